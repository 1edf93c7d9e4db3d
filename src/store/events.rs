//! The `webhook_events` table: recording deliveries (the dedupe decision), recording
//! handler attempts, and claiming due retries.

use super::sql::{self, Session, params};
use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

use super::StoreError;
use crate::event::IncomingEvent;

/// Where an event stands: `processed` (every handler done), `ignored` (none
/// applies), `failed` (a handler will run again at `next_attempt_at`, or a forward
/// has yet to run), `dead` (waits for a person).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
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

impl std::fmt::Display for EventStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status binds as its text, the `status` column's.
impl ToSql for EventStatus {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        self.as_str().to_sql(ty, out)
    }

    fn accepts(ty: &Type) -> bool {
        <&str as ToSql>::accepts(ty)
    }

    to_sql_checked!();
}

impl sql::PgType for EventStatus {
    const TYPE: Type = Type::TEXT;
}

impl sql::PgElement for EventStatus {
    const ARRAY: Type = Type::TEXT_ARRAY;
}

/// What the one dedupe statement decided about a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// First delivery: the row was inserted in the caller's transaction.
    New { id: i64 },
    /// Same event, same payload: `deliveries` was counted on its row. `event_id`
    /// is the id it was first stored under, which the answer names: another
    /// than the delivery's when a source that dedupes on the body found it.
    Duplicate { id: i64, event_id: String },
    /// Same event id, different payload: nothing changed.
    Conflict,
}

/// How a new event's row is first written: as its run at receipt usually ends,
/// so that success, the common case, needs no second write of the row (an UPDATE
/// that would touch every index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expected {
    pub status: EventStatus,
    /// Handler runs at receipt (0 or 1).
    pub attempts: i32,
    /// Due for the dispatcher at once (forwards still to run).
    pub due_now: bool,
}

/// The dedupe decision for one event, in one statement (the ingest benchmark's
/// pgbench baseline runs this very text).
pub const RECORD_DELIVERY: &str = "INSERT INTO webhook_events AS e
        (source, event_id, event_type, kind, status, payload, payload_sha256,
         signed_with, payment_id, customer_id, attempts, processed_at, body,
         signature_headers, stable_sha256, next_attempt_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11,
            CASE WHEN $5 IN ('processed', 'ignored') THEN now() END, $12, $13, $14,
            CASE WHEN $15 THEN now() END)
    ON CONFLICT (source, event_id) DO UPDATE
        SET deliveries = e.deliveries + 1, last_delivery_at = now()
        WHERE e.payload_sha256 = EXCLUDED.payload_sha256
           OR e.stable_sha256 = EXCLUDED.stable_sha256
    RETURNING id, deliveries";

/// The dedupe decision for an event of a source that dedupes on the body: a
/// copy of a stored body (its stable fingerprint, `$14`, is the key) is a
/// duplicate of that event whatever its id or type. A row holding this id under
/// another key, or none (stored before, or while the source did not dedupe on
/// the body), yields no row: the decision by id is left to `recount_by_id`.
pub const RECORD_BODY_DELIVERY: &str = "INSERT INTO webhook_events AS e
        (source, event_id, event_type, kind, status, payload, payload_sha256,
         signed_with, payment_id, customer_id, attempts, processed_at, body,
         signature_headers, stable_sha256, next_attempt_at, body_sha256)
    SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::jsonb, $7::bytea,
           $8::int, $9::text, $10::text, $11::int,
           CASE WHEN $5::text IN ('processed', 'ignored') THEN now() END, $12::bytea,
           $13::jsonb, $14::bytea, CASE WHEN $15::bool THEN now() END, $14::bytea
    WHERE NOT EXISTS (SELECT 1 FROM webhook_events x
                      WHERE x.source = $1::text AND x.event_id = $2::text
                        AND x.body_sha256 IS DISTINCT FROM $14::bytea)
    ON CONFLICT (source, body_sha256) WHERE body_sha256 IS NOT NULL DO UPDATE
        SET deliveries = e.deliveries + 1, last_delivery_at = now()
    RETURNING id, deliveries, event_id";

/// Inserts the event, or counts a repeated delivery of it, in one statement. A
/// new row is written as `expected` says; the caller changes it, in the same
/// transaction, when the run at receipt ends otherwise.
pub async fn record_delivery(
    client: &impl Session,
    event: &IncomingEvent,
    signed_with: i32,
    expected: Expected,
) -> Result<Recorded, StoreError> {
    let by_body = event.body_key.is_some();
    let row = sql::query_opt(
        client,
        if by_body {
            RECORD_BODY_DELIVERY
        } else {
            RECORD_DELIVERY
        },
        params![
            &event.source,
            &event.event_id,
            &event.event_type,
            &event.kind,
            &expected.status.as_str(),
            &stored_payload(event),
            &event.fingerprint.as_slice(),
            &signed_with,
            &event.payment_id,
            &event.customer_id,
            &expected.attempts,
            &event.body,
            &event.signature_headers,
            &event.stable_fingerprint.as_slice(),
            &expected.due_now,
        ],
    )
    .await?;
    Ok(match row {
        // The id is stored under another body key, or none.
        None if by_body => recount_by_id(client, event, 1).await?,
        // The conflict's WHERE refused the update: the stored payload differs,
        // unless the row predates stable fingerprints.
        None => recount_legacy_duplicate(client, event, 1).await?,
        // Only an insert leaves `deliveries` at its starting value.
        Some(row) if row.get::<_, i32>(1) == 1 => Recorded::New { id: row.get(0) },
        Some(row) if by_body => Recorded::Duplicate {
            id: row.get(0),
            event_id: row.get(2),
        },
        Some(row) => Recorded::Duplicate {
            id: row.get(0),
            event_id: event.event_id.clone(),
        },
    })
}

/// The constraint a second row of one `(source, event_id)` violates.
const EVENT_ID_KEY: &str = "webhook_events_source_event_id_key";

/// Whether a body-keyed insert met a concurrent delivery of its id under
/// another body, which committed first: its transaction is undone, and
/// deciding again in a new one sees that delivery's row.
pub fn lost_id_race(error: &StoreError) -> bool {
    let StoreError::Query(error) = error else {
        return false;
    };
    error.as_db_error().is_some_and(|db| {
        *db.code() == tokio_postgres::error::SqlState::UNIQUE_VIOLATION
            && db.constraint() == Some(EVENT_ID_KEY)
    })
}

/// A body-keyed delivery whose id a row holds under another body key (or
/// none): the decision by id, as for any other source — a duplicate when the
/// payload matches, else a conflict.
async fn recount_by_id(
    client: &impl Session,
    event: &IncomingEvent,
    deliveries: i32,
) -> Result<Recorded, StoreError> {
    let row = sql::query_opt(
        client,
        "UPDATE webhook_events
             SET deliveries = deliveries + $3, last_delivery_at = now()
             WHERE source = $1 AND event_id = $2
               AND (payload_sha256 = $4 OR stable_sha256 = $5)
             RETURNING id",
        params![
            &event.source,
            &event.event_id,
            &deliveries,
            &event.fingerprint.as_slice(),
            &event.stable_fingerprint.as_slice(),
        ],
    )
    .await?;
    match row {
        Some(row) => Ok(Recorded::Duplicate {
            id: row.get(0),
            event_id: event.event_id.clone(),
        }),
        None => recount_legacy_duplicate(client, event, deliveries).await,
    }
}

/// One event of a batch: its delivery, how its row is first written, and how many
/// deliveries of it the batch holds (copies that arrived together count at once).
#[derive(Debug, Clone, Copy)]
pub struct BatchItem<'a> {
    pub event: &'a IncomingEvent,
    pub signed_with: i32,
    pub expected: Expected,
    pub deliveries: i32,
}

/// The multi-row dedupe statement: `$key` is what `body_sha256` is written as,
/// `$only` filters the rows, `$conflict` names the key deciding and `$same` the
/// condition under which a conflict counts a duplicate.
macro_rules! record_batch_sql {
    ($key:literal, $only:literal, $conflict:literal, $same:literal) => {
        concat!(
            "INSERT INTO webhook_events AS e
                 (source, event_id, event_type, kind, status, payload, payload_sha256,
                  signed_with, payment_id, customer_id, attempts, processed_at, body,
                  signature_headers, stable_sha256, next_attempt_at, deliveries, body_sha256)
             SELECT source, event_id, event_type, kind, status, payload, payload_sha256,
                    signed_with, payment_id, customer_id, attempts,
                    CASE WHEN status IN ('processed', 'ignored') THEN now() END, body,
                    signature_headers, stable_sha256,
                    CASE WHEN due_now THEN now() END, deliveries, ",
            $key,
            "
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
                         $6::jsonb[], $7::bytea[], $8::int[], $9::text[], $10::text[],
                         $11::int[], $12::bytea[], $13::jsonb[], $14::bytea[], $15::bool[],
                         $16::int[])
                  AS u(source, event_id, event_type, kind, status, payload, payload_sha256,
                       signed_with, payment_id, customer_id, attempts, body,
                       signature_headers, stable_sha256, due_now, deliveries) ",
            $only,
            "
             ON CONFLICT ",
            $conflict,
            " DO UPDATE
                 SET deliveries = e.deliveries + EXCLUDED.deliveries, last_delivery_at = now() ",
            $same,
            "
             RETURNING id, source, event_id, (xmax = 0), body_sha256"
        )
    };
}

/// The batch's events decided by id.
const RECORD_BATCH: &str = record_batch_sql!(
    "NULL::bytea",
    "",
    "(source, event_id)",
    "WHERE e.payload_sha256 = EXCLUDED.payload_sha256
        OR e.stable_sha256 = EXCLUDED.stable_sha256"
);

/// The batch's events decided by body key, as `RECORD_BODY_DELIVERY`.
const RECORD_BODY_BATCH: &str = record_batch_sql!(
    "u.stable_sha256",
    "WHERE NOT EXISTS (SELECT 1 FROM webhook_events x
                       WHERE x.source = u.source AND x.event_id = u.event_id
                         AND x.body_sha256 IS DISTINCT FROM u.stable_sha256)",
    "(source, body_sha256) WHERE body_sha256 IS NOT NULL",
    ""
);

/// `record_delivery` for several distinct events (distinct ids, and distinct
/// body keys where the source dedupes on the body), in a statement per rule,
/// sent together; the decisions come back in the items' order.
pub async fn record_batch(
    client: &impl Session,
    items: &[BatchItem<'_>],
) -> Result<Vec<Recorded>, StoreError> {
    let (by_body, by_id): (Vec<&BatchItem<'_>>, Vec<&BatchItem<'_>>) =
        items.iter().partition(|i| i.event.body_key.is_some());
    let (body_rows, id_rows) = tokio::join!(
        insert_batch(client, RECORD_BODY_BATCH, &by_body),
        insert_batch(client, RECORD_BATCH, &by_id)
    );
    let (body_rows, id_rows) = (body_rows?, id_rows?);
    let mut decided = Vec::with_capacity(items.len());
    for item in items {
        let event = item.event;
        let row = match &event.body_key {
            Some(key) => body_rows.iter().find(|r| {
                r.get::<_, &str>(1) == event.source
                    && r.get::<_, Option<&[u8]>>(4) == Some(key.as_slice())
            }),
            None => id_rows.iter().find(|r| {
                r.get::<_, &str>(1) == event.source && r.get::<_, &str>(2) == event.event_id
            }),
        };
        decided.push(match row {
            Some(row) if row.get::<_, bool>(3) => Recorded::New { id: row.get(0) },
            Some(row) => Recorded::Duplicate {
                id: row.get(0),
                event_id: row.get(2),
            },
            None if event.body_key.is_some() => {
                recount_by_id(client, event, item.deliveries).await?
            }
            None => recount_legacy_duplicate(client, event, item.deliveries).await?,
        });
    }
    Ok(decided)
}

/// The `payload` parameter of an event: its body's own text when that is the
/// payload as jsonb can take it, else the parsed payload.
fn stored_payload(event: &IncomingEvent) -> sql::Jsonb<'_> {
    match event.payload_text() {
        Some(text) => sql::Jsonb::Text(text),
        None => sql::Jsonb::Value(event.storable_payload()),
    }
}

/// One multi-row dedupe statement over `items` (none: no statement).
async fn insert_batch(
    client: &impl Session,
    sql: &str,
    items: &[&BatchItem<'_>],
) -> Result<Vec<tokio_postgres::Row>, StoreError> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    // Rows in one order in every transaction: two batches holding copies of the
    // same events never wait on each other's rows the opposite way (a deadlock).
    let mut items = items.to_vec();
    items.sort_unstable_by_key(|i| (&i.event.source, i.event.body_key, &i.event.event_id));
    let payloads: Vec<sql::Jsonb<'_>> = items.iter().map(|i| stored_payload(i.event)).collect();
    let sources: Vec<&str> = items.iter().map(|i| i.event.source.as_str()).collect();
    let ids: Vec<&str> = items.iter().map(|i| i.event.event_id.as_str()).collect();
    let types: Vec<&str> = items.iter().map(|i| i.event.event_type.as_str()).collect();
    let kinds: Vec<Option<&str>> = items.iter().map(|i| i.event.kind.as_deref()).collect();
    let statuses: Vec<&str> = items.iter().map(|i| i.expected.status.as_str()).collect();
    let fingerprints: Vec<&[u8]> = items.iter().map(|i| &i.event.fingerprint[..]).collect();
    let signed: Vec<i32> = items.iter().map(|i| i.signed_with).collect();
    let payments: Vec<Option<&str>> = items
        .iter()
        .map(|i| i.event.payment_id.as_deref())
        .collect();
    let customers: Vec<Option<&str>> = items
        .iter()
        .map(|i| i.event.customer_id.as_deref())
        .collect();
    let attempts: Vec<i32> = items.iter().map(|i| i.expected.attempts).collect();
    let bodies: Vec<&[u8]> = items.iter().map(|i| i.event.body.as_slice()).collect();
    let headers: Vec<&Value> = items.iter().map(|i| &i.event.signature_headers).collect();
    let stable: Vec<&[u8]> = items
        .iter()
        .map(|i| &i.event.stable_fingerprint[..])
        .collect();
    let due: Vec<bool> = items.iter().map(|i| i.expected.due_now).collect();
    let deliveries: Vec<i32> = items.iter().map(|i| i.deliveries).collect();
    let rows = sql::query(
        client,
        sql,
        params![
            &sources,
            &ids,
            &types,
            &kinds,
            &statuses,
            &payloads,
            &fingerprints,
            &signed,
            &payments,
            &customers,
            &attempts,
            &bodies,
            &headers,
            &stable,
            &due,
            &deliveries,
        ],
    )
    .await?;
    Ok(rows)
}

/// A row stored before stable fingerprints has none to compare: its stable
/// fingerprint is computed from its stored body (or payload) and kept, and the
/// delivery counts as a duplicate when it matches.
async fn recount_legacy_duplicate(
    client: &impl Session,
    event: &IncomingEvent,
    deliveries: i32,
) -> Result<Recorded, StoreError> {
    let Some(row) = sql::query_opt(
        client,
        "SELECT body, payload FROM webhook_events
             WHERE source = $1 AND event_id = $2 AND stable_sha256 IS NULL
               AND payload IS NOT NULL",
        params![&event.source, &event.event_id],
    )
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
    let row = sql::query_one(
        client,
        "UPDATE webhook_events
             SET deliveries = deliveries + $4, last_delivery_at = now(), stable_sha256 = $3
             WHERE source = $1 AND event_id = $2
             RETURNING id",
        params![
            &event.source,
            &event.event_id,
            &theirs.as_slice(),
            &deliveries,
        ],
    )
    .await?;
    Ok(Recorded::Duplicate {
        id: row.get(0),
        event_id: event.event_id.clone(),
    })
}

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

const CLAIMED_COLUMNS: &str = "id, source, event_id, event_type, kind, payload, attempts, body, \
                               received_at, COALESCE(lease_until > now(), false)";

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

fn claimed(row: &tokio_postgres::Row) -> ClaimedEvent {
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

/// What one handler of an event has done so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerRuns {
    /// The kind, or `forward:NAME`.
    pub handler: String,
    pub runs: i32,
    /// Each run's outcome, oldest first (what they make of the handler is the
    /// ledger's to say).
    pub outcomes: Vec<String>,
}

/// Each handler's runs of an event (attempts written before handlers were named
/// count as the kind's).
pub async fn handler_runs(client: &impl Session, id: i64) -> Result<Vec<HandlerRuns>, StoreError> {
    let rows = sql::query(
        client,
        "SELECT COALESCE(a.handler, e.kind, ''), count(*)::int,
                    array_agg(a.outcome ORDER BY a.attempt, a.id)
             FROM webhook_event_attempts a
             JOIN webhook_events e ON e.id = a.webhook_event_id
             WHERE a.webhook_event_id = $1
             GROUP BY 1",
        params![&id],
    )
    .await?;
    Ok(rows
        .iter()
        .map(|row| HandlerRuns {
            handler: row.get(0),
            runs: row.get(1),
            outcomes: row.get(2),
        })
        .collect())
}

/// How one handler run ended.
#[derive(Debug, Clone)]
pub struct AttemptRecord {
    pub event: i64,
    /// The event's run number: 1 for the first, then 2, 3, …
    pub attempt: i32,
    /// The kind, or `forward:NAME`.
    pub handler: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    /// `processed`, `failed` or `dead`: what this run means for its handler.
    pub outcome: EventStatus,
    pub error: Option<String>,
    /// Forwards: the receiver's status and the first bytes of its answer.
    pub http_status: Option<i32>,
    pub response: Option<String>,
}

/// The event row after a run of its handlers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    pub status: EventStatus,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// Set while the run's forwards are being sent (with `next_attempt_at` the
    /// same time); `None` ends a lease.
    pub lease_until: Option<DateTime<Utc>>,
}

/// Writes the event's new status and counters.
pub async fn settle(client: &impl Session, id: i64, settled: &Settled) -> Result<(), StoreError> {
    sql::execute(
        client,
        "UPDATE webhook_events
             SET status = $2,
                 attempts = $3,
                 last_error = $4,
                 next_attempt_at = $5,
                 lease_until = $6,
                 processed_at = CASE WHEN $2 = 'processed' THEN now() END
             WHERE id = $1",
        params![
            &id,
            &settled.status.as_str(),
            &settled.attempts,
            &settled.last_error,
            &settled.next_attempt_at,
            &settled.lease_until,
        ],
    )
    .await?;
    Ok(())
}

/// The database's time (its transaction's start), which leases are measured by.
pub async fn database_now(client: &impl Session) -> Result<DateTime<Utc>, StoreError> {
    Ok(sql::query_one(client, "SELECT now()", params![])
        .await?
        .get(0))
}

/// Locks an event whose forwards a run sent under the lease `until`, if that
/// lease is still the event's (it is not when it ran out and another run took
/// the event).
pub async fn lock_leased(
    client: &impl Session,
    id: i64,
    until: DateTime<Utc>,
) -> Result<bool, StoreError> {
    Ok(sql::query_opt(
        client,
        "SELECT 1 FROM webhook_events WHERE id = $1 AND lease_until = $2
             FOR NO KEY UPDATE",
        params![&id, &until],
    )
    .await?
    .is_some())
}

/// Attempt rows, any number at once (also the pgbench baseline's, with one).
pub const APPEND_ATTEMPTS: &str = "INSERT INTO webhook_event_attempts
        (webhook_event_id, attempt, handler, started_at, finished_at, outcome, error,
         http_status, response)
    SELECT * FROM unnest($1::bigint[], $2::int[], $3::text[], $4::timestamptz[],
                         $5::timestamptz[], $6::text[], $7::text[], $8::int[],
                         $9::text[])";

/// Appends attempt rows, in one statement.
pub async fn append_attempts(
    client: &impl Session,
    attempts: &[AttemptRecord],
) -> Result<(), StoreError> {
    if attempts.is_empty() {
        return Ok(());
    }
    let events: Vec<i64> = attempts.iter().map(|a| a.event).collect();
    let numbers: Vec<i32> = attempts.iter().map(|a| a.attempt).collect();
    let handlers: Vec<&str> = attempts.iter().map(|a| a.handler.as_str()).collect();
    let started: Vec<DateTime<Utc>> = attempts.iter().map(|a| a.started_at).collect();
    let finished: Vec<DateTime<Utc>> = attempts.iter().map(|a| a.finished_at).collect();
    let outcomes: Vec<&str> = attempts.iter().map(|a| a.outcome.as_str()).collect();
    let errors: Vec<Option<&str>> = attempts.iter().map(|a| a.error.as_deref()).collect();
    let statuses: Vec<Option<i32>> = attempts.iter().map(|a| a.http_status).collect();
    let responses: Vec<Option<&str>> = attempts.iter().map(|a| a.response.as_deref()).collect();
    sql::execute(
        client,
        APPEND_ATTEMPTS,
        params![
            &events, &numbers, &handlers, &started, &finished, &outcomes, &errors, &statuses,
            &responses,
        ],
    )
    .await?;
    Ok(())
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

/// Keeps an item of a several-event request that reused a stored event's id
/// with another payload, beside that event (the request itself is acknowledged);
/// the same item again counts a delivery on its record.
pub async fn record_conflict(
    client: &impl Session,
    event: &IncomingEvent,
) -> Result<(), StoreError> {
    sql::execute(
        client,
        "INSERT INTO event_conflicts
                 (webhook_event_id, stored_sha256, offered_sha256, offered_payload)
             SELECT e.id, e.payload_sha256, $3, $4
               FROM webhook_events e
              WHERE e.source = $1 AND e.event_id = $2
             ON CONFLICT (webhook_event_id, offered_sha256) DO UPDATE
                SET deliveries = event_conflicts.deliveries + 1, last_delivery_at = now()",
        params![
            &event.source,
            &event.event_id,
            &event.fingerprint.as_slice(),
            &stored_payload(event),
        ],
    )
    .await?;
    Ok(())
}
