//! hookd: a self-hosted webhook receiver. A delivery flows one way through the
//! modules: `http` receives, `signature` proves, `event` parses, `store` persists,
//! `dispatch` applies through `handlers`, `purge` cleans, `cli` drives; `app` wires
//! them together and owns shutdown.

pub mod config;
pub mod event;
pub mod signature;
