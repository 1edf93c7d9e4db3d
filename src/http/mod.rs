//! HTTP: routes and the state they share. Status codes are decided in `error`.

mod admin;
mod auth;
pub mod body;
mod charts;
pub(crate) mod client;
pub mod error;
mod forwards;
mod idempotency;
mod idempotency_pages;
mod limiter;
mod ops;
mod pages;
pub mod receive;
pub mod request_id;
pub mod server;
mod ui;

use actix_web::http::Method;
use actix_web::web;

use crate::instance::Instance;

/// What the routes share: the instance, and what only HTTP needs beside it.
pub struct AppState {
    pub app: Instance,
    pub guard: auth::Guard,
    /// Webhook body bytes being read, one permit a byte (see `body::read_budgeted`).
    pub body_memory: tokio::sync::Semaphore,
    /// The same for the gateway's request bodies: a budget of its own, so that
    /// its callers cannot spend the webhooks'.
    pub gateway_body_memory: tokio::sync::Semaphore,
    /// The last readiness check: what was wrong (`None`: ready).
    pub readiness: crate::metrics::fresh::Fresh<Option<&'static str>>,
    /// A stop was asked for: `/readyz` answers 503 whatever the database says.
    pub stopping: std::sync::atomic::AtomicBool,
}

impl AppState {
    pub fn new(app: Instance) -> Self {
        // Both fixed at start: a reload keeps their running values.
        let settings = app.settings.now();
        let budget = || {
            tokio::sync::Semaphore::new(
                settings
                    .max_body_memory
                    .min(tokio::sync::Semaphore::MAX_PERMITS),
            )
        };
        let (body_memory, gateway_body_memory) = (budget(), budget());
        let guard = auth::Guard::new(settings.trusted_proxies.clone());
        AppState {
            app,
            guard,
            body_memory,
            gateway_body_memory,
            readiness: Default::default(),
            stopping: Default::default(),
        }
    }
}

/// One path and the methods it answers; any other method is 405.
fn at(config: &mut web::ServiceConfig, path: &str, routes: Vec<actix_web::Route>) {
    let mut resource = web::resource(path).default_service(web::to(ops::method_not_allowed));
    for route in routes {
        resource = resource.route(route);
    }
    config.service(resource);
}

/// The probes' paths (packaging files name them; a test checks they agree): the
/// process answers, and it can take deliveries.
pub const HEALTH_PATH: &str = "/healthz";
pub const READY_PATH: &str = "/readyz";

fn health_routes(config: &mut web::ServiceConfig) {
    at(config, HEALTH_PATH, vec![web::get().to(ops::healthz)]);
    at(config, READY_PATH, vec![web::get().to(ops::readyz)]);
}

/// The routes of the listener that faces providers: webhooks and health, plus the
/// admin pages and metrics when they have no listener of their own.
pub fn public_routes(config: &mut web::ServiceConfig, with_admin: bool) {
    at(
        config,
        "/webhooks/{source}",
        vec![web::post().to(receive::receive)],
    );
    health_routes(config);
    if with_admin {
        admin_routes(config);
        config.default_service(web::to(ui::not_found));
    } else {
        config.default_service(web::to(ops::not_found));
    }
}

/// `docs/openapi.json`, built into the binary and served at `/admin/api/openapi.json`.
pub const OPENAPI: &str = include_str!("../../docs/openapi.json");

/// Every `/admin/api` route: method, path, handler — one method per path (a test
/// checks it; each path is registered as one resource). `docs/openapi.json`
/// describes each of them (a test compares the two), so a new route goes here
/// and there.
pub fn admin_api_routes() -> Vec<(Method, &'static str, actix_web::Route)> {
    vec![
        (Method::GET, "/admin/api/events", web::to(admin::list)),
        // Before `{id}`, which would otherwise take "retry" for an id.
        (
            Method::POST,
            "/admin/api/events/retry",
            web::to(admin::bulk_retry),
        ),
        (Method::GET, "/admin/api/events/{id}", web::to(admin::show)),
        (
            Method::POST,
            "/admin/api/events/{id}/retry",
            web::to(admin::retry),
        ),
        (Method::GET, "/admin/api/stats", web::to(admin::stats)),
        (
            Method::GET,
            "/admin/api/stats/series",
            web::to(admin::series),
        ),
        (Method::GET, "/admin/api/payments", web::to(admin::payments)),
        (
            Method::GET,
            "/admin/api/payments/{source}/{payment_id}",
            web::to(admin::payment),
        ),
        (
            Method::POST,
            "/admin/api/customers/{customer}/forget",
            web::to(admin::forget),
        ),
        (Method::GET, "/admin/api/audit", web::to(admin::audit)),
        (Method::GET, "/admin/api/forwards", web::to(forwards::list)),
        (
            Method::POST,
            "/admin/api/forwards/{name}/pause",
            web::to(forwards::pause),
        ),
        (
            Method::POST,
            "/admin/api/forwards/{name}/resume",
            web::to(forwards::resume),
        ),
        (
            Method::GET,
            "/admin/api/idempotency",
            web::to(idempotency::list),
        ),
        (
            Method::GET,
            "/admin/api/idempotency/{id}",
            web::to(idempotency::show),
        ),
        (
            Method::POST,
            "/admin/api/idempotency/{id}/release",
            web::to(idempotency::release),
        ),
        (
            Method::GET,
            "/admin/api/openapi.json",
            web::to(admin::openapi),
        ),
    ]
}

/// The routes for operators and support staff.
pub fn admin_routes(config: &mut web::ServiceConfig) {
    let get = web::get;
    let post = web::post;
    at(config, "/metrics", vec![get().to(ops::metrics)]);
    for (method, path, route) in admin_api_routes() {
        at(config, path, vec![route.method(method)]);
    }
    at(config, "/admin", vec![get().to(ui::list)]);
    at(config, "/admin/", vec![get().to(ui::list)]);
    at(
        config,
        "/admin/login",
        vec![get().to(ui::login_form), post().to(ui::login)],
    );
    at(config, "/admin/logout", vec![post().to(ui::logout)]);
    at(config, "/admin/events/{id}", vec![get().to(ui::detail)]);
    at(
        config,
        "/admin/events/{id}/retry",
        vec![post().to(ui::retry)],
    );
    at(
        config,
        "/admin/events/{id}/reveal",
        vec![post().to(ui::reveal)],
    );
    at(
        config,
        "/admin/payments/{source}/{payment_id}",
        vec![get().to(ui::payment)],
    );
    at(
        config,
        "/admin/customers/{customer}",
        vec![get().to(ui::customer)],
    );
    at(
        config,
        "/admin/retry",
        vec![get().to(ui::bulk_form), post().to(ui::bulk_post)],
    );
    at(config, "/admin/audit", vec![get().to(ui::audit)]);
    at(
        config,
        "/admin/forwards/{name}/pause",
        vec![post().to(ui::pause_forward)],
    );
    at(
        config,
        "/admin/forwards/{name}/resume",
        vec![post().to(ui::resume_forward)],
    );
    at(
        config,
        "/admin/idempotency",
        vec![get().to(idempotency::list_page)],
    );
    at(
        config,
        "/admin/idempotency/{id}",
        vec![get().to(idempotency::detail_page)],
    );
    at(
        config,
        "/admin/idempotency/{id}/release",
        vec![post().to(idempotency::release_page)],
    );
}

/// The admin listener: its routes, and health for its own probes.
pub fn admin_listener_routes(config: &mut web::ServiceConfig) {
    admin_routes(config);
    health_routes(config);
    config.default_service(web::to(ui::not_found));
}
