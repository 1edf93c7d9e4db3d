//! `DATABASE_URL` over TLS: a cluster of this test's own serves TLS on 127.0.0.1 and
//! refuses plain TCP, with a certificate for `localhost` and `127.0.0.1` from a CA
//! made here; each `sslmode` connects, or refuses, as libpq's would. The connections
//! go through hookd's own code (`store::tls::connect_options` and `store::pool`, as
//! `Database::open` does) and through the real binary's `hookd migrate`. Over such
//! a connection, `handler_timeout` still cancels a handler's statement.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::Transaction;
use hookd::embedded_pg::{self, ClusterOptions, EmbeddedPostgres};
use hookd::handlers::{Event, Handler, HandlerError, Registry};
use hookd::store::{self, StoreError};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

use crate::support::{Spawn, connect, run_hookd, shipped_settings, spawn, stripe_event, wait_for};

const DATABASE: &str = "hookd";

/// A CA, the server's certificate and key signed by it, and an unrelated CA.
pub struct Pki {
    pub ca: String,
    pub other_ca: String,
    pub server_cert: String,
    pub server_key: String,
}

/// A CA made here (the PayPal tests issue signing certificates from one).
pub fn authority(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    CertifiedIssuer::self_signed(params, KeyPair::generate().expect("CA key")).expect("CA")
}

/// A server certificate for `localhost` and `127.0.0.1`, from a CA made here.
/// A TLS acceptor with `pki`'s server certificate (for `localhost` and 127.0.0.1).
pub fn acceptor(pki: &Pki) -> tokio_rustls::TlsAcceptor {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = vec![CertificateDer::from_pem_slice(pki.server_cert.as_bytes()).expect("cert")];
    let key = PrivateKeyDer::from_pem_slice(pki.server_key.as_bytes()).expect("key");
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server config");
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

pub fn pki() -> Pki {
    let ca = authority("hookd test CA");
    let other_ca = authority("some other CA");
    let key = KeyPair::generate().expect("server key");
    let mut params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .expect("server params");
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &ca).expect("server certificate");
    Pki {
        ca: ca.pem(),
        other_ca: other_ca.pem(),
        server_cert: cert.pem(),
        server_key: key.serialize_pem(),
    }
}

/// Writes `text` as a file of the data folder's owner: as root, the cluster runs as
/// `postgres`, and PostgreSQL refuses a key file it does not own.
fn write_owned(path: &Path, text: &str, mode: u32, owner: &fs::Metadata) {
    fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    std::os::unix::fs::chown(path, Some(owner.uid()), Some(owner.gid()))
        .unwrap_or_else(|e| panic!("chown {}: {e}", path.display()));
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The TLS cluster; stopped when dropped, so also when an assertion fails.
struct TlsCluster {
    cluster: EmbeddedPostgres,
    port: u16,
    ca: PathBuf,
    other_ca: PathBuf,
    files: PathBuf,
}

impl Drop for TlsCluster {
    fn drop(&mut self) {
        if let Err(error) = self.cluster.stop() {
            eprintln!("stopping the TLS cluster: {error}");
        }
        let _ = fs::remove_dir_all(&self.files);
    }
}

async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(work).await.expect("join")
}

/// Numbers the TLS clusters of this process (tests run side by side).
static NEXT_CLUSTER: AtomicUsize = AtomicUsize::new(0);

impl TlsCluster {
    async fn start() -> TlsCluster {
        let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let name = format!(
            "tls-{}-{}",
            std::process::id(),
            NEXT_CLUSTER.fetch_add(1, Ordering::SeqCst)
        );
        let dir = root.join(&name);
        let files = root.join(format!("{name}-files"));
        fs::create_dir_all(&files).expect("files folder");

        // First as hookd runs it (socket only), to create the database.
        let start_dir = dir.clone();
        let mut cluster = blocking(move || {
            EmbeddedPostgres::start(&start_dir, ClusterOptions { durable: false }).expect("cluster")
        })
        .await;
        store::create_database_if_missing(&cluster.pg_config("postgres"), DATABASE)
            .await
            .expect("database");
        let cluster = blocking(move || {
            cluster.stop().expect("stop");
            // Should the test process die, this removes the folder and stops the
            // cluster; a normal end stops it through Drop.
            hookd_kit::cluster::remove_when_this_process_exits(&mut cluster);
            cluster
        })
        .await;

        let data = cluster.dir().join("data");
        let owner = fs::metadata(&data).expect("data folder");
        let pki = pki();
        write_owned(&data.join("server.crt"), &pki.server_cert, 0o644, &owner);
        write_owned(&data.join("server.key"), &pki.server_key, 0o600, &owner);
        let port = hookd_kit::pooler::free_port();
        // postgresql.auto.conf is read last, so this overrides hookd's
        // `listen_addresses = ''`.
        let auto_conf = data.join("postgresql.auto.conf");
        let settings = format!(
            "{}\nlisten_addresses = '127.0.0.1'\nport = {port}\nssl = on\n\
             ssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n",
            read(&auto_conf)
        );
        write_owned(&auto_conf, &settings, 0o600, &owner);
        // The first matching line decides, so these go before initdb's `host … trust`.
        let hba = data.join("pg_hba.conf");
        let rules = format!(
            "hostssl all all 127.0.0.1/32 trust\nhostnossl all all 127.0.0.1/32 reject\n{}",
            read(&hba)
        );
        write_owned(&hba, &rules, 0o600, &owner);

        let (ca, other_ca) = (files.join("ca.pem"), files.join("other-ca.pem"));
        fs::write(&ca, &pki.ca).expect("ca.pem");
        fs::write(&other_ca, &pki.other_ca).expect("other-ca.pem");

        let cluster = blocking(move || {
            EmbeddedPostgres::start(&dir, ClusterOptions { durable: false })
                .expect("cluster with TLS")
        })
        .await;
        TlsCluster {
            cluster,
            port,
            ca,
            other_ca,
            files,
        }
    }

    /// A URL-form `DATABASE_URL` for `host`, with `params` as its query.
    fn url(&self, host: &str, params: &str) -> String {
        format!(
            "postgres://{}@{host}:{}/{DATABASE}?{params}",
            embedded_pg::USER,
            self.port
        )
    }

    fn root_cert(path: &Path) -> String {
        utf8_percent_encode(&path.to_string_lossy(), NON_ALPHANUMERIC).to_string()
    }

    fn with_ca(&self, mode: &str) -> String {
        format!("sslmode={mode}&sslrootcert={}", Self::root_cert(&self.ca))
    }

    fn with_other_ca(&self, mode: &str) -> String {
        format!(
            "sslmode={mode}&sslrootcert={}",
            Self::root_cert(&self.other_ca)
        )
    }
}

/// Connects as `hookd` would, and says whether the session is encrypted.
async fn session_is_encrypted(url: &str) -> Result<bool, String> {
    let (config, tls, _) = store::tls::connect_options(url).map_err(|e| e.to_string())?;
    let pool = store::pool(config, tls, 1);
    let result = async {
        let client = pool.get().await.map_err(StoreError::from)?;
        let row = client
            .query_one(
                "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                &[],
            )
            .await
            .map_err(StoreError::from)?;
        Ok::<bool, StoreError>(row.get(0))
    }
    .await;
    pool.close();
    result.map_err(|e| e.to_string())
}

async fn assert_encrypted(url: &str) {
    assert_eq!(session_is_encrypted(url).await, Ok(true), "{url}");
}

async fn assert_refused(url: &str, because: &str) {
    match session_is_encrypted(url).await {
        Ok(ssl) => panic!("{url} connected (ssl: {ssl})"),
        Err(error) => assert!(error.contains(because), "{url}: {error}"),
    }
}

const UNVERIFIED: &str = "certificate could not be verified";

#[tokio::test]
async fn slow_each_sslmode_connects_or_refuses_as_libpq_would() {
    let server = TlsCluster::start().await;

    // Encrypted without checking the certificate.
    assert_encrypted(&server.url("localhost", "sslmode=require")).await;
    assert_encrypted(&server.url("localhost", "sslmode=prefer")).await;
    assert_encrypted(&server.url("127.0.0.1", "")).await;

    // The chain, and the host name: DNS name and IP address alike.
    assert_encrypted(&server.url("localhost", &server.with_ca("verify-full"))).await;
    assert_encrypted(&server.url("127.0.0.1", &server.with_ca("verify-full"))).await;
    assert_encrypted(&server.url("127.0.0.1", &server.with_ca("verify-ca"))).await;

    // A name the certificate does not carry, for the same address.
    let alias = format!(
        "host=wrong.example hostaddr=127.0.0.1 port={} user={} dbname={DATABASE} \
         sslmode=verify-full sslrootcert='{}'",
        server.port,
        embedded_pg::USER,
        server.ca.display()
    );
    assert_refused(&alias, UNVERIFIED).await;
    assert_refused(&alias, "wrong.example").await;
    // verify-ca checks no name.
    assert_encrypted(&alias.replace("verify-full", "verify-ca")).await;
    // An address alone (no host name) still negotiates TLS.
    let address_only = format!(
        "hostaddr=127.0.0.1 port={} user={} dbname={DATABASE} sslmode=prefer",
        server.port,
        embedded_pg::USER
    );
    assert_encrypted(&address_only).await;

    // Another CA's root: refused by the verifying modes, and by require too, which
    // checks the chain once a root certificate is named.
    for mode in ["verify-full", "verify-ca", "require"] {
        assert_refused(
            &server.url("localhost", &server.with_other_ca(mode)),
            UNVERIFIED,
        )
        .await;
    }

    // Plain TCP is refused by the server, so the connections above were TLS.
    assert_refused(
        &server.url("localhost", "sslmode=disable"),
        "pg_hba.conf rejects connection",
    )
    .await;

    // The real binary, end to end.
    let migrated = run_hookd(
        &["migrate"],
        Some(server.url("localhost", "sslmode=require")),
    )
    .await;
    assert!(
        migrated.status.success(),
        "{}",
        String::from_utf8_lossy(&migrated.stderr)
    );
    let refused = run_hookd(
        &["migrate"],
        Some(server.url("localhost", &server.with_other_ca("verify-full"))),
    )
    .await;
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("hookd: ") && stderr.contains(UNVERIFIED),
        "{stderr}"
    );
}

#[tokio::test]
async fn slow_a_bad_sslmode_or_sslrootcert_stops_startup_with_one_line() {
    let missing = "/nonexistent/hookd/ca.pem";
    for (url, expected) in [
        (
            format!("host=127.0.0.1 sslmode=verify-full sslrootcert={missing}"),
            format!("hookd: DATABASE_URL: sslrootcert: {missing}: No such file or directory"),
        ),
        (
            "postgres://127.0.0.1/hookd?sslmode=verify".to_string(),
            "hookd: DATABASE_URL: sslmode: \"verify\" is not one of disable, prefer, require, \
             verify-ca, verify-full"
                .to_string(),
        ),
        (
            "postgres://127.0.0.1/hookd?sslmode=verify-ca".to_string(),
            "hookd: DATABASE_URL: sslmode=verify-ca needs sslrootcert: against the system's \
             public CAs without a name check, anyone with any public certificate could pose \
             as the database (use verify-full, or name your CA file)"
                .to_string(),
        ),
    ] {
        let output = run_hookd(&["migrate"], Some(url.clone())).await;
        assert!(!output.status.success(), "{url}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.trim(), expected, "{url}");
    }
}

/// The advisory lock the stuck handler waits for.
const HELD_LOCK: i64 = 4_242;

/// Writes an effect, then waits for a lock the test holds, its session's
/// statement timeout lifted: only a cancel stops it.
struct StuckOnLock;

#[async_trait]
impl Handler for StuckOnLock {
    async fn apply(&self, tx: &Transaction<'_>, event: &Event<'_>) -> Result<(), HandlerError> {
        tx.execute(
            "INSERT INTO payments (source, payment_id) VALUES ($1, 'locked-effect')",
            &[&event.source],
        )
        .await?;
        tx.batch_execute("SET LOCAL statement_timeout = 0").await?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&HELD_LOCK])
            .await?;
        Ok(())
    }
}

/// hookd's sessions over TLS waiting for the held lock, as PostgreSQL sees them.
async fn waiting_over_tls(watcher: &tokio_postgres::Client) -> i64 {
    watcher
        .query_one(
            "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
             WHERE a.application_name = 'hookd' AND s.ssl
               AND a.wait_event_type = 'Lock' AND a.wait_event = 'advisory'",
            &[],
        )
        .await
        .expect("pg_stat_activity")
        .get(0)
}

/// Waits until the handler waits for the lock over TLS, then until it no longer
/// does: the time limit's cancel must have reached PostgreSQL (nothing else
/// ends the wait while the test holds the lock).
async fn the_wait_starts_then_is_cancelled(watcher: &tokio_postgres::Client) {
    wait_for(
        "the handler to wait for the lock",
        Duration::from_secs(20),
        || async { (waiting_over_tls(watcher).await > 0).then_some(()) },
    )
    .await;
    wait_for(
        "the handler's wait to be cancelled",
        Duration::from_secs(10),
        || async { (waiting_over_tls(watcher).await == 0).then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn slow_handler_timeout_cancels_a_stuck_handler_over_tls() {
    let server = TlsCluster::start().await;
    // Migrated over the socket (on the port TLS moved it to); hookd itself
    // connects only over TLS.
    let mut socket = tokio_postgres::Config::new();
    socket
        .host_path(server.cluster.dir())
        .port(server.port)
        .user(embedded_pg::USER)
        .dbname(DATABASE);
    let migrating = store::pool(socket.clone(), store::DbConnector::Plain, 1);
    store::migrate(&migrating).await.expect("migrate");
    migrating.close();

    let url = server.url("localhost", &server.with_ca("verify-full"));
    let (config, connector, _) = store::tls::connect_options(&url).expect("options");
    let mut settings = shipped_settings();
    settings.handler_timeout = Duration::from_secs(1);
    for source in &mut settings.sources {
        source
            .event_types
            .insert("test.locked".into(), "test_locked".into());
    }
    let mut registry = Registry::builtin();
    registry.register("test_locked", Arc::new(StuckOnLock));
    let app = spawn(Spawn {
        settings,
        registry,
        database: Some(config),
        connector,
        ..Spawn::default()
    })
    .await;
    let holder = connect(socket.clone()).await;
    holder
        .execute("SELECT pg_advisory_lock($1)", &[&HELD_LOCK])
        .await
        .expect("hold the lock");
    let watcher = connect(socket).await;
    let state = async || {
        let row = watcher
            .query_one(
                "SELECT status, attempts, last_error,
                        (SELECT count(*) FROM payments WHERE payment_id = 'locked-effect')
                 FROM webhook_events WHERE event_id = 'evt_locked'",
                &[],
            )
            .await
            .expect("event");
        let error: Option<String> = row.get(2);
        (
            row.get::<_, String>(0),
            row.get::<_, i32>(1),
            error.is_some_and(|e| e.contains("timed out after 1s")),
            row.get::<_, i64>(3),
        )
    };

    let event = stripe_event(
        "evt_locked",
        "test.locked",
        serde_json::json!({"id": "obj"}),
    );
    let (answer, ()) = tokio::join!(
        app.deliver("stripe", &event),
        the_wait_starts_then_is_cancelled(&watcher)
    );
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(state().await, ("failed".into(), 1, true, 0), "rolled back");

    // Its retry, through the dispatcher, is held to the same limit.
    watcher
        .execute("UPDATE webhook_events SET next_attempt_at = now()", &[])
        .await
        .expect("make it due");
    let (step, ()) = tokio::join!(
        app.app.dispatcher.try_dispatch_due(),
        the_wait_starts_then_is_cancelled(&watcher)
    );
    assert!(step.is_ok(), "{step:?}");
    assert_eq!(state().await, ("failed".into(), 2, true, 0), "rolled back");
}
