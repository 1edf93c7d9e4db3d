//! Forward-only migrations from `sql/`, applied in order under an advisory lock so
//! any number of instances can start at once. A migration that changed after it was
//! applied is refused rather than silently skipped.

use deadpool_postgres::Pool;
use sha2::{Digest, Sha256};

use super::StoreError;

pub struct Migration {
    pub version: i32,
    pub name: &'static str,
    pub sql: &'static str,
}

pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_events.sql",
        sql: include_str!("../../sql/0001_events.sql"),
    },
    Migration {
        version: 2,
        name: "0002_purge.sql",
        sql: include_str!("../../sql/0002_purge.sql"),
    },
    Migration {
        version: 3,
        name: "0003_history.sql",
        sql: include_str!("../../sql/0003_history.sql"),
    },
    Migration {
        version: 4,
        name: "0004_purge_watermark.sql",
        sql: include_str!("../../sql/0004_purge_watermark.sql"),
    },
    Migration {
        version: 5,
        name: "0005_admin_sessions.sql",
        sql: include_str!("../../sql/0005_admin_sessions.sql"),
    },
    Migration {
        version: 6,
        name: "0006_exact_bodies.sql",
        sql: include_str!("../../sql/0006_exact_bodies.sql"),
    },
    Migration {
        version: 7,
        name: "0007_stable_fingerprint.sql",
        sql: include_str!("../../sql/0007_stable_fingerprint.sql"),
    },
    Migration {
        version: 8,
        name: "0008_handler_ledger.sql",
        sql: include_str!("../../sql/0008_handler_ledger.sql"),
    },
];

/// Arbitrary, fixed: "hookd" in ASCII, so it won't collide with an application's lock.
const MIGRATION_LOCK: i64 = 0x0068_6f6f_6b64;

/// Applies pending migrations; returns how many were applied.
pub async fn migrate(pool: &Pool) -> Result<usize, StoreError> {
    let mut client = pool.get().await?;
    // Waiting for another instance's migration, or building an index on a big
    // table, may outlast the pool's statement timeout.
    client.batch_execute("SET statement_timeout = 0").await?;
    // Everything, the bookkeeping table included, happens under the lock: even
    // `CREATE TABLE IF NOT EXISTS` races with itself.
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    let result = apply_pending(&mut client).await;
    let unlock = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await;
    let reset = client.batch_execute(&super::session_limits()).await;
    let applied = result?;
    unlock?;
    reset?;
    Ok(applied)
}

async fn apply_pending(client: &mut deadpool_postgres::Object) -> Result<usize, StoreError> {
    // Event bodies are Unicode text: another server encoding would refuse some.
    let encoding: String = client
        .query_one("SELECT current_setting('server_encoding')", &[])
        .await?
        .get(0);
    if encoding != "UTF8" {
        return Err(StoreError::Schema(format!(
            "the database's encoding is {encoding}; hookd needs UTF8 (CREATE DATABASE … ENCODING 'UTF8')"
        )));
    }
    // Checked first rather than `IF NOT EXISTS`, which logs a notice at every start.
    let exists: bool = client
        .query_one(
            "SELECT to_regclass('hookd_schema_migrations') IS NOT NULL",
            &[],
        )
        .await?
        .get(0);
    if !exists {
        client
            .batch_execute(
                "CREATE TABLE hookd_schema_migrations (
                version    integer PRIMARY KEY,
                name       text NOT NULL,
                sha256     bytea NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now())",
            )
            .await?;
    }
    let rows = client
        .query("SELECT version, sha256 FROM hookd_schema_migrations", &[])
        .await?;
    let applied: Vec<(i32, Vec<u8>)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let mut count = 0;
    for migration in MIGRATIONS {
        let digest = Sha256::digest(migration.sql.as_bytes()).to_vec();
        if let Some((_, existing)) = applied.iter().find(|(v, _)| *v == migration.version) {
            if *existing != digest {
                return Err(StoreError::Schema(format!(
                    "migration {} was changed after it was applied",
                    migration.name
                )));
            }
            continue;
        }
        let tx = client.transaction().await?;
        tx.batch_execute(migration.sql).await?;
        tx.execute(
            "INSERT INTO hookd_schema_migrations (version, name, sha256) VALUES ($1, $2, $3)",
            &[&migration.version, &migration.name, &digest],
        )
        .await?;
        tx.commit().await?;
        log::info!("applied migration {}", migration.name);
        count += 1;
    }
    if let Some(newest) = applied.iter().map(|(v, _)| *v).max() {
        let known = MIGRATIONS.last().map_or(0, |m| m.version);
        if newest > known {
            log::warn!(
                "the database has migration {newest}, newer than this hookd knows ({known})"
            );
        }
    }
    Ok(count)
}
