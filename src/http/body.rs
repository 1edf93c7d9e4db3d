//! Reading request bodies with a size cap and a deadline, so that a client that
//! sends too much or too slowly cannot hold a connection (or memory) for long: the
//! body must arrive within `body_timeout`, and an oversized one is drained (so the
//! client reads the 413 instead of a reset) only until that same deadline. Webhook
//! bodies also share a memory budget: past its first `FREE_BODY_BYTES`, every byte
//! of a body being read counts against `max_body_memory`, and goes on counting
//! while the delivery waits to be verified (a certificate fetch), so clients that
//! send large bodies and stall cannot make hookd hold gigabytes; when the budget
//! is spent, a body that needs more is answered 503 + `Retry-After` at once
//! (small deliveries, the usual case, never touch it).

use std::time::Duration;

use actix_web::HttpRequest;
use actix_web::http::header::CONTENT_LENGTH;
use actix_web::web;
use futures_util::StreamExt;
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::{Instant, timeout_at};

use super::error::ApiError;

/// Past this much, an oversized body is no longer drained: the connection is closed.
const MAX_DRAIN_BYTES: usize = 64 * 1024 * 1024;

/// The part of each body that never counts against the memory budget: with the
/// connection cap, this bounds what small bodies can hold (4,096 × 64 KiB).
pub const FREE_BODY_BYTES: usize = 64 * 1024;

/// Reads the whole body, at most `limit` bytes, within `within`.
pub async fn read(
    payload: &mut web::Payload,
    request: &HttpRequest,
    limit: usize,
    within: Duration,
) -> Result<Vec<u8>, ApiError> {
    Ok(read_within(payload, request, limit, within, None).await?.0)
}

/// `read`, with every byte past `FREE_BODY_BYTES` taken from `budget` (one permit
/// a byte): the permits are returned with the body, for as long as the caller
/// holds on to it.
pub async fn read_budgeted<'b>(
    payload: &mut web::Payload,
    request: &HttpRequest,
    limit: usize,
    within: Duration,
    budget: &'b Semaphore,
) -> Result<(Vec<u8>, Option<SemaphorePermit<'b>>), ApiError> {
    read_within(payload, request, limit, within, Some(budget)).await
}

async fn read_within<'b>(
    payload: &mut web::Payload,
    request: &HttpRequest,
    limit: usize,
    within: Duration,
    budget: Option<&'b Semaphore>,
) -> Result<(Vec<u8>, Option<SemaphorePermit<'b>>), ApiError> {
    let deadline = Instant::now() + within;
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        drain(payload, 0, deadline).await;
        return Err(ApiError::PayloadTooLarge);
    }
    let mut body = Vec::with_capacity(declared.unwrap_or(8 * 1024).min(limit).min(FREE_BODY_BYTES));
    let mut held: Option<SemaphorePermit<'b>> = None;
    loop {
        let chunk = match timeout_at(deadline, payload.next()).await {
            Err(_) => return Err(ApiError::RequestTimeout),
            Ok(None) => return Ok((body, held)),
            Ok(Some(chunk)) => {
                chunk.map_err(|e| ApiError::BadRequest(format!("could not read the body: {e}")))?
            }
        };
        if body.len() + chunk.len() > limit {
            drain(payload, body.len() + chunk.len(), deadline).await;
            return Err(ApiError::PayloadTooLarge);
        }
        if let Some(budget) = budget {
            let counted = (body.len() + chunk.len()).saturating_sub(FREE_BODY_BYTES)
                - body.len().saturating_sub(FREE_BODY_BYTES);
            if counted > 0 {
                let permit = u32::try_from(counted)
                    .ok()
                    .and_then(|n| budget.try_acquire_many(n).ok())
                    .ok_or_else(|| {
                        ApiError::Unavailable(
                            "too many large bodies are being received at once".into(),
                        )
                    })?;
                match &mut held {
                    Some(held) => held.merge(permit),
                    None => held = Some(permit),
                }
            }
        }
        body.extend_from_slice(&chunk);
    }
}

/// Reads and drops the rest of a body, until it ends, grows past `MAX_DRAIN_BYTES`,
/// or the deadline passes.
pub async fn drain(payload: &mut web::Payload, already: usize, deadline: Instant) {
    let mut seen = already;
    while let Ok(Some(Ok(chunk))) = timeout_at(deadline, payload.next()).await {
        seen += chunk.len();
        if seen > MAX_DRAIN_BYTES {
            break;
        }
    }
}
