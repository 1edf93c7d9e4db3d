//! Admin `Idempotency-Key` records, scoped to the token's name: the first request
//! with a key claims it (committed at once, so a concurrent repeat sees it), then
//! stores its answer; repeats get that answer back. A claim carries a random id:
//! only its owner answers or releases it, and a claim abandoned by a crash is taken
//! over only by the same request (the stored request hash never changes).

use super::sql::{self, Session, params};

use super::StoreError;

/// A claim older than this with no answer belongs to a request that died.
const ABANDONED_AFTER: &str = "5 minutes";

/// How often a running request renews its claim, well within `ABANDONED_AFTER`,
/// so a long bulk retry is never taken for a dead one.
pub const RENEW_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// This request owns the key under this claim id: run it, then `complete`
    /// (or `release`) with the id.
    Fresh(Vec<u8>),
    /// The same request was answered before.
    Replay { status: u16, body: Vec<u8> },
    /// The first request with this key is still running.
    InProgress,
    /// The key was used for a different request.
    Mismatch,
}

pub async fn claim(
    client: &impl Session,
    token: &str,
    key: &str,
    request_sha256: &[u8],
) -> Result<Claim, StoreError> {
    let claim_id: [u8; 16] = rand::random();
    let claim = claim_id.as_slice();
    // Twice at most: the record can be purged between the two statements.
    for _ in 0..2 {
        let params = params![&token, &key, &request_sha256, &ABANDONED_AFTER, &claim,];
        if sql::query_opt(
            client,
            "INSERT INTO admin_idempotency_keys
                 (token_name, idempotency_key, request_sha256, claim_id)
             VALUES ($1, $2, $3, $5)
             ON CONFLICT (token_name, idempotency_key) DO UPDATE
                 SET claim_id = EXCLUDED.claim_id, created_at = now()
                 WHERE admin_idempotency_keys.response_status IS NULL
                   AND admin_idempotency_keys.created_at < now() - $4::text::interval
                   AND admin_idempotency_keys.request_sha256 = EXCLUDED.request_sha256
             RETURNING 1",
            params,
        )
        .await?
        .is_some()
        {
            return Ok(Claim::Fresh(claim_id.to_vec()));
        }
        let Some(row) = sql::query_opt(
            client,
            "SELECT request_sha256, response_status, response_body FROM admin_idempotency_keys
             WHERE token_name = $1 AND idempotency_key = $2",
            params![&token, &key],
        )
        .await?
        else {
            continue;
        };
        let stored: Vec<u8> = row.get(0);
        if stored != request_sha256 {
            return Ok(Claim::Mismatch);
        }
        let status: Option<i16> = row.get(1);
        return Ok(match status {
            Some(status) => Claim::Replay {
                status: u16::try_from(status).unwrap_or(500),
                body: row.get::<_, Option<Vec<u8>>>(2).unwrap_or_default(),
            },
            None => Claim::InProgress,
        });
    }
    Ok(Claim::InProgress)
}

/// Stores the answer, if `claim_id` still owns the key (a takeover may have won).
pub async fn complete(
    client: &impl Session,
    token: &str,
    key: &str,
    claim_id: &[u8],
    status: u16,
    body: &[u8],
) -> Result<(), StoreError> {
    let status = i16::try_from(status).unwrap_or(500);
    sql::execute(
        client,
        "UPDATE admin_idempotency_keys SET response_status = $3, response_body = $4
             WHERE token_name = $1 AND idempotency_key = $2 AND claim_id = $5
               AND response_status IS NULL",
        params![&token, &key, &status, &body, &claim_id],
    )
    .await?;
    Ok(())
}

/// Renews a running request's claim (see `RENEW_EVERY`).
pub async fn renew(
    client: &impl Session,
    token: &str,
    key: &str,
    claim_id: &[u8],
) -> Result<(), StoreError> {
    while_claimed(
        client,
        "UPDATE admin_idempotency_keys SET created_at = now()
         WHERE token_name = $1 AND idempotency_key = $2 AND claim_id = $3
           AND response_status IS NULL",
        [token, key],
        claim_id,
    )
    .await
}

/// Gives the key up (the request failed in a way worth retrying).
pub async fn release(
    client: &impl Session,
    token: &str,
    key: &str,
    claim_id: &[u8],
) -> Result<(), StoreError> {
    while_claimed(
        client,
        "DELETE FROM admin_idempotency_keys
         WHERE token_name = $1 AND idempotency_key = $2 AND claim_id = $3
           AND response_status IS NULL",
        [token, key],
        claim_id,
    )
    .await
}

/// Runs `sql` on the key (`$1` token, `$2` key) while `$3` is still its
/// unanswered claim.
async fn while_claimed(
    client: &impl Session,
    sql: &str,
    [token, key]: [&str; 2],
    claim_id: &[u8],
) -> Result<(), StoreError> {
    sql::execute(client, sql, params![&token, &key, &claim_id]).await?;
    Ok(())
}
