//! The `webhook_events` table: recording deliveries (the dedupe decision), recording
//! handler attempts, and claiming due retries.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde_json::Value;

use super::StoreError;
use crate::event::IncomingEvent;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventStatus {
    Processed,
    Ignored,
    Failed,
    Dead,
}

impl EventStatus {
    pub const ALL: [EventStatus; 4] = [
        EventStatus::Processed,
        EventStatus::Ignored,
        EventStatus::Failed,
        EventStatus::Dead,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventStatus::Processed => "processed",
            EventStatus::Ignored => "ignored",
            EventStatus::Failed => "failed",
            EventStatus::Dead => "dead",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// What the one dedupe statement decided about a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// First delivery: the row was inserted in the caller's transaction.
    New { id: i64 },
    /// Same event, same payload: `deliveries` was counted.
    Duplicate { id: i64 },
    /// Same event id, different payload: nothing changed.
    Conflict,
}

/// Inserts the event, or counts a repeated delivery of it, in one statement.
///
/// A new row with a handler is written as the inline attempt usually ends —
/// `processed`, one attempt — so that success, the common case, needs no second
/// write of the row (an UPDATE that would touch every index); the caller changes
/// it, in the same transaction, when the attempt fails. Without a handler it is
/// `ignored` at once.
pub async fn record_delivery(
    client: &impl GenericClient,
    event: &IncomingEvent,
    signed_with: i32,
    has_handler: bool,
) -> Result<Recorded, StoreError> {
    let statement = client
        .prepare_cached(
            "INSERT INTO webhook_events AS e
                 (source, event_id, event_type, kind, status, payload, payload_sha256,
                  signed_with, payment_id, customer_id, attempts, processed_at, body,
                  signature_headers, stable_sha256)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,
                     CASE WHEN $11 THEN 1 ELSE 0 END, now(), $12, $13, $14)
             ON CONFLICT (source, event_id) DO UPDATE
                 SET deliveries = e.deliveries + 1, last_delivery_at = now()
                 WHERE e.payload_sha256 = EXCLUDED.payload_sha256
                    OR e.stable_sha256 = EXCLUDED.stable_sha256
             RETURNING id, deliveries",
        )
        .await?;
    let status = if has_handler {
        EventStatus::Processed
    } else {
        EventStatus::Ignored
    };
    let row = client
        .query_opt(
            &statement,
            &[
                &event.source,
                &event.event_id,
                &event.event_type,
                &event.kind,
                &status.as_str(),
                &event.storable_payload().as_ref(),
                &event.fingerprint.as_slice(),
                &signed_with,
                &event.payment_id,
                &event.customer_id,
                &has_handler,
                &event.body,
                &event.signature_headers,
                &event.stable_fingerprint.as_slice(),
            ],
        )
        .await?;
    Ok(match row {
        // The conflict's WHERE refused the update: the stored payload differs,
        // unless the row predates stable fingerprints.
        None => recount_legacy_duplicate(client, event).await?,
        // Only an insert leaves `deliveries` at its starting value.
        Some(row) if row.get::<_, i32>(1) == 1 => Recorded::New { id: row.get(0) },
        Some(row) => Recorded::Duplicate { id: row.get(0) },
    })
}

/// A row stored before stable fingerprints has none to compare: its stable
/// fingerprint is computed from its stored body (or payload) and kept, and the
/// delivery counts as a duplicate when it matches.
async fn recount_legacy_duplicate(
    client: &impl GenericClient,
    event: &IncomingEvent,
) -> Result<Recorded, StoreError> {
    let stored = client
        .prepare_cached(
            "SELECT body, payload FROM webhook_events
             WHERE source = $1 AND event_id = $2 AND stable_sha256 IS NULL
               AND payload IS NOT NULL",
        )
        .await?;
    let Some(row) = client
        .query_opt(&stored, &[&event.source, &event.event_id])
        .await?
    else {
        return Ok(Recorded::Conflict);
    };
    let body: Option<Vec<u8>> = row.get(0);
    let payload = body
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .or_else(|| row.get(1));
    let Some(payload) = payload else {
        return Ok(Recorded::Conflict);
    };
    let theirs = crate::event::stable_fingerprint(&payload, &event.fingerprint_ignore);
    if theirs != event.stable_fingerprint {
        return Ok(Recorded::Conflict);
    }
    let count = client
        .prepare_cached(
            "UPDATE webhook_events
             SET deliveries = deliveries + 1, last_delivery_at = now(), stable_sha256 = $3
             WHERE source = $1 AND event_id = $2
             RETURNING id",
        )
        .await?;
    let row = client
        .query_one(
            &count,
            &[&event.source, &event.event_id, &theirs.as_slice()],
        )
        .await?;
    Ok(Recorded::Duplicate { id: row.get(0) })
}

/// An event to apply, as loaded for a retry.
#[derive(Debug, Clone)]
pub struct ClaimedEvent {
    pub id: i64,
    pub source: String,
    pub event_id: String,
    pub kind: Option<String>,
    /// The payload as sent (parsed from the exact body when it is kept); `None`
    /// once purged.
    pub payload: Option<Value>,
    pub attempts: i32,
}

/// Locks the most overdue `failed` event for this transaction, skipping rows other
/// instances hold, so any number of dispatchers can run side by side.
pub async fn claim_due(client: &impl GenericClient) -> Result<Option<ClaimedEvent>, StoreError> {
    let statement = client
        .prepare_cached(
            "SELECT id, source, event_id, kind, payload, attempts, body
             FROM webhook_events
             WHERE status = 'failed' AND next_attempt_at <= now()
             ORDER BY next_attempt_at
             LIMIT 1
             FOR UPDATE SKIP LOCKED",
        )
        .await?;
    let row = client.query_opt(&statement, &[]).await?;
    Ok(row.as_ref().map(claimed))
}

fn claimed(row: &tokio_postgres::Row) -> ClaimedEvent {
    // A NULL payload means purged. Otherwise the exact body is the truth: the
    // jsonb copy cannot hold every string.
    let stored: Option<Value> = row.get(4);
    let body: Option<Vec<u8>> = row.get(6);
    let payload = stored.map(|stored| {
        body.and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or(stored)
    });
    ClaimedEvent {
        id: row.get(0),
        source: row.get(1),
        event_id: row.get(2),
        kind: row.get(3),
        payload,
        attempts: row.get(5),
    }
}

/// Locks one event for a manual retry, waiting for a dispatcher that holds it.
pub async fn lock_by_id(
    client: &impl GenericClient,
    id: i64,
) -> Result<Option<ClaimedEvent>, StoreError> {
    let statement = client
        .prepare_cached(
            "SELECT id, source, event_id, kind, payload, attempts, body
             FROM webhook_events WHERE id = $1 FOR UPDATE",
        )
        .await?;
    let row = client.query_opt(&statement, &[&id]).await?;
    Ok(row.as_ref().map(claimed))
}

/// How one handler run ended, to be written with the event's new status.
#[derive(Debug, Clone)]
pub struct AttemptRecord {
    pub event: i64,
    /// 1 for the inline run, then 2, 3, …
    pub attempt: i32,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub status: EventStatus,
    pub error: Option<String>,
    pub next_attempt_at: Option<DateTime<Utc>>,
}

/// Updates the event's status and counters and appends the attempt, in one statement.
pub async fn record_attempt(
    client: &impl GenericClient,
    attempt: &AttemptRecord,
) -> Result<(), StoreError> {
    let statement = client
        .prepare_cached(
            "WITH event AS (
                 UPDATE webhook_events
                 SET status = $2,
                     attempts = $7,
                     last_error = $3,
                     next_attempt_at = $4,
                     processed_at = CASE WHEN $2 = 'processed' THEN $6::timestamptz END
                 WHERE id = $1
                 RETURNING id)
             INSERT INTO webhook_event_attempts
                 (webhook_event_id, attempt, started_at, finished_at, outcome, error)
             SELECT id, $7, $5, $6, $2, $3 FROM event",
        )
        .await?;
    client
        .execute(
            &statement,
            &[
                &attempt.event,
                &attempt.status.as_str(),
                &attempt.error,
                &attempt.next_attempt_at,
                &attempt.started_at,
                &attempt.finished_at,
                &attempt.attempt,
            ],
        )
        .await?;
    Ok(())
}

/// Appends an attempt whose outcome the event row already shows (an inline
/// success, see `record_delivery`).
pub async fn append_attempt(
    client: &impl GenericClient,
    attempt: &AttemptRecord,
) -> Result<(), StoreError> {
    let statement = client
        .prepare_cached(
            "INSERT INTO webhook_event_attempts
                 (webhook_event_id, attempt, started_at, finished_at, outcome, error)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .await?;
    client
        .execute(
            &statement,
            &[
                &attempt.event,
                &attempt.attempt,
                &attempt.started_at,
                &attempt.finished_at,
                &attempt.status.as_str(),
                &attempt.error,
            ],
        )
        .await?;
    Ok(())
}

/// Number of `failed` events waiting for a retry (for metrics).
pub async fn retry_backlog(client: &impl GenericClient) -> Result<i64, StoreError> {
    let statement = client
        .prepare_cached("SELECT count(*) FROM webhook_events WHERE status = 'failed'")
        .await?;
    Ok(client.query_one(&statement, &[]).await?.get(0))
}
