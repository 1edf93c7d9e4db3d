//! Forgetting a customer: their events' stored payloads, bodies, kept requests
//! and conflicting items rewritten without their personal data, and their id taken off their
//! events and payments. Dedupe keys, fingerprints and payment states stay.

use serde_json::Value;

use super::StoreError;
use super::sql::{self, Session, params};

/// One of a customer's events as stored.
#[derive(Debug, Clone)]
pub struct StoredEvent {
    pub id: i64,
    pub source: String,
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
        "SELECT e.id, e.source, e.payload, e.body FROM webhook_events e
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
