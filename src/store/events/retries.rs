//! Events to run again: claiming the most overdue, locking one for a manual
//! retry or a forward's run, and settling its row after a run.

use crate::store::sql::{self, Session, params};
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::store::StoreError;

use super::EventStatus;

/// An event to apply, as loaded for a retry.
#[derive(Debug, Clone)]
pub struct ClaimedEvent {
    pub id: i64,
    pub source: String,
    pub event_id: String,
    pub event_type: String,
    pub kind: Option<String>,
    /// The payload as sent (parsed from the exact body when it is kept); `None`
    /// once purged.
    pub payload: Option<Value>,
    /// The body as received (for events stored before bodies were kept, the
    /// payload written out); `None` once purged.
    pub body: Option<Vec<u8>>,
    pub attempts: i32,
    pub received_at: DateTime<Utc>,
    /// Another run holds a lease on it: its forwards are being sent right now.
    pub leased: bool,
}

/// Its last column says whether a lane is sending one of its forwards now.
const CLAIMED_COLUMNS: &str = "id, source, event_id, event_type, kind, payload, attempts, body, \
                               received_at, EXISTS (SELECT 1 FROM event_forwards f \
                               WHERE f.webhook_event_id = webhook_events.id AND f.lease_until > now())";

/// Locks the most overdue `failed` event for this transaction, skipping rows other
/// instances hold, so any number of dispatchers can run side by side. An event
/// whose forwards are being sent is not due: its lease pushed `next_attempt_at`. (`NO KEY`:
/// the lock excludes other dispatchers and retries, yet a purge pass may still
/// list the event as pending — a foreign key check — without waiting.)
pub async fn claim_due(client: &impl Session) -> Result<Option<ClaimedEvent>, StoreError> {
    let row = sql::query_opt(
        client,
        &format!(
            "SELECT {CLAIMED_COLUMNS}
             FROM webhook_events
             WHERE status = 'failed' AND next_attempt_at <= now()
             ORDER BY next_attempt_at
             LIMIT 1
             FOR NO KEY UPDATE SKIP LOCKED"
        ),
        params![],
    )
    .await?;
    Ok(row.as_ref().map(claimed))
}

pub(in crate::store) fn claimed(row: &tokio_postgres::Row) -> ClaimedEvent {
    // A NULL payload means purged. Otherwise the exact body is the truth: the
    // jsonb copy cannot hold every string.
    let stored: Option<Value> = row.get(5);
    let kept: Option<Vec<u8>> = row.get(7);
    let (payload, body) = match stored {
        None => (None, None),
        Some(stored) => {
            let parsed = kept.as_ref().and_then(|b| serde_json::from_slice(b).ok());
            let body = kept.unwrap_or_else(|| serde_json::to_vec(&stored).unwrap_or_default());
            (Some(parsed.unwrap_or(stored)), Some(body))
        }
    };
    ClaimedEvent {
        id: row.get(0),
        source: row.get(1),
        event_id: row.get(2),
        event_type: row.get(3),
        kind: row.get(4),
        payload,
        body,
        attempts: row.get(6),
        received_at: row.get(8),
        leased: row.get(9),
    }
}

/// Pushes when event `id`'s kind's handler is due to `secs` from now, and
/// returns that time: a dispatcher that reads what the event names outside its
/// transaction holds it so meanwhile (if it dies, the event is due again then).
pub async fn postpone(
    client: &impl Session,
    id: i64,
    secs: f64,
) -> Result<DateTime<Utc>, StoreError> {
    let row = sql::query_one(
        client,
        "UPDATE webhook_events SET next_attempt_at = now() + make_interval(secs => $2) \
         WHERE id = $1 RETURNING next_attempt_at",
        params![&id, &secs],
    )
    .await?;
    Ok(row.get(0))
}

/// Locks event `id` again after `postpone`, if it is still `failed` and due
/// when it was postponed to: any run of its kind's handler (a retry, an
/// operator's) settles it anew, while a forward's keeps that time.
pub async fn lock_postponed(
    client: &impl Session,
    id: i64,
    until: DateTime<Utc>,
) -> Result<Option<ClaimedEvent>, StoreError> {
    let row = sql::query_opt(
        client,
        &format!(
            "SELECT {CLAIMED_COLUMNS} FROM webhook_events \
             WHERE id = $1 AND status = 'failed' AND next_attempt_at = $2 FOR NO KEY UPDATE"
        ),
        params![&id, &until],
    )
    .await?;
    Ok(row.as_ref().map(claimed))
}

/// Locks one event for a manual retry, waiting for a dispatcher that holds it
/// (`NO KEY`, as `claim_due`: a purge pass does not wait for it).
pub async fn lock_by_id(
    client: &impl Session,
    id: i64,
) -> Result<Option<ClaimedEvent>, StoreError> {
    let row = sql::query_opt(
        client,
        &format!("SELECT {CLAIMED_COLUMNS} FROM webhook_events WHERE id = $1 FOR NO KEY UPDATE"),
        params![&id],
    )
    .await?;
    Ok(row.as_ref().map(claimed))
}

/// The event row after a run of its handlers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    pub status: EventStatus,
    pub attempts: i32,
    pub last_error: Option<String>,
    /// When its kind's handler runs again (forwards keep their own times).
    pub next_attempt_at: Option<DateTime<Utc>>,
}

/// Writes the event's new status and counters (and ends a lease on the event
/// that a run of an earlier version took).
pub async fn settle(client: &impl Session, id: i64, settled: &Settled) -> Result<(), StoreError> {
    sql::execute(
        client,
        "UPDATE webhook_events
             SET status = $2,
                 attempts = $3,
                 last_error = $4,
                 next_attempt_at = $5,
                 lease_until = NULL,
                 processed_at = CASE WHEN $2 = 'processed' THEN now() END
             WHERE id = $1",
        params![
            &id,
            &settled.status.as_str(),
            &settled.attempts,
            &settled.last_error,
            &settled.next_attempt_at,
        ],
    )
    .await?;
    Ok(())
}

/// The status of event `id`, if it exists.
pub async fn status_of(client: &impl Session, id: i64) -> Result<Option<EventStatus>, StoreError> {
    let row = sql::query_opt(
        client,
        "SELECT status FROM webhook_events WHERE id = $1",
        params![&id],
    )
    .await?;
    Ok(row.and_then(|row| EventStatus::parse(row.get(0))))
}

/// Whether an event of `source` with `event_id` is stored (a copy of it would
/// be a duplicate or a conflict, never new).
pub async fn is_stored(
    client: &impl Session,
    source: &str,
    event_id: &str,
) -> Result<bool, StoreError> {
    let row = sql::query_one(
        client,
        "SELECT EXISTS (SELECT 1 FROM webhook_events WHERE source = $1 AND event_id = $2)",
        params![&source, &event_id],
    )
    .await?;
    Ok(row.get(0))
}

/// Locks event `id` for recording a forward's run in `client`'s transaction;
/// its attempts so far and when its kind's handler is due again, if it is.
pub async fn lock_for_forward(
    client: &impl Session,
    id: i64,
) -> Result<Option<(i32, Option<DateTime<Utc>>)>, StoreError> {
    let row = sql::query_opt(
        client,
        "SELECT attempts, next_attempt_at FROM webhook_events WHERE id = $1 FOR NO KEY UPDATE",
        params![&id],
    )
    .await?;
    Ok(row.map(|row| (row.get(0), row.get(1))))
}

/// Failed events waiting for a retry, and dead events waiting for a person.
pub async fn backlog(client: &impl Session) -> Result<(i64, i64), StoreError> {
    let row = sql::query_one(
        client,
        "SELECT count(*) FILTER (WHERE status = 'failed'),
                    count(*) FILTER (WHERE status = 'dead')
             FROM webhook_events WHERE status IN ('failed', 'dead')",
        params![],
    )
    .await?;
    Ok((row.get(0), row.get(1)))
}
