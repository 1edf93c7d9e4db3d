//! `/admin/api/*`: the support desk as JSON. Viewers read, with personal data
//! masked; operators may also reveal an event's payload, retry (one event, or
//! every event a filter matches), forget a customer and read the audit trail.
//! Retries and forgetting honour `Idempotency-Key`, scoped to the token.

use actix_web::http::header::CONTENT_TYPE;
use actix_web::{HttpRequest, HttpResponse, web};
use chrono::Utc;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::auth::{Operator, Principal, Viewer};
use super::error::ApiError;
use super::{AppState, body, request_id};
use crate::desk::{self, Claim, Desk, DeskError};
use crate::dispatch::RetryOutcome;
use crate::duration;
use crate::filter::{FilterError, ListParams};
use crate::store::history::{EventSummary, Stats};

/// Admin bodies are small forms or JSON.
pub const ADMIN_BODY_LIMIT: usize = 64 * 1024;
/// Payments and audit entries per page, by default and at most.
const DEFAULT_PAGE: i64 = 50;
const MAX_PAGE: i64 = 500;

impl From<FilterError> for ApiError {
    fn from(error: FilterError) -> Self {
        ApiError::BadRequest(error.0)
    }
}

impl From<DeskError> for ApiError {
    fn from(error: DeskError) -> Self {
        match error {
            DeskError::Store(error) => error.into(),
            DeskError::Filter(error) => error.into(),
            error @ DeskError::TooMany { .. } => {
                ApiError::Unprocessable("too_many_events", error.to_string())
            }
            DeskError::ShuttingDown => ApiError::Unavailable("shutting down".into()),
            error @ DeskError::UnknownSource(_) => {
                ApiError::Unprocessable("unknown_source", error.to_string())
            }
        }
    }
}

pub async fn list(
    _: Viewer,
    state: web::Data<AppState>,
    request: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let filter = ListParams::from_query(request.query_string())?.to_filter(Utc::now())?;
    Ok(HttpResponse::Ok().json(state.app.desk.list(filter).await?))
}

/// The `webhook_events.id` in a path (not the provider's event id).
pub fn event_row_id(path: &str) -> Result<i64, ApiError> {
    path.parse::<i64>().map_err(|_| ApiError::NotFound)
}

#[derive(Debug, Deserialize)]
struct ShowParams {
    reveal: Option<String>,
}

/// `?reveal=true`: the payload without its mask, for operators only.
pub(super) fn reveal_asked(request: &HttpRequest, who: &Principal) -> Result<bool, ApiError> {
    let params = web::Query::<ShowParams>::from_query(request.query_string())
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let reveal = match params.reveal.as_deref() {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(ApiError::BadRequest("reveal must be true or false".into())),
    };
    if reveal {
        who.check_operator()?;
    }
    Ok(reveal)
}

pub async fn show(
    Viewer { who, .. }: Viewer,
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = event_row_id(&path)?;
    let reveal = reveal_asked(&request, &who)?;
    let event = state
        .app
        .desk
        .event(id, &who.name, reveal)
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(HttpResponse::Ok().json(event))
}

#[derive(Debug, Deserialize)]
struct StatsParams {
    window: Option<String>,
}

/// The counts of a window of time.
#[derive(Debug, Serialize)]
struct WindowStats {
    window: String,
    since: chrono::DateTime<Utc>,
    #[serde(flatten)]
    stats: Stats,
}

pub async fn stats(
    _: Viewer,
    state: web::Data<AppState>,
    request: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let params = web::Query::<StatsParams>::from_query(request.query_string())
        .map_err(|e| ApiError::BadRequest(e.to_string()))?
        .into_inner();
    let text = params.window.unwrap_or_else(|| "24h".into());
    let bad_window = || ApiError::BadRequest("window must be an age like 24h or 7d".into());
    let window = duration::parse(&text).map_err(|_| bad_window())?;
    let since = duration::before(Utc::now(), window).ok_or_else(bad_window)?;
    // Counted in whole hours: from the start of `since`'s hour.
    let since = crate::rollup::hour_of(since);
    Ok(HttpResponse::Ok().json(WindowStats {
        window: duration::format(window),
        since,
        stats: state.app.desk.stats(since).await?,
    }))
}

/// Events per hour of the last day and failures per day of the last week.
pub async fn series(_: Viewer, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(state.app.desk.series(Utc::now()).await?))
}

/// Applies an event again and describes the result (shared with the web page).
/// It owns what it needs, so it can run on after its request is gone.
pub async fn apply_again(
    desk: Desk,
    who: String,
    request_id: String,
    id: i64,
) -> Result<EventSummary, ApiError> {
    let outcome = desk.retry(id, &who).await?;
    desk::log_retry(&who, &request_id, id, &outcome);
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
        RetryOutcome::InFlight => return Err(ApiError::InFlight),
    }
    desk.summary(id).await?.ok_or(ApiError::NotFound)
}

/// An answer as status and JSON bytes (what an Idempotency-Key stores).
fn answer<T: serde::Serialize>(result: Result<T, ApiError>) -> (u16, Vec<u8>) {
    match result {
        Ok(value) => (200, serde_json::to_vec(&value).unwrap_or_default()),
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
    Operator { who: principal, .. }: Operator,
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let id = path.into_inner();
    let work = move |acting: Acting, _body| async move {
        let id = event_row_id(&id)?;
        apply_again(acting.desk, acting.who, acting.request_id, id).await
    };
    keyed(&state, &principal, &request, payload, work).await
}

/// Runs a retry to its end even when its request is gone — the client left, or
/// the connection's deadline passed half-way through a bulk retry — so what it
/// changed is still audited, logged and, under an Idempotency-Key, answered to
/// the repeat instead of being run again.
pub async fn to_completion<T: 'static>(
    work: impl std::future::Future<Output = Result<T, ApiError>> + 'static,
) -> Result<T, ApiError> {
    actix_web::rt::spawn(work)
        .await
        .map_err(|error| ApiError::Internal(format!("a retry stopped: {error}")))?
}

/// The API described for tools and people (OpenAPI 3.1), to viewers and operators.
pub async fn openapi(_: Viewer) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok()
        .insert_header((CONTENT_TYPE, "application/json"))
        .body(super::OPENAPI))
}

/// The filter keys of the history list, and `dry_run`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BulkRequest {
    source: Option<String>,
    kind: Option<String>,
    #[serde(rename = "type")]
    event_type: Option<String>,
    status: Option<String>,
    since: Option<String>,
    until: Option<String>,
    q: Option<String>,
    #[serde(default)]
    dry_run: bool,
}

pub async fn bulk_retry(
    Operator { who: principal, .. }: Operator,
    state: web::Data<AppState>,
    request: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let work = move |acting: Acting, body: Vec<u8>| async move {
        let bulk: BulkRequest = body_or_default(&body, "a filter")?;
        let params = ListParams {
            source: bulk.source,
            kind: bulk.kind,
            event_type: bulk.event_type,
            status: bulk.status,
            since: bulk.since,
            until: bulk.until,
            q: bulk.q,
            limit: None,
            cursor: None,
        };
        let filter = params.to_filter(Utc::now())?;
        let outcome = (acting.desk)
            .bulk_retry(filter, bulk.dry_run, &acting.who)
            .await?;
        if !bulk.dry_run {
            desk::log_bulk_retry(&acting.who, &acting.request_id, &outcome);
        }
        Ok(outcome)
    };
    keyed(&state, &principal, &request, payload, work).await
}

/// What forgetting a customer takes: a source to keep to, and `dry_run`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ForgetRequest {
    source: Option<String>,
    #[serde(default)]
    dry_run: bool,
}

pub async fn forget(
    Operator { who: principal, .. }: Operator,
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let customer = path.into_inner();
    let work = move |acting: Acting, body: Vec<u8>| async move {
        let asked: ForgetRequest = body_or_default(&body, "{source, dry_run}")?;
        let (source, dry_run) = (asked.source.as_deref(), asked.dry_run);
        let outcome = (acting.desk)
            .forget(&customer, source, dry_run, &acting.who)
            .await?;
        if !dry_run {
            desk::log_forget(&acting.who, &acting.request_id, &outcome);
        }
        Ok(outcome)
    };
    keyed(&state, &principal, &request, payload, work).await
}

/// A request's JSON body, or `T`'s default when the body is blank; `what`
/// names what it should be when it is neither.
fn body_or_default<T: Default + serde::de::DeserializeOwned>(
    body: &[u8],
    what: &str,
) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("the body is not {what}: {e}")))
}

/// Who runs an operator's change, and for which request: what `keyed` hands
/// its work.
struct Acting {
    desk: Desk,
    who: String,
    request_id: String,
}

/// Runs `work` once per `Idempotency-Key` (when the request has one): a repeat
/// gets the stored answer, the same key with another request 422, a repeat while
/// the first runs 409. No connection is held while `work` runs, and `work` (with
/// the key's answer) runs to its end even if the request is gone.
async fn keyed<F, Fut, T>(
    state: &web::Data<AppState>,
    principal: &Principal,
    request: &HttpRequest,
    mut payload: web::Payload,
    work: F,
) -> Result<HttpResponse, ApiError>
where
    F: FnOnce(Acting, Vec<u8>) -> Fut,
    Fut: std::future::Future<Output = Result<T, ApiError>> + 'static,
    T: serde::Serialize + 'static,
{
    let acting = Acting {
        desk: state.app.desk.clone(),
        who: principal.name.clone(),
        request_id: request_id::of_request(request),
    };
    let body = body::read(
        &mut payload,
        request,
        ADMIN_BODY_LIMIT,
        state.app.settings.now().body_timeout,
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
    let fingerprint =
        Sha256::digest([request.path().as_bytes(), b"\n", body.as_slice()].concat()).to_vec();
    let Some(key) = key else {
        let work = work(acting, body);
        let (status, body) = to_completion(async move { Ok(answer(work.await)) }).await?;
        return Ok(respond(status, body, false));
    };
    let desk = &state.app.desk;
    let claim = desk.claim_key(&principal.name, &key, &fingerprint).await?;
    match claim {
        Claim::Replay { status, body } => Ok(respond(status, body, true)),
        Claim::InProgress => Err(ApiError::Conflict(
            "request_in_progress",
            "a request with this Idempotency-Key is still running".into(),
        )),
        Claim::Mismatch => Err(ApiError::IdempotencyKeyReused),
        Claim::Fresh(claim_id) => {
            let (work, desk, who) = (work(acting, body), desk.clone(), principal.name.clone());
            let (status, body) = to_completion(async move {
                let result = tokio::select! {
                    result = work => result,
                    never = keep_claimed(&desk, &who, &key, &claim_id) => match never {},
                };
                let passes = result.as_ref().err().is_some_and(ApiError::passes);
                let (status, body) = answer(result);
                if passes {
                    desk.release_key(&who, &key, &claim_id).await?;
                } else {
                    desk.complete_key(&who, &key, &claim_id, status, &body)
                        .await?;
                }
                Ok((status, body))
            })
            .await?;
            Ok(respond(status, body, false))
        }
    }
}

/// Renews a running request's claim on its key until the request ends (the
/// caller stops polling this), so a repeat meanwhile is told it is in progress.
async fn keep_claimed(
    desk: &Desk,
    who: &str,
    key: &str,
    claim_id: &[u8],
) -> std::convert::Infallible {
    loop {
        tokio::time::sleep(desk::RENEW_EVERY).await;
        if let Err(error) = desk.renew_key(who, key, claim_id).await {
            log::warn!("could not renew an Idempotency-Key claim: {error}");
        }
    }
}

pub async fn payment(
    Viewer { who, .. }: Viewer,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (source, payment_id) = path.into_inner();
    let view = state
        .app
        .desk
        .payment(&source, &payment_id, &who.name)
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(HttpResponse::Ok().json(view))
}

#[derive(Debug, Deserialize)]
struct PageParams {
    customer: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
}

/// `limit` as given: 1 to `MAX_PAGE`, default `DEFAULT_PAGE`.
pub(super) fn page_limit(limit: Option<&str>) -> Result<i64, ApiError> {
    match limit.filter(|l| !l.is_empty()) {
        None => Ok(DEFAULT_PAGE),
        Some(text) => text
            .parse::<i64>()
            .ok()
            .filter(|n| (1..=MAX_PAGE).contains(n))
            .ok_or_else(|| {
                ApiError::BadRequest(format!("limit must be a number from 1 to {MAX_PAGE}"))
            }),
    }
}

fn page_params(request: &HttpRequest) -> Result<PageParams, ApiError> {
    web::Query::<PageParams>::from_query(request.query_string())
        .map(web::Query::into_inner)
        .map_err(|e| ApiError::BadRequest(e.to_string()))
}

pub async fn payments(
    _: Viewer,
    state: web::Data<AppState>,
    request: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let params = page_params(&request)?;
    let customer = params
        .customer
        .filter(|c| !c.trim().is_empty() && !c.contains('\0'))
        .ok_or_else(|| ApiError::BadRequest("customer (a customer id) is required".into()))?;
    let limit = page_limit(params.limit.as_deref())?;
    let page = state
        .app
        .desk
        .customer_payments(customer.trim(), limit, params.cursor.as_deref())
        .await?;
    Ok(HttpResponse::Ok().json(page))
}

pub async fn audit(
    _: Operator,
    state: web::Data<AppState>,
    request: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let params = page_params(&request)?;
    let limit = page_limit(params.limit.as_deref())?;
    let page = state
        .app
        .desk
        .audit(limit, params.cursor.as_deref())
        .await?;
    Ok(HttpResponse::Ok().json(page))
}
