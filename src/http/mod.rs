//! HTTP: routes and the state they share. Status codes are decided in `error`.

pub mod error;
mod ops;
pub mod receive;

use std::sync::Arc;

use actix_web::web;
use deadpool_postgres::Pool;

use crate::config::Settings;
use crate::dispatch::Dispatcher;
use crate::metrics::Metrics;

pub struct AppState {
    pub settings: Arc<Settings>,
    pub pool: Pool,
    pub dispatcher: Dispatcher,
    pub metrics: Arc<Metrics>,
}

pub fn routes(config: &mut web::ServiceConfig) {
    config
        .route("/webhooks/{source}", web::post().to(receive::receive))
        .route("/healthz", web::get().to(ops::healthz))
        .route("/readyz", web::get().to(ops::readyz))
        .route("/metrics", web::get().to(ops::metrics));
}
