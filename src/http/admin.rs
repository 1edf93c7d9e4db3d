//! `/admin/api/*`: the event history for support staff (SPEC §8). Viewers read;
//! operators may also retry, with `Idempotency-Key` support scoped to their token.

use actix_web::http::header::CONTENT_TYPE;
use actix_web::{HttpRequest, HttpResponse, web};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};

use super::AppState;
use super::auth::{self, Principal};
use super::error::ApiError;
use crate::config::{format_duration, parse_duration};
use crate::dispatch::RetryOutcome;
use crate::store::events::EventStatus;
use crate::store::history::{self, EventFilter, EventSummary};
use crate::store::idempotency::{self, Claim};

const DEFAULT_LIMIT: i64 = 50;
const MAX_LIMIT: i64 = 500;

/// The query string of a history listing, as given.
#[derive(Debug, Default, Deserialize)]
pub struct ListParams {
    pub source: Option<String>,
    pub kind: Option<String>,
    #[serde(rename = "type")]
    pub event_type: Option<String>,
    pub status: Option<String>,
    pub since: Option<String>,
    pub until: Option<String>,
    pub q: Option<String>,
    pub limit: Option<String>,
    pub cursor: Option<String>,
}

impl ListParams {
    pub fn from_query(query: &str) -> Result<Self, ApiError> {
        web::Query::<Self>::from_query(query)
            .map(web::Query::into_inner)
            .map_err(|e| ApiError::BadRequest(e.to_string()))
    }

    pub fn to_filter(&self, now: DateTime<Utc>) -> Result<EventFilter, ApiError> {
        let present = |v: &Option<String>| v.clone().filter(|s| !s.trim().is_empty());
        let status = present(&self.status);
        if let Some(status) = &status
            && EventStatus::parse(status).is_none()
        {
            return Err(ApiError::BadRequest(format!(
                "status {status:?} is not one of processed, ignored, failed, dead"
            )));
        }
        let limit = match present(&self.limit) {
            None => DEFAULT_LIMIT,
            Some(text) => match text.parse::<i64>() {
                Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
                _ => {
                    return Err(ApiError::BadRequest(format!(
                        "limit must be a number from 1 to {MAX_LIMIT}"
                    )));
                }
            },
        };
        Ok(EventFilter {
            source: present(&self.source),
            kind: present(&self.kind),
            event_type: present(&self.event_type),
            status,
            since: present(&self.since)
                .map(|t| parse_moment("since", &t, now))
                .transpose()?,
            until: present(&self.until)
                .map(|t| parse_moment("until", &t, now))
                .transpose()?,
            q: present(&self.q).map(|q| q.trim().to_string()),
            limit,
            after: present(&self.cursor)
                .map(|c| decode_cursor(&c))
                .transpose()?,
        })
    }
}

/// RFC 3339, or an age such as `24h` meaning that long before `now`.
pub fn parse_moment(name: &str, text: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, ApiError> {
    if let Ok(moment) = DateTime::parse_from_rfc3339(text) {
        return Ok(moment.with_timezone(&Utc));
    }
    let age = parse_duration(text).map_err(|_| {
        ApiError::BadRequest(format!(
            "{name} must be an RFC 3339 time or an age like 24h or 7d"
        ))
    })?;
    Ok(now - chrono::Duration::from_std(age).unwrap_or(chrono::Duration::MAX))
}

pub fn encode_cursor(event: &EventSummary) -> String {
    B64.encode(format!(
        "{}:{}",
        event.received_at.timestamp_micros(),
        event.id
    ))
}

fn decode_cursor(text: &str) -> Result<(DateTime<Utc>, i64), ApiError> {
    let bad = || ApiError::BadRequest("cursor is not one this API returned".into());
    let raw = String::from_utf8(B64.decode(text).map_err(|_| bad())?).map_err(|_| bad())?;
    let (micros, id) = raw.split_once(':').ok_or_else(bad)?;
    let micros: i64 = micros.parse().map_err(|_| bad())?;
    let id: i64 = id.parse().map_err(|_| bad())?;
    Ok((DateTime::from_timestamp_micros(micros).ok_or_else(bad)?, id))
}

/// A page of the history and the cursor of the next one.
pub async fn page(
    state: &AppState,
    mut filter: EventFilter,
) -> Result<(Vec<EventSummary>, Option<String>), ApiError> {
    let limit = filter.limit;
    filter.limit = limit + 1;
    let client = state
        .pool
        .get()
        .await
        .map_err(crate::store::StoreError::from)?;
    let mut events = history::list_events(&client, &filter).await?;
    let next = if events.len() as i64 > limit {
        events.truncate(usize::try_from(limit).unwrap_or(0));
        events.last().map(encode_cursor)
    } else {
        None
    };
    Ok((events, next))
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
    let client = state
        .pool
        .get()
        .await
        .map_err(crate::store::StoreError::from)?;
    let event = history::get_event(&client, id)
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
    let window = parse_duration(&text)
        .map_err(|_| ApiError::BadRequest("window must be an age like 24h or 7d".into()))?;
    let since = Utc::now() - chrono::Duration::from_std(window).unwrap_or(chrono::Duration::MAX);
    let client = state
        .pool
        .get()
        .await
        .map_err(crate::store::StoreError::from)?;
    let stats = history::stats(&client, since).await?;
    Ok(HttpResponse::Ok().json(json!({
        "window": format_duration(window),
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
    let client = state
        .pool
        .get()
        .await
        .map_err(crate::store::StoreError::from)?;
    let event = history::get_event(&client, id)
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
