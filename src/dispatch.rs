//! Applying events. A new event's handler runs inline, in the transaction that
//! stored it, inside a savepoint and under `handler_timeout`; a failure rolls back to
//! the savepoint and leaves the event `failed` with a due time. The retry loop
//! claims due events with `FOR UPDATE SKIP LOCKED` (any number of instances can
//! run it) and runs them the same way, until `processed` or `dead`.
//!
//! `try_dispatch_due` is one step of that loop, public so tests and tools drive the
//! queue without sleeping.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use deadpool_postgres::{Pool, Transaction};
use serde_json::Value;
use tokio_postgres::NoTls;

use crate::config::Settings;
use crate::duration;
use crate::event::{IncomingEvent, PaymentShape};
use crate::handlers::{EventToApply, HandlerError, Registry};
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;
use crate::signature::Verified;
use crate::store::events::{self, AttemptRecord, EventStatus, Recorded};
use crate::store::{self, StoreError};

/// How often an idle dispatcher looks for due retries.
const POLL: Duration = Duration::from_millis(500);
/// How long it waits after a database error before trying again.
const BACKOFF_ON_ERROR: Duration = Duration::from_secs(2);

#[derive(Clone)]
pub struct Dispatcher {
    pool: Pool,
    registry: Arc<Registry>,
    settings: Arc<Settings>,
    metrics: Arc<Metrics>,
}

/// The outcome of receiving one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ingested {
    pub recorded: Recorded,
    /// The event's status after the inline attempt (new events only).
    pub status: Option<EventStatus>,
}

/// The outcome of an operator's retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryOutcome {
    /// The handler ran again; the event now has this status.
    Applied(EventStatus),
    NotFound,
    /// The payload was purged: there is nothing to apply.
    Gone,
    /// The event's kind has no handler: there is nothing to apply.
    NoHandler,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DispatchStep {
    /// One due event was attempted and now has this status.
    Attempted { id: i64, status: EventStatus },
    /// Nothing is due.
    Idle,
}

/// What an attempt needs to know about its event.
struct Target<'a> {
    id: i64,
    source: &'a str,
    event_id: &'a str,
    kind: Option<&'a str>,
    payload: Option<&'a Value>,
    attempt: i32,
}

impl Dispatcher {
    pub fn new(
        pool: Pool,
        registry: Arc<Registry>,
        settings: Arc<Settings>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            pool,
            registry,
            settings,
            metrics,
        }
    }

    /// Stores a verified delivery once and, when it is new, applies it — one
    /// transaction, committed before this returns.
    pub async fn ingest(
        &self,
        event: &IncomingEvent,
        verified: Verified,
    ) -> Result<Ingested, StoreError> {
        let has_handler = self.has_handler(event.kind.as_deref());
        let mut client = self.pool.get().await?;
        if !has_handler {
            // Nothing to apply: the one statement is the whole transaction.
            let recorded =
                events::record_delivery(&client, event, verified.signed_with, false).await?;
            let status = matches!(recorded, Recorded::New { .. }).then(|| {
                self.count_status(event.kind.as_deref(), EventStatus::Ignored);
                EventStatus::Ignored
            });
            return Ok(Ingested { recorded, status });
        }
        let tx = client.transaction().await?;
        let recorded = events::record_delivery(&tx, event, verified.signed_with, true).await?;
        let status = match recorded {
            Recorded::New { id } => {
                let target = Target {
                    id,
                    source: &event.source,
                    event_id: &event.event_id,
                    kind: event.kind.as_deref(),
                    payload: Some(&event.payload),
                    attempt: 1,
                };
                let record = self.attempt(&tx, &target).await?;
                if record.status == EventStatus::Processed {
                    // The row was written as processed: only the attempt is new.
                    events::append_attempt(&tx, &record).await?;
                } else {
                    events::record_attempt(&tx, &record).await?;
                }
                Some(record.status)
            }
            Recorded::Duplicate { .. } | Recorded::Conflict => None,
        };
        tx.commit().await?;
        Ok(Ingested { recorded, status })
    }

    /// Claims the most overdue failed event, if any, and attempts it.
    pub async fn try_dispatch_due(&self) -> Result<DispatchStep, StoreError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let Some(claimed) = events::claim_due(&tx).await? else {
            return Ok(DispatchStep::Idle);
        };
        let record = self.attempt_again(&tx, &claimed).await?;
        tx.commit().await?;
        Ok(DispatchStep::Attempted {
            id: claimed.id,
            status: record.status,
        })
    }

    /// Applies one event again now, whatever its status (operators' retry). The
    /// handlers are idempotent, so re-applying a processed event changes nothing.
    pub async fn retry_now(&self, id: i64) -> Result<RetryOutcome, StoreError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let Some(event) = events::lock_by_id(&tx, id).await? else {
            return Ok(RetryOutcome::NotFound);
        };
        if event.payload.is_none() {
            return Ok(RetryOutcome::Gone);
        }
        if !self.has_handler(event.kind.as_deref()) {
            return Ok(RetryOutcome::NoHandler);
        }
        let record = self.attempt_again(&tx, &event).await?;
        tx.commit().await?;
        Ok(RetryOutcome::Applied(record.status))
    }

    /// Runs due retries until shutdown; an attempt under way is finished first.
    pub async fn run_until_stopped(self, mut shutdown: Shutdown) {
        while !shutdown.is_requested() {
            let pause = match self.try_dispatch_due().await {
                Ok(DispatchStep::Attempted { .. }) => continue,
                Ok(DispatchStep::Idle) => POLL,
                Err(error) => {
                    log::warn!("dispatcher: {error}; retrying in {BACKOFF_ON_ERROR:?}");
                    BACKOFF_ON_ERROR
                }
            };
            if !shutdown.sleep(pause).await {
                break;
            }
        }
    }

    fn has_handler(&self, kind: Option<&str>) -> bool {
        kind.is_some_and(|kind| self.registry.get(kind).is_some())
    }

    /// The next attempt of an event locked in `tx`, recorded there.
    async fn attempt_again(
        &self,
        tx: &Transaction<'_>,
        event: &events::ClaimedEvent,
    ) -> Result<AttemptRecord, StoreError> {
        let target = Target {
            id: event.id,
            source: &event.source,
            event_id: &event.event_id,
            kind: event.kind.as_deref(),
            payload: event.payload.as_ref(),
            attempt: event.attempts + 1,
        };
        let record = self.attempt(tx, &target).await?;
        events::record_attempt(tx, &record).await?;
        Ok(record)
    }

    /// One handler run inside a savepoint of `tx`; returns what to record. Only
    /// database errors outside the handler itself escape (they abort `tx`).
    async fn attempt(
        &self,
        tx: &Transaction<'_>,
        target: &Target<'_>,
    ) -> Result<AttemptRecord, StoreError> {
        let started_at = Utc::now();
        let clock = Instant::now();
        let kind = target.kind.unwrap_or("none");
        let result = match self.prepare(target) {
            Ok((event, handler)) => {
                store::savepoint(tx).await?;
                let timeout = self.settings.handler_timeout;
                let result = match tokio::time::timeout(timeout, handler.apply(tx, &event)).await {
                    Ok(result) => result,
                    Err(_) => {
                        // Stop whatever statement the abandoned handler left running.
                        let _ = tx.cancel_token().cancel_query(NoTls).await;
                        Err(HandlerError::Retry(format!(
                            "handler timed out after {}",
                            duration::format(timeout)
                        )))
                    }
                };
                if result.is_ok() {
                    store::release_savepoint(tx).await?;
                } else {
                    store::rollback_to_savepoint(tx).await?;
                }
                result
            }
            Err(error) => Err(error),
        };
        let elapsed = clock.elapsed();
        self.metrics
            .observe("hookd_handler_duration_seconds", &[("kind", kind)], elapsed);
        let (status, error, next_attempt_at) = match result {
            Ok(()) => (EventStatus::Processed, None, None),
            Err(HandlerError::Permanent(reason)) => (EventStatus::Dead, Some(reason), None),
            Err(HandlerError::Retry(reason)) if target.attempt >= self.settings.max_attempts => {
                let reason = format!("{reason} (gave up after {} attempts)", target.attempt);
                (EventStatus::Dead, Some(reason), None)
            }
            Err(HandlerError::Retry(reason)) => {
                let delay = retry_delay(
                    self.settings.retry_base,
                    self.settings.retry_cap,
                    target.attempt,
                );
                let due = duration::after(Utc::now(), delay).unwrap_or_else(Utc::now);
                (EventStatus::Failed, Some(reason), Some(due))
            }
        };
        if let Some(reason) = &error {
            log::warn!(
                "event {} ({}/{:?}) attempt {} {}: {reason:?}",
                target.id,
                target.source,
                target.event_id,
                target.attempt,
                status.as_str()
            );
        }
        self.count_status(target.kind, status);
        Ok(AttemptRecord {
            event: target.id,
            attempt: target.attempt,
            started_at,
            finished_at: Utc::now(),
            status,
            error: error.map(|e| storable_error(&e)),
            next_attempt_at,
        })
    }

    /// The handler and the event as it sees it, or why it cannot run at all.
    fn prepare<'t>(
        &'t self,
        target: &'t Target<'t>,
    ) -> Result<(EventToApply<'t>, &'t Arc<dyn crate::handlers::Handler>), HandlerError> {
        let kind = target
            .kind
            .ok_or_else(|| HandlerError::Permanent("the event has no kind".into()))?;
        let handler = self
            .registry
            .get(kind)
            .ok_or_else(|| HandlerError::Permanent(format!("no handler for kind {kind}")))?;
        let payload = target
            .payload
            .ok_or_else(|| HandlerError::Permanent("the payload was purged".into()))?;
        let source = self.settings.source(target.source).ok_or_else(|| {
            HandlerError::Retry(format!("source {} is not configured", target.source))
        })?;
        let event = EventToApply {
            id: target.id,
            source: target.source,
            event_id: target.event_id,
            kind,
            payload,
            attempt: target.attempt,
            shape: PaymentShape::of(&source.scheme),
        };
        Ok((event, handler))
    }

    fn count_status(&self, kind: Option<&str>, status: EventStatus) {
        self.metrics.inc(
            "hookd_events_total",
            &[
                ("kind", kind.unwrap_or("none")),
                ("status", status.as_str()),
            ],
        );
    }
}

/// Longest `last_error` kept, in characters.
const MAX_ERROR_CHARS: usize = 2000;

/// An error message as a text column can hold it: no NUL, bounded length.
fn storable_error(error: &str) -> String {
    let mut text: String = error
        .chars()
        .map(|c| if c == '\0' { '\u{fffd}' } else { c })
        .take(MAX_ERROR_CHARS)
        .collect();
    if error.chars().count() > MAX_ERROR_CHARS {
        text.push('…');
    }
    text
}

/// Exponential backoff with "equal jitter": the delay doubles from `base` per
/// attempt up to `cap`, and half of it is random so that events failing together
/// do not all retry at the same instant.
pub fn retry_delay(base: Duration, cap: Duration, attempt: i32) -> Duration {
    let doublings = u32::try_from(attempt.saturating_sub(1))
        .unwrap_or(0)
        .min(32);
    let full = base
        .checked_mul(2u32.saturating_pow(doublings))
        .unwrap_or(cap)
        .min(cap);
    let half = full / 2;
    let jitter_ms = u64::try_from(half.as_millis()).unwrap_or(u64::MAX);
    half + Duration::from_millis(rand::random_range(0..=jitter_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delays_double_up_to_the_cap_with_bounded_jitter() {
        let base = Duration::from_secs(1);
        let cap = Duration::from_secs(3600);
        for (attempt, full) in [(1, 1), (2, 2), (3, 4), (10, 512), (13, 3600), (40, 3600)] {
            for _ in 0..50 {
                let d = retry_delay(base, cap, attempt);
                let full = Duration::from_secs(full);
                assert!(d >= full / 2 && d <= full, "attempt {attempt}: {d:?}");
            }
        }
    }
}
