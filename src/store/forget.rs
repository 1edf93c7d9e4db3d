//! Forgetting a customer: their events' stored payloads, bodies, kept requests,
//! conflicting items and free texts rewritten without their personal data,
//! their id taken off their events and payments, and what else quotes them
//! found and rewritten: batch-mates' kept bodies, audit details, stored answers
//! to Idempotency-Keys. Dedupe keys, fingerprints and payment states stay.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::StoreError;
use super::sql::{self, Session, params};

/// One of a customer's events as stored.
#[derive(Debug, Clone)]
pub struct StoredEvent {
    pub id: i64,
    pub source: String,
    /// The provider's id (an item's within a kept request).
    pub event_id: String,
    pub received_at: DateTime<Utc>,
    /// `None` once purged.
    pub payload: Option<Value>,
    pub body: Option<Vec<u8>>,
}

/// A request kept once beside its events, as stored.
#[derive(Debug, Clone)]
pub struct StoredRequest {
    pub id: i64,
    pub source: String,
    /// `None` once purged.
    pub body: Option<Vec<u8>>,
}

/// A conflicting item kept beside an event.
#[derive(Debug, Clone)]
pub struct StoredConflict {
    pub id: i64,
    pub source: String,
    pub payload: Value,
}

/// A customer's events (of `source`, when given), locked until the transaction
/// ends: those that name them, and those of their payments.
pub async fn events_of_customer(
    client: &impl Session,
    customer: &str,
    source: Option<&str>,
) -> Result<Vec<StoredEvent>, StoreError> {
    let rows = sql::query(
        client,
        "SELECT e.id, e.source, e.payload, e.body, e.event_id, e.received_at
           FROM webhook_events e
             WHERE ($2::text IS NULL OR e.source = $2)
               AND (e.customer_id = $1
                    OR (e.source, e.payment_id) IN
                       (SELECT p.source, p.payment_id FROM payments p WHERE p.customer_id = $1))
             ORDER BY e.id
             FOR UPDATE OF e",
        params![&customer, &source],
    )
    .await?;
    Ok(rows
        .iter()
        .map(|r| StoredEvent {
            id: r.get(0),
            source: r.get(1),
            payload: r.get(2),
            body: r.get(3),
            event_id: r.get(4),
            received_at: r.get(5),
        })
        .collect())
}

/// The conflicting items kept beside events `ids`, locked.
pub async fn conflicts_of(
    client: &impl Session,
    ids: &[i64],
) -> Result<Vec<StoredConflict>, StoreError> {
    let rows = sql::query(
        client,
        "SELECT c.id, e.source, c.offered_payload
             FROM event_conflicts c JOIN webhook_events e ON e.id = c.webhook_event_id
             WHERE c.webhook_event_id = ANY($1)
             ORDER BY c.id
             FOR UPDATE OF c",
        params![&ids],
    )
    .await?;
    Ok(rows
        .iter()
        .map(|r| StoredConflict {
            id: r.get(0),
            source: r.get(1),
            payload: r.get(2),
        })
        .collect())
}

/// The requests kept once beside events `ids` (their batch-mates' too), locked.
pub async fn requests_of(
    client: &impl Session,
    ids: &[i64],
) -> Result<Vec<StoredRequest>, StoreError> {
    let rows = sql::query(
        client,
        "SELECT r.id, r.source, r.body FROM event_requests r
             WHERE r.id IN (SELECT request_id FROM webhook_events WHERE id = ANY($1))
             ORDER BY r.id
             FOR UPDATE OF r",
        params![&ids],
    )
    .await?;
    Ok(rows
        .iter()
        .map(|r| StoredRequest {
            id: r.get(0),
            source: r.get(1),
            body: r.get(2),
        })
        .collect())
}

/// Stores a kept request's redacted body and marks it redacted: none of its
/// events' signatures can be checked with it any more.
pub async fn redact_request(
    client: &impl Session,
    id: i64,
    body: Option<&[u8]>,
) -> Result<(), StoreError> {
    sql::execute(
        client,
        "UPDATE event_requests SET body = $2, redacted_at = now() WHERE id = $1",
        params![&id, &body],
    )
    .await?;
    Ok(())
}

/// Stores an event's redacted payload and body, takes the customer's id off it,
/// and marks it redacted.
pub async fn redact_event(
    client: &impl Session,
    id: i64,
    payload: Option<&Value>,
    body: Option<&[u8]>,
) -> Result<(), StoreError> {
    sql::execute(
        client,
        "UPDATE webhook_events
             SET payload = $2, body = $3, customer_id = NULL, redacted_at = now()
             WHERE id = $1",
        params![&id, &payload, &body],
    )
    .await?;
    Ok(())
}

pub async fn redact_conflict(
    client: &impl Session,
    id: i64,
    payload: &Value,
) -> Result<(), StoreError> {
    sql::execute(
        client,
        "UPDATE event_conflicts SET offered_payload = $2 WHERE id = $1",
        params![&id, payload],
    )
    .await?;
    Ok(())
}

/// Takes the customer's id off their payments (of `source`, when given); their
/// amounts and status stay. Returns how many.
pub async fn forget_payments(
    client: &impl Session,
    customer: &str,
    source: Option<&str>,
) -> Result<u64, StoreError> {
    sql::execute(
        client,
        "UPDATE payments SET customer_id = NULL
             WHERE customer_id = $1 AND ($2::text IS NULL OR source = $2)",
        params![&customer, &source],
    )
    .await
}

/// A free-text column of a customer's events (`event` holds the event's id)
/// that may quote their data.
#[derive(Debug, Clone, Copy)]
pub struct EventText {
    pub table: &'static str,
    pub event: &'static str,
    pub column: &'static str,
    /// Erased whole rather than rewritten where it quotes them.
    pub erase: bool,
}

/// Every such column, each rewritten by forgetting: a column added later is one
/// more line here.
pub const EVENT_TEXTS: &[EventText] = &[
    EventText {
        table: "webhook_events",
        event: "id",
        column: "last_error",
        erase: false,
    },
    EventText {
        table: "webhook_event_attempts",
        event: "webhook_event_id",
        column: "error",
        erase: false,
    },
    EventText {
        table: "event_forwards",
        event: "webhook_event_id",
        column: "last_error",
        erase: false,
    },
    // A receiver's answer may echo anything of the event, in any shape, cut
    // anywhere: nothing of it can be kept with certainty.
    EventText {
        table: "webhook_event_attempts",
        event: "webhook_event_id",
        column: "response",
        erase: true,
    },
];

/// The distinct texts `text` holds for events `ids`.
pub async fn texts_of(
    client: &impl Session,
    text: &EventText,
    ids: &[i64],
) -> Result<Vec<String>, StoreError> {
    let EventText {
        table,
        event,
        column,
        ..
    } = text;
    let rows = sql::query(
        client,
        &format!(
            "SELECT DISTINCT {column} FROM {table}
                 WHERE {event} = ANY($1) AND {column} IS NOT NULL"
        ),
        params![&ids],
    )
    .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Replaces `was` with `now` in `text` for events `ids`.
pub async fn rewrite_text(
    client: &impl Session,
    text: &EventText,
    ids: &[i64],
    was: &str,
    now: &str,
) -> Result<u64, StoreError> {
    let EventText {
        table,
        event,
        column,
        ..
    } = text;
    sql::execute(
        client,
        &format!("UPDATE {table} SET {column} = $3 WHERE {event} = ANY($1) AND {column} = $2"),
        params![&ids, &was, &now],
    )
    .await
}

/// Events of `source` received since `since`, other than `ids`, whose kept
/// body holds one of `needles`, locked: each event of a several-event request
/// keeps the whole request, so a customer's items ride along in their
/// batch-mates' bodies.
pub async fn bodies_quoting(
    client: &impl Session,
    source: &str,
    since: DateTime<Utc>,
    needles: &[Vec<u8>],
    ids: &[i64],
) -> Result<Vec<(i64, Vec<u8>)>, StoreError> {
    let rows = sql::query(
        client,
        "SELECT id, body FROM webhook_events
             WHERE source = $1 AND received_at >= $2 AND body IS NOT NULL
               AND id <> ALL($4)
               AND EXISTS (SELECT 1 FROM unnest($3::bytea[]) n WHERE position(n IN body) > 0)
             ORDER BY id
             FOR UPDATE",
        params![&source, &since, &needles, &ids],
    )
    .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Stores a batch-mate's rewritten body and marks it redacted: what is kept no
/// longer matches its signature.
pub async fn redact_body(client: &impl Session, id: i64, body: &[u8]) -> Result<(), StoreError> {
    sql::execute(
        client,
        "UPDATE webhook_events SET body = $2, redacted_at = now() WHERE id = $1",
        params![&id, &body],
    )
    .await?;
    Ok(())
}

/// Audit entries whose detail holds one of `needles` (as its JSON text
/// writes them), locked.
pub async fn audit_quoting(
    client: &impl Session,
    needles: &[String],
) -> Result<Vec<(i64, Value)>, StoreError> {
    let rows = sql::query(
        client,
        "SELECT id, detail FROM admin_audit
             WHERE detail IS NOT NULL
               AND EXISTS (SELECT 1 FROM unnest($1::text[]) n WHERE strpos(detail::text, n) > 0)
             ORDER BY id
             FOR UPDATE",
        params![&needles],
    )
    .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

pub async fn redact_audit(
    client: &impl Session,
    id: i64,
    detail: &Value,
) -> Result<(), StoreError> {
    sql::execute(
        client,
        "UPDATE admin_audit SET detail = $2 WHERE id = $1",
        params![&id, detail],
    )
    .await?;
    Ok(())
}

/// A stored answer to an Idempotency-Key: (token name, key, body).
pub type StoredAnswer = (String, String, Vec<u8>);

/// Stored answers that hold one of `needles`, locked.
pub async fn answers_quoting(
    client: &impl Session,
    needles: &[Vec<u8>],
) -> Result<Vec<StoredAnswer>, StoreError> {
    let rows = sql::query(
        client,
        "SELECT token_name, idempotency_key, response_body FROM admin_idempotency_keys
             WHERE response_body IS NOT NULL
               AND EXISTS (SELECT 1 FROM unnest($1::bytea[]) n
                            WHERE position(n IN response_body) > 0)
             ORDER BY token_name, idempotency_key
             FOR UPDATE",
        params![&needles],
    )
    .await?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect())
}

pub async fn redact_answer(
    client: &impl Session,
    (token, key, body): &StoredAnswer,
) -> Result<(), StoreError> {
    sql::execute(
        client,
        "UPDATE admin_idempotency_keys SET response_body = $3
             WHERE token_name = $1 AND idempotency_key = $2",
        params![token, key, body],
    )
    .await?;
    Ok(())
}
