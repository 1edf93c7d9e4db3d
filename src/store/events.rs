//! The `webhook_events` table: recording deliveries (the dedupe decision), recording
//! handler attempts, and claiming due retries.

use super::sql::{self, Session, params};
use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

use super::StoreError;
use super::payments::{PaymentColumns, PaymentUpdate};
use crate::event::{IncomingEvent, KeptRequest};

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
/// that would touch every index). No new event is due for a retry: a handler
/// that fails at receipt schedules its own (`events::settle`), and forwards wait
/// in their own rows (`store::forwards`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expected {
    pub status: EventStatus,
    /// Handler runs at receipt (0 or 1).
    pub attempts: i32,
}

/// The dedupe decision for one event, in one statement (the ingest benchmark's
/// pgbench baseline runs this very text).
pub const RECORD_DELIVERY: &str = "INSERT INTO webhook_events AS e
        (source, event_id, event_type, kind, status, payload, payload_sha256,
         signed_with, payment_id, customer_id, attempts, processed_at, body,
         signature_headers, stable_sha256)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11,
            CASE WHEN $5 IN ('processed', 'ignored') THEN now() END, $12, $13, $14)
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
         signature_headers, stable_sha256, body_sha256)
    SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::jsonb, $7::bytea,
           $8::int, $9::text, $10::text, $11::int,
           CASE WHEN $5::text IN ('processed', 'ignored') THEN now() END, $12::bytea,
           $13::jsonb, $14::bytea, $14::bytea
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
        ],
    )
    .await?;
    let recorded = match row {
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
    };
    keep_requests(client, &[(event, &recorded)]).await?;
    Ok(recorded)
}

/// Keeps the requests of the new events among `decided` once each (a request
/// already kept, by a resend or by a batch-mate stored apart, is that one) and
/// points those events at them: a statement for the requests and one for the
/// events, in the caller's transaction, only when there are such events.
async fn keep_requests(
    client: &impl Session,
    decided: &[(&IncomingEvent, &Recorded)],
) -> Result<(), StoreError> {
    let mut stored: Vec<(i64, &str, &KeptRequest)> = decided
        .iter()
        .filter_map(|(event, recorded)| match (recorded, &event.request) {
            (Recorded::New { id }, Some(request)) => Some((*id, event.source.as_str(), &**request)),
            _ => None,
        })
        .collect();
    if stored.is_empty() {
        return Ok(());
    }
    // In one order in every transaction, so two never wait on each other.
    let mut requests: Vec<(&str, &KeptRequest)> = stored.iter().map(|s| (s.1, s.2)).collect();
    requests.sort_unstable_by_key(|(source, request)| (*source, request.sha256));
    requests.dedup_by_key(|(source, request)| (*source, request.sha256));
    let sources: Vec<&str> = requests.iter().map(|r| r.0).collect();
    let keys: Vec<&[u8]> = requests.iter().map(|r| &r.1.sha256[..]).collect();
    let bodies: Vec<&[u8]> = requests.iter().map(|r| r.1.body.as_slice()).collect();
    // One kept by a transaction still open is waited for, then found.
    sql::execute(
        client,
        "INSERT INTO event_requests (source, body_sha256, body)
             SELECT * FROM unnest($1::text[], $2::bytea[], $3::bytea[])
             ON CONFLICT (source, body_sha256) DO NOTHING",
        params![&sources, &keys, &bodies],
    )
    .await?;
    stored.sort_unstable_by_key(|s| s.0);
    let ids: Vec<i64> = stored.iter().map(|s| s.0).collect();
    let sources: Vec<&str> = stored.iter().map(|s| s.1).collect();
    let keys: Vec<&[u8]> = stored.iter().map(|s| &s.2.sha256[..]).collect();
    sql::execute(
        client,
        "UPDATE webhook_events e SET request_id = r.id
             FROM unnest($1::bigint[], $2::text[], $3::bytea[]) AS s(id, source, key)
             JOIN event_requests r ON r.source = s.source AND r.body_sha256 = s.key
             WHERE e.id = s.id",
        params![&ids, &sources, &keys],
    )
    .await?;
    Ok(())
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
                  signature_headers, stable_sha256, deliveries, body_sha256)
             SELECT source, event_id, event_type, kind, status, payload, payload_sha256,
                    signed_with, payment_id, customer_id, attempts,
                    CASE WHEN status IN ('processed', 'ignored') THEN now() END, body,
                    signature_headers, stable_sha256, deliveries, ",
            $key,
            "
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
                         $6::jsonb[], $7::bytea[], $8::int[], $9::text[], $10::text[],
                         $11::int[], $12::bytea[], $13::jsonb[], $14::bytea[], $15::int[])
                  AS u(source, event_id, event_type, kind, status, payload, payload_sha256,
                       signed_with, payment_id, customer_id, attempts, body,
                       signature_headers, stable_sha256, deliveries) ",
            $only,
            "
             ON CONFLICT ",
            $conflict,
            " DO UPDATE
                 SET deliveries = e.deliveries + EXCLUDED.deliveries, last_delivery_at = now() ",
            $same,
            "
             RETURNING id, source, event_id, (xmax = 0) AS inserted, body_sha256"
        )
    };
}

/// The multi-row dedupe statement deciding by id.
macro_rules! record_by_id_sql {
    () => {
        record_batch_sql!(
            "NULL::bytea",
            "",
            "(source, event_id)",
            "WHERE e.payload_sha256 = EXCLUDED.payload_sha256
                OR e.stable_sha256 = EXCLUDED.stable_sha256"
        )
    };
}

/// The batch's events decided by id.
const RECORD_BATCH: &str = record_by_id_sql!();

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
        let rows = match event.body_key {
            Some(_) => &body_rows,
            None => &id_rows,
        };
        decided.push(match decision(event, rows) {
            Some(recorded) => recorded,
            None if event.body_key.is_some() => {
                recount_by_id(client, event, item.deliveries).await?
            }
            None => recount_legacy_duplicate(client, event, item.deliveries).await?,
        });
    }
    let pairs: Vec<(&IncomingEvent, &Recorded)> =
        items.iter().map(|i| i.event).zip(&decided).collect();
    keep_requests(client, &pairs).await?;
    Ok(decided)
}

/// What a dedupe statement's `rows` (`id, source, event_id, inserted,
/// body_sha256`) decided for `event`: `None` when it returned none for it (the
/// stored row's payload differs, or predates stable fingerprints).
fn decision(event: &IncomingEvent, rows: &[tokio_postgres::Row]) -> Option<Recorded> {
    let row = match &event.body_key {
        Some(key) => rows.iter().find(|r| {
            r.get::<_, &str>(1) == event.source
                && r.get::<_, Option<&[u8]>>(4) == Some(key.as_slice())
        }),
        None => rows
            .iter()
            .find(|r| r.get::<_, &str>(1) == event.source && r.get::<_, &str>(2) == event.event_id),
    }?;
    Some(match row.get::<_, bool>(3) {
        true => Recorded::New { id: row.get(0) },
        false => Recorded::Duplicate {
            id: row.get(0),
            event_id: row.get(2),
        },
    })
}

/// A new event's payment merge, run by the built-in handler of its kind, and
/// the attempt that records the run.
pub struct FoldedRun<'a> {
    pub source: &'a str,
    pub event_id: &'a str,
    pub update: &'a PaymentUpdate,
    pub attempt: &'a AttemptRecord,
}

/// `RECORD_BATCH`, and in the same statement the payment merges of the events
/// it stores as new (`$16`..`$25`: `FoldedRun`s' source, the payment's columns,
/// event id) and their attempts (`$26`..`$33`).
const RECORD_FOLDED: &str = concat!(
    "WITH recorded AS (",
    record_by_id_sql!(),
    "), merged AS (",
    super::payments::merge_grouped!(
        "unnest($16::text[], $17::text[], $18::bool[], $19::bool[], $20::bool[],
                $21::bigint[], $22::bigint[], $23::text[], $24::text[], $25::text[])
             AS u(source, payment_id, succeeded, failed, disputed, amount,
                  amount_refunded, currency, customer_id, event_id)
         JOIN recorded r ON r.source = u.source AND r.event_id = u.event_id AND r.inserted"
    ),
    "), attempted AS (
         INSERT INTO webhook_event_attempts
             (webhook_event_id, attempt, handler, started_at, finished_at, outcome, error,
              http_status, response)
         SELECT r.id, a.attempt, a.handler, a.started_at, a.finished_at, a.outcome, a.error,
                a.http_status, a.response
         FROM unnest($16::text[], $25::text[], $26::int[], $27::text[], $28::timestamptz[],
                     $29::timestamptz[], $30::text[], $31::text[], $32::int[], $33::text[])
              AS a(source, event_id, attempt, handler, started_at, finished_at, outcome,
                   error, http_status, response)
         JOIN recorded r ON r.source = a.source AND r.event_id = a.event_id AND r.inserted
     )
     SELECT id, source, event_id, inserted, body_sha256 FROM recorded"
);

/// `items` (every one decided by id) stored, and the payment merges and attempts
/// of those that are new, in one statement, all or nothing: its columns,
/// gathered. The caller (`store::one_statement_transaction`) sends `BEGIN` and
/// `COMMIT` along with it.
pub struct Folded<'a> {
    items: &'a [BatchItem<'a>],
    columns: EventColumns<'a>,
    payments: PaymentColumns<'a>,
    event_ids: Vec<&'a str>,
    attempts: AttemptColumns<'a>,
}

/// The folded statement, ready to send (`Folded::ready`).
pub struct FoldedReady<'p> {
    items: &'p [BatchItem<'p>],
    statement: sql::Ready<'p>,
}

impl<'a> Folded<'a> {
    pub fn of(items: &'a [BatchItem<'a>], runs: &[FoldedRun<'a>]) -> Self {
        let all: Vec<&BatchItem<'a>> = items.iter().collect();
        let updates: Vec<(&str, &PaymentUpdate)> =
            runs.iter().map(|r| (r.source, r.update)).collect();
        Folded {
            items,
            columns: EventColumns::of(&all),
            payments: PaymentColumns::of(&updates),
            event_ids: runs.iter().map(|r| r.event_id).collect(),
            attempts: AttemptColumns::of(runs.iter().map(|r| r.attempt)),
        }
    }

    /// Prepared now (once per connection) when statements are prepared, so that
    /// `FoldedReady::run` puts it on the wire when first polled: sent along with
    /// a `COMMIT`, the statement is on the wire before it.
    pub async fn ready(&self, client: &impl Session) -> Result<FoldedReady<'_>, StoreError> {
        let mut params = Vec::with_capacity(33);
        params.extend(self.columns.params());
        params.extend(self.payments.params());
        params.push(sql::param(&self.event_ids));
        params.extend(self.attempts.params());
        Ok(FoldedReady {
            items: self.items,
            statement: sql::ready(client, RECORD_FOLDED, params).await?,
        })
    }
}

impl FoldedReady<'_> {
    /// Runs the statement: each item's decision, `None` for one the statement
    /// did not take (`decision`'s), to be decided on its own.
    pub async fn run(&self, client: &impl Session) -> Result<Vec<Option<Recorded>>, StoreError> {
        let rows = self.statement.query(client).await?;
        Ok(self
            .items
            .iter()
            .map(|item| decision(item.event, &rows))
            .collect())
    }
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
    let columns = EventColumns::of(items);
    sql::query(client, sql, &columns.params()).await
}

/// The columns of a multi-row dedupe statement (`$1`..`$15`), its rows in one
/// order in every transaction: two batches holding copies of the same events
/// never wait on each other's rows the opposite way (a deadlock).
struct EventColumns<'a> {
    sources: Vec<&'a str>,
    ids: Vec<&'a str>,
    types: Vec<&'a str>,
    kinds: Vec<Option<&'a str>>,
    statuses: Vec<&'static str>,
    payloads: Vec<sql::Jsonb<'a>>,
    fingerprints: Vec<&'a [u8]>,
    signed: Vec<i32>,
    payments: Vec<Option<&'a str>>,
    customers: Vec<Option<&'a str>>,
    attempts: Vec<i32>,
    bodies: Vec<&'a [u8]>,
    headers: Vec<&'a Value>,
    stable: Vec<&'a [u8]>,
    deliveries: Vec<i32>,
}

impl<'a> EventColumns<'a> {
    fn of(items: &[&BatchItem<'a>]) -> Self {
        let mut items = items.to_vec();
        items.sort_unstable_by_key(|i| (&i.event.source, i.event.body_key, &i.event.event_id));
        let events = || items.iter().map(|i| i.event);
        EventColumns {
            sources: events().map(|e| e.source.as_str()).collect(),
            ids: events().map(|e| e.event_id.as_str()).collect(),
            types: events().map(|e| e.event_type.as_str()).collect(),
            kinds: events().map(|e| e.kind.as_deref()).collect(),
            statuses: items.iter().map(|i| i.expected.status.as_str()).collect(),
            payloads: events().map(stored_payload).collect(),
            fingerprints: events().map(|e| &e.fingerprint[..]).collect(),
            signed: items.iter().map(|i| i.signed_with).collect(),
            payments: events().map(|e| e.payment_id.as_deref()).collect(),
            customers: events().map(|e| e.customer_id.as_deref()).collect(),
            attempts: items.iter().map(|i| i.expected.attempts).collect(),
            bodies: events().map(|e| e.body.as_slice()).collect(),
            headers: events().map(|e| &e.signature_headers).collect(),
            stable: events().map(|e| &e.stable_fingerprint[..]).collect(),
            deliveries: items.iter().map(|i| i.deliveries).collect(),
        }
    }

    fn params(&self) -> [sql::Param<'_>; 15] {
        [
            sql::param(&self.sources),
            sql::param(&self.ids),
            sql::param(&self.types),
            sql::param(&self.kinds),
            sql::param(&self.statuses),
            sql::param(&self.payloads),
            sql::param(&self.fingerprints),
            sql::param(&self.signed),
            sql::param(&self.payments),
            sql::param(&self.customers),
            sql::param(&self.attempts),
            sql::param(&self.bodies),
            sql::param(&self.headers),
            sql::param(&self.stable),
            sql::param(&self.deliveries),
        ]
    }
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

pub(super) fn claimed(row: &tokio_postgres::Row) -> ClaimedEvent {
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
    /// Its latest run's error.
    pub last_error: Option<String>,
}

/// Each handler's runs of an event (attempts written before handlers were named
/// count as the kind's).
pub async fn handler_runs(client: &impl Session, id: i64) -> Result<Vec<HandlerRuns>, StoreError> {
    let rows = sql::query(
        client,
        "SELECT COALESCE(a.handler, e.kind, ''), count(*)::int,
                    array_agg(a.outcome ORDER BY a.attempt, a.id),
                    (array_agg(a.error ORDER BY a.attempt DESC, a.id DESC))[1]
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
            last_error: row.get(3),
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
    let columns = AttemptColumns::of(attempts.iter());
    let mut params = vec![sql::param(&events)];
    params.extend(columns.params());
    sql::execute(client, APPEND_ATTEMPTS, &params).await?;
    Ok(())
}

/// The columns of attempt rows but their event's id, in `APPEND_ATTEMPTS`' order.
struct AttemptColumns<'a> {
    numbers: Vec<i32>,
    handlers: Vec<&'a str>,
    started: Vec<DateTime<Utc>>,
    finished: Vec<DateTime<Utc>>,
    outcomes: Vec<&'static str>,
    errors: Vec<Option<&'a str>>,
    statuses: Vec<Option<i32>>,
    responses: Vec<Option<&'a str>>,
}

impl<'a> AttemptColumns<'a> {
    fn of(attempts: impl Iterator<Item = &'a AttemptRecord> + Clone) -> Self {
        AttemptColumns {
            numbers: attempts.clone().map(|a| a.attempt).collect(),
            handlers: attempts.clone().map(|a| a.handler.as_str()).collect(),
            started: attempts.clone().map(|a| a.started_at).collect(),
            finished: attempts.clone().map(|a| a.finished_at).collect(),
            outcomes: attempts.clone().map(|a| a.outcome.as_str()).collect(),
            errors: attempts.clone().map(|a| a.error.as_deref()).collect(),
            statuses: attempts.clone().map(|a| a.http_status).collect(),
            responses: attempts.map(|a| a.response.as_deref()).collect(),
        }
    }

    fn params(&self) -> [sql::Param<'_>; 8] {
        [
            sql::param(&self.numbers),
            sql::param(&self.handlers),
            sql::param(&self.started),
            sql::param(&self.finished),
            sql::param(&self.outcomes),
            sql::param(&self.errors),
            sql::param(&self.statuses),
            sql::param(&self.responses),
        ]
    }
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

/// Conflicting items kept per event at most; past them a conflicting item is
/// counted on the event (`conflicts_not_kept`), not kept. Adyen signs 8 fields
/// of an item, so one genuine item resent with another unsigned field each time
/// would otherwise keep a new record, whole, for every copy.
pub const CONFLICTS_KEPT: i64 = 10;

/// Given the event's row id (`$1`) and fingerprint (`$2`), the offered item's
/// fingerprint (`$3`) and payload (`$4`): a known item counts a delivery on its
/// record; a new one is kept while the event has fewer than `$5` records, else
/// counted on the event. The caller holds the event's row lock, so concurrent
/// records of one event are decided one after the other.
const RECORD_CONFLICT: &str = "WITH known AS (
         UPDATE event_conflicts SET deliveries = deliveries + 1, last_delivery_at = now()
          WHERE webhook_event_id = $1 AND offered_sha256 = $3
         RETURNING 1),
     kept AS (
         INSERT INTO event_conflicts
                 (webhook_event_id, stored_sha256, offered_sha256, offered_payload)
         SELECT $1, $2, $3, $4
          WHERE NOT EXISTS (SELECT 1 FROM known)
            AND (SELECT count(*) FROM event_conflicts WHERE webhook_event_id = $1) < $5
         RETURNING 1)
     UPDATE webhook_events SET conflicts_not_kept = conflicts_not_kept + 1
      WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM known) AND NOT EXISTS (SELECT 1 FROM kept)";

/// Keeps an item of a several-event request that reused a stored event's id
/// with another payload, beside that event (the request itself is acknowledged);
/// the same item again counts a delivery on its record. Past `CONFLICTS_KEPT`
/// records a new item is only counted on the event.
pub async fn record_conflict(
    client: &mut deadpool_postgres::Object,
    event: &IncomingEvent,
) -> Result<(), StoreError> {
    let tx = super::begin(client).await?;
    // Its row lock orders the records of one event (the count must not race).
    let stored = sql::query_opt(
        &tx,
        "SELECT id, payload_sha256 FROM webhook_events
          WHERE source = $1 AND event_id = $2
          FOR NO KEY UPDATE",
        params![&event.source, &event.event_id],
    )
    .await?;
    if let Some(stored) = stored {
        let (id, stored_sha256): (i64, Vec<u8>) = (stored.get(0), stored.get(1));
        sql::execute(
            &tx,
            RECORD_CONFLICT,
            params![
                &id,
                &stored_sha256,
                &event.fingerprint.as_slice(),
                &stored_payload(event),
                &CONFLICTS_KEPT,
            ],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(())
}
