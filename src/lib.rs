//! hookd: a self-hosted webhook receiver. A delivery flows one way through the
//! modules: `http` receives, `signature` proves, `event` parses (where each
//! provider puts ids, types and payment facts is in `providers`), `store` persists,
//! `runner` applies through `handlers` (for `ingest` at receipt and `dispatch` on
//! retries, with `ledger` saying what each run means), `purge` cleans, `cli`
//! drives; `app` wires them together and owns shutdown.

pub mod app;
mod builder;
pub mod cli;
pub mod config;
pub mod desk;
pub mod dispatch;
pub mod domain;
pub mod duration;
pub mod embedded_pg;
pub mod event;
pub mod filter;
pub mod gateway;
pub mod handlers;
pub mod http;
pub mod idempotency;
pub mod ingest;
pub mod instance;
pub mod keys;
pub mod ledger;
pub mod logging;
pub mod mask;
pub mod metrics;
pub mod money;
pub mod outbound;
pub mod provider;
pub mod providers;
pub mod purge;
pub mod reconcile;
pub mod rollup;
pub mod runner;
pub mod shutdown;
pub mod signature;
pub mod silence;
pub mod store;
pub mod traces;
pub mod version;

pub use builder::Hookd;
pub use handlers::{Event, Handler, HandlerError, Registry};
pub use store::Migration;
