//! The audit trail: who (a token's name) viewed which event or payment payload,
//! and who retried what. Kept as long as the event records (`retention`). An
//! action is written when it begins — a retry in its own transaction, a bulk
//! retry before its first event runs — and completed with its outcome.

use super::sql::{self, Session, params};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::StoreError;

/// One thing someone did.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AuditEntry {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub who: String,
    pub action: String,
    pub webhook_event_id: Option<i64>,
    pub source: Option<String>,
    pub payment_id: Option<String>,
    pub detail: Option<Value>,
}

/// What is recorded: an action and what it concerned.
#[derive(Debug, Clone, Default)]
pub struct Record<'a> {
    pub who: &'a str,
    pub action: &'a str,
    pub webhook_event_id: Option<i64>,
    pub source: Option<&'a str>,
    pub payment_id: Option<&'a str>,
    pub detail: Option<Value>,
}

/// Writes an entry; returns its id.
pub async fn record(client: &impl Session, entry: &Record<'_>) -> Result<i64, StoreError> {
    let row = sql::query_one(
        client,
        "INSERT INTO admin_audit (who, action, webhook_event_id, source, payment_id, detail)
             VALUES ($1, $2, $3, $4, $5, $6)
             RETURNING id",
        params![
            &entry.who,
            &entry.action,
            &entry.webhook_event_id,
            &entry.source,
            &entry.payment_id,
            &entry.detail,
        ],
    )
    .await?;
    Ok(row.get(0))
}

/// Adds what became known once the action ended (its outcome, its counts) to the
/// detail of entry `id`, which was written when the action began.
pub async fn complete(client: &impl Session, id: i64, ended: &Value) -> Result<(), StoreError> {
    sql::execute(
        client,
        "UPDATE admin_audit SET detail = COALESCE(detail, '{}'::jsonb) || $2 WHERE id = $1",
        params![&id, ended],
    )
    .await?;
    Ok(())
}

/// Entries newest first, at most `limit`, after `(at, id)` of the previous page.
pub async fn list(
    client: &impl Session,
    limit: i64,
    after: Option<(DateTime<Utc>, i64)>,
) -> Result<Vec<AuditEntry>, StoreError> {
    let (at, id) = match after {
        Some((at, id)) => (Some(at), Some(id)),
        None => (None, None),
    };
    let rows = sql::query(
        client,
        "SELECT id, at, who, action, webhook_event_id, source, payment_id, detail
             FROM admin_audit
             WHERE $2::timestamptz IS NULL OR (at, id) < ($2, $3::bigint)
             ORDER BY at DESC, id DESC LIMIT $1",
        params![&limit, &at, &id],
    )
    .await?;
    Ok(rows
        .iter()
        .map(|r| AuditEntry {
            id: r.get(0),
            at: r.get(1),
            who: r.get(2),
            action: r.get(3),
            webhook_event_id: r.get(4),
            source: r.get(5),
            payment_id: r.get(6),
            detail: r.get(7),
        })
        .collect())
}
