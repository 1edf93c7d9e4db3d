//! `/admin/api/*`: the event history for support staff (SPEC §8). Viewers read;
//! operators may also retry, with `Idempotency-Key` support scoped to their token.

use actix_web::http::header::CONTENT_TYPE;
use actix_web::{HttpRequest, HttpResponse, web};
use chrono::Utc;
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};

use super::AppState;
use super::auth::{self, Principal};
use super::error::ApiError;
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
    auth::require(&state.settings, &request)?;
    let filter = ListParams::from_query(request.query_string())?.to_filter(Utc::now())?;
    let (events, next_cursor) = page(&state, filter).await?;
    Ok(HttpResponse::Ok().json(json!({"events": events, "next_cursor": next_cursor})))
}

fn event_id(path: &str) -> Result<i64, ApiError> {
    path.parse::<i64>().map_err(|_| ApiError::NotFound)
}

pub async fn show(
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    auth::require(&state.settings, &request)?;
    let id = event_id(&path)?;
    let event = history::load_event(&state.pool, id)
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(HttpResponse::Ok().json(event.to_json()))
}

#[derive(Debug, Deserialize)]
struct StatsParams {
    window: Option<String>,
}

pub async fn stats(
    state: web::Data<AppState>,
    request: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    auth::require(&state.settings, &request)?;
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

pub async fn retry(
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let principal = auth::require_operator(&state.settings, &request)?;
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
        let id = event_id(&path)?;
        let (status, body) = answer(apply_again(&state, &principal, id).await);
        return Ok(respond(status, body, false));
    };
    let fingerprint =
        Sha256::digest([request.path().as_bytes(), b"\n", body.as_ref()].concat()).to_vec();
    let client = state
        .pool
        .get()
        .await
        .map_err(crate::store::StoreError::from)?;
    match idempotency::claim(&client, &principal.name, &key, &fingerprint).await? {
        Claim::Replay { status, body } => Ok(respond(status, body, true)),
        Claim::InProgress => Err(ApiError::Conflict(
            "request_in_progress",
            "a request with this Idempotency-Key is still running".into(),
        )),
        Claim::Mismatch => Err(ApiError::IdempotencyKeyReused),
        Claim::Fresh => {
            let result = match event_id(&path) {
                Ok(id) => apply_again(&state, &principal, id).await,
                Err(error) => Err(error),
            };
            let (status, body) = answer(result);
            if status >= 500 {
                idempotency::release(&client, &principal.name, &key).await?;
            } else {
                idempotency::complete(&client, &principal.name, &key, status, &body).await?;
            }
            Ok(respond(status, body, false))
        }
    }
}
