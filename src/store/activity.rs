//! `source_activity`: when each source last had a delivery accepted.

use chrono::{DateTime, Utc};

use super::StoreError;
use super::sql::{self, Session, params};

/// Records that these sources had deliveries accepted at these times (a later
/// time than the one stored wins; a source seen for the first time counts from
/// now when `seen_at` is `None`).
pub async fn record(
    client: &impl Session,
    seen: &[(&str, DateTime<Utc>)],
) -> Result<(), StoreError> {
    if seen.is_empty() {
        return Ok(());
    }
    let (sources, times): (Vec<&str>, Vec<DateTime<Utc>>) = seen.iter().copied().unzip();
    sql::execute(
        client,
        "INSERT INTO source_activity AS a (source, last_accepted_at)
             SELECT * FROM unnest($1::text[], $2::timestamptz[])
         ON CONFLICT (source) DO UPDATE
             SET last_accepted_at = GREATEST(a.last_accepted_at, EXCLUDED.last_accepted_at)",
        params![&sources, &times],
    )
    .await?;
    Ok(())
}

/// Starts watching these sources: one never seen counts as seen now.
pub async fn watch(client: &impl Session, sources: &[&str]) -> Result<(), StoreError> {
    sql::execute(
        client,
        "INSERT INTO source_activity (source, last_accepted_at)
             SELECT unnest($1::text[]), now()
         ON CONFLICT (source) DO NOTHING",
        params![&sources],
    )
    .await?;
    Ok(())
}

/// How long ago each source last had a delivery accepted, in seconds.
pub async fn silences(client: &impl Session) -> Result<Vec<(String, f64)>, StoreError> {
    let rows = sql::query(
        client,
        "SELECT source, EXTRACT(EPOCH FROM now() - last_accepted_at)::float8 FROM source_activity",
        params![],
    )
    .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}
