//! hookd's integration tests: real HTTP against a real PostgreSQL.

mod outage;
mod receive;
mod support;
