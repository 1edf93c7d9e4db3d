//! HTTP: routes and the state they share. Status codes are decided in `error`.

mod admin;
mod auth;
pub mod body;
pub mod error;
mod limiter;
mod ops;
pub mod receive;
pub mod server;
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
    pub guard: auth::Guard,
    /// Operators' retries running at once: a handler run holds a pool connection,
    /// and deliveries need most of them.
    pub retry_permits: tokio::sync::Semaphore,
}

impl AppState {
    pub fn new(
        settings: Arc<Settings>,
        pool: Pool,
        dispatcher: Dispatcher,
        metrics: Arc<Metrics>,
    ) -> Self {
        let permits = (pool.status().max_size / 4).max(1);
        AppState {
            settings,
            pool,
            dispatcher,
            metrics,
            guard: auth::Guard::default(),
            retry_permits: tokio::sync::Semaphore::new(permits),
        }
    }
}

/// The routes of the listener that faces providers: webhooks and health, plus the
/// admin pages and metrics when they have no listener of their own.
pub fn public_routes(config: &mut web::ServiceConfig, with_admin: bool) {
    config
        .route("/webhooks/{source}", web::post().to(receive::receive))
        .route("/healthz", web::get().to(ops::healthz))
        .route("/readyz", web::get().to(ops::readyz));
    if with_admin {
        admin_routes(config);
    }
    config.default_service(web::to(ops::not_found));
}

/// The routes for operators and support staff.
pub fn admin_routes(config: &mut web::ServiceConfig) {
    config
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

/// The admin listener: its routes, and health for its own probes.
pub fn admin_listener_routes(config: &mut web::ServiceConfig) {
    admin_routes(config);
    config
        .route("/healthz", web::get().to(ops::healthz))
        .route("/readyz", web::get().to(ops::readyz))
        .default_service(web::to(ops::not_found));
}
