//! What the admin sessions need from the database: the server secret that keys
//! session cookies (made once, shared by every instance), and the sessions ended
//! by signing out before they expired.

use super::sql::{self, Session, params};
use chrono::{DateTime, Utc};

use super::StoreError;

/// The server secret, created with `candidate` if there is none yet.
pub async fn server_secret(
    client: &impl Session,
    candidate: &[u8; 32],
) -> Result<Vec<u8>, StoreError> {
    let row = sql::query_opt(
        client,
        "WITH made AS (
                 INSERT INTO hookd_server_secret (secret) VALUES ($1)
                 ON CONFLICT (singleton) DO NOTHING
                 RETURNING secret)
             SELECT secret FROM made
             UNION ALL
             SELECT secret FROM hookd_server_secret
             LIMIT 1",
        params![&candidate.as_slice()],
    )
    .await?;
    match row {
        Some(row) => Ok(row.get(0)),
        // Lost a race with another instance's first start: its row is there now.
        None => Ok(
            sql::query_one(client, "SELECT secret FROM hookd_server_secret", params![])
                .await?
                .get(0),
        ),
    }
}

pub async fn revoke(
    client: &impl Session,
    nonce: &str,
    expires_at: DateTime<Utc>,
) -> Result<(), StoreError> {
    sql::execute(
        client,
        "INSERT INTO admin_revoked_sessions (nonce, expires_at) VALUES ($1, $2)
             ON CONFLICT (nonce) DO NOTHING",
        params![&nonce, &expires_at],
    )
    .await?;
    Ok(())
}

pub async fn is_revoked(client: &impl Session, nonce: &str) -> Result<bool, StoreError> {
    Ok(sql::query_opt(
        client,
        "SELECT 1 FROM admin_revoked_sessions WHERE nonce = $1",
        params![&nonce],
    )
    .await?
    .is_some())
}
