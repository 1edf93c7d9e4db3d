//! The per-hour counts (sql/0017_hourly_rollups.sql): folding the changes the
//! triggers noted, adding refused signatures, and reading counts of whole hours.
//! Every read here touches rollup rows only, never the events.

use chrono::{DateTime, Utc};

use super::StoreError;
use super::history::Stats;
use super::sql::{self, Session, params};

/// Folds every change noted so far into the hourly and total counts, in one
/// statement (changes noted meanwhile wait for the next fold). Keys are upserted
/// in one order, so two folds at once never deadlock.
pub async fn fold(client: &impl Session) -> Result<(), StoreError> {
    sql::execute(
        client,
        "WITH moved AS (
                 DELETE FROM event_rollup_changes RETURNING hour, source, kind, status, events),
             hourly AS (
                 INSERT INTO event_rollups AS r (hour, source, kind, status, events)
                 SELECT hour, source, kind, status, sum(events)::bigint FROM moved
                 GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
                 ON CONFLICT (hour, source, kind, status)
                 DO UPDATE SET events = r.events + EXCLUDED.events)
         INSERT INTO event_status_totals AS t (status, events)
         SELECT status, sum(events)::bigint FROM moved GROUP BY 1 ORDER BY 1
         ON CONFLICT (status) DO UPDATE SET events = t.events + EXCLUDED.events",
        params![],
    )
    .await?;
    Ok(())
}

/// Counts every event again, from scratch, as the triggers would have: for a
/// history written with triggers off (a bulk load). Writers wait meanwhile.
pub async fn recount(client: &mut deadpool_postgres::Object) -> Result<(), StoreError> {
    let tx = super::begin(client).await?;
    tx.batch_execute(
        "LOCK TABLE webhook_events IN SHARE MODE;
         DELETE FROM event_rollup_changes;
         DELETE FROM event_rollups;
         DELETE FROM event_status_totals;
         INSERT INTO event_rollups (hour, source, kind, status, events)
             SELECT date_trunc('hour', received_at, 'UTC'), source, COALESCE(kind, 'none'),
                    status, count(*)
             FROM webhook_events GROUP BY 1, 2, 3, 4;
         INSERT INTO event_status_totals (status, events)
             SELECT status, count(*) FROM webhook_events GROUP BY 1;",
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Drops the hours whose events all left (purged, or moved by a status change)
/// and refused-signature counts received before `rejections_before`.
pub async fn prune(
    client: &impl Session,
    rejections_before: DateTime<Utc>,
) -> Result<(), StoreError> {
    sql::execute(
        client,
        "WITH empty AS (DELETE FROM event_rollups WHERE events = 0)
         DELETE FROM signature_rejections WHERE hour < $1",
        params![&rejections_before],
    )
    .await?;
    Ok(())
}

/// Adds refused signatures: `(hour, source, count)`.
pub async fn add_rejections(
    client: &impl Session,
    counts: &[(DateTime<Utc>, String, i64)],
) -> Result<(), StoreError> {
    let hours: Vec<DateTime<Utc>> = counts.iter().map(|c| c.0).collect();
    let sources: Vec<&str> = counts.iter().map(|c| c.1.as_str()).collect();
    let rejected: Vec<i64> = counts.iter().map(|c| c.2).collect();
    sql::execute(
        client,
        "INSERT INTO signature_rejections AS s (hour, source, rejected)
         SELECT * FROM unnest($1::timestamptz[], $2::text[], $3::bigint[]) ORDER BY 1, 2
         ON CONFLICT (hour, source) DO UPDATE SET rejected = s.rejected + EXCLUDED.rejected",
        params![&hours, &sources, &rejected],
    )
    .await?;
    Ok(())
}

/// Events received in the hours from `since_hour` on, counted three ways.
pub async fn stats(client: &impl Session, since_hour: DateTime<Utc>) -> Result<Stats, StoreError> {
    let mut stats = Stats::default();
    for row in sql::query(
        client,
        "SELECT status, kind, source, sum(events)::bigint FROM event_rollups
             WHERE hour >= $1 GROUP BY 1, 2, 3 HAVING sum(events) <> 0",
        params![&since_hour],
    )
    .await?
    {
        let count: i64 = row.get(3);
        stats.total += count;
        *stats.by_status.entry(row.get(0)).or_default() += count;
        *stats.by_kind.entry(row.get(1)).or_default() += count;
        *stats.by_source.entry(row.get(2)).or_default() += count;
    }
    Ok(stats)
}

/// Every event now in each of `statuses`, whenever received.
pub async fn totals(
    client: &impl Session,
    statuses: &[&str],
) -> Result<std::collections::BTreeMap<String, i64>, StoreError> {
    let rows = sql::query(
        client,
        "SELECT s, COALESCE((SELECT events FROM event_status_totals WHERE status = s), 0)
             FROM unnest($1::text[]) AS s",
        params![&statuses],
    )
    .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Events per hour and status from `since_hour` on: `(hour, status, events)`.
pub async fn hourly_by_status(
    client: &impl Session,
    since_hour: DateTime<Utc>,
) -> Result<Vec<(DateTime<Utc>, String, i64)>, StoreError> {
    let rows = sql::query(
        client,
        "SELECT hour, status, sum(events)::bigint FROM event_rollups
             WHERE hour >= $1 GROUP BY 1, 2",
        params![&since_hour],
    )
    .await?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect())
}

/// Refused signatures per hour from `since_hour` on, all sources together.
pub async fn hourly_rejections(
    client: &impl Session,
    since_hour: DateTime<Utc>,
) -> Result<Vec<(DateTime<Utc>, i64)>, StoreError> {
    let rows = sql::query(
        client,
        "SELECT hour, sum(rejected)::bigint FROM signature_rejections
             WHERE hour >= $1 GROUP BY 1",
        params![&since_hour],
    )
    .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}
