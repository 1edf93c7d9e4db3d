//! Retention: batched removal of old payloads (leaving slim dedupe keys), of old
//! keys, and of expired admin Idempotency-Key records. Only finished events
//! (`processed`, `ignored`, `dead`) are touched — never `failed` ones, which still
//! hold work — and rows another transaction holds are skipped, not waited for.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;

use super::StoreError;

/// Arbitrary, fixed: one instance purges at a time.
const PURGE_LOCK: i64 = 0x0068_6f6f_6b70;

/// Rows removed, by event status.
pub type ByStatus = BTreeMap<String, u64>;

/// Takes the purge lock for this session; `false` if another session holds it.
pub async fn try_lock(client: &impl GenericClient) -> Result<bool, StoreError> {
    let row = client
        .query_one("SELECT pg_try_advisory_lock($1)", &[&PURGE_LOCK])
        .await?;
    Ok(row.get(0))
}

pub async fn unlock(client: &impl GenericClient) -> Result<(), StoreError> {
    client
        .execute("SELECT pg_advisory_unlock($1)", &[&PURGE_LOCK])
        .await?;
    Ok(())
}

fn tally(rows: &[tokio_postgres::Row], into: &mut ByStatus) -> u64 {
    for row in rows {
        *into.entry(row.get(0)).or_default() += 1;
    }
    rows.len() as u64
}

/// Deletes up to `limit` finished events received before `cutoff` (their attempts
/// go with them). Returns how many, counted into `by_status`.
pub async fn delete_keys_batch(
    client: &impl GenericClient,
    cutoff: DateTime<Utc>,
    limit: i64,
    by_status: &mut ByStatus,
) -> Result<u64, StoreError> {
    let statement = client
        .prepare_cached(
            "WITH batch AS (
                 SELECT id FROM webhook_events
                 WHERE status IN ('processed', 'ignored', 'dead') AND received_at < $1
                 ORDER BY received_at
                 LIMIT $2
                 FOR UPDATE SKIP LOCKED)
             DELETE FROM webhook_events e USING batch
             WHERE e.id = batch.id
             RETURNING e.status",
        )
        .await?;
    let rows = client.query(&statement, &[&cutoff, &limit]).await?;
    Ok(tally(&rows, by_status))
}

/// Drops the payload, attempts and last error of up to `limit` finished events
/// received before `cutoff`, keeping the slim key that answers resends.
pub async fn drop_payloads_batch(
    client: &impl GenericClient,
    cutoff: DateTime<Utc>,
    limit: i64,
    by_status: &mut ByStatus,
) -> Result<u64, StoreError> {
    let statement = client
        .prepare_cached(
            "WITH batch AS (
                 SELECT id FROM webhook_events
                 WHERE purged_at IS NULL AND status IN ('processed', 'ignored', 'dead')
                   AND received_at < $1
                 ORDER BY received_at
                 LIMIT $2
                 FOR UPDATE SKIP LOCKED),
             attempts AS (
                 DELETE FROM webhook_event_attempts a USING batch
                 WHERE a.webhook_event_id = batch.id)
             UPDATE webhook_events e
             SET payload = NULL, last_error = NULL, purged_at = now()
             FROM batch
             WHERE e.id = batch.id
             RETURNING e.status",
        )
        .await?;
    let rows = client.query(&statement, &[&cutoff, &limit]).await?;
    Ok(tally(&rows, by_status))
}

/// Deletes up to `limit` admin Idempotency-Key records created before `cutoff`.
pub async fn delete_idempotency_keys_batch(
    client: &impl GenericClient,
    cutoff: DateTime<Utc>,
    limit: i64,
) -> Result<u64, StoreError> {
    let statement = client
        .prepare_cached(
            "DELETE FROM admin_idempotency_keys
             WHERE ctid IN (SELECT ctid FROM admin_idempotency_keys
                            WHERE created_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)",
        )
        .await?;
    Ok(client.execute(&statement, &[&cutoff, &limit]).await?)
}

/// What a pass would remove, without removing it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preview {
    pub payloads: ByStatus,
    pub keys: ByStatus,
    pub idempotency_keys: u64,
}

pub async fn preview(
    client: &impl GenericClient,
    payload_cutoff: DateTime<Utc>,
    key_cutoff: DateTime<Utc>,
    idempotency_cutoff: DateTime<Utc>,
) -> Result<Preview, StoreError> {
    let rows = client
        .query(
            "SELECT status,
                    count(*) FILTER (WHERE received_at < $2),
                    count(*) FILTER (WHERE received_at >= $2 AND purged_at IS NULL)
             FROM webhook_events
             WHERE status IN ('processed', 'ignored', 'dead') AND received_at < $1
             GROUP BY status",
            &[&payload_cutoff, &key_cutoff],
        )
        .await?;
    let mut preview = Preview::default();
    for row in rows {
        let status: String = row.get(0);
        let (keys, payloads): (i64, i64) = (row.get(1), row.get(2));
        if keys > 0 {
            preview.keys.insert(status.clone(), keys.unsigned_abs());
        }
        if payloads > 0 {
            preview.payloads.insert(status, payloads.unsigned_abs());
        }
    }
    let expired: i64 = client
        .query_one(
            "SELECT count(*) FROM admin_idempotency_keys WHERE created_at < $1",
            &[&idempotency_cutoff],
        )
        .await?
        .get(0);
    preview.idempotency_keys = expired.unsigned_abs();
    Ok(preview)
}
