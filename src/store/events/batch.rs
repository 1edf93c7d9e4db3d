//! `record_delivery` for a batch: one multi-row dedupe statement per rule.

use crate::store::sql::{self, Session};
use serde_json::Value;

use crate::event::{EventId, IncomingEvent};
use crate::store::StoreError;

use super::record::{keep_requests, recount_by_id, recount_legacy_duplicate, stored_payload};
use super::{FirstWrite, Recorded};

/// One event of a batch: its delivery, how its row is first written, and how many
/// deliveries of it the batch holds (copies that arrived together count at once).
#[derive(Debug, Clone, Copy)]
pub struct BatchItem<'a> {
    pub event: &'a IncomingEvent,
    pub signed_with: i32,
    pub expected: FirstWrite,
    pub deliveries: i32,
}

/// The multi-row dedupe statement, its parameters `$?` (`sql::numbered!`), the
/// columns of `EventColumns` in order: `$key` is what `body_sha256` is written as,
/// `$only` filters the rows, `$conflict` names the key deciding and `$same` the
/// condition under which a conflict counts a duplicate.
macro_rules! record_batch_sql {
    ($key:literal, $only:literal, $conflict:literal, $same:literal) => {
        concat!(
            "INSERT INTO webhook_events AS e
                 (source, event_id, event_type, kind, status, payload, payload_sha256,
                  signed_with, payment_id, customer_id, attempts, processed_at, body,
                  signature_headers, stable_sha256, deliveries, origin, body_sha256)
             SELECT source, event_id, event_type, kind, status, payload, payload_sha256,
                    signed_with, payment_id, customer_id, attempts,
                    CASE WHEN status IN ('processed', 'ignored') THEN now() END, body,
                    signature_headers, stable_sha256, deliveries,
                    CASE WHEN signed_with = -1 THEN 'api' ELSE 'delivery' END, ",
            $key,
            "
             FROM unnest($?::text[], $?::text[], $?::text[], $?::text[], $?::text[],
                         $?::jsonb[], $?::bytea[], $?::int[], $?::text[], $?::text[],
                         $?::int[], $?::bytea[], $?::jsonb[], $?::bytea[], $?::int[])
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
pub(super) use record_batch_sql;

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
pub(super) use record_by_id_sql;

/// The batch's events decided by id.
const RECORD_BATCH: &str = sql::numbered!(record_by_id_sql!());

/// The batch's events decided by body key, as `RECORD_BODY_DELIVERY`.
const RECORD_BODY_BATCH: &str = sql::numbered!(record_batch_sql!(
    "u.stable_sha256",
    "WHERE NOT EXISTS (SELECT 1 FROM webhook_events x
                       WHERE x.source = u.source AND x.event_id = u.event_id
                         AND x.body_sha256 IS DISTINCT FROM u.stable_sha256)",
    "(source, body_sha256) WHERE body_sha256 IS NOT NULL",
    ""
));

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
pub(super) fn decision(event: &IncomingEvent, rows: &[tokio_postgres::Row]) -> Option<Recorded> {
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
            event_id: EventId::stored(row.get(2)),
        },
    })
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
    let columns = EventColumns::from_items(items);
    sql::query(client, sql, &columns.params()).await
}

/// The columns of a multi-row dedupe statement (its first fifteen parameters, in
/// order), its rows in one
/// order in every transaction: two batches holding copies of the same events
/// never wait on each other's rows the opposite way (a deadlock).
pub(super) struct EventColumns<'a> {
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
    pub(super) fn from_items(items: &[&BatchItem<'a>]) -> Self {
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

    pub(super) fn params(&self) -> [sql::Param<'_>; 15] {
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
