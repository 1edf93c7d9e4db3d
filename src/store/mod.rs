//! Everything hookd says to PostgreSQL. Queries are parameterised and prepared once
//! per connection (`prepare_cached`); the schema lives in `sql/` migrations.

pub mod audit;
pub mod events;
pub mod history;
pub mod idempotency;
mod migrate;
pub mod payments;
pub mod purge;
pub mod sessions;
pub mod tls;

use std::time::Duration;

use deadpool_postgres::{GenericClient, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;
use tokio_postgres::error::SqlState;

pub use migrate::{MIGRATIONS, Migration, migrate, migrate_with};
pub use tls::DbConnector;

/// How long a request waits for a connection before the database counts as unavailable.
const POOL_WAIT: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
pub const DEFAULT_POOL_SIZE: usize = 16;
/// PostgreSQL cancels any statement of hookd's that runs longer than this, and
/// ends a session left idle inside a transaction, so nothing stuck holds locks or
/// connections for long. Migrations lift the limit on their own session.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);
const IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached right now; callers answer 503 and retry later.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    #[error("database error: {}", describe(.0))]
    Query(#[source] tokio_postgres::Error),
    #[error("database schema: {0}")]
    Schema(String),
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(error: tokio_postgres::Error) -> Self {
        if is_transient(&error) {
            StoreError::Unavailable(tls::explain(&error))
        } else {
            StoreError::Query(error)
        }
    }
}

impl From<deadpool_postgres::PoolError> for StoreError {
    fn from(error: deadpool_postgres::PoolError) -> Self {
        match error {
            deadpool_postgres::PoolError::Backend(e) => e.into(),
            other => StoreError::Unavailable(other.to_string()),
        }
    }
}

/// The server's message and SQLSTATE when there is one ("db error" alone says little).
fn describe(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => tls::explain(error),
    }
}

/// Connection loss, shutdown, overload and serialization failures: worth retrying.
fn is_transient(error: &tokio_postgres::Error) -> bool {
    if error.is_closed() {
        return true;
    }
    match error.code() {
        Some(code) => {
            let class = &code.code()[..2];
            matches!(class, "08" | "53" | "57" | "40" | "58")
                || *code == SqlState::ADMIN_SHUTDOWN
                || *code == SqlState::CANNOT_CONNECT_NOW
        }
        // No SQLSTATE: transient only if the connection itself failed.
        None => {
            let source = std::error::Error::source(error);
            source.is_some_and(|s| s.is::<std::io::Error>())
                || error.to_string().contains("timeout")
        }
    }
}

pub fn pool(mut config: tokio_postgres::Config, tls: DbConnector, max_size: usize) -> Pool {
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    config.application_name("hookd");
    let manager = tls.manager(
        config,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(max_size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(POOL_WAIT))
        .create_timeout(Some(CONNECT_TIMEOUT))
        .recycle_timeout(Some(CONNECT_TIMEOUT))
        // Set on each new session rather than as startup options, which poolers
        // such as pgbouncer refuse.
        .post_create(deadpool_postgres::Hook::async_fn(|client, _| {
            Box::pin(async move {
                client
                    .batch_execute(&session_limits())
                    .await
                    .map_err(deadpool_postgres::HookError::Backend)
            })
        }))
        .build()
        .unwrap_or_else(|e| unreachable!("a pool with a runtime always builds: {e}"))
}

/// The statement that bounds every session of hookd's: each limit is hookd's,
/// or the database's or role's own when that is stricter (`reset_val`, in
/// milliseconds, is the session's default before any `SET`; 0 means none).
pub fn session_limits() -> String {
    format!(
        "SELECT set_config(name, least(NULLIF(reset_val::bigint, 0), CASE name \
             WHEN 'statement_timeout' THEN {} ELSE {} END)::text, false) \
         FROM pg_settings \
         WHERE name IN ('statement_timeout', 'idle_in_transaction_session_timeout')",
        STATEMENT_TIMEOUT.as_millis(),
        IDLE_IN_TRANSACTION_TIMEOUT.as_millis()
    )
}

/// Reachable and migrated to the schema this binary expects.
pub async fn is_ready(pool: &Pool, application: &[Migration]) -> Result<(), StoreError> {
    let client = pool.get().await?;
    let wanted = [
        ("hookd_schema_migrations", "hookd", MIGRATIONS.last()),
        (
            "hookd_app_migrations",
            "the application",
            application.last(),
        ),
    ];
    for (table, whose, newest) in wanted {
        let Some(newest) = newest else { continue };
        let exists: bool = client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
            .await?
            .get(0);
        // The table names are constants, never input.
        let applied: Option<i32> = if exists {
            client
                .query_one(&format!("SELECT max(version) FROM {table}"), &[])
                .await?
                .get(0)
        } else {
            None
        };
        if applied.is_none_or(|v| v < newest.version) {
            return Err(StoreError::Schema(format!(
                "{whose}'s schema is at version {}, this build needs {}",
                applied.unwrap_or(0),
                newest.version
            )));
        }
    }
    Ok(())
}

/// Creates database `name` if missing (embedded cluster and tests); connects to the
/// maintenance database `admin`.
pub async fn create_database_if_missing(
    admin: &tokio_postgres::Config,
    name: &str,
) -> Result<(), StoreError> {
    let (client, connection) = admin.connect(NoTls).await?;
    let task = tokio::spawn(connection);
    let exists = client
        .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
        .await?
        .is_some();
    if !exists {
        client
            .batch_execute(&format!("CREATE DATABASE {}", quote_identifier(name)))
            .await?;
    }
    drop(client);
    let _ = task.await;
    Ok(())
}

/// Identifiers cannot be query parameters; this quotes one safely.
pub fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A named savepoint inside a transaction, for running a handler that may fail.
pub async fn savepoint(client: &impl GenericClient) -> Result<(), StoreError> {
    client.batch_execute("SAVEPOINT handler").await?;
    Ok(())
}

pub async fn release_savepoint(client: &impl GenericClient) -> Result<(), StoreError> {
    client.batch_execute("RELEASE SAVEPOINT handler").await?;
    Ok(())
}

pub async fn rollback_to_savepoint(client: &impl GenericClient) -> Result<(), StoreError> {
    client
        .batch_execute("ROLLBACK TO SAVEPOINT handler")
        .await?;
    Ok(())
}
