//! One delivery's dedupe decision: one `INSERT … ON CONFLICT` decides new,
//! duplicate or conflict; the rows stored before stable fingerprints, and a
//! body-keyed delivery that met its id under another body, are decided again.

use crate::store::sql::{self, Session, params};
use serde_json::Value;

use crate::event::{EventId, IncomingEvent, KeptRequest};
use crate::store::StoreError;

use super::{FirstWrite, Recorded};

/// The dedupe decision for one event, in one statement (the ingest benchmark's
/// pgbench baseline runs this very text).
pub const RECORD_DELIVERY: &str = "INSERT INTO webhook_events AS e
        (source, event_id, event_type, kind, status, payload, payload_sha256,
         signed_with, payment_id, customer_id, attempts, processed_at, body,
         signature_headers, stable_sha256, origin)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11,
            CASE WHEN $5 IN ('processed', 'ignored') THEN now() END, $12, $13, $14,
            CASE WHEN $8 = -1 THEN 'api' ELSE 'delivery' END)
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
         signature_headers, stable_sha256, body_sha256, origin)
    SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::jsonb, $7::bytea,
           $8::int, $9::text, $10::text, $11::int,
           CASE WHEN $5::text IN ('processed', 'ignored') THEN now() END, $12::bytea,
           $13::jsonb, $14::bytea, $14::bytea,
           CASE WHEN $8::int = -1 THEN 'api' ELSE 'delivery' END
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
    expected: FirstWrite,
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
            event_id: EventId::stored(row.get(2)),
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
pub(super) async fn keep_requests(
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
pub(super) async fn recount_by_id(
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

/// The `payload` parameter of an event: its body's own text when that is the
/// payload as jsonb can take it, else the parsed payload.
pub(super) fn stored_payload(event: &IncomingEvent) -> sql::Jsonb<'_> {
    match event.payload_text() {
        Some(text) => sql::Jsonb::Text(text),
        None => sql::Jsonb::Value(event.storable_payload()),
    }
}

/// A row stored before stable fingerprints has none to compare: its stable
/// fingerprint is computed from its stored body (or payload) and kept, and the
/// delivery counts as a duplicate when it matches.
pub(super) async fn recount_legacy_duplicate(
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
