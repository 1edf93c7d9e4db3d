//! The event history support staff read: filtered, keyset-paginated lists (newest
//! first), one event with its attempts (counts come from `rollups`). Filters become
//! WHERE clauses only when given, so each query shape can use its index: the
//! `(received_at, id)` order, `status`, or the event/payment/customer id indexes.

use super::sql::{self, Param, Session, param, params};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::StoreError;
use super::events::EventStatus;

#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    pub source: Option<String>,
    pub kind: Option<String>,
    pub event_type: Option<String>,
    pub status: Option<EventStatus>,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
    /// An event id, payment id or customer id.
    pub q: Option<String>,
    pub limit: i64,
    /// Continue after this `(received_at, id)`.
    pub after: Option<(DateTime<Utc>, i64)>,
}

/// One row of the history, with the column names of `webhook_events`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct EventSummary {
    pub id: i64,
    pub source: String,
    pub event_id: String,
    pub event_type: String,
    pub kind: Option<String>,
    pub status: EventStatus,
    pub payment_id: Option<String>,
    pub customer_id: Option<String>,
    pub deliveries: i32,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub signed_with: i32,
    pub received_at: DateTime<Utc>,
    pub last_delivery_at: DateTime<Utc>,
    pub processed_at: Option<DateTime<Utc>>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub purged_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Attempt {
    pub attempt: i32,
    /// The handler that ran: the kind, or `forward:NAME`.
    pub handler: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub duration_ms: f64,
    pub outcome: String,
    pub error: Option<String>,
    /// Forwards: the receiver's status and the first bytes of its answer.
    pub http_status: Option<i32>,
    pub response: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct EventDetail {
    pub summary: EventSummary,
    /// `None` once purged.
    pub payload: Option<Value>,
    /// The fingerprint a redelivery is compared with (hex).
    pub payload_sha256: String,
    pub attempts: Vec<Attempt>,
    /// Items of several-event requests that reused this event's id with another
    /// payload, oldest first (`events::CONFLICTS_KEPT` at most).
    pub conflicts: Vec<Conflict>,
    /// Deliveries of conflicting items that came past those kept: counted, not kept.
    pub conflicts_not_kept: i32,
}

/// An item refused as a conflict but acknowledged with its batch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Conflict {
    pub received_at: DateTime<Utc>,
    /// The stored event's fingerprint when the item came (hex).
    pub stored_fingerprint: String,
    /// The refused item's (hex).
    pub offered_fingerprint: String,
    pub offered_payload: Value,
    /// How many times this item came, and when last.
    pub deliveries: i32,
    pub last_delivery_at: DateTime<Utc>,
}

const SUMMARY_COLUMNS: &str = "id, source, event_id, event_type, kind, status, payment_id, \
     customer_id, deliveries, attempts, last_error, signed_with, received_at, last_delivery_at, \
     processed_at, next_attempt_at, purged_at";

fn summary(row: &tokio_postgres::Row) -> EventSummary {
    EventSummary {
        id: row.get(0),
        source: row.get(1),
        event_id: row.get(2),
        event_type: row.get(3),
        kind: row.get(4),
        status: EventStatus::parse(row.get(5)).unwrap_or(EventStatus::Failed),
        payment_id: row.get(6),
        customer_id: row.get(7),
        deliveries: row.get(8),
        attempts: row.get(9),
        last_error: row.get(10),
        signed_with: row.get(11),
        received_at: row.get(12),
        last_delivery_at: row.get(13),
        processed_at: row.get(14),
        next_attempt_at: row.get(15),
        purged_at: row.get(16),
    }
}

impl EventFilter {
    /// The listing's SQL and its parameters. Only the filters given become
    /// clauses, and only column names and placeholders are written into the
    /// text; the values travel as parameters.
    pub fn to_sql(&self) -> (String, Vec<Param<'_>>) {
        let mut clauses: Vec<String> = Vec::new();
        let mut params: Vec<Param<'_>> = Vec::new();
        let equal: [(&str, Option<Param<'_>>); 4] = [
            ("source", self.source.as_ref().map(param)),
            ("kind", self.kind.as_ref().map(param)),
            ("event_type", self.event_type.as_ref().map(param)),
            ("status", self.status.as_ref().map(param)),
        ];
        for (column, value) in equal {
            if let Some(value) = value {
                params.push(value);
                clauses.push(format!("{column} = ${}", params.len()));
            }
        }
        if let Some(since) = &self.since {
            params.push(param(since));
            clauses.push(format!("received_at >= ${}", params.len()));
        }
        if let Some(until) = &self.until {
            params.push(param(until));
            clauses.push(format!("received_at < ${}", params.len()));
        }
        if let Some(q) = &self.q {
            params.push(param(q));
            let n = params.len();
            clauses.push(format!(
                "(event_id = ${n} OR payment_id = ${n} OR customer_id = ${n})"
            ));
        }
        if let Some((received_at, id)) = &self.after {
            params.push(param(received_at));
            params.push(param(id));
            let n = params.len();
            clauses.push(format!("(received_at, id) < (${}, ${n})", n - 1));
        }
        params.push(param(&self.limit));
        let where_sql = if clauses.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", clauses.join(" AND "))
        };
        let sql = format!(
            "SELECT {SUMMARY_COLUMNS} FROM webhook_events {where_sql}
             ORDER BY received_at DESC, id DESC LIMIT ${}",
            params.len()
        );
        (sql, params)
    }
}

/// Newest first; returns at most `filter.limit` rows.
pub async fn list_events(
    client: &impl Session,
    filter: &EventFilter,
) -> Result<Vec<EventSummary>, StoreError> {
    let (sql, params) = filter.to_sql();
    let rows = sql::query(client, &sql, &params).await?;
    Ok(rows.iter().map(summary).collect())
}

/// One event with its attempts, on a connection of its own from `pool`.
pub async fn load_event(
    pool: &deadpool_postgres::Pool,
    id: i64,
) -> Result<Option<EventDetail>, StoreError> {
    let client = pool.get().await?;
    get_event(&client, id).await
}

pub async fn get_event(client: &impl Session, id: i64) -> Result<Option<EventDetail>, StoreError> {
    let sql = format!(
        "SELECT {SUMMARY_COLUMNS}, payload, encode(payload_sha256, 'hex'), conflicts_not_kept \
         FROM webhook_events WHERE id = $1"
    );
    let Some(row) = sql::query_opt(client, &sql, params![&id]).await? else {
        return Ok(None);
    };
    let attempts = attempts_of(client, &[id])
        .await?
        .remove(&id)
        .unwrap_or_default();
    let conflicts = sql::query(
        client,
        "SELECT received_at, encode(stored_sha256, 'hex'), encode(offered_sha256, 'hex'),
                offered_payload, deliveries, last_delivery_at
           FROM event_conflicts WHERE webhook_event_id = $1 ORDER BY received_at, id",
        params![&id],
    )
    .await?
    .iter()
    .map(|r| Conflict {
        received_at: r.get(0),
        stored_fingerprint: r.get(1),
        offered_fingerprint: r.get(2),
        offered_payload: r.get(3),
        deliveries: r.get(4),
        last_delivery_at: r.get(5),
    })
    .collect();
    Ok(Some(EventDetail {
        summary: summary(&row),
        payload: row.get(17),
        payload_sha256: row.get(18),
        attempts,
        conflicts,
        conflicts_not_kept: row.get(19),
    }))
}

/// The attempts of several events, by event, in run order.
pub async fn attempts_of(
    client: &impl Session,
    ids: &[i64],
) -> Result<std::collections::HashMap<i64, Vec<Attempt>>, StoreError> {
    let mut by_event: std::collections::HashMap<i64, Vec<Attempt>> = Default::default();
    for r in sql::query(
        client,
        "SELECT a.webhook_event_id, a.attempt, a.started_at, a.finished_at,
                    extract(epoch FROM a.finished_at - a.started_at)::float8 * 1000, a.outcome,
                    a.error, COALESCE(a.handler, e.kind, ''), a.http_status, a.response
             FROM webhook_event_attempts a JOIN webhook_events e ON e.id = a.webhook_event_id
             WHERE a.webhook_event_id = ANY($1) ORDER BY a.webhook_event_id, a.attempt, a.id",
        params![&ids],
    )
    .await?
    {
        by_event.entry(r.get(0)).or_default().push(Attempt {
            attempt: r.get(1),
            started_at: r.get(2),
            finished_at: r.get(3),
            duration_ms: r.get(4),
            outcome: r.get(5),
            error: r.get(6),
            handler: r.get(7),
            http_status: r.get(8),
            response: r.get(9),
        });
    }
    Ok(by_event)
}

/// The payloads of events `ids` that still have one (purged ones have none).
pub async fn payloads_of(
    client: &impl Session,
    ids: &[i64],
) -> Result<std::collections::HashMap<i64, Value>, StoreError> {
    let rows = sql::query(
        client,
        "SELECT id, payload FROM webhook_events WHERE id = ANY($1) AND payload IS NOT NULL",
        params![&ids],
    )
    .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// The events about one payment, oldest first (at most `limit`).
pub async fn events_of_payment(
    client: &impl Session,
    source: &str,
    payment_id: &str,
    limit: i64,
) -> Result<Vec<EventSummary>, StoreError> {
    let rows = sql::query(
        client,
        &format!(
            "SELECT {SUMMARY_COLUMNS} FROM webhook_events
             WHERE payment_id = $2 AND source = $1
             ORDER BY received_at, id LIMIT $3"
        ),
        params![&source, &payment_id, &limit],
    )
    .await?;
    Ok(rows.iter().map(summary).collect())
}

/// When secret `position` of `source` last signed an event.
pub async fn secret_last_used(
    client: &impl Session,
    source: &str,
    position: i32,
) -> Result<Option<DateTime<Utc>>, StoreError> {
    Ok(sql::query_one(
        client,
        "SELECT max(received_at) FROM webhook_events WHERE source = $1 AND signed_with = $2",
        params![&source, &position],
    )
    .await?
    .get(0))
}

/// What a stored event's signature can be checked with again.
#[derive(Debug, Clone)]
pub struct SignedDelivery {
    pub source: String,
    pub received_at: DateTime<Utc>,
    /// `None` once purged (or for events stored before hookd kept them).
    pub kept: Option<KeptDelivery>,
    /// When its customer (or, in a kept request, a batch-mate's) was
    /// forgotten: what is kept is no longer what was signed.
    pub redacted_at: Option<DateTime<Utc>>,
    /// Recovered from the provider's API (`origin = 'api'`), not delivered.
    pub recovered: bool,
}

/// The body exactly as received, and the headers its signature depends on.
pub type KeptDelivery = (Vec<u8>, Vec<(String, String)>);

/// An event's source, time, and exact body and signature headers when they are
/// kept (the whole request, for an event whose request is kept once beside
/// it); `None` if there is no such event.
pub async fn signed_delivery(
    client: &impl Session,
    id: i64,
) -> Result<Option<SignedDelivery>, StoreError> {
    let Some(row) = sql::query_opt(
        client,
        "SELECT e.source, e.received_at,
                CASE WHEN e.request_id IS NULL THEN e.body ELSE r.body END,
                e.signature_headers, COALESCE(e.redacted_at, r.redacted_at),
                e.origin = 'api'
             FROM webhook_events e LEFT JOIN event_requests r ON r.id = e.request_id
             WHERE e.id = $1",
        params![&id],
    )
    .await?
    else {
        return Ok(None);
    };
    let body: Option<Vec<u8>> = row.get(2);
    let headers: Option<Value> = row.get(3);
    let headers = headers.map(|headers| {
        headers
            .as_object()
            .map(|map| {
                map.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default()
    });
    Ok(Some(SignedDelivery {
        source: row.get(0),
        received_at: row.get(1),
        kept: body.zip(headers),
        redacted_at: row.get(4),
        recovered: row.get(5),
    }))
}

/// Events received in a window, counted three ways.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Stats {
    pub total: i64,
    pub by_status: std::collections::BTreeMap<String, i64>,
    pub by_kind: std::collections::BTreeMap<String, i64>,
    pub by_source: std::collections::BTreeMap<String, i64>,
}
