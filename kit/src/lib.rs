//! The kit hookd's integration tests, benchmarks and load generator share, so each
//! sets up PostgreSQL, settings and hookd one way:
//!
//! - `cluster`: throwaway PostgreSQL clusters (the embedded-cluster code of
//!   `hookd serve`, removed when the process exits), client programs, connections;
//! - `settings`: the shipped `hookd.toml` on a free port;
//! - `app`: hookd in-process for a test, on a fresh database, with the handlers of
//!   the test's choosing;
//! - `admin`: an admin client with a method per API route and page action;
//! - `gate`: a handler that holds retries until the test lets them through;
//! - `metrics`: `/metrics` parsed as Prometheus reads it;
//! - `load`: the signing load generator (closed and open loops, reports);
//! - `bench`: a durable cluster with hookd in-process, CPU accounting, bulk fills;
//! - `pgbench`: the ingest and gateway benchmarks' baselines, made from the store's
//!   statements, and the runner that measures them;
//! - `waits`: what PostgreSQL's sessions wait for during a run;
//! - `stall`: an open loop's worst moment, slot by slot, beside those waits.

pub mod admin;
pub mod app;
pub mod bench;
pub mod cluster;
pub mod gate;
pub mod load;
pub mod metrics;
pub mod pgbench;
pub mod pooler;
pub mod settings;
pub mod stall;
pub mod waits;
