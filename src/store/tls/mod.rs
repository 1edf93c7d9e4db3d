//! TLS for `DATABASE_URL` connections, on rustls with the ring provider. libpq's
//! `sslmode` and `sslrootcert` are read here, since tokio-postgres knows only part of
//! the first and none of the second, and become tokio-postgres's `SslMode` plus a
//! connector that checks what the mode asks for.

use std::error::Error as StdError;
use std::ffi::OsStr;
use std::fmt;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use deadpool_postgres::{Manager, ManagerConfig};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres::config::{Host, SslMode as PgSslMode};
use tokio_postgres::{CancelToken, NoTls};
use tokio_postgres_rustls::MakeRustlsConnect;

const SSLMODE: &str = "sslmode";
const SSLROOTCERT: &str = "sslrootcert";
/// Prisma's convention: `pgbouncer=true` says a transaction-mode pooler is in front.
const PGBOUNCER: &str = "pgbouncer";

/// libpq's `sslmode` values, all but `allow`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SslMode {
    Disable,
    #[default]
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for SslMode {
    type Err = DatabaseUrlError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            SslMode::Disable,
            SslMode::Prefer,
            SslMode::Require,
            SslMode::VerifyCa,
            SslMode::VerifyFull,
        ]
        .into_iter()
        .find(|mode| mode.name() == s)
        .ok_or_else(|| DatabaseUrlError::SslMode(s.to_string()))
    }
}

/// What a connection string says that hookd reads itself rather than
/// tokio-postgres: TLS, and whether a transaction-mode pooler is in front.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UrlParams {
    pub mode: SslMode,
    /// PEM file of the CA certificates to trust instead of the system's.
    pub root_cert: Option<PathBuf>,
    pub pooler: Pooler,
}

/// What sits between hookd and PostgreSQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pooler {
    /// PostgreSQL itself, or a session-mode pooler: one server session per connection.
    #[default]
    None,
    /// A transaction-mode pooler: each transaction may run on another server session.
    Transaction,
}

#[derive(Debug, thiserror::Error)]
pub enum DatabaseUrlError {
    #[error("sslmode: {0:?} is not one of disable, prefer, require, verify-ca, verify-full")]
    SslMode(String),
    #[error("sslrootcert: {}: {}", .path.display(), io_text(.source))]
    RootCertRead { path: PathBuf, source: io::Error },
    #[error("sslrootcert: {}: not PEM: {source}", .path.display())]
    RootCertPem {
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("sslrootcert: {}: no certificate in it", .path.display())]
    RootCertEmpty { path: PathBuf },
    #[error(
        "sslmode={mode}: no system root certificates to verify the server with ({detail}); \
         name a CA file with sslrootcert"
    )]
    SystemRoots { mode: SslMode, detail: String },
    #[error(
        "sslmode=verify-ca needs sslrootcert: against the system's public CAs without a \
         name check, anyone with any public certificate could pose as the database \
         (use verify-full, or name your CA file)"
    )]
    VerifyCaWithoutRoot,
    #[error("{}", explain(.0))]
    Parse(tokio_postgres::Error),
    #[error("pgbouncer: {0:?} is not true or false")]
    Pgbouncer(String),
    /// rustls refusing the ring provider's defaults; not expected to happen.
    #[error("TLS setup: {0}")]
    Setup(String),
}

/// How `store::pool` connects: plain (the embedded cluster's socket) or over rustls.
#[derive(Clone)]
pub enum DbConnector {
    Plain,
    Tls(MakeRustlsConnect),
}

impl DbConnector {
    pub(super) fn manager(
        self,
        mut config: tokio_postgres::Config,
        with: ManagerConfig,
    ) -> Manager {
        match self {
            DbConnector::Plain => {
                // tokio-postgres's default, prefer, would still send an SSLRequest.
                config.ssl_mode(PgSslMode::Disable);
                Manager::from_connect(config, OnRuntime::new(NoTls), with)
            }
            DbConnector::Tls(tls) => Manager::from_connect(config, OnRuntime::new(tls), with),
        }
    }

    /// Asks the server to cancel whatever statement the session of `token` is
    /// running. The request goes over a connection of its own, made as the pool
    /// makes its connections: a server that wants TLS refuses a plain one.
    pub async fn cancel_query(&self, token: CancelToken) -> Result<(), tokio_postgres::Error> {
        match self {
            DbConnector::Plain => token.cancel_query(NoTls).await,
            DbConnector::Tls(tls) => token.cancel_query(tls.clone()).await,
        }
    }
}

/// Makes the pool's connections on the runtime the pool was made on: the
/// socket, and the driver running it. Opened where a connection happens to be
/// needed first (an HTTP worker answering a request), either would end with that
/// worker when hookd stops, closing the connection under whichever transaction
/// uses it then.
struct OnRuntime<T> {
    tls: T,
    runtime: Option<tokio::runtime::Handle>,
}

impl<T> OnRuntime<T> {
    fn new(tls: T) -> Self {
        OnRuntime {
            tls,
            runtime: tokio::runtime::Handle::try_current().ok(),
        }
    }
}

impl<T> deadpool_postgres::Connect for OnRuntime<T>
where
    T: tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket> + Clone + Sync + Send + 'static,
    T::Stream: Sync + Send,
    T::TlsConnect: Sync + Send,
    <T::TlsConnect as tokio_postgres::tls::TlsConnect<tokio_postgres::Socket>>::Future: Send,
{
    fn connect(
        &self,
        config: &tokio_postgres::Config,
    ) -> futures_util::future::BoxFuture<
        '_,
        Result<(tokio_postgres::Client, tokio::task::JoinHandle<()>), tokio_postgres::Error>,
    > {
        let (tls, config) = (self.tls.clone(), config.clone());
        let runtime = self.runtime.clone();
        let open = async move {
            let (client, connection) = config.connect(tls).await?;
            let task = tokio::spawn(async move {
                if let Err(error) = connection.await {
                    log::debug!("a database connection ended: {error}");
                }
            });
            Ok((client, task))
        };
        Box::pin(async move {
            let Some(runtime) = runtime else {
                return open.await;
            };
            // The socket belongs to the runtime it is opened on, not only its
            // driver: opened on an HTTP worker, it would die with that worker.
            match runtime.spawn(open).await {
                Ok(opened) => opened,
                Err(failed) if failed.is_panic() => std::panic::resume_unwind(failed.into_panic()),
                // The pool's runtime is shutting down: hookd is stopping, and the
                // pool's create_timeout ends the wait.
                Err(_) => std::future::pending().await,
            }
        })
    }
}

/// Turns `DATABASE_URL` into the configuration and connector for `store::pool`.
pub fn connect_options(
    url: &str,
) -> Result<(tokio_postgres::Config, DbConnector, Pooler), DatabaseUrlError> {
    let (rest, params) = split_hookd_params(url)?;
    let mut config = tokio_postgres::Config::from_str(&rest).map_err(DatabaseUrlError::Parse)?;
    // Like libpq, which never negotiates TLS over a Unix socket whatever sslmode says.
    let only_sockets = config.get_hostaddrs().is_empty()
        && !config.get_hosts().is_empty()
        && config
            .get_hosts()
            .iter()
            .all(|host| matches!(host, Host::Unix(_)));
    if params.mode == SslMode::Disable || only_sockets {
        config.ssl_mode(PgSslMode::Disable);
        return Ok((config, DbConnector::Plain, params.pooler));
    }
    // With `hostaddr` alone, TLS would get an empty server name; like libpq, the
    // address itself is the name then.
    if config.get_hosts().is_empty() {
        let addresses: Vec<String> = config
            .get_hostaddrs()
            .iter()
            .map(ToString::to_string)
            .collect();
        for address in &addresses {
            config.host(address);
        }
    }
    config.ssl_mode(if params.mode == SslMode::Prefer {
        PgSslMode::Prefer
    } else {
        PgSslMode::Require
    });
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = verifier(&params, &provider)?;
    let tls = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| DatabaseUrlError::Setup(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok((
        config,
        DbConnector::Tls(MakeRustlsConnect::new(tls)),
        params.pooler,
    ))
}

/// Whether `DATABASE_URL` says `sslmode=prefer` (also libpq's default) to a host
/// beyond this machine, where the connection may silently stay unencrypted.
pub fn prefers_tls_beyond_this_machine(url: &str) -> bool {
    let Ok((rest, params)) = split_hookd_params(url) else {
        return false;
    };
    let Ok(config) = tokio_postgres::Config::from_str(&rest) else {
        return false;
    };
    let remote_host = config.get_hosts().iter().any(|host| match host {
        Host::Tcp(name) => {
            !name.eq_ignore_ascii_case("localhost")
                && name
                    .parse::<std::net::IpAddr>()
                    .map_or(true, |ip| !ip.is_loopback())
        }
        Host::Unix(_) => false,
    });
    let remote_address = config.get_hostaddrs().iter().any(|ip| !ip.is_loopback());
    params.mode == SslMode::Prefer && (remote_host || remote_address)
}

fn verifier(
    params: &UrlParams,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ServerCertVerifier>, DatabaseUrlError> {
    let algorithms = provider.signature_verification_algorithms;
    let check_name = match (params.mode, &params.root_cert) {
        (SslMode::Disable | SslMode::Prefer, _) | (SslMode::Require, None) => {
            return Ok(Arc::new(Lenient {
                chain: None,
                algorithms,
            }));
        }
        (SslMode::VerifyCa, None) => return Err(DatabaseUrlError::VerifyCaWithoutRoot),
        // libpq's rule: a root certificate makes `require` check the chain.
        (SslMode::Require, Some(_)) | (SslMode::VerifyCa, Some(_)) => false,
        (SslMode::VerifyFull, _) => true,
    };
    let roots = match &params.root_cert {
        Some(path) => roots_from_file(path)?,
        None => system_roots(params.mode)?,
    };
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| DatabaseUrlError::Setup(e.to_string()))?;
    if check_name {
        Ok(webpki)
    } else {
        Ok(Arc::new(Lenient {
            chain: Some(webpki),
            algorithms,
        }))
    }
}

fn roots_from_file(path: &Path) -> Result<RootCertStore, DatabaseUrlError> {
    let pem = std::fs::read(path).map_err(|source| DatabaseUrlError::RootCertRead {
        path: path.to_path_buf(),
        source,
    })?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| DatabaseUrlError::RootCertPem {
            path: path.to_path_buf(),
            source,
        })?;
    let mut roots = RootCertStore::empty();
    let (added, _unusable) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(DatabaseUrlError::RootCertEmpty {
            path: path.to_path_buf(),
        });
    }
    Ok(roots)
}

fn system_roots(mode: SslMode) -> Result<RootCertStore, DatabaseUrlError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _unusable) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let detail = found
            .errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        return Err(DatabaseUrlError::SystemRoots {
            mode,
            detail: if detail.is_empty() {
                "none found".into()
            } else {
                detail
            },
        });
    }
    Ok(roots)
}

/// What `prefer`, `require` and `verify-ca` check. Without `chain`, any certificate
/// passes (encryption without authentication, as in libpq); with it, the chain must
/// lead to a trusted root but the host name is not checked. The handshake's
/// signatures are always checked, so the session is bound to the certificate's key.
#[derive(Debug)]
struct Lenient {
    chain: Option<Arc<WebPkiServerVerifier>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            // webpki checks the name last: getting here means the chain verified.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// An error and its causes on one line. tokio-postgres's own text names only the kind
/// of failure ("error performing TLS handshake"); the cause says what went wrong.
pub fn explain(error: &(dyn StdError + 'static)) -> String {
    let mut text = describe_cause(error);
    let mut cause = error.source();
    while let Some(current) = cause {
        let part = describe_cause(current);
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cause = current.source();
    }
    // A server error's DETAIL and HINT come on lines of their own.
    text.lines().collect::<Vec<_>>().join("; ")
}

fn describe_cause(error: &(dyn StdError + 'static)) -> String {
    // tokio-rustls hands rustls's error over inside an io::Error.
    let rustls_error = error
        .downcast_ref::<io::Error>()
        .and_then(io::Error::get_ref)
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .or_else(|| error.downcast_ref::<rustls::Error>());
    match rustls_error {
        Some(rustls::Error::InvalidCertificate(problem)) => format!(
            "the server's certificate could not be verified: {}",
            certificate_problem(problem)
        ),
        _ => error.to_string(),
    }
}

fn certificate_problem(problem: &CertificateError) -> String {
    match problem {
        CertificateError::UnknownIssuer => {
            "it was not issued by a trusted certificate authority".into()
        }
        CertificateError::NotValidForName => "it is not valid for the host name".into(),
        CertificateError::Expired => "it has expired".into(),
        CertificateError::NotValidYet => "it is not valid yet".into(),
        other => other.to_string(),
    }
}

/// io::Error's text without the "(os error N)" that follows the system's own words.
fn io_text(error: &io::Error) -> String {
    let text = error.to_string();
    match error.raw_os_error() {
        Some(code) => text
            .strip_suffix(&format!(" (os error {code})"))
            .map_or(text.clone(), str::to_string),
        None => text,
    }
}

/// Takes `sslmode` and `sslrootcert` out of a connection string, URL or key=value
/// form, and returns the rest as written, for `tokio_postgres::Config::from_str`.
/// A key given twice counts the last time, as in libpq.
pub fn split_hookd_params(url: &str) -> Result<(String, UrlParams), DatabaseUrlError> {
    let (rest, found) = if ["postgres://", "postgresql://"]
        .iter()
        .any(|prefix| url.starts_with(prefix))
    {
        split_url(url)
    } else {
        split_key_value(url)
    };
    let mut params = UrlParams::default();
    for (key, value) in found {
        if key == SSLMODE {
            params.mode = String::from_utf8_lossy(&value).parse()?;
        } else if key == PGBOUNCER {
            params.pooler = match &value[..] {
                b"true" => Pooler::Transaction,
                b"false" => Pooler::None,
                other => {
                    return Err(DatabaseUrlError::Pgbouncer(
                        String::from_utf8_lossy(other).into_owned(),
                    ));
                }
            };
        } else if value.is_empty() {
            // libpq reads an empty value as not set.
            params.root_cert = None;
        } else {
            params.root_cert = Some(PathBuf::from(OsStr::from_bytes(&value)));
        }
    }
    Ok((rest, params))
}

fn is_hookd_key(key: &str) -> bool {
    key == SSLMODE || key == SSLROOTCERT || key == PGBOUNCER
}

type Found = Vec<(String, Vec<u8>)>;

/// The query string: `&`-separated, percent-encoded `key=value` pairs. Its start is
/// found as tokio-postgres finds it: the first `?` after the user info.
fn split_url(url: &str) -> (String, Found) {
    let after_user = url.find('@').map_or(0, |at| at + 1);
    let Some(question) = url[after_user..].find('?').map(|q| after_user + q) else {
        return (url.to_string(), Vec::new());
    };
    let (head, query) = (&url[..question], &url[question + 1..]);
    let mut kept = Vec::new();
    let mut found = Vec::new();
    for pair in query.split('&') {
        let key = pair.split_once('=').map(|(key, value)| {
            let key = percent_encoding::percent_decode_str(key).decode_utf8_lossy();
            (key.into_owned(), value)
        });
        match key {
            Some((key, value)) if is_hookd_key(&key) => {
                found.push((key, percent_encoding::percent_decode_str(value).collect()));
            }
            _ => kept.push(pair),
        }
    }
    if kept.is_empty() {
        (head.to_string(), found)
    } else {
        (format!("{head}?{}", kept.join("&")), found)
    }
}

/// `key = value` pairs separated by white space; a value is quoted with `'` or not,
/// and `\` escapes the next character in both. What cannot be read is left as it is
/// for tokio-postgres to report.
fn split_key_value(text: &str) -> (String, Found) {
    let mut kept = Vec::new();
    let mut found = Vec::new();
    let mut cursor = Cursor { text, pos: 0 };
    loop {
        cursor.skip_whitespace();
        let start = cursor.pos;
        if start == text.len() {
            break;
        }
        match cursor.pair() {
            Some((key, value)) if is_hookd_key(key) => {
                found.push((key.to_string(), value.into_bytes()));
            }
            Some(_) => kept.push(&text[start..cursor.pos]),
            None => {
                kept.push(&text[start..]);
                break;
            }
        }
    }
    (kept.join(" "), found)
}

struct Cursor<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn next(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn skip_whitespace(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.next();
        }
    }

    fn pair(&mut self) -> Option<(&'a str, String)> {
        let start = self.pos;
        while self.peek().is_some_and(|c| !c.is_whitespace() && c != '=') {
            self.next();
        }
        let key = &self.text[start..self.pos];
        self.skip_whitespace();
        if key.is_empty() || self.next() != Some('=') {
            return None;
        }
        self.skip_whitespace();
        let quoted = self.peek() == Some('\'');
        if quoted {
            self.next();
        }
        let mut value = String::new();
        loop {
            match self.peek() {
                None if quoted => return None,
                None => break,
                Some('\'') if quoted => {
                    self.next();
                    break;
                }
                Some(c) if c.is_whitespace() && !quoted => break,
                Some('\\') => {
                    self.next();
                    if let Some(escaped) = self.next() {
                        value.push(escaped);
                    }
                }
                Some(c) => {
                    self.next();
                    value.push(c);
                }
            }
        }
        if value.is_empty() && !quoted {
            return None;
        }
        Some((key, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(url: &str) -> (String, UrlParams) {
        split_hookd_params(url).expect("split")
    }

    fn params(mode: SslMode, root_cert: Option<&str>) -> UrlParams {
        UrlParams {
            mode,
            root_cert: root_cert.map(PathBuf::from),
            pooler: Pooler::None,
        }
    }

    #[test]
    fn prefer_is_the_default_and_the_rest_is_untouched() {
        for url in [
            "postgres://u:p@db.example:5432/hookd?application_name=x",
            "host=db.example user=u dbname=hookd",
            "postgresql://db.example/hookd",
        ] {
            assert_eq!(split(url), (url.to_string(), UrlParams::default()), "{url}");
        }
    }

    #[test]
    fn url_form_takes_both_keys_out() {
        let (rest, found) = split(
            "postgres://u:p@localhost:5432/db?sslmode=verify-full&connect_timeout=3&sslrootcert=/etc/ca.pem",
        );
        assert_eq!(rest, "postgres://u:p@localhost:5432/db?connect_timeout=3");
        assert_eq!(found, params(SslMode::VerifyFull, Some("/etc/ca.pem")));

        let (rest, found) = split("postgresql://localhost/db?sslmode=require");
        assert_eq!(rest, "postgresql://localhost/db");
        assert_eq!(found, params(SslMode::Require, None));
    }

    #[test]
    fn url_form_is_percent_decoded() {
        let (rest, found) = split(
            "postgres://localhost/db?ssl%6Dode=verify%2Dca&sslrootcert=%2Fsecrets%2Fmy%20ca%26co.pem",
        );
        assert_eq!(rest, "postgres://localhost/db");
        assert_eq!(
            found,
            params(SslMode::VerifyCa, Some("/secrets/my ca&co.pem"))
        );
    }

    #[test]
    fn url_form_query_starts_after_the_user_info() {
        let (rest, found) = split("postgres://u:pa?ss@localhost/db?sslmode=disable");
        assert_eq!(rest, "postgres://u:pa?ss@localhost/db");
        assert_eq!(found.mode, SslMode::Disable);
    }

    #[test]
    fn key_value_form_takes_both_keys_out() {
        let (rest, found) =
            split("host=localhost  sslmode = verify-full port=5432 sslrootcert=/etc/ca.pem");
        assert_eq!(rest, "host=localhost port=5432");
        assert_eq!(found, params(SslMode::VerifyFull, Some("/etc/ca.pem")));
    }

    #[test]
    fn key_value_form_honours_quotes_and_escapes() {
        let (rest, found) = split(
            r"host='/tmp/a b' sslrootcert='/etc/my ca\'s.pem' password='x y' sslmode='require'",
        );
        assert_eq!(rest, "host='/tmp/a b' password='x y'");
        assert_eq!(found, params(SslMode::Require, Some("/etc/my ca's.pem")));

        let (_, found) = split(r"sslrootcert=/etc/with\ space.pem");
        assert_eq!(found.root_cert, Some(PathBuf::from("/etc/with space.pem")));
    }

    #[test]
    fn the_last_value_wins_and_empty_rootcert_means_none() {
        let (_, found) = split("sslmode=disable sslmode=verify-ca sslrootcert=/a sslrootcert=''");
        assert_eq!(found, params(SslMode::VerifyCa, None));
    }

    #[test]
    fn what_cannot_be_read_is_left_for_tokio_postgres() {
        let (rest, found) = split("sslmode=require host='unterminated");
        assert_eq!(rest, "host='unterminated");
        assert_eq!(found.mode, SslMode::Require);
        assert!(tokio_postgres::Config::from_str(&rest).is_err());
    }

    #[test]
    fn prefer_is_flagged_only_towards_another_machine() {
        for url in [
            "postgres://u@db.internal/db",
            "postgres://u@db.internal/db?sslmode=prefer",
            "host=10.0.0.5 sslmode=prefer",
            "host=localhost hostaddr=192.0.2.7",
        ] {
            assert!(prefers_tls_beyond_this_machine(url), "{url}");
        }
        for url in [
            "postgres://u@localhost/db",
            "postgres://u@127.0.0.1:5432/db?sslmode=prefer",
            "host=/run/postgresql sslmode=prefer",
            "postgres://u@db.internal/db?sslmode=require",
            "postgres://u@db.internal/db?sslmode=disable",
            "postgres://u@db.internal/db?sslmode=verify-full",
        ] {
            assert!(!prefers_tls_beyond_this_machine(url), "{url}");
        }
    }

    #[test]
    fn an_unknown_sslmode_is_an_error_naming_it() {
        for url in [
            "host=localhost sslmode=allow",
            "postgres://localhost/db?sslmode=verify_full",
            "sslmode=''",
        ] {
            let error = split_hookd_params(url).expect_err(url).to_string();
            assert!(error.starts_with("sslmode: "), "{error}");
            assert!(error.contains("verify-full"), "{error}");
        }
    }

    #[test]
    fn the_rest_parses_and_gets_the_mode() {
        let (config, tls, _) =
            connect_options("postgres://u@localhost:6543/db?sslmode=require&application_name=t")
                .expect("options");
        assert_eq!(config.get_ssl_mode(), PgSslMode::Require);
        assert_eq!(config.get_ports(), [6543]);
        assert!(matches!(tls, DbConnector::Tls(_)));

        let (config, tls, _) = connect_options("host=localhost sslmode=prefer").expect("options");
        assert_eq!(config.get_ssl_mode(), PgSslMode::Prefer);
        assert!(matches!(tls, DbConnector::Tls(_)));

        let (config, tls, _) = connect_options("host=localhost sslmode=disable").expect("options");
        assert_eq!(config.get_ssl_mode(), PgSslMode::Disable);
        assert!(matches!(tls, DbConnector::Plain));
    }

    #[test]
    fn pgbouncer_true_is_taken_out_and_names_a_transaction_pooler() {
        for (url, rest) in [
            (
                "postgres://u@pool:6432/db?pgbouncer=true&application_name=t",
                "postgres://u@pool:6432/db?application_name=t",
            ),
            ("host=pool port=6432 pgbouncer=true", "host=pool port=6432"),
        ] {
            let (kept, params) = split(url);
            assert_eq!(kept, rest, "{url}");
            assert_eq!(params.pooler, Pooler::Transaction, "{url}");
        }
        let (_, params) = split("postgres://u@db/db?pgbouncer=false");
        assert_eq!(params.pooler, Pooler::None);
        let (_, _, pooler) =
            connect_options("postgres://u@pool:6432/db?sslmode=disable&pgbouncer=true")
                .expect("options");
        assert_eq!(pooler, Pooler::Transaction);
        let error = connect_options("postgres://u@pool/db?pgbouncer=yes")
            .err()
            .expect("refused")
            .to_string();
        assert!(
            error.contains("pgbouncer") && error.contains("yes"),
            "{error}"
        );
    }

    #[test]
    fn a_unix_socket_never_uses_tls() {
        let (config, tls, _) =
            connect_options("host=/var/run/postgresql sslmode=verify-full sslrootcert=/nowhere")
                .expect("options");
        assert_eq!(config.get_ssl_mode(), PgSslMode::Disable);
        assert!(matches!(tls, DbConnector::Plain));
    }

    #[test]
    fn a_missing_or_empty_rootcert_names_the_key_and_file() {
        let missing =
            connect_options("host=localhost sslmode=verify-ca sslrootcert=/no/such/ca.pem")
                .err()
                .map(|e| e.to_string());
        assert_eq!(
            missing.as_deref(),
            Some("sslrootcert: /no/such/ca.pem: No such file or directory")
        );

        let dir = std::env::temp_dir().join(format!("hookd-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").expect("write");
        let error = connect_options(&format!(
            "host=localhost sslmode=require sslrootcert={}",
            empty.display()
        ))
        .err()
        .map(|e| e.to_string());
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            error,
            Some(format!(
                "sslrootcert: {}: no certificate in it",
                empty.display()
            ))
        );
    }

    #[test]
    fn a_bad_remainder_says_why() {
        let error = connect_options("host=localhost frobnicate=1")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(error.starts_with("invalid connection string: "), "{error}");
        assert!(error.contains("frobnicate"), "{error}");
    }

    #[test]
    fn a_certificate_failure_says_so() {
        let handshake = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
        );
        let text = explain(&handshake);
        assert!(text.contains("certificate could not be verified"), "{text}");
    }
}
