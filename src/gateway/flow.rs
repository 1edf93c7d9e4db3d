//! One request through the gateway: its route, its key and scope, its body and
//! fingerprint, the claim (committed before anything is sent), the upstream
//! call, and the key settled before the answer goes back. Once claimed, the
//! request runs to its end even if the client leaves, so its key is always
//! settled.

use std::sync::Arc;
use std::time::Instant;

use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, ResponseError, web};
use tracing::field::Empty;
use tracing::{Instrument, Span};

use super::config::Route;
use super::forwarding::Forwarding;
use super::upstream::{self, Body, Failure};
use crate::http::AppState;
use crate::http::error::ApiError;
use crate::http::{body, request_id};
use crate::idempotency::{
    self, Claim, Claimed, OPERATION_HEADER, Outcome, Refusal, Settle, StoredAnswer,
};
use crate::traces;

/// Every request of the gateway's listener.
pub async fn handle(
    state: web::Data<AppState>,
    request: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    let request_id = request_id::taken_or_new(request.headers());
    // One configuration for the whole request, however long it takes.
    let settings = state.app.settings.now();
    let Some(route) = settings
        .gateway
        .route_for(request.method().as_str(), request.path())
        .cloned()
    else {
        let refusal = ApiError::Idempotency(Refusal::NoRoute).error_response();
        return own_answer(refusal, &request_id);
    };
    let limits = BodyLimits {
        bytes: settings.max_body_bytes,
        within: settings.body_timeout,
    };
    let span = gateway_span(&route, &request);
    let (response, outcome) = through(state.clone(), route.clone(), limits, request, payload)
        .instrument(span.clone())
        .await;
    let response = own_answer(response, &request_id);
    if let Some(outcome) = outcome {
        state.app.metrics.gateway_request(route.name(), outcome);
        span.record("hookd.outcome", outcome.as_str());
    }
    span.record("http.response.status_code", response.status().as_u16());
    response
}

/// Marks an answer that is upstream's (passed on, or stored and given again):
/// it leaves as upstream wrote it.
struct Upstreams;

/// `X-Request-Id` on an answer of hookd's own (a refusal, a 502), as every
/// answer of the other listener carries; upstream's answers keep their own.
fn own_answer(mut response: HttpResponse, request_id: &str) -> HttpResponse {
    let upstreams = response.extensions().contains::<Upstreams>();
    if !upstreams && let Ok(value) = HeaderValue::from_str(request_id) {
        response.headers_mut().insert(request_id::HEADER, value);
    }
    response
}

/// `response`, marked as upstream's.
fn upstreams(mut response: HttpResponse) -> HttpResponse {
    response.extensions_mut().insert(Upstreams);
    response
}

/// How large a request body may be, and how long it may take to arrive.
#[derive(Debug, Clone, Copy)]
struct BodyLimits {
    bytes: usize,
    within: std::time::Duration,
}

/// The request's span: its own trace's root (kind server), a caller's
/// `traceparent` linked, as a delivery's.
fn gateway_span(route: &Route, request: &HttpRequest) -> Span {
    let span = tracing::trace_span!(
        parent: None,
        "gateway",
        otel.kind = "server",
        http.route = route.path.pattern(),
        http.request.method = route.method.as_str(),
        hookd.route = route.name(),
        hookd.operation = Empty,
        hookd.outcome = Empty,
        http.response.status_code = Empty,
        otel.status_message = Empty,
    );
    let caller = request.headers().get("traceparent");
    if let Some(header) = caller.and_then(|h| h.to_str().ok()) {
        traces::link_traceparent(&span, header);
    }
    span
}

/// The answer, and the outcome counted (none for a failure of hookd's own).
type Answered = (HttpResponse, Option<Outcome>);

fn refused(refusal: Refusal) -> Answered {
    (
        ApiError::Idempotency(refusal).error_response(),
        Some(refusal.outcome()),
    )
}

/// A refusal naming the key's operation id: what the client quotes when it
/// asks what became of it.
fn refused_for(refusal: Refusal, operation: &str) -> Answered {
    (
        idempotency::refused_for(refusal, operation),
        Some(refusal.outcome()),
    )
}

fn failed(error: ApiError, state: &AppState) -> Answered {
    if matches!(error, ApiError::Internal(_)) {
        state.app.metrics.internal_error();
    }
    traces::fail(&Span::current(), &error);
    (error.error_response(), None)
}

/// The route's rules, in order: a key (or none where it is not required), a
/// scope, the body, then the claim.
async fn through(
    state: web::Data<AppState>,
    route: Arc<Route>,
    limits: BodyLimits,
    request: HttpRequest,
    mut payload: web::Payload,
) -> Answered {
    let rules = &route.rules;
    let keyed = match idempotency::key_and_scope(rules, request.headers()) {
        Ok(keyed) => keyed,
        Err(refusal) => return refused(refusal),
    };
    // Past its first 64 KiB, a body counts against the gateway's memory budget
    // (`max_body_memory`) for as long as it is held.
    let budget = &state.gateway_body_memory;
    let (body, held) = match body::read_budgeted(
        &mut payload,
        &request,
        limits.bytes,
        limits.within,
        budget,
    )
    .await
    {
        Ok(read) => read,
        Err(error) => return failed(error, &state),
    };
    let share = BodyShare::of(&state, held);
    let Some((key, scope)) = keyed else {
        return unkeyed(&state, &route, &request, body).await;
    };
    // From the claim to its end even if the client leaves (a reset drops this
    // handler): a key claimed is always sent and settled, never left claimed
    // with nobody to run it. The body's share of the budget goes with it.
    let (on, work_state) = (share, state.clone());
    let work = async move {
        let _share = on;
        claimed_through(work_state, route, request, body, key, scope).await
    };
    let work = work.instrument(Span::current());
    match actix_web::rt::spawn(work).await {
        Ok(answered) => answered,
        Err(error) => failed(
            ApiError::Internal(format!("a gateway request stopped: {error}")),
            &state,
        ),
    }
}

/// A body's share of the gateway's memory budget, given back when it is
/// dropped: it goes with the body into the task a keyed request runs in, which
/// a client that left does not end.
struct BodyShare {
    held: Option<(web::Data<AppState>, usize)>,
}

impl BodyShare {
    fn of(state: &web::Data<AppState>, held: Option<tokio::sync::SemaphorePermit<'_>>) -> Self {
        let held = held.map(|permit| {
            let permits = permit.num_permits();
            permit.forget();
            (state.clone(), permits)
        });
        BodyShare { held }
    }
}

impl Drop for BodyShare {
    fn drop(&mut self) {
        if let Some((state, permits)) = self.held.take() {
            state.gateway_body_memory.add_permits(permits);
        }
    }
}

/// The claim of a keyed request, then what it decided: a refusal, the stored
/// answer, or the request sent upstream and its answer stored.
async fn claimed_through(
    state: web::Data<AppState>,
    route: Arc<Route>,
    request: HttpRequest,
    body: Vec<u8>,
    key: String,
    scope: Vec<u8>,
) -> Answered {
    let rules = &route.rules;
    let fingerprint = idempotency::fingerprint(
        request.method().as_str(),
        request.path(),
        request.query_string(),
        &body,
        &rules.fingerprint_ignore,
    );
    let target = request.uri().path_and_query().map_or("/", |p| p.as_str());
    let claim_request = idempotency::Request {
        rules,
        scope: &scope,
        key: &key,
        fingerprint: &fingerprint,
        method: request.method().as_str(),
        target,
    };
    let claim = match claim_key(&state, &claim_request)
        .instrument(tracing::trace_span!("claim"))
        .await
    {
        Ok(claim) => claim,
        Err(error) => return failed(error.into(), &state),
    };
    match claim {
        Claim::Refused(refusal, None) => refused(refusal),
        Claim::Refused(refusal, Some(operation)) => refused_for(refusal, &operation),
        Claim::Replay(answer, operation) => {
            Span::current().record("hookd.operation", operation.as_str());
            (
                upstreams(idempotency::replay(answer, &operation)),
                Some(Outcome::Replayed),
            )
        }
        Claim::Run(claimed) => {
            Span::current().record("hookd.operation", claimed.operation_id.as_str());
            let key = (rules.route.clone(), scope.clone(), key.clone());
            let route = route.clone();
            run(state, route, request, body, claimed, key).await
        }
    }
}

/// The claim's first statement goes with other requests' in one commit
/// (`commit::KeyWrites`); only a key it could not take is read and judged, on
/// a connection of this request's.
async fn claim_key(
    state: &AppState,
    request: &idempotency::Request<'_>,
) -> Result<Claim, crate::store::StoreError> {
    let attempt = idempotency::attempt(request);
    let taken = state.app.key_writes.try_claim(attempt.clone()).await?;
    if let Some(taken) = taken {
        return Ok(Claim::Run(idempotency::claimed(&attempt, taken)));
    }
    let client = state.app.pool.get().await?;
    let claim = idempotency::claim_after(&client, request, &attempt, None).await;
    crate::store::give_back(client, claim)
}

/// A request without a key on a route that does not require one: sent as it
/// is, nothing stored.
async fn unkeyed(
    state: &AppState,
    route: &Route,
    request: &HttpRequest,
    body: Vec<u8>,
) -> Answered {
    let started = Instant::now();
    let forwarding = forwarding(state, request);
    let sent = upstream::send(route, request, forwarding.as_ref(), body, None)
        .instrument(upstream_span())
        .await;
    state
        .app
        .metrics
        .gateway_upstream(route.name(), started.elapsed());
    match sent {
        Err(Failure::NothingSent(why)) => {
            log::warn!("gateway {}: {why}", route.name());
            refused(Refusal::UpstreamUnavailable)
        }
        Err(Failure::NoAnswer(why)) => {
            log::warn!("gateway {}: {why}", route.name());
            refused(Refusal::UpstreamOutcomeUnknown)
        }
        Ok(answer) => {
            let outcome = match idempotency::settle(answer.status) {
                Settle::Store => Outcome::Sent,
                Settle::Release => Outcome::UpstreamError,
            };
            let (status, headers) = (answer.status, answer.headers);
            (pass_on(status, &headers, answer.body, None), Some(outcome))
        }
    }
}

/// What upstream is told of who sent `request` (`X-Forwarded-*`) when
/// `[gateway] trusted_proxies` is set; unset, the caller's headers go as they
/// are. Under the configuration in force (a reload changes it).
fn forwarding(state: &AppState, request: &HttpRequest) -> Option<Forwarding> {
    let settings = state.app.settings.now();
    let trusted = settings.gateway.trusted_proxies.as_deref()?;
    Some(Forwarding::of(request, trusted))
}

fn upstream_span() -> Span {
    tracing::trace_span!(
        "upstream",
        otel.kind = "client",
        http.response.status_code = Empty,
        otel.status_message = Empty,
    )
}

/// The claimed request: sent upstream, its key settled by the answer, then the
/// answer given.
async fn run(
    state: web::Data<AppState>,
    route: Arc<Route>,
    request: HttpRequest,
    body: Vec<u8>,
    claimed: Claimed,
    key: KeyName,
) -> Answered {
    let name = route.name();
    let started = Instant::now();
    let span = upstream_span();
    let forwarding = forwarding(&state, &request);
    let operation = Some(claimed.operation_id.as_str());
    let sent = upstream::send(&route, &request, forwarding.as_ref(), body, operation)
        .instrument(span.clone())
        .await;
    state.app.metrics.gateway_upstream(name, started.elapsed());
    let answer = match sent {
        Ok(answer) => answer,
        Err(Failure::NothingSent(why)) => {
            log::warn!(
                "gateway {name}: {why}; key released ({})",
                claimed.operation_id
            );
            traces::fail(&span, &why);
            release(&state, &claimed).await;
            return refused_for(Refusal::UpstreamUnavailable, &claimed.operation_id);
        }
        Err(Failure::NoAnswer(why)) => {
            log::warn!(
                "gateway {name}: {why}; the outcome of {} is unknown",
                claimed.operation_id
            );
            traces::fail(&span, &why);
            mark_unknown(&state, &claimed).await;
            return refused_for(Refusal::UpstreamOutcomeUnknown, &claimed.operation_id);
        }
    };
    span.record("http.response.status_code", answer.status);
    let operation = Some(claimed.operation_id.as_str());
    match idempotency::settle(answer.status) {
        Settle::Release => {
            release(&state, &claimed).await;
            let response = pass_on(answer.status, &answer.headers, answer.body, operation);
            (response, Some(Outcome::UpstreamError))
        }
        Settle::Store => {
            let kept = answer
                .headers
                .iter()
                .filter(|(name, _)| route.rules.keeps_header(name.as_str()))
                .filter_map(|(name, value)| {
                    Some((name.as_str().to_string(), value.to_str().ok()?.to_string()))
                })
                .collect();
            let (stored, body) = match answer.body {
                Body::Whole(bytes) => (
                    StoredAnswer {
                        status: answer.status,
                        headers: kept,
                        body: bytes,
                        body_omitted: false,
                    },
                    None,
                ),
                large @ Body::Large { .. } => (
                    StoredAnswer {
                        status: answer.status,
                        headers: kept,
                        body: Vec::new(),
                        body_omitted: true,
                    },
                    Some(large),
                ),
            };
            let stored = Arc::new(stored);
            store_answer(&state, &claimed, key, stored.clone()).await;
            let body = body.unwrap_or_else(|| {
                Body::Whole(Arc::try_unwrap(stored).map_or_else(|s| s.body.clone(), |s| s.body))
            });
            let response = pass_on(answer.status, &answer.headers, body, operation);
            (response, Some(Outcome::Sent))
        }
    }
}

/// A key's route, scope and key: where a batch of key writes orders it.
type KeyName = (String, Vec<u8>, String);

/// Stores the answer, committed with other requests' writes. A failure is
/// logged, not answered (see `settled`): the client gets the answer all the same.
async fn store_answer(
    state: &AppState,
    claimed: &Claimed,
    key: KeyName,
    answer: Arc<StoredAnswer>,
) {
    let span = tracing::trace_span!("commit");
    let done = state
        .app
        .key_writes
        .complete(key, claimed.row_id, claimed.claim_id.clone(), answer)
        .instrument(span.clone())
        .await;
    settled(&span, claimed, done);
}

/// Frees the key: a retry runs again.
async fn release(state: &AppState, claimed: &Claimed) {
    let span = tracing::trace_span!("commit");
    let done = async {
        let client = state.app.pool.get().await?;
        let done = idempotency::release(&client, claimed).await;
        crate::store::give_back(client, done)
    }
    .instrument(span.clone())
    .await;
    settled(&span, claimed, done);
}

/// A settling write's outcome, logged: the client gets upstream's answer all
/// the same, and a key left claimed is taken over as `unknown` once its lock
/// is over.
fn settled(span: &Span, claimed: &Claimed, done: Result<bool, crate::store::StoreError>) {
    match done {
        Ok(true) => {}
        Ok(false) => log::warn!(
            "gateway: the key of {} was taken over before its answer was stored",
            claimed.operation_id
        ),
        Err(error) => {
            traces::fail(span, &error);
            log::error!(
                "gateway: cannot settle the key of {}: {error}; it is taken over as unknown \
                 once its lock is over",
                claimed.operation_id
            );
        }
    }
}

async fn mark_unknown(state: &AppState, claimed: &Claimed) {
    let marked = async {
        let client = state.app.pool.get().await?;
        let done = idempotency::outcome_unknown(&client, claimed).await;
        crate::store::give_back(client, done)
    }
    .instrument(tracing::trace_span!("commit"))
    .await;
    if let Err(error) = marked {
        log::error!(
            "gateway: cannot mark {} unknown: {error}; its lock's end does",
            claimed.operation_id
        );
    }
}

/// Upstream's answer as it came (but the hop-by-hop headers), with the
/// operation's id when the request was keyed.
fn pass_on(
    status: u16,
    headers: &[(reqwest::header::HeaderName, reqwest::header::HeaderValue)],
    body: Body,
    operation: Option<&str>,
) -> HttpResponse {
    let mut response = idempotency::answer_with(status);
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_str().as_bytes()),
            HeaderValue::from_bytes(value.as_bytes()),
        ) {
            response.append_header((name, value));
        }
    }
    if let Some(value) = operation.and_then(|op| HeaderValue::from_str(op).ok()) {
        response.insert_header((HeaderName::from_static(OPERATION_HEADER), value));
    }
    upstreams(match body {
        Body::Whole(bytes) => response.body(bytes),
        Body::Large { head, rest } => {
            let first = futures_util::stream::once(async move {
                Ok::<_, reqwest::Error>(actix_web::web::Bytes::from(head))
            });
            // Ends after the first error (the connection is cut: the client
            // sees a truncated answer, as from upstream itself).
            let rest = futures_util::stream::unfold(Some(rest), |rest| async move {
                let mut rest = rest?;
                match rest.chunk().await {
                    Ok(Some(chunk)) => Some((Ok(chunk), Some(rest))),
                    Ok(None) => None,
                    Err(error) => Some((Err(error), None)),
                }
            });
            response.streaming(futures_util::StreamExt::chain(first, rest))
        }
    })
}
