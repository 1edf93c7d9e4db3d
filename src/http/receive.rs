//! `POST /webhooks/{source}`: the delivery read (its source known, its body
//! within its size and time), taken in by the intake, and the provider's
//! answer, sent only after the commit; then the delivery's log line and metrics.

use std::time::Instant;

use actix_web::http::header::{CONTENT_TYPE, HeaderMap};
use actix_web::{HttpRequest, HttpResponse, ResponseError, web};
use serde::Serialize;
use tracing::field::Empty;
use tracing::{Instrument, Span};

use super::error::ApiError;
use super::{AppState, body, client, request_id};
use crate::intake::{Delivery, Receipt, Seen};
use crate::providers::Answer;
use crate::signature::Headers;
use crate::store::events::Recorded;
use crate::traces;

/// A request's headers, and its URL's query.
struct RequestHeaders<'a>(&'a HeaderMap, Option<&'a str>);

impl Headers for RequestHeaders<'_> {
    fn header(&self, name: &str) -> Option<&str> {
        self.0.get(name).and_then(|v| v.to_str().ok())
    }

    fn query(&self) -> Option<&str> {
        self.1
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
    let label = if known { source.as_str() } else { "unknown" };
    let (response, outcome, seen) =
        match take_in(&state, &settings, &source, &request, payload, arrived).await {
            Ok((receipt, answer)) => {
                for _ in 0..receipt.duplicates() {
                    state.app.metrics.duplicate(label);
                }
                (answer, receipt.outcome(), receipt.seen())
            }
            Err((error, seen)) => {
                if let ApiError::InvalidSignature(reason, _) = &error {
                    state.app.metrics.signature_failure(label, reason);
                }
                (error.error_response(), error.code(), seen)
            }
        };
    if known && response.status().is_success() {
        state.app.activity.accepted(label);
    }
    let elapsed = started.elapsed();
    state.app.metrics.delivery(label, outcome);
    state.app.metrics.delivery_duration(label, elapsed);
    let request_id = request_id::of_request(&request);
    let status = response.status().as_u16();
    let latency_ms = (elapsed.as_secs_f64() * 10_000.0).round() / 10.0;
    if !span.is_disabled() {
        span.record("hookd.event_id", seen.event_id.as_deref());
        span.record("hookd.kind", seen.kind.as_deref());
        span.record("hookd.outcome", outcome);
        span.record("hookd.request_id", request_id.as_str());
        span.record("http.response.status_code", status);
        if response.status().is_server_error() {
            traces::fail(&span, &outcome);
        }
    }
    // The line as text, and its fields apart for JSON logs.
    log::info!(
        source = source.as_str(),
        event_id = seen.event_id.as_deref(),
        kind = seen.kind.as_deref(),
        outcome = outcome,
        status = status,
        latency_ms = latency_ms,
        request_id = request_id.as_str();
        "delivery source={:?} event_id={:?} kind={} outcome={outcome} status={status} \
         latency_ms={latency_ms:.1} request_id={request_id}",
        source.as_str(),
        seen.event_id.as_deref().unwrap_or("-"),
        seen.kind.as_deref().unwrap_or("-"),
    );
    response
}

/// The delivery read from the request and taken in, and its answer; or the
/// refusal, with what was read of it.
async fn take_in(
    state: &AppState,
    settings: &crate::config::Settings,
    source_name: &str,
    request: &HttpRequest,
    mut payload: web::Payload,
    arrived: i64,
) -> Result<(Receipt, HttpResponse), (ApiError, Seen)> {
    let unseen = |error: ApiError| (error, Seen::default());
    let Some(source) = settings.source(source_name) else {
        let deadline = tokio::time::Instant::now() + settings.body_timeout;
        body::drain(&mut payload, 0, deadline).await;
        return Err(unseen(ApiError::UnknownSource));
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
    .await
    .map_err(unseen)?;
    let delivery = Delivery {
        source,
        headers: &RequestHeaders(request.headers(), request.uri().query()),
        body,
        arrived,
        forwarded: client::is_forwarded(request),
        held,
    };
    let receipt = state
        .app
        .intake()
        .receive(settings, delivery)
        .await
        .map_err(|refused| (refused.error.into(), refused.seen))?;
    let answer = answer(source.scheme.provider().answer(), &receipt);
    Ok((receipt, answer))
}

/// The provider's answer to a delivery taken in. A duplicate gets the first
/// answer: it names the id the event was first stored under (another, when
/// its body was found under another id).
fn answer(answer: Answer, receipt: &Receipt) -> HttpResponse {
    let mut response = HttpResponse::Ok();
    if receipt.replayed() && answer != Answer::Nothing {
        response.insert_header(("Idempotent-Replayed", "true"));
    }
    let body = match (answer, receipt) {
        (Answer::Nothing, _) => Vec::new(),
        (Answer::Fixed { content_type, body }, _) => {
            response.insert_header((CONTENT_TYPE, content_type));
            body.as_bytes().to_vec()
        }
        (
            Answer::Json,
            Receipt::One {
                recorded, event_id, ..
            },
        ) => {
            response.insert_header((CONTENT_TYPE, "application/json"));
            let first = match recorded {
                Recorded::Duplicate { event_id, .. } => event_id.as_str(),
                _ => event_id.as_str(),
            };
            accepted_body(first)
        }
        (Answer::Json, Receipt::Several { event_ids, .. }) => {
            response.insert_header((CONTENT_TYPE, "application/json"));
            serde_json::to_vec(&serde_json::json!({"status": "accepted", "event_ids": event_ids}))
                .unwrap_or_default()
        }
    };
    response.body(body)
}
