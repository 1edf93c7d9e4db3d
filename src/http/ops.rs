//! Health, readiness and metrics for operators and orchestrators.

use std::time::{Duration, Instant};

use actix_web::{HttpResponse, ResponseError, web};
use serde_json::json;

use super::AppState;
use super::error::ApiError;
use crate::metrics::Metric;
use crate::store;

pub async fn not_found() -> HttpResponse {
    ApiError::NotFound.error_response()
}

pub async fn method_not_allowed() -> HttpResponse {
    ApiError::MethodNotAllowed.error_response()
}

pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

/// Readiness answers from a result at most this old, so probes (or floods of
/// them) cost the database one query a second.
const READY_FOR: Duration = Duration::from_secs(1);

/// Why this instance is not ready, if it is not (checked at most once per
/// `READY_FOR`).
async fn readiness(state: &AppState) -> Option<&'static str> {
    let cached = state
        .readiness
        .lock()
        .ok()
        .and_then(|c| *c)
        .filter(|(at, _)| at.elapsed() < READY_FOR)
        .map(|(_, problem)| problem);
    if let Some(problem) = cached {
        return problem;
    }
    let problem = match store::is_ready(&state.pool, state.migrations).await {
        Ok(()) => None,
        Err(error) => {
            log::warn!("not ready: {error}");
            Some(match error {
                store::StoreError::Schema(_) => "database not migrated",
                _ => "database unreachable",
            })
        }
    };
    if let Ok(mut cache) = state.readiness.lock() {
        *cache = Some((Instant::now(), problem));
    }
    problem
}

pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let problem = readiness(&state).await;
    match problem {
        None => HttpResponse::Ok().json(json!({"status": "ready"})),
        Some(reason) => HttpResponse::ServiceUnavailable()
            .insert_header(("Retry-After", "5"))
            .json(json!({"status": "unavailable", "reason": reason})),
    }
}

pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    // The pool as it is before this scrape takes a connection of it.
    let pool = state.pool.status();
    let mut gauges = vec![
        (Metric::DbPoolSize, pool.size as f64),
        (Metric::DbPoolAvailable, pool.available as f64),
        (Metric::DbPoolMaxSize, pool.max_size as f64),
        (Metric::DbPoolWaiting, pool.waiting as f64),
    ];
    let ready = readiness(&state).await.is_none();
    gauges.push((Metric::Ready, if ready { 1.0 } else { 0.0 }));
    if let Ok(client) = state.pool.get().await
        && let Ok((failed, dead)) = store::events::backlog(&client).await
    {
        gauges.push((Metric::RetryBacklog, failed as f64));
        gauges.push((Metric::DeadEvents, dead as f64));
    }
    gauges.extend(crate::metrics::process::read());
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(state.metrics.render(&gauges))
}
