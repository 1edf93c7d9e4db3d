//! The `bound_signatures` table: a signature that covers only a checksum of the
//! body (PayPal's CRC32) is bound to the first body it was accepted with.

use chrono::{DateTime, Utc};

use super::StoreError;
use super::sql::{self, Session, params};

/// Binds `signature` (its SHA-256) to `body` (its SHA-256) for `source`, unless
/// it is bound already; whether it is bound to this body. One statement: a
/// concurrent claim of the same signature waits for this one and then sees it.
/// Claims of the source older than `expired_before` are dropped on the way.
pub async fn claim(
    client: &impl Session,
    source: &str,
    signature_sha256: &[u8],
    body_sha256: &[u8],
    event_id: &str,
    expired_before: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let row = sql::query_one(
        client,
        "WITH expired AS (
             DELETE FROM bound_signatures
             WHERE source = $1 AND accepted_at < $5 AND signature_sha256 <> $2)
         INSERT INTO bound_signatures AS b (source, signature_sha256, body_sha256, event_id)
         VALUES ($1, $2, $3, $4)
         ON CONFLICT (source, signature_sha256) DO UPDATE SET source = b.source
         RETURNING b.body_sha256 = $3",
        params![
            &source,
            &signature_sha256,
            &body_sha256,
            &event_id,
            &expired_before
        ],
    )
    .await?;
    Ok(row.get(0))
}
