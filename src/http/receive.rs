//! `POST /webhooks/{source}`: the receiver's checks, in order — source, size,
//! signature, body, dedupe — and the answer, sent only after the commit.

use std::time::Instant;

use actix_web::http::header::{CONTENT_TYPE, HeaderMap};
use actix_web::{HttpRequest, HttpResponse, ResponseError, web};
use serde::Serialize;
use sha2::{Digest, Sha256};
use tracing::field::Empty;
use tracing::{Instrument, Span};

use super::error::ApiError;
use super::{AppState, body, client, request_id};
use crate::config::is_development_credential;
use crate::event::IncomingEvent;
use crate::ingest::Ingested;
use crate::providers::{self, Answer, Provider};
use crate::signature::{Headers, SignatureError, Verified};
use crate::store::events::{self, Recorded};
use crate::store::{StoreError, bound_signatures};
use crate::traces;

struct RequestHeaders<'a>(&'a HeaderMap);

impl Headers for RequestHeaders<'_> {
    fn header(&self, name: &str) -> Option<&str> {
        self.0.get(name).and_then(|v| v.to_str().ok())
    }
}

#[derive(Serialize)]
struct Accepted<'a> {
    status: &'static str,
    event_id: &'a str,
}

/// The first answer for an event. Deterministic, so a resend gets it byte for byte
/// even after the payload is purged.
pub fn accepted_body(event_id: &str) -> Vec<u8> {
    serde_json::to_vec(&Accepted {
        status: "accepted",
        event_id,
    })
    .unwrap_or_default()
}

/// What the log line and metrics say about a delivery.
struct Summary {
    event_id: Option<String>,
    kind: Option<String>,
    outcome: &'static str,
}

/// A delivery's span: its own trace's root (kind server). A caller's
/// `traceparent` is linked, not continued: the header comes from the open
/// internet, and the trace of a delivery is hookd's to start.
fn delivery_span(source: &str, request: &HttpRequest) -> Span {
    let span = tracing::trace_span!(
        parent: None,
        "delivery",
        otel.kind = "server",
        http.route = "/webhooks/{source}",
        hookd.source = source,
        hookd.event_id = Empty,
        hookd.kind = Empty,
        hookd.outcome = Empty,
        hookd.request_id = Empty,
        http.response.status_code = Empty,
        otel.status_message = Empty,
    );
    if !span.is_disabled()
        && let Some(header) = request.headers().get("traceparent")
        && let Ok(header) = header.to_str()
    {
        traces::link_traceparent(&span, header);
    }
    span
}

pub async fn receive(
    state: web::Data<AppState>,
    source: web::Path<String>,
    request: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    // Only configured names become span fields and metric labels: the path is
    // the caller's to choose.
    // One configuration for the whole delivery, however long its body takes.
    let settings = state.app.settings.now();
    let known = settings.source(&source).is_some();
    let span = delivery_span(if known { &source } else { "unknown" }, &request);
    receive_in(
        state,
        settings,
        source,
        known,
        request,
        payload,
        span.clone(),
    )
    .instrument(span)
    .await
}

/// `receive` inside the delivery's span, its last line included.
async fn receive_in(
    state: web::Data<AppState>,
    settings: std::sync::Arc<crate::config::Settings>,
    source: web::Path<String>,
    known: bool,
    request: HttpRequest,
    payload: web::Payload,
    span: Span,
) -> HttpResponse {
    let started = Instant::now();
    // The time a delivery is judged by is when it arrived, not when its body
    // finished uploading (a 5 s tolerance must not shrink by a slow upload).
    let arrived = chrono::Utc::now().timestamp();
    let mut summary = Summary {
        event_id: None,
        kind: None,
        outcome: "",
    };
    let result = handle(
        &state,
        &settings,
        &source,
        &request,
        payload,
        arrived,
        &mut summary,
    )
    .await;
    let label = if known { source.as_str() } else { "unknown" };
    let response = match result {
        Ok(response) => response,
        Err(error) => {
            summary.outcome = error.code();
            if let ApiError::InvalidSignature(reason, _) = &error {
                state.app.metrics.signature_failure(label, reason);
            }
            error.error_response()
        }
    };
    if known && response.status().is_success() {
        state.app.activity.accepted(label);
    }
    let elapsed = started.elapsed();
    state.app.metrics.delivery(label, summary.outcome);
    state.app.metrics.delivery_duration(label, elapsed);
    let request_id = request_id::of(&request);
    let status = response.status().as_u16();
    let latency_ms = (elapsed.as_secs_f64() * 10_000.0).round() / 10.0;
    if !span.is_disabled() {
        span.record("hookd.event_id", summary.event_id.as_deref());
        span.record("hookd.kind", summary.kind.as_deref());
        span.record("hookd.outcome", summary.outcome);
        span.record("hookd.request_id", request_id.as_str());
        span.record("http.response.status_code", status);
        if response.status().is_server_error() {
            traces::fail(&span, &summary.outcome);
        }
    }
    // The line as text, and its fields apart for JSON logs.
    log::info!(
        source = source.as_str(),
        event_id = summary.event_id.as_deref(),
        kind = summary.kind.as_deref(),
        outcome = summary.outcome,
        status = status,
        latency_ms = latency_ms,
        request_id = request_id.as_str();
        "delivery source={:?} event_id={:?} kind={} outcome={} status={status} \
         latency_ms={latency_ms:.1} request_id={request_id}",
        source.as_str(),
        summary.event_id.as_deref().unwrap_or("-"),
        summary.kind.as_deref().unwrap_or("-"),
        summary.outcome,
    );
    response
}

async fn handle(
    state: &AppState,
    settings: &crate::config::Settings,
    source_name: &str,
    request: &HttpRequest,
    mut payload: web::Payload,
    arrived: i64,
    summary: &mut Summary,
) -> Result<HttpResponse, ApiError> {
    let Some(source) = settings.source(source_name) else {
        let deadline = tokio::time::Instant::now() + settings.body_timeout;
        body::drain(&mut payload, 0, deadline).await;
        return Err(ApiError::UnknownSource);
    };
    // The body's share of the memory budget is held until it is verified,
    // however long a certificate fetch makes it wait.
    let (body, held) = body::read_budgeted(
        &mut payload,
        request,
        settings.max_body_bytes,
        settings.body_timeout,
        &state.body_memory,
    )
    .await?;
    let headers = RequestHeaders(request.headers());
    let provider = providers::of(&source.scheme);
    let refused = |reason| ApiError::InvalidSignature(reason, provider.refused_signature());
    let verifier = source.verifier();
    let span = tracing::trace_span!(
        "verify",
        hookd.scheme = source.scheme.name(),
        otel.status_message = Empty,
    );
    let verified = async {
        match verifier.verify_request(&headers, &body, arrived) {
            // PayPal's certificate may need fetching first.
            Err(SignatureError::Mismatch) => {
                state
                    .app
                    .certificates
                    .verify_after_fetching(source_name, &verifier, &headers, &body, arrived)
                    .await
            }
            verified => verified,
        }
    }
    .instrument(span.clone())
    .await;
    drop(held);
    if let Err(error) = &verified {
        traces::fail(&span, error);
    }
    let verified = verified.map_err(refused)?;
    // The shipped secrets are public: a delivery a proxy forwarded (from beyond
    // this machine) may not use them, whatever address hookd listens on.
    let signer = usize::try_from(verified.signed_with - 1)
        .ok()
        .and_then(|i| source.secrets.get(i));
    let shipped_key = signer.is_some_and(|s| is_development_credential(s.expose()))
        || provider.development_credential().is_some();
    if shipped_key && client::is_forwarded(request) {
        log::warn!(
            "refused a forwarded delivery to {source_name:?} signed with a shipped development secret"
        );
        return Err(refused(SignatureError::Mismatch));
    }
    let mut events = IncomingEvent::parse_all(source, &headers, &body)?;
    if let (Some(signature), Some(event)) = (
        provider.checksum_signature(&providers::AnyHeaders(&headers)),
        events.first(),
    ) && !bind_signature(state, settings, source_name, &signature, &body, event).await?
    {
        return Err(refused(SignatureError::Replayed));
    }
    if events.len() != 1 {
        return receive_several(state, source_name, provider, events, verified, summary).await;
    }
    let Some(event) = events.pop() else {
        return Err(ApiError::BadRequest("the request carries no event".into()));
    };
    summary.event_id = Some(event.event_id.clone());
    summary.kind = event.kind.clone();
    let delivered_id = event.event_id.clone();
    let Ingested { recorded, status } = state.app.ingester.ingest(event, verified).await?;
    let mut response = HttpResponse::Ok();
    // A duplicate gets the first answer: it names the id the event was first
    // stored under (another, when its body was found under another id).
    let body = match (provider.answer(), &recorded) {
        (Answer::Fixed { content_type, body }, _) => {
            response.insert_header((CONTENT_TYPE, content_type));
            body.as_bytes().to_vec()
        }
        (Answer::Json, Recorded::Duplicate { event_id, .. }) => {
            response.insert_header((CONTENT_TYPE, "application/json"));
            accepted_body(event_id)
        }
        (Answer::Json, _) => {
            response.insert_header((CONTENT_TYPE, "application/json"));
            accepted_body(&delivered_id)
        }
    };
    match recorded {
        Recorded::New { .. } => {
            summary.outcome = match status {
                Some(status) => status.as_str(),
                None => "accepted",
            };
        }
        Recorded::Duplicate { .. } => {
            summary.outcome = "duplicate";
            state.app.metrics.duplicate(source_name);
            response.insert_header(("Idempotent-Replayed", "true"));
        }
        Recorded::Conflict => return Err(ApiError::EventIdConflict),
    }
    Ok(response.body(body))
}

/// Binds a signature that covers only a checksum of the body (PayPal's) to
/// this body, unless it is bound already: whether it is bound to this one.
async fn bind_signature(
    state: &AppState,
    settings: &crate::config::Settings,
    source_name: &str,
    signature: &[u8],
    body: &[u8],
    event: &IncomingEvent,
) -> Result<bool, ApiError> {
    let sha256 = |bytes: &[u8]| Sha256::digest(bytes).to_vec();
    // Kept as long as the payloads: a signature that old is refused for its time anyway.
    let expired_before = crate::duration::before(chrono::Utc::now(), settings.retention)
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC);
    let client = state.app.pool.get().await.map_err(StoreError::from)?;
    Ok(bound_signatures::claim(
        &client,
        source_name,
        &sha256(signature),
        &sha256(body),
        &event.event_id,
        expired_before,
    )
    .await?)
}

/// A request carrying several events (Adyen's batches): each is stored once,
/// all in one commit, and the request is answered after it. An item reusing a
/// stored id with another payload is recorded as a conflict and acknowledged:
/// refusing the request would hold back its other items for the provider's
/// whole retry window, and the provider cannot fix the item anyway.
async fn receive_several(
    state: &AppState,
    source_name: &str,
    provider: &dyn Provider,
    events: Vec<IncomingEvent>,
    verified: Verified,
    summary: &mut Summary,
) -> Result<HttpResponse, ApiError> {
    if events.is_empty() {
        return Err(ApiError::BadRequest("the request carries no event".into()));
    }
    summary.event_id = Some(
        events
            .iter()
            .map(|e| e.event_id.as_str())
            .collect::<Vec<_>>()
            .join(","),
    );
    let outcomes = state
        .app
        .ingester
        .ingest_all(events.clone(), verified)
        .await?;
    let mut duplicates = 0;
    let mut conflicts = Vec::new();
    for (event, outcome) in events.iter().zip(&outcomes) {
        match &outcome.recorded {
            Recorded::New { .. } => {}
            Recorded::Duplicate { .. } => {
                duplicates += 1;
                state.app.metrics.duplicate(source_name);
            }
            Recorded::Conflict => {
                conflicts.push(event);
            }
        }
    }
    if !conflicts.is_empty() {
        let mut client = state.app.pool.get().await.map_err(StoreError::from)?;
        for event in &conflicts {
            events::record_conflict(&mut client, event).await?;
        }
    }
    summary.outcome = match (duplicates, conflicts.len()) {
        (_, c) if c > 0 => "conflict_recorded",
        (d, _) if d == outcomes.len() => "duplicate",
        _ => "accepted",
    };
    let mut response = HttpResponse::Ok();
    if duplicates == outcomes.len() {
        response.insert_header(("Idempotent-Replayed", "true"));
    }
    let body = match provider.answer() {
        Answer::Fixed { content_type, body } => {
            response.insert_header((CONTENT_TYPE, content_type));
            body.as_bytes().to_vec()
        }
        Answer::Json => {
            response.insert_header((CONTENT_TYPE, "application/json"));
            let ids: Vec<&str> = events.iter().map(|e| e.event_id.as_str()).collect();
            serde_json::to_vec(&serde_json::json!({"status": "accepted", "event_ids": ids}))
                .unwrap_or_default()
        }
    };
    Ok(response.body(body))
}
