//! The Idempotency-Key gateway: a listener of its own (off unless
//! `[gateway] listen` is set) in front of any payment endpoint, whatever its
//! stack. Each `[[gateway.routes]]` names a method and path and the upstream
//! they go to; a keyed request is claimed first (committed), sent upstream
//! with `Idempotency-Operation`, and its answer stored before it is returned,
//! so copies get it back and upstream runs once per key. The rules themselves
//! (key, scope, fingerprint, states) are `crate::idempotency`'s.

mod commit;
pub mod config;
mod flow;
/// What upstream is told of the client (`X-Forwarded-*`, `X-Real-IP`).
mod forwarding;
mod upstream;

use std::time::Duration;

use actix_web::web;

pub use commit::KeyWrites;

/// Every path of the gateway's listener is the gateway's: no probe or page
/// shares it (a route may well be `/*`).
pub fn routes(config: &mut web::ServiceConfig) {
    config.default_service(web::to(flow::handle));
}

/// How long the gateway's connections are given to answer beyond reading the
/// request: the longest wait for upstream any route may set.
pub const LONGEST_WAIT: Duration = config::MAX_TIMEOUT;
