//! HTTP: routes and the state they share. Status codes are decided in `error`.

mod admin;
mod auth;
pub mod error;
mod ops;
pub mod receive;
mod ui;

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
        .route("/metrics", web::get().to(ops::metrics))
        .route("/admin/api/events", web::get().to(admin::list))
        .route("/admin/api/events/{id}", web::get().to(admin::show))
        .route("/admin/api/events/{id}/retry", web::post().to(admin::retry))
        .route("/admin/api/stats", web::get().to(admin::stats))
        .route("/admin", web::get().to(ui::list))
        .route("/admin/", web::get().to(ui::list))
        .route("/admin/login", web::get().to(ui::login_form))
        .route("/admin/login", web::post().to(ui::login))
        .route("/admin/logout", web::post().to(ui::logout))
        .route("/admin/events/{id}", web::get().to(ui::detail))
        .route("/admin/events/{id}/retry", web::post().to(ui::retry));
}
