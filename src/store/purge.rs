//! Retention: batched removal of old payloads (leaving slim dedupe keys), of old
//! keys, and of expired admin Idempotency-Key records. Only finished events
//! (`processed`, `ignored`, `dead`) are touched — never `failed` ones, which still
//! hold work.
//!
//! Payloads are dropped by walking events in arrival order from a persisted
//! watermark; events passed while `failed` are listed in `hookd_purge_pending` and
//! dropped once they finish. The walk needs no index on "not yet purged", so the
//! UPDATE that drops a payload changes no indexed column and can be HOT.

use std::collections::BTreeMap;

use super::sql::{self, Session, params};
use chrono::{DateTime, Utc};

use super::StoreError;

/// The job lease of the purge pass: one instance purges at a time.
const PURGE_JOB: &str = "purge";

/// Rows removed, by event status.
pub type ByStatus = BTreeMap<String, u64>;

/// Takes (or, for its holder, extends) the purge lease for `term`; `false` if
/// another holder's lease has not run out.
pub async fn lease(
    client: &impl Session,
    holder: &[u8],
    term: std::time::Duration,
) -> Result<bool, StoreError> {
    lease_job(client, PURGE_JOB, holder, term).await
}

/// Ends `holder`'s purge lease, so the next pass need not wait for it to run out.
pub async fn release(client: &impl Session, holder: &[u8]) -> Result<(), StoreError> {
    sql::execute(
        client,
        "DELETE FROM hookd_job_leases WHERE job = $1 AND holder = $2",
        params![&PURGE_JOB, &holder],
    )
    .await?;
    Ok(())
}

/// Takes (or, for its holder, extends) the lease of `job` for `term`; `false`
/// if another holder's lease has not run out.
pub async fn lease_job(
    client: &impl Session,
    job: &str,
    holder: &[u8],
    term: std::time::Duration,
) -> Result<bool, StoreError> {
    let seconds = term.as_secs_f64();
    let row = sql::query_opt(
        client,
        "INSERT INTO hookd_job_leases AS l (job, holder, expires_at)
         VALUES ($1, $2, now() + make_interval(secs => $3))
         ON CONFLICT (job) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
             WHERE l.expires_at < now() OR l.holder = EXCLUDED.holder
         RETURNING 1",
        params![&job, &holder, &seconds],
    )
    .await?;
    Ok(row.is_some())
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
    client: &mut deadpool_postgres::Object,
    cutoff: DateTime<Utc>,
    limit: i64,
    by_status: &mut ByStatus,
) -> Result<u64, StoreError> {
    // A transaction of its own, so it runs under hookd's limits behind a pooler too.
    let tx = super::begin(client).await?;
    let rows = sql::query(
        &tx,
        "WITH batch AS (
                 SELECT id FROM webhook_events
                 WHERE status IN ('processed', 'ignored', 'dead') AND received_at < $1
                 ORDER BY received_at
                 LIMIT $2
                 FOR UPDATE SKIP LOCKED)
             DELETE FROM webhook_events e USING batch
             WHERE e.id = batch.id
             RETURNING e.status",
        params![&cutoff, &limit],
    )
    .await?;
    tx.commit().await?;
    Ok(tally(&rows, by_status))
}

const FINAL: &str = "('processed', 'ignored', 'dead')";

/// Walks up to `limit` events past the watermark received before `cutoff`, in one
/// transaction: drops the payload, attempts and last error of the finished ones,
/// lists the others as pending, and moves the watermark. Returns how many events
/// were walked (fewer than `limit`: the walk has reached `cutoff`).
pub async fn walk_payloads_batch(
    client: &mut deadpool_postgres::Object,
    cutoff: DateTime<Utc>,
    limit: i64,
    by_status: &mut ByStatus,
) -> Result<u64, StoreError> {
    let tx = super::begin(client).await?;
    let rows = sql::query(
        &tx,
        "SELECT e.id, e.received_at FROM webhook_events e
             WHERE (e.received_at, e.id) > (
                     SELECT COALESCE(max(w.received_at), '-infinity'), COALESCE(max(w.id), 0)
                     FROM hookd_purge_watermark w)
               AND e.received_at < $1
             ORDER BY e.received_at, e.id
             LIMIT $2",
        params![&cutoff, &limit],
    )
    .await?;
    let Some(last) = rows.last() else {
        return Ok(0);
    };
    let last: (DateTime<Utc>, i64) = (last.get(1), last.get(0));
    let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
    drop_payloads(&tx, &ids, by_status).await?;
    sql::execute(
        &tx,
        "INSERT INTO hookd_purge_pending (webhook_event_id)
             SELECT id FROM webhook_events WHERE id = ANY($1) AND payload IS NOT NULL
             ON CONFLICT DO NOTHING",
        params![&ids],
    )
    .await?;
    sql::execute(
        &tx,
        "INSERT INTO hookd_purge_watermark (received_at, id) VALUES ($1, $2)
             ON CONFLICT (singleton) DO UPDATE SET received_at = $1, id = $2",
        params![&last.0, &last.1],
    )
    .await?;
    tx.commit().await?;
    Ok(rows.len() as u64)
}

/// Drops the payloads of the listed events that are finished (the status is
/// checked again under the row lock), with their attempts and forwards' rows. Rows another
/// transaction holds are skipped (the walk lists them as pending, for a later
/// pass): a pass never waits on a delivery or a retry.
async fn drop_payloads(
    client: &impl Session,
    ids: &[i64],
    by_status: &mut ByStatus,
) -> Result<Vec<i64>, StoreError> {
    let rows = sql::query(
        client,
        &format!(
            "UPDATE webhook_events SET payload = NULL, body = NULL, signature_headers = NULL,
                 last_error = NULL, purged_at = now()
             WHERE id IN (SELECT id FROM webhook_events
                          WHERE id = ANY($1) AND status IN {FINAL} AND payload IS NOT NULL
                          FOR NO KEY UPDATE SKIP LOCKED)
             RETURNING status, id"
        ),
        params![&ids],
    )
    .await?;
    tally(&rows, by_status);
    let dropped: Vec<i64> = rows.iter().map(|r| r.get(1)).collect();
    sql::execute(
        client,
        "DELETE FROM webhook_event_attempts WHERE webhook_event_id = ANY($1)",
        params![&dropped],
    )
    .await?;
    // A finished event's forwards are all delivered or dead: their rows go too.
    sql::execute(
        client,
        "DELETE FROM event_forwards WHERE webhook_event_id = ANY($1)",
        params![&dropped],
    )
    .await?;
    Ok(dropped)
}

/// Drops the payloads of pending events that have finished since the walk passed
/// them, up to `limit`; returns how many pending entries were settled.
pub async fn settle_pending_batch(
    client: &mut deadpool_postgres::Object,
    limit: i64,
    by_status: &mut ByStatus,
) -> Result<u64, StoreError> {
    let tx = super::begin(client).await?;
    let ids: Vec<i64> = sql::query(
        &tx,
        &format!(
            "SELECT p.webhook_event_id FROM hookd_purge_pending p
             JOIN webhook_events e ON e.id = p.webhook_event_id
             WHERE e.status IN {FINAL} OR e.payload IS NULL
             LIMIT $1"
        ),
        params![&limit],
    )
    .await?
    .iter()
    .map(|r| r.get(0))
    .collect();
    drop_payloads(&tx, &ids, by_status).await?;
    let settled = sql::execute(
        &tx,
        "DELETE FROM hookd_purge_pending p USING webhook_events e
             WHERE p.webhook_event_id = ANY($1) AND e.id = p.webhook_event_id
               AND e.payload IS NULL",
        params![&ids],
    )
    .await?;
    tx.commit().await?;
    Ok(settled)
}

/// Drops, in one transaction, the bodies of up to `limit` requests kept once
/// beside their events (GoCardless's) received before `cutoff` none of whose
/// events holds its payload any more, and deletes up to `limit` such requests
/// no event points at (their keys are gone). Returns how many of each.
pub async fn drop_requests_batch(
    client: &mut deadpool_postgres::Object,
    cutoff: DateTime<Utc>,
    limit: i64,
) -> Result<(u64, u64), StoreError> {
    let tx = super::begin(client).await?;
    let dropped = sql::execute(
        &tx,
        "UPDATE event_requests SET body = NULL
             WHERE id IN (SELECT r.id FROM event_requests r
                          WHERE r.body IS NOT NULL AND r.received_at < $1
                            AND NOT EXISTS (SELECT 1 FROM webhook_events e
                                            WHERE e.request_id = r.id AND e.payload IS NOT NULL)
                          LIMIT $2 FOR UPDATE SKIP LOCKED)",
        params![&cutoff, &limit],
    )
    .await?;
    let deleted = sql::execute(
        &tx,
        "DELETE FROM event_requests
             WHERE id IN (SELECT r.id FROM event_requests r
                          WHERE r.body IS NULL
                            AND NOT EXISTS (SELECT 1 FROM webhook_events e
                                            WHERE e.request_id = r.id)
                          LIMIT $1 FOR UPDATE SKIP LOCKED)",
        params![&limit],
    )
    .await?;
    tx.commit().await?;
    Ok((dropped, deleted))
}

/// The small tables the purge empties of rows older than a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiring {
    /// Admin Idempotency-Key records, by when they were created.
    IdempotencyKeys,
    /// Revoked sessions, once the session would have expired anyway.
    RevokedSessions,
    /// Audit entries, by when they were made.
    AuditEntries,
    /// Conflicting items kept beside their event, by when they first came (they
    /// hold a payload, so they go with the payloads).
    Conflicts,
    /// The gateway's finished keys (completed or released), past their route's
    /// retention; `unknown` and running keys never expire.
    ApiIdempotencyKeys,
}

impl Expiring {
    /// Deletes up to `$2` rows older than `$1`, skipping rows others hold.
    fn delete_sql(self) -> &'static str {
        match self {
            Expiring::IdempotencyKeys => {
                "DELETE FROM admin_idempotency_keys
                 WHERE ctid IN (SELECT ctid FROM admin_idempotency_keys
                                WHERE created_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)"
            }
            Expiring::RevokedSessions => {
                "DELETE FROM admin_revoked_sessions
                 WHERE nonce IN (SELECT nonce FROM admin_revoked_sessions
                                 WHERE expires_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)"
            }
            Expiring::AuditEntries => {
                "DELETE FROM admin_audit
                 WHERE id IN (SELECT id FROM admin_audit WHERE at < $1
                              ORDER BY at LIMIT $2 FOR UPDATE SKIP LOCKED)"
            }
            Expiring::Conflicts => {
                "DELETE FROM event_conflicts
                 WHERE id IN (SELECT id FROM event_conflicts WHERE received_at < $1
                              ORDER BY received_at LIMIT $2 FOR UPDATE SKIP LOCKED)"
            }
            // Each expiry was set by the database's clock: never purged
            // before that clock says so, however far ahead hookd's runs.
            Expiring::ApiIdempotencyKeys => {
                "DELETE FROM api_idempotency_keys
                 WHERE id IN (SELECT id FROM api_idempotency_keys
                              WHERE state IN ('completed', 'released')
                                AND expires_at < LEAST($1, now())
                              LIMIT $2 FOR UPDATE SKIP LOCKED)"
            }
        }
    }
}

/// Deletes up to `limit` rows of `what` older than `before`; how many went.
pub async fn delete_expired_batch(
    client: &mut deadpool_postgres::Object,
    what: Expiring,
    before: DateTime<Utc>,
    limit: i64,
) -> Result<u64, StoreError> {
    // A transaction of its own, so it runs under hookd's limits behind a pooler too.
    let tx = super::begin(client).await?;
    let deleted = sql::execute(&tx, what.delete_sql(), params![&before, &limit]).await?;
    tx.commit().await?;
    Ok(deleted)
}

/// What a pass would remove, without removing it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preview {
    pub payloads: ByStatus,
    pub keys: ByStatus,
    pub idempotency_keys: u64,
    /// The gateway's finished keys past their route's retention.
    pub gateway_keys: u64,
}

pub async fn preview(
    client: &impl Session,
    payload_cutoff: DateTime<Utc>,
    key_cutoff: DateTime<Utc>,
    idempotency_cutoff: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<Preview, StoreError> {
    // Payloads: what the walk will meet past its watermark, and the pending events
    // that have finished; keys: everything finished before the key cut-off.
    let rows = sql::query(
        client,
        "WITH mark AS (
                 SELECT COALESCE(max(received_at), '-infinity') AS received_at,
                        COALESCE(max(id), 0) AS id
                 FROM hookd_purge_watermark),
             keys AS (
                 SELECT status, count(*) AS n FROM webhook_events
                 WHERE status IN ('processed', 'ignored', 'dead') AND received_at < $2
                 GROUP BY status),
             payloads AS (
                 SELECT status, count(*) AS n FROM webhook_events e
                 WHERE e.status IN ('processed', 'ignored', 'dead') AND e.payload IS NOT NULL
                   AND e.received_at >= $2 AND e.received_at < $1
                   AND ((e.received_at, e.id) > (SELECT received_at, id FROM mark)
                        OR e.id IN (SELECT webhook_event_id FROM hookd_purge_pending))
                 GROUP BY status)
             SELECT status, COALESCE(keys.n, 0), COALESCE(payloads.n, 0)
             FROM keys FULL JOIN payloads USING (status)",
        params![&payload_cutoff, &key_cutoff],
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
    let expired: i64 = sql::query_one(
        client,
        "SELECT count(*) FROM admin_idempotency_keys WHERE created_at < $1",
        params![&idempotency_cutoff],
    )
    .await?
    .get(0);
    preview.idempotency_keys = expired.unsigned_abs();
    let gateway: i64 = sql::query_one(
        client,
        "SELECT count(*) FROM api_idempotency_keys
         WHERE state IN ('completed', 'released') AND expires_at < LEAST($1, now())",
        params![&now],
    )
    .await?
    .get(0);
    preview.gateway_keys = gateway.unsigned_abs();
    Ok(preview)
}
