//! hookd's integration tests: real HTTP against a real PostgreSQL.

mod admin;
mod dispatch;
mod migrate;
mod outage;
mod payments;
mod process;
mod purge;
mod receive;
mod replay;
mod support;
mod tls;
