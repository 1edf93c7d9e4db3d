//! hookd's integration tests: real HTTP against a real PostgreSQL.

mod admin;
mod admin_security;
mod batching;
mod browser;
mod custom_handler;
mod deploy;
mod desk;
mod dispatch;
mod drift;
mod embedded;
mod forwards;
mod hardening;
mod hostile;
mod migrate;
mod observability;
mod openapi;
mod outage;
mod payments;
mod process;
mod production;
mod properties;
mod purge;
mod receive;
mod replay;
mod support;
mod tls;
