//! Forward-only migrations from `sql/`, applied in order under an advisory lock so
//! any number of instances can start at once. A migration that changed after it was
//! applied is refused rather than silently skipped. A team embedding hookd adds its
//! own list, applied after hookd's under the same lock and checks, and recorded in
//! a table of its own (`hookd_app_migrations`), so the two numberings never meet.

use deadpool_postgres::Pool;
use sha2::{Digest, Sha256};

use super::StoreError;
use super::sql::{self, params};

/// One forward-only migration: a version (increasing), a name for messages, and
/// its SQL (usually `include_str!` of a file in `sql/`).
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    pub version: i32,
    pub name: &'static str,
    pub sql: &'static str,
}

/// Whose migrations a list is, and where they are recorded.
#[derive(Debug, Clone, Copy)]
struct Ledger {
    table: &'static str,
    whose: &'static str,
}

const HOOKD: Ledger = Ledger {
    table: "hookd_schema_migrations",
    whose: "hookd",
};
const APPLICATION: Ledger = Ledger {
    table: "hookd_app_migrations",
    whose: "the application",
};

/// A migration of `sql/`, by its file name: the version is its number.
macro_rules! migration {
    ($version:literal, $file:literal) => {
        Migration {
            version: $version,
            name: $file,
            sql: include_str!(concat!("../../sql/", $file)),
        }
    };
}

/// Every file of `sql/`, in order (a test checks that none is left out).
pub const MIGRATIONS: &[Migration] = &[
    migration!(1, "0001_events.sql"),
    migration!(2, "0002_purge.sql"),
    migration!(3, "0003_history.sql"),
    migration!(4, "0004_purge_watermark.sql"),
    migration!(5, "0005_admin_sessions.sql"),
    migration!(6, "0006_exact_bodies.sql"),
    migration!(7, "0007_stable_fingerprint.sql"),
    migration!(8, "0008_handler_ledger.sql"),
    migration!(9, "0009_lz4_payloads.sql"),
    migration!(10, "0010_support_desk.sql"),
    migration!(11, "0011_body_dedupe.sql"),
    migration!(12, "0012_forward_lease.sql"),
    migration!(13, "0013_event_conflicts.sql"),
    migration!(14, "0014_refunds.sql"),
    migration!(15, "0015_conflict_counts.sql"),
    migration!(16, "0016_job_leases.sql"),
    migration!(17, "0017_hourly_rollups.sql"),
    migration!(18, "0018_forgotten_customers.sql"),
    migration!(19, "0019_forward_lanes.sql"),
    migration!(20, "0020_bound_signatures.sql"),
    migration!(21, "0021_forward_states.sql"),
    migration!(22, "0022_source_activity.sql"),
    migration!(23, "0023_conflicts_kept.sql"),
    migration!(24, "0024_event_requests.sql"),
    migration!(25, "0025_api_idempotency_keys.sql"),
    migration!(26, "0026_event_origin.sql"),
];

/// Arbitrary, fixed: "hookd" in ASCII, so it won't collide with an application's lock.
const MIGRATION_LOCK: i64 = 0x0068_6f6f_6b64;

/// Applies hookd's pending migrations; returns how many were applied.
pub async fn migrate(pool: &Pool) -> Result<usize, StoreError> {
    migrate_with(pool, &[]).await
}

/// Applies hookd's pending migrations, then the application's; returns how many
/// were applied in all.
///
/// Each migration is a transaction of its own that first takes the migration
/// lock for that transaction only, then reads the ledger: no session state, so
/// a transaction-mode pooler may hand each transaction to another server
/// connection. (A session-level lock of an older hookd on the same key still
/// excludes it.)
pub async fn migrate_with(pool: &Pool, application: &[Migration]) -> Result<usize, StoreError> {
    let mut client = pool.get().await?;
    check_encoding(&client).await?;
    let mut applied = apply_pending(&mut client, HOOKD, MIGRATIONS).await?;
    if !application.is_empty() {
        applied += apply_pending(&mut client, APPLICATION, application).await?;
    }
    Ok(applied)
}

/// Event bodies are Unicode text: another server encoding would refuse some.
async fn check_encoding(client: &deadpool_postgres::Object) -> Result<(), StoreError> {
    let encoding: String = sql::query_one(
        client,
        "SELECT current_setting('server_encoding')",
        params![],
    )
    .await?
    .get(0);
    if encoding != "UTF8" {
        return Err(StoreError::Schema(format!(
            "the database's encoding is {encoding}; hookd needs UTF8 (CREATE DATABASE … ENCODING 'UTF8')"
        )));
    }
    Ok(())
}

/// How long a migration waits for a table's lock before it lets go and tries
/// again: a lock request queued behind a long reader (a `pg_dump`, a report)
/// would hold every delivery's statement behind it for as long.
const LOCK_WAIT: &str = "SET LOCAL lock_timeout = '3s'";
/// Tries at one migration before it gives up (about two minutes in all).
const LOCK_TRIES: u32 = 24;
/// The pause between two tries, while deliveries run.
const LOCK_PAUSE: std::time::Duration = std::time::Duration::from_secs(2);

/// Applies `migrations` one transaction at a time, until none is pending.
async fn apply_pending(
    client: &mut deadpool_postgres::Object,
    ledger: Ledger,
    migrations: &[Migration],
) -> Result<usize, StoreError> {
    let mut count = 0;
    let mut tries = 0;
    loop {
        let tx = client.transaction().await?;
        // Waiting for another instance's migration, or building an index on a
        // big table, may outlast hookd's statement timeout.
        tx.batch_execute("SET LOCAL statement_timeout = 0").await?;
        // Everything, the ledger's creation included, happens under the lock:
        // even `CREATE TABLE IF NOT EXISTS` races with itself.
        sql::execute(
            &tx,
            "SELECT pg_advisory_xact_lock($1)",
            params![&MIGRATION_LOCK],
        )
        .await?;
        let applied = read_ledger(&tx, ledger).await?;
        let Some((migration, digest)) = next_pending(ledger, migrations, &applied)? else {
            tx.commit().await?;
            warn_if_newer(ledger, migrations, &applied);
            return Ok(count);
        };
        // Only the migration's own statements give up on a lock (the
        // advisory one above waits for another instance's migration).
        tx.batch_execute(LOCK_WAIT).await?;
        if let Err(error) = tx.batch_execute(migration.sql).await {
            if error.code() != Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE) {
                return Err(needs_owner(error, ledger.whose, migration.name));
            }
            tx.rollback().await?;
            tries += 1;
            if tries >= LOCK_TRIES {
                return Err(StoreError::Schema(format!(
                    "{} migration {}: a table it changes stayed locked by another session \
                     (a long query, a dump) for {LOCK_TRIES} tries; run it again once that ends",
                    ledger.whose, migration.name
                )));
            }
            log::warn!(
                "{} migration {}: a table it changes is locked by another session (a long \
                 query, a dump); trying again in {} ({tries} of {LOCK_TRIES})",
                ledger.whose,
                migration.name,
                crate::duration::format(LOCK_PAUSE)
            );
            tokio::time::sleep(LOCK_PAUSE).await;
            continue;
        }
        tries = 0;
        // The table names are hookd's own constants, never input.
        sql::execute(
            &tx,
            &format!(
                "INSERT INTO {} (version, name, sha256) VALUES ($1, $2, $3)",
                ledger.table
            ),
            params![&migration.version, &migration.name, &digest],
        )
        .await?;
        tx.commit().await?;
        log::info!("applied {} migration {}", ledger.whose, migration.name);
        count += 1;
    }
}

/// A change to the schema refused for want of privileges says who may make it:
/// serving needs only rows, changing the schema needs the role that owns it.
fn needs_owner(error: tokio_postgres::Error, whose: &str, what: &str) -> StoreError {
    if error.code() != Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) {
        return error.into();
    }
    StoreError::Schema(format!(
        "{whose} migration {what}: {}; changing the schema needs the role that owns it \
         (run `hookd migrate` with that role's DATABASE_URL, then serve with this one)",
        super::describe(&error)
    ))
}

/// The versions `ledger` records and their SQL's digests; creates its table
/// when missing.
async fn read_ledger(
    tx: &deadpool_postgres::Transaction<'_>,
    ledger: Ledger,
) -> Result<Vec<(i32, Vec<u8>)>, StoreError> {
    let table = ledger.table;
    // Checked first rather than `IF NOT EXISTS`, which logs a notice at every start.
    if !super::table_in_search_path(tx, table).await? {
        tx.batch_execute(&format!(
            "CREATE TABLE {table} (
                version    integer PRIMARY KEY,
                name       text NOT NULL,
                sha256     bytea NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now())"
        ))
        .await
        .map_err(|e| needs_owner(e, ledger.whose, &format!("ledger {table}")))?;
    }
    let rows = sql::query(
        tx,
        &format!("SELECT version, sha256 FROM {table}"),
        params![],
    )
    .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// The first migration not yet applied, and its digest; refuses one that
/// changed after it was applied.
fn next_pending<'m>(
    ledger: Ledger,
    migrations: &'m [Migration],
    applied: &[(i32, Vec<u8>)],
) -> Result<Option<(&'m Migration, Vec<u8>)>, StoreError> {
    for migration in migrations {
        let digest = Sha256::digest(migration.sql.as_bytes()).to_vec();
        match applied.iter().find(|(v, _)| *v == migration.version) {
            Some((_, existing)) if *existing != digest => {
                return Err(StoreError::Schema(format!(
                    "{} migration {} was changed after it was applied",
                    ledger.whose, migration.name
                )));
            }
            Some(_) => {}
            None => return Ok(Some((migration, digest))),
        }
    }
    Ok(None)
}

fn warn_if_newer(ledger: Ledger, migrations: &[Migration], applied: &[(i32, Vec<u8>)]) {
    if let Some(newest) = applied.iter().map(|(v, _)| *v).max() {
        let known = migrations.last().map_or(0, |m| m.version);
        if newest > known {
            log::warn!(
                "the database has {} migration {newest}, newer than this build knows ({known})",
                ledger.whose
            );
        }
    }
}
