//! Everything hookd says to PostgreSQL. Queries are parameterised and sent through
//! `sql` (prepared once per connection, or unnamed behind a transaction-mode
//! pooler); the schema lives in `sql/` migrations.

pub mod activity;
pub mod api_idempotency;
pub mod audit;
pub mod bound_signatures;
pub mod events;
pub mod forget;
pub mod forwards;
pub mod history;
pub mod idempotency;
mod migrate;
pub mod payments;
pub mod purge;
pub mod reconcile;
pub mod rollups;
pub mod sessions;
pub mod sql;
pub mod tls;

use std::time::Duration;

use deadpool_postgres::{
    GenericClient, ManagerConfig, Object, Pool, QueueMode, RecyclingMethod, Runtime,
};
use tokio_postgres::NoTls;
use tokio_postgres::error::SqlState;
use tracing::Instrument;

use sql::params;

pub use migrate::{MIGRATIONS, Migration, migrate, migrate_with};
pub use tls::{DbConnector, Pooler};

/// How long a request waits for a connection before the database counts as unavailable.
const POOL_WAIT: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Data sent to PostgreSQL and not acknowledged for this long ends the link
/// (`TCP_USER_TIMEOUT`, where the URL sets none): a server host lost without a
/// reset is given up in seconds, not after the kernel's ~15 minutes of
/// retransmissions (keepalives are not sent while data waits).
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(30);
/// Keepalive probes on an idle TCP link to PostgreSQL, where the URL sets none.
const KEEPALIVES_IDLE: Duration = Duration::from_secs(60);
const KEEPALIVES_INTERVAL: Duration = Duration::from_secs(10);
const KEEPALIVES_RETRIES: u32 = 3;
pub const DEFAULT_POOL_SIZE: usize = 16;
/// PostgreSQL cancels any statement of hookd's that runs longer than this, and
/// ends a session left idle inside a transaction, so nothing stuck holds locks or
/// connections for long. Migrations lift the limit on their own session.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);
const IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);
/// While a statement runs, PostgreSQL checks this often that hookd is still
/// connected, and ends the statement (and its locks) once it is not: a session
/// hookd closed — cut at `handler_timeout`, its cancel lost on the way — holds
/// its locks a second, not until `statement_timeout`. (PostgreSQL 14 and
/// later; older servers have no such setting and keep theirs.)
const CONNECTION_CHECK_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot serve hookd right now; callers answer 503 and retry later.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// The transaction lost to a concurrent one (a serialization failure or a
    /// deadlock) and was rolled back: running it again may well succeed.
    #[error("database contention: {0}")]
    Contention(String),
    /// hookd's own mistake (a statement the schema refuses): a bug, answered 500.
    #[error("database error: {}", describe(.0))]
    Query(#[source] tokio_postgres::Error),
    #[error("database schema: {0}")]
    Schema(String),
}

impl StoreError {
    /// Whether the session that gave this error should be closed rather than
    /// reused: it may be on a server that can no longer serve hookd (a standby
    /// after a failover, a link that broke) or have lost its prepared statements.
    pub fn spoils_connection(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }

    /// Whether a transaction that failed so on its `runs`-th run is run again.
    pub fn runs_again(&self, runs: u32) -> bool {
        matches!(self, StoreError::Contention(_)) && runs < CONTENTION_RUNS
    }
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(error: tokio_postgres::Error) -> Self {
        if error.code().is_some_and(shows_transaction_pooler) && !sql::unnamed() {
            hint_transaction_pooler(&error);
        }
        match Failure::of_error(&error) {
            Failure::Unavailable => StoreError::Unavailable(tls::explain(&error)),
            Failure::Contention => StoreError::Contention(describe(&error)),
            Failure::Bug => StoreError::Query(error),
        }
    }
}

impl From<deadpool_postgres::PoolError> for StoreError {
    fn from(error: deadpool_postgres::PoolError) -> Self {
        match error {
            // Whatever refused a new session (an unreachable host, a password or
            // certificate refused, a database not there): not one of hookd's
            // statements, so unavailable.
            deadpool_postgres::PoolError::Backend(e) => StoreError::Unavailable(tls::explain(&e)),
            other => StoreError::Unavailable(other.to_string()),
        }
    }
}

/// A statement hookd prepared on this connection is missing on the server, or
/// one of the same name is already there: the connection is not one server
/// session, as behind a transaction-mode pooler.
fn shows_transaction_pooler(code: &SqlState) -> bool {
    *code == SqlState::INVALID_SQL_STATEMENT_NAME || *code == SqlState::DUPLICATE_PSTATEMENT
}

/// Says what to do, once a minute at most however many statements fail so.
fn hint_transaction_pooler(error: &tokio_postgres::Error) {
    static LAST: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let last = LAST.load(std::sync::atomic::Ordering::Relaxed);
    if now >= last + 60
        && LAST
            .compare_exchange(
                last,
                now,
                std::sync::atomic::Ordering::Relaxed,
                std::sync::atomic::Ordering::Relaxed,
            )
            .is_ok()
    {
        log::error!(
            "{}: a transaction-mode pooler (PgBouncer, RDS Proxy, Supavisor, PgCat) seems to be \
             in front of the database; add pgbouncer=true to DATABASE_URL",
            describe(error)
        );
    }
}

/// The server's message and SQLSTATE when there is one ("db error" alone says little).
fn describe(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => tls::explain(error),
    }
}

/// What a failed statement means for hookd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The server cannot do the work now, for reasons outside hookd: the session
    /// or link is gone, the server is shutting down, overloaded, out of disk, a
    /// read-only standby, or its statement was cancelled.
    Unavailable,
    /// A serialization failure or a deadlock: the transaction may be run again.
    Contention,
    /// Anything else is a statement hookd should not have sent.
    Bug,
}

impl Failure {
    pub fn of_error(error: &tokio_postgres::Error) -> Failure {
        match error.code() {
            Some(code) => Failure::of_sqlstate(code),
            // No SQLSTATE: the session closed, or the link failed (I/O, TLS,
            // connecting); otherwise tokio-postgres refused hookd's own values.
            None if error.is_closed() => Failure::Unavailable,
            None if std::error::Error::source(error).is_some_and(|s| s.is::<std::io::Error>()) => {
                Failure::Unavailable
            }
            None => Failure::Bug,
        }
    }

    pub fn of_sqlstate(code: &SqlState) -> Failure {
        let unavailable = [
            SqlState::READ_ONLY_SQL_TRANSACTION,
            SqlState::INVALID_SQL_STATEMENT_NAME,
            SqlState::DUPLICATE_PSTATEMENT,
            SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT,
            SqlState::LOCK_NOT_AVAILABLE,
            SqlState::T_R_STATEMENT_COMPLETION_UNKNOWN,
        ];
        if *code == SqlState::T_R_SERIALIZATION_FAILURE || *code == SqlState::T_R_DEADLOCK_DETECTED
        {
            return Failure::Contention;
        }
        // 08 connection, 53 resources, 57 operator intervention (shutdown, a
        // cancelled statement), 58 system (I/O), XX the server's own failure.
        let class = code.code().get(..2).unwrap_or_default();
        if matches!(class, "08" | "53" | "57" | "58" | "XX") || unavailable.contains(code) {
            Failure::Unavailable
        } else {
            Failure::Bug
        }
    }
}

/// How many times in all hookd runs a transaction that keeps losing to
/// concurrent ones.
pub const CONTENTION_RUNS: u32 = 3;

/// Returns `client` to the pool after `outcome`, or closes it when the error
/// spoils it, so the next request opens a fresh session (after a failover, to
/// the new primary).
pub fn give_back<T>(client: Object, outcome: Result<T, StoreError>) -> Result<T, StoreError> {
    if outcome.as_ref().is_err_and(StoreError::spoils_connection) {
        discard(client);
    }
    outcome
}

/// Closes a pooled connection instead of returning it; the pool opens another
/// when it needs one.
pub fn discard(client: Object) {
    drop(Object::take(client));
}

/// TCP keepalive probes on a connection that sits idle, where `DATABASE_URL`
/// sets none of its own. The pool hands out the connection used last, so spare
/// ones can sit unused for hours; a NAT, firewall or balancer that forgets an
/// idle link after minutes would leave them dead without a word, to fail the
/// batch that next takes one. A probe each minute keeps such a link alive, and a
/// link that stopped answering is closed within ~90 s, which the pool sees.
/// (Unix sockets, as the embedded cluster's, ignore these.) A URL's idle time
/// equal to tokio-postgres's own default (2 h) cannot be told from none.
fn probe_idle_links(config: &mut tokio_postgres::Config) {
    if !config.get_keepalives() {
        return;
    }
    if config.get_keepalives_idle() == tokio_postgres::Config::new().get_keepalives_idle() {
        config.keepalives_idle(KEEPALIVES_IDLE);
    }
    if config.get_keepalives_interval().is_none() {
        config.keepalives_interval(KEEPALIVES_INTERVAL);
    }
    if config.get_keepalives_retries().is_none() {
        config.keepalives_retries(KEEPALIVES_RETRIES);
    }
}

pub fn pool(config: tokio_postgres::Config, tls: DbConnector, max_size: usize) -> Pool {
    pool_through(config, tls, max_size, Pooler::None)
}

/// A pool whose connections go through `pooler`. Behind a transaction-mode
/// pooler hookd keeps nothing on a server session: statements go unnamed, locks
/// and limits last one transaction (see `begin`).
pub fn pool_through(
    mut config: tokio_postgres::Config,
    tls: DbConnector,
    max_size: usize,
    pooler: Pooler,
) -> Pool {
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(TCP_USER_TIMEOUT);
    }
    probe_idle_links(&mut config);
    config.application_name("hookd");
    let manager = tls.manager(
        config,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    let builder = Pool::builder(manager)
        .max_size(max_size)
        // The connection used last goes out first: at a moderate rate one backend
        // runs batch after batch, warm in the CPU's caches, where handing them
        // round the pool woke a different backend each time.
        .queue_mode(QueueMode::Lifo)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(POOL_WAIT))
        .create_timeout(Some(CONNECT_TIMEOUT))
        .recycle_timeout(Some(CONNECT_TIMEOUT));
    let builder = match pooler {
        Pooler::Transaction => {
            sql::send_unnamed();
            builder
        }
        // Set on each new session rather than as startup options, which poolers
        // such as pgbouncer refuse.
        Pooler::None => builder.post_create(deadpool_postgres::Hook::async_fn(|client, _| {
            Box::pin(async move {
                client
                    .batch_execute(&session_limits(Scope::Session))
                    .await
                    .map_err(deadpool_postgres::HookError::Backend)
            })
        })),
    };
    builder
        .build()
        .unwrap_or_else(|e| unreachable!("a pool with a runtime always builds: {e}"))
}

/// Starts a transaction. Behind a transaction-mode pooler, where no session
/// setting can be relied on, it first bounds its own statements.
pub async fn begin(
    client: &mut deadpool_postgres::Object,
) -> Result<deadpool_postgres::Transaction<'_>, tokio_postgres::Error> {
    let tx = client.transaction().await?;
    if sql::unnamed() {
        tx.batch_execute(&session_limits(Scope::Transaction))
            .await?;
    }
    Ok(tx)
}

/// A transaction whose work is one statement, whole in one round trip: `BEGIN`
/// (and, behind a pooler, the transaction's limits), `only` and `COMMIT` sent
/// together. `only` must put its statement on the wire when first polled (a
/// prepared `sql::Ready`), or the `COMMIT` would overtake it. Returns the
/// statement's outcome and the `COMMIT`'s: the work is kept only when both are
/// `Ok`. After a failed statement the server takes the `COMMIT` as a
/// `ROLLBACK`; a `COMMIT` that failed kept nothing, unless the connection was
/// lost while it ran, as with any commit. Dropped unfinished, it leaves the
/// server to end what was sent.
pub async fn one_statement_transaction<T>(
    client: &tokio_postgres::Client,
    only: impl Future<Output = Result<T, StoreError>>,
) -> (Result<T, StoreError>, Result<(), StoreError>) {
    let begin = async {
        if sql::unnamed() {
            let limits = session_limits(Scope::Transaction);
            client.batch_execute(&format!("BEGIN; {limits}")).await
        } else {
            client.batch_execute("BEGIN").await
        }
    };
    // Sent with the rest: its span covers the one round trip it rides in.
    let commit = client
        .batch_execute("COMMIT")
        .instrument(tracing::trace_span!("commit"));
    // In this order on the first poll: each puts its message on the wire then.
    let (begun, done, committed) = tokio::join!(biased; begin, only, commit);
    (
        begun.map_err(StoreError::from).and(done),
        committed.map_err(StoreError::from),
    )
}

/// How long a setting lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Session,
    Transaction,
}

/// The statement that bounds hookd's statements: each limit is hookd's, or the
/// database's or role's own when that is stricter (`reset_val`, in
/// milliseconds, is the session's default before any `SET`; 0 means none).
pub fn session_limits(scope: Scope) -> String {
    format!(
        "SELECT set_config(name, least(NULLIF(reset_val::bigint, 0), CASE name \
             WHEN 'statement_timeout' THEN {} \
             WHEN 'idle_in_transaction_session_timeout' THEN {} ELSE {} END)::text, {}) \
         FROM pg_settings \
         WHERE name IN ('statement_timeout', 'idle_in_transaction_session_timeout', \
                        'client_connection_check_interval')",
        STATEMENT_TIMEOUT.as_millis(),
        IDLE_IN_TRANSACTION_TIMEOUT.as_millis(),
        CONNECTION_CHECK_INTERVAL.as_millis(),
        scope == Scope::Transaction,
    )
}

/// Why an instance is not ready to take deliveries.
#[derive(Debug, thiserror::Error)]
pub enum NotReady {
    #[error("{0}")]
    Store(#[from] StoreError),
    /// A standby, or a database set read-only.
    #[error("the database is read-only (a standby?)")]
    ReadOnly,
}

impl From<tokio_postgres::Error> for NotReady {
    fn from(error: tokio_postgres::Error) -> Self {
        NotReady::Store(error.into())
    }
}

/// How long readiness waits for a pooled session before it finds every one
/// busy (a burst of deliveries: the database answers them, so ready).
const READY_POOL_WAIT: Duration = Duration::from_secs(1);

/// Reachable, taking writes, and migrated to the schema this binary (and the
/// application) expects: what readiness reports. A pool whose every session is
/// open and busy counts as reachable when `progressing` (the instance's
/// deliveries commit): under a burst, readiness must not take every instance
/// out of the balancer at once — but sessions held by a server that stopped
/// answering are busy too, and commit nothing.
pub async fn is_ready(
    pool: &Pool,
    application: &[Migration],
    progressing: bool,
) -> Result<(), NotReady> {
    let wait = deadpool_postgres::Timeouts {
        wait: Some(READY_POOL_WAIT),
        ..pool.timeouts()
    };
    let client = match pool.timeout_get(&wait).await {
        Ok(client) => client,
        Err(deadpool_postgres::PoolError::Timeout(deadpool_postgres::TimeoutType::Wait))
            if progressing && pool.status().size >= pool.status().max_size =>
        {
            return Ok(());
        }
        Err(error) => return Err(StoreError::from(error).into()),
    };
    // A standby (or a database set read-only) takes no delivery: not ready, so a
    // balancer sends them elsewhere; the session is closed so the next one can
    // find the new primary.
    let read_only: bool = sql::query_one(
        &client,
        "SELECT current_setting('transaction_read_only') = 'on'",
        params![],
    )
    .await?
    .get(0);
    if read_only {
        discard(client);
        return Err(NotReady::ReadOnly);
    }
    check_schema(&client, application).await?;
    Ok(())
}

/// Whether no hookd has migrated this database (its migrations' table is
/// not in the search path).
pub async fn never_migrated(pool: &Pool) -> Result<bool, StoreError> {
    let client = pool.get().await?;
    Ok(!table_in_search_path(&client, "hookd_schema_migrations").await?)
}

/// Whether a table of this name is in the search path. Read from the
/// catalog's rows rather than with `to_regclass`, whose "not there" a session
/// remembers until its next transaction: a migration that waited for another
/// instance's lock would then be told the ledger that instance made meanwhile
/// is still missing, and make it again.
pub(crate) async fn table_in_search_path(
    client: &impl sql::Session,
    table: &str,
) -> Result<bool, StoreError> {
    Ok(sql::query_one(
        client,
        "SELECT EXISTS (
             SELECT 1 FROM pg_catalog.pg_class c
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             WHERE c.relname = $1 AND n.nspname = ANY (pg_catalog.current_schemas(false)))",
        params![&table],
    )
    .await?
    .get(0))
}

/// Whether the schema is the one this build (and the application) expects:
/// `StoreError::Schema` naming the version found and the one needed if not.
pub async fn check_schema(
    client: &impl sql::Session,
    application: &[Migration],
) -> Result<(), StoreError> {
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
        let exists = table_in_search_path(client, table).await?;
        // The table names are constants, never input.
        let applied: Option<i32> = if exists {
            sql::query_one(
                client,
                &format!("SELECT max(version) FROM {table}"),
                params![],
            )
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
        let created = client
            .batch_execute(&format!("CREATE DATABASE {}", quote_identifier(name)))
            .await;
        // Another hookd started beside this one may have created it first.
        let made_by_another = |e: &tokio_postgres::Error| {
            e.code().is_some_and(|code| {
                *code == tokio_postgres::error::SqlState::DUPLICATE_DATABASE
                    || *code == tokio_postgres::error::SqlState::UNIQUE_VIOLATION
            })
        };
        if let Err(e) = created
            && !made_by_another(&e)
        {
            return Err(e.into());
        }
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

pub async fn rollback_to_savepoint(client: &impl GenericClient) -> Result<(), StoreError> {
    const ROLLBACK: &str = "ROLLBACK TO SAVEPOINT handler";
    match client.batch_execute(ROLLBACK).await {
        // The cancel of a handler's statement that had just ended lands on the
        // rollback right behind it; the savepoint is still there to go back to.
        Err(error) if error.code() == Some(&SqlState::QUERY_CANCELED) => {
            client.batch_execute(ROLLBACK).await?;
        }
        done => done?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_links_are_probed_unless_the_url_says_otherwise() {
        let mut plain: tokio_postgres::Config = "host=db user=hookd".parse().expect("url");
        probe_idle_links(&mut plain);
        assert_eq!(plain.get_keepalives_idle(), Duration::from_secs(60));
        assert_eq!(
            plain.get_keepalives_interval(),
            Some(Duration::from_secs(10))
        );
        assert_eq!(plain.get_keepalives_retries(), Some(3));

        let mut own: tokio_postgres::Config =
            "host=db user=hookd keepalives_idle=30 keepalives_interval=5 keepalives_retries=9"
                .parse()
                .expect("url");
        probe_idle_links(&mut own);
        assert_eq!(own.get_keepalives_idle(), Duration::from_secs(30));
        assert_eq!(own.get_keepalives_interval(), Some(Duration::from_secs(5)));
        assert_eq!(own.get_keepalives_retries(), Some(9));

        let mut off: tokio_postgres::Config =
            "host=db user=hookd keepalives=0".parse().expect("url");
        probe_idle_links(&mut off);
        assert!(!off.get_keepalives());
        assert_eq!(
            off.get_keepalives_idle(),
            tokio_postgres::Config::new().get_keepalives_idle()
        );
    }

    #[test]
    fn sqlstates_are_classified_by_what_they_mean_for_hookd() {
        let table = [
            // The link or the server: unavailable.
            ("08006", Failure::Unavailable), // connection_failure
            ("08P01", Failure::Unavailable), // protocol_violation
            ("53100", Failure::Unavailable), // disk_full
            ("53300", Failure::Unavailable), // too_many_connections
            ("57014", Failure::Unavailable), // query_canceled (statement_timeout)
            ("57P01", Failure::Unavailable), // admin_shutdown
            ("57P03", Failure::Unavailable), // cannot_connect_now
            ("58030", Failure::Unavailable), // io_error
            ("XX000", Failure::Unavailable), // internal_error
            ("25006", Failure::Unavailable), // read_only_sql_transaction (a standby)
            ("26000", Failure::Unavailable), // invalid_sql_statement_name (statements lost)
            ("42P05", Failure::Unavailable), // duplicate_prepared_statement (a pooler)
            ("25P03", Failure::Unavailable), // idle_in_transaction_session_timeout
            ("55P03", Failure::Unavailable), // lock_not_available (lock_timeout)
            ("40003", Failure::Unavailable), // statement_completion_unknown
            // Lost to a concurrent transaction: run it again.
            ("40001", Failure::Contention), // serialization_failure
            ("40P01", Failure::Contention), // deadlock_detected
            // hookd's own statements: a bug.
            ("42601", Failure::Bug), // syntax_error
            ("42703", Failure::Bug), // undefined_column
            ("42P01", Failure::Bug), // undefined_table
            ("23505", Failure::Bug), // unique_violation
            ("23502", Failure::Bug), // not_null_violation
            ("22P02", Failure::Bug), // invalid_text_representation
            ("25P02", Failure::Bug), // in_failed_sql_transaction
            ("40002", Failure::Bug), // transaction_integrity_constraint_violation
            ("42501", Failure::Bug), // insufficient_privilege
            ("P0001", Failure::Bug), // raise_exception
        ];
        for (code, expected) in table {
            assert_eq!(
                Failure::of_sqlstate(&SqlState::from_code(code)),
                expected,
                "{code}"
            );
        }
    }

    #[test]
    fn only_unavailable_spoils_a_connection() {
        assert!(StoreError::Unavailable("gone".into()).spoils_connection());
        assert!(!StoreError::Contention("deadlock".into()).spoils_connection());
        assert!(!StoreError::Schema("old".into()).spoils_connection());
    }

    #[test]
    fn only_contention_runs_again_and_only_so_often() {
        let lost = StoreError::Contention("deadlock".into());
        assert!(lost.runs_again(1));
        assert!(lost.runs_again(CONTENTION_RUNS - 1));
        assert!(!lost.runs_again(CONTENTION_RUNS));
        assert!(!StoreError::Unavailable("gone".into()).runs_again(1));
    }
}
