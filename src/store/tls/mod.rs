//! TLS for `DATABASE_URL` connections, on rustls with the ring provider. libpq's
//! `sslmode` and `sslrootcert` are read here, since tokio-postgres knows only part of
//! the first and none of the second, and become tokio-postgres's `SslMode` plus a
//! connector that checks what the mode asks for.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use deadpool_postgres::{Manager, ManagerConfig};
use rustls::ClientConfig;
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

mod params;
mod verify;

use verify::{io_text, verifier};

pub use params::split_hookd_params;
pub use verify::explain;

#[cfg(test)]
mod tests;
