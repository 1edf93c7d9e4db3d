//! What the admin sessions need from the database: the server secret that keys
//! session cookies (made once, shared by every instance), and the sessions ended
//! by signing out before they expired.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;

use super::StoreError;

/// The server secret, created with `candidate` if there is none yet.
pub async fn server_secret(
    client: &impl GenericClient,
    candidate: &[u8; 32],
) -> Result<Vec<u8>, StoreError> {
    let statement = client
        .prepare_cached(
            "WITH made AS (
                 INSERT INTO hookd_server_secret (secret) VALUES ($1)
                 ON CONFLICT (singleton) DO NOTHING
                 RETURNING secret)
             SELECT secret FROM made
             UNION ALL
             SELECT secret FROM hookd_server_secret
             LIMIT 1",
        )
        .await?;
    let row = client
        .query_opt(&statement, &[&candidate.as_slice()])
        .await?;
    match row {
        Some(row) => Ok(row.get(0)),
        // Lost a race with another instance's first start: its row is there now.
        None => Ok(client
            .query_one("SELECT secret FROM hookd_server_secret", &[])
            .await?
            .get(0)),
    }
}

pub async fn revoke(
    client: &impl GenericClient,
    nonce: &str,
    expires_at: DateTime<Utc>,
) -> Result<(), StoreError> {
    let statement = client
        .prepare_cached(
            "INSERT INTO admin_revoked_sessions (nonce, expires_at) VALUES ($1, $2)
             ON CONFLICT (nonce) DO NOTHING",
        )
        .await?;
    client.execute(&statement, &[&nonce, &expires_at]).await?;
    Ok(())
}

pub async fn is_revoked(client: &impl GenericClient, nonce: &str) -> Result<bool, StoreError> {
    let statement = client
        .prepare_cached("SELECT 1 FROM admin_revoked_sessions WHERE nonce = $1")
        .await?;
    Ok(client.query_opt(&statement, &[&nonce]).await?.is_some())
}
