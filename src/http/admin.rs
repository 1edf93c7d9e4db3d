//! `/admin/api/*`: the event history for support staff (SPEC §8). Viewers read;
//! operators may also retry, with `Idempotency-Key` support scoped to their token.

use actix_web::http::header::CONTENT_TYPE;
use actix_web::{HttpRequest, HttpResponse, web};
use chrono::Utc;
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};

use super::auth::{self, Principal};
use super::error::ApiError;
use super::{AppState, body};
use crate::dispatch::RetryOutcome;
use crate::duration;
use crate::query::{FilterError, ListParams};
use crate::store::history::{self, EventFilter, EventSummary};
use crate::store::idempotency::{self, Claim};

impl From<FilterError> for ApiError {
    fn from(error: FilterError) -> Self {
        ApiError::BadRequest(error.0)
    }
}

/// A page of the history and the cursor of the next one.
pub async fn page(
    state: &AppState,
    filter: EventFilter,
) -> Result<(Vec<EventSummary>, Option<String>), ApiError> {
    let client = state
        .pool
        .get()
        .await
        .map_err(crate::store::StoreError::from)?;
    Ok(crate::query::page(&client, filter).await?)
}

pub async fn list(
    state: web::Data<AppState>,
    request: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    auth::require(&state, &request).await?;
    let filter = ListParams::from_query(request.query_string())?.to_filter(Utc::now())?;
    let (events, next_cursor) = page(&state, filter).await?;
    Ok(HttpResponse::Ok().json(json!({"events": events, "next_cursor": next_cursor})))
}

/// The `webhook_events.id` in a path (not the provider's event id).
pub fn event_row_id(path: &str) -> Result<i64, ApiError> {
    path.parse::<i64>().map_err(|_| ApiError::NotFound)
}

pub async fn show(
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    auth::require(&state, &request).await?;
    let id = event_row_id(&path)?;
    let event = history::load_event(&state.pool, id)
        .await?
        .ok_or(ApiError::NotFound)?;
    let handlers = event.handler_states(&state.dispatcher.plan_names(&event.summary));
    Ok(HttpResponse::Ok().json(event.to_json(&handlers)))
}

#[derive(Debug, Deserialize)]
struct StatsParams {
    window: Option<String>,
}

pub async fn stats(
    state: web::Data<AppState>,
    request: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    auth::require(&state, &request).await?;
    let params = web::Query::<StatsParams>::from_query(request.query_string())
        .map_err(|e| ApiError::BadRequest(e.to_string()))?
        .into_inner();
    let text = params.window.unwrap_or_else(|| "24h".into());
    let bad_window = || ApiError::BadRequest("window must be an age like 24h or 7d".into());
    let window = duration::parse(&text).map_err(|_| bad_window())?;
    let since = duration::before(Utc::now(), window).ok_or_else(bad_window)?;
    let client = state
        .pool
        .get()
        .await
        .map_err(crate::store::StoreError::from)?;
    let stats = history::stats(&client, since).await?;
    Ok(HttpResponse::Ok().json(json!({
        "window": duration::format(window),
        "since": since,
        "total": stats.total,
        "by_status": stats.by_status,
        "by_kind": stats.by_kind,
        "by_source": stats.by_source,
    })))
}

/// Applies an event again and describes the result (shared with the web page).
pub async fn apply_again(
    state: &AppState,
    principal: &Principal,
    id: i64,
) -> Result<EventSummary, ApiError> {
    // Waits its turn rather than taking the connections deliveries need.
    let _permit = state
        .retry_permits
        .acquire()
        .await
        .map_err(|_| ApiError::Unavailable("shutting down".into()))?;
    let outcome = state.dispatcher.retry_now(id).await?;
    log::info!(
        "admin retry of event {id} by {}: {outcome:?}",
        principal.name
    );
    match outcome {
        RetryOutcome::Applied(_) => {}
        RetryOutcome::NotFound => return Err(ApiError::NotFound),
        RetryOutcome::Gone => {
            return Err(ApiError::Gone(
                "the payload was purged; it cannot be applied".into(),
            ));
        }
        RetryOutcome::NoHandler => {
            return Err(ApiError::Conflict(
                "no_handler",
                "no handler applies to this event's kind".into(),
            ));
        }
    }
    let event = history::load_event(&state.pool, id)
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(event.summary)
}

fn answer(result: Result<EventSummary, ApiError>) -> (u16, Vec<u8>) {
    match result {
        Ok(event) => (200, serde_json::to_vec(&event).unwrap_or_default()),
        Err(error) => (
            actix_web::ResponseError::status_code(&error).as_u16(),
            error.json_body(),
        ),
    }
}

fn respond(status: u16, body: Vec<u8>, replayed: bool) -> HttpResponse {
    let status = actix_web::http::StatusCode::from_u16(status)
        .unwrap_or(actix_web::http::StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = HttpResponse::build(status);
    response.insert_header((CONTENT_TYPE, "application/json"));
    if replayed {
        response.insert_header(("Idempotent-Replayed", "true"));
    }
    response.body(body)
}

/// Admin bodies are small forms or JSON.
pub const ADMIN_BODY_LIMIT: usize = 64 * 1024;

pub async fn retry(
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
    mut payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let principal = auth::require_operator(&state, &request).await?;
    let body = body::read(
        &mut payload,
        &request,
        ADMIN_BODY_LIMIT,
        state.settings.body_timeout,
    )
    .await?;
    let key = match request.headers().get("Idempotency-Key") {
        None => None,
        Some(value) => match value.to_str() {
            Ok(key) if !key.is_empty() && key.len() <= 255 => Some(key.to_string()),
            _ => {
                return Err(ApiError::BadRequest(
                    "Idempotency-Key must be 1 to 255 visible characters".into(),
                ));
            }
        },
    };
    let Some(key) = key else {
        let id = event_row_id(&path)?;
        let (status, body) = answer(apply_again(&state, &principal, id).await);
        return Ok(respond(status, body, false));
    };
    let fingerprint =
        Sha256::digest([request.path().as_bytes(), b"\n", body.as_slice()].concat()).to_vec();
    // Each step takes a connection and gives it back: none is held while the
    // handler runs (that takes its own).
    let claim = {
        let client = connection(&state).await?;
        idempotency::claim(&client, &principal.name, &key, &fingerprint).await?
    };
    match claim {
        Claim::Replay { status, body } => Ok(respond(status, body, true)),
        Claim::InProgress => Err(ApiError::Conflict(
            "request_in_progress",
            "a request with this Idempotency-Key is still running".into(),
        )),
        Claim::Mismatch => Err(ApiError::IdempotencyKeyReused),
        Claim::Fresh(claim_id) => {
            let result = match event_row_id(&path) {
                Ok(id) => apply_again(&state, &principal, id).await,
                Err(error) => Err(error),
            };
            let (status, body) = answer(result);
            let client = connection(&state).await?;
            if status >= 500 {
                idempotency::release(&client, &principal.name, &key, &claim_id).await?;
            } else {
                idempotency::complete(&client, &principal.name, &key, &claim_id, status, &body)
                    .await?;
            }
            Ok(respond(status, body, false))
        }
    }
}

async fn connection(state: &AppState) -> Result<deadpool_postgres::Object, ApiError> {
    Ok(state
        .pool
        .get()
        .await
        .map_err(crate::store::StoreError::from)?)
}
