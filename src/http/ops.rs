//! Health, readiness and metrics for operators and orchestrators.

use actix_web::{HttpResponse, ResponseError, web};
use serde_json::json;

use super::AppState;
use super::error::ApiError;
use crate::store;

pub async fn not_found() -> HttpResponse {
    ApiError::NotFound.error_response()
}

pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    match store::is_ready(&state.pool).await {
        Ok(()) => HttpResponse::Ok().json(json!({"status": "ready"})),
        Err(error) => {
            log::warn!("not ready: {error}");
            let reason = match error {
                store::StoreError::Schema(_) => "database not migrated",
                _ => "database unreachable",
            };
            HttpResponse::ServiceUnavailable()
                .insert_header(("Retry-After", "5"))
                .json(json!({"status": "unavailable", "reason": reason}))
        }
    }
}

pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    let mut gauges = Vec::new();
    if let Ok(client) = state.pool.get().await
        && let Ok(backlog) = store::events::retry_backlog(&client).await
    {
        gauges.push(("hookd_retry_backlog", backlog));
    }
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(state.metrics.render(&gauges))
}
