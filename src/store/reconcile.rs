//! What `hookd reconcile` reads of the events table: which of the events a
//! provider lists are stored already, and with which fingerprints; and how
//! many events were recovered lately, for the dashboard.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::StoreError;
use super::sql::{self, Session, params};

/// A stored event's fingerprints: of the whole payload, and without the
/// source's `fingerprint_ignore` fields (`None` for rows older than those).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub payload_sha256: Vec<u8>,
    pub stable_sha256: Option<Vec<u8>>,
}

/// Of `event_ids`, those `source` holds, with their fingerprints.
pub async fn stored(
    client: &impl Session,
    source: &str,
    event_ids: &[&str],
) -> Result<HashMap<String, Stored>, StoreError> {
    if event_ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = sql::query(
        client,
        "SELECT event_id, payload_sha256, stable_sha256 FROM webhook_events
             WHERE source = $1 AND event_id = ANY($2::text[])",
        params![&source, &event_ids],
    )
    .await?;
    Ok(rows
        .iter()
        .map(|row| {
            let stored = Stored {
                payload_sha256: row.get(1),
                stable_sha256: row.get(2),
            };
            (row.get(0), stored)
        })
        .collect())
}

/// Events recovered from the providers' APIs since `since`, all sources.
pub async fn recovered_since(
    client: &impl Session,
    since: DateTime<Utc>,
) -> Result<i64, StoreError> {
    let row = sql::query_one(
        client,
        "SELECT count(*) FROM webhook_events WHERE received_at >= $1 AND origin = 'api'",
        params![&since],
    )
    .await?;
    Ok(row.get(0))
}
