//! Reading request bodies with a size cap and a deadline, so that a client that
//! sends too much or too slowly cannot hold a connection (or memory) for long: the
//! body must arrive within `body_timeout`, and an oversized one is drained (so the
//! client reads the 413 instead of a reset) only until that same deadline.

use std::time::Duration;

use actix_web::HttpRequest;
use actix_web::http::header::CONTENT_LENGTH;
use actix_web::web;
use futures_util::StreamExt;
use tokio::time::{Instant, timeout_at};

use super::error::ApiError;

/// Past this much, an oversized body is no longer drained: the connection is closed.
const MAX_DRAIN_BYTES: usize = 64 * 1024 * 1024;

/// Reads the whole body, at most `limit` bytes, within `within`.
pub async fn read(
    payload: &mut web::Payload,
    request: &HttpRequest,
    limit: usize,
    within: Duration,
) -> Result<Vec<u8>, ApiError> {
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
    let mut body = Vec::with_capacity(declared.unwrap_or(8 * 1024).min(limit));
    loop {
        let chunk = match timeout_at(deadline, payload.next()).await {
            Err(_) => return Err(ApiError::RequestTimeout),
            Ok(None) => return Ok(body),
            Ok(Some(chunk)) => {
                chunk.map_err(|e| ApiError::BadRequest(format!("could not read the body: {e}")))?
            }
        };
        if body.len() + chunk.len() > limit {
            drain(payload, body.len() + chunk.len(), deadline).await;
            return Err(ApiError::PayloadTooLarge);
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
