//! `DATABASE_URL` over TLS: a cluster of this test's own serves TLS on 127.0.0.1 and
//! refuses plain TCP, with a certificate for `localhost` and `127.0.0.1` from a CA
//! made here; each `sslmode` connects, or refuses, as libpq's would. The connections
//! go through hookd's own code (`store::tls::connect_options` and `store::pool`, as
//! `Database::open` does) and through the real binary's `hookd migrate`.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use hookd::embedded_pg::{self, ClusterOptions, EmbeddedPostgres};
use hookd::store::{self, StoreError};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

use crate::support::run_hookd;

const DATABASE: &str = "hookd";

/// A CA, the server's certificate and key signed by it, and an unrelated CA.
pub struct Pki {
    pub ca: String,
    pub other_ca: String,
    pub server_cert: String,
    pub server_key: String,
}

fn authority(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    CertifiedIssuer::self_signed(params, KeyPair::generate().expect("CA key")).expect("CA")
}

/// A server certificate for `localhost` and `127.0.0.1`, from a CA made here.
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

impl TlsCluster {
    async fn start() -> TlsCluster {
        let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let dir = root.join(format!("tls-{}", std::process::id()));
        let files = root.join(format!("tls-{}-files", std::process::id()));
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
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("free port")
            .port();
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
    let (config, tls) = store::tls::connect_options(url).map_err(|e| e.to_string())?;
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
async fn each_sslmode_connects_or_refuses_as_libpq_would() {
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
async fn a_bad_sslmode_or_sslrootcert_stops_startup_with_one_line() {
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
