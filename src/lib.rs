//! hookd as a library: the webhook receiver with a team's own handlers and
//! migrations ([`Hookd`], [`Handler`], [`Event`], [`Registry`], [`Migration`]),
//! and the Idempotency-Key rules for a team's own actix-web endpoint
//! ([`idempotency::Idempotent`]).
//!
//! ```no_run
//! use async_trait::async_trait;
//! use hookd::{Event, Handler, HandlerError};
//!
//! /// Marks an invoice paid, once, whatever the provider resends.
//! struct InvoicePaid;
//!
//! #[async_trait]
//! impl Handler for InvoicePaid {
//!     async fn apply(
//!         &self,
//!         tx: &deadpool_postgres::Transaction<'_>,
//!         event: &Event<'_>,
//!     ) -> Result<(), HandlerError> {
//!         let invoice = event.text("/data/object/id")?;
//!         tx.execute("INSERT INTO paid_invoices (id) VALUES ($1) ON CONFLICT DO NOTHING", &[&invoice])
//!             .await?;
//!         Ok(())
//!     }
//! }
//!
//! fn main() -> std::process::ExitCode {
//!     hookd::Hookd::new().handler("invoice_paid", InvoicePaid).main()
//! }
//! ```
//!
//! Inside, a delivery flows one way through the modules: `http` receives,
//! `intake` proves and records (with `signature` and `providers`, `event`
//! parsing), `store` persists, `runner` applies through `handlers` (for `ingest`
//! at receipt and `dispatch` on retries, with `ledger` saying what each run
//! means), `purge` cleans, `cli` drives; `app` wires them together and owns
//! shutdown. Those modules are public for hookd's own kit, tests and
//! benchmarks, and hidden from this documentation: they are not an API.

#[doc(hidden)]
pub mod app;
mod builder;
/// Address blocks (`trusted_proxies`).
mod cidr;
#[doc(hidden)]
pub mod cli;
#[doc(hidden)]
pub mod config;
#[doc(hidden)]
pub mod config_keys;
#[doc(hidden)]
pub mod desk;
#[doc(hidden)]
pub mod dispatch;
#[doc(hidden)]
pub mod domain;
#[doc(hidden)]
pub mod duration;
#[doc(hidden)]
pub mod embedded_pg;
#[doc(hidden)]
pub mod event;
#[doc(hidden)]
pub mod filter;
#[doc(hidden)]
pub mod gateway;
#[doc(hidden)]
pub mod handlers;
#[doc(hidden)]
pub mod http;
pub mod idempotency;
#[doc(hidden)]
pub mod ingest;
#[doc(hidden)]
pub mod instance;
#[doc(hidden)]
pub mod intake;
#[doc(hidden)]
pub mod ledger;
#[doc(hidden)]
pub mod logging;
#[doc(hidden)]
pub mod mask;
#[doc(hidden)]
pub mod metrics;
#[doc(hidden)]
pub mod money;
#[doc(hidden)]
pub mod outbound;
#[doc(hidden)]
pub mod provider_api;
#[doc(hidden)]
pub mod providers;
/// The headers proxies set to describe a client.
mod proxy_headers;
#[doc(hidden)]
pub mod purge;
#[doc(hidden)]
pub mod reconcile;
#[doc(hidden)]
pub mod rollup;
#[doc(hidden)]
pub mod runner;
#[doc(hidden)]
pub mod shutdown;
#[doc(hidden)]
pub mod signature;
#[doc(hidden)]
pub mod silence;
#[doc(hidden)]
pub mod simulate;
#[doc(hidden)]
pub mod store;
#[doc(hidden)]
pub mod traces;
#[doc(hidden)]
pub mod version;
#[doc(hidden)]
pub mod words;

pub use builder::Hookd;
pub use handlers::{Event, Handler, HandlerError, Registry};
pub use store::{Migration, migrate, migrate_with};
