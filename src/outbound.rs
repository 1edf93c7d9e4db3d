//! hookd's own HTTP client, for forwarding events, replaying fixtures and
//! fetching the signing certificates a provider names (PayPal's): TLS by rustls
//! with the ring provider and the system's root certificates, no redirects
//! followed (a forward's answer is the answer of the URL configured; a
//! certificate comes from the host allowed, or not at all).
//!
//! Certificates are fetched by an instance's [`Certificates`], because the URL
//! comes with a request nobody has verified yet: at most one fetch in flight
//! per URL (the others wait for it), a failure remembered for a minute, and at
//! most `FETCHES_PER_MINUTE` fetches started a minute per source.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, TrustAnchor};

use crate::providers::{self, Scheme, Verifier};
use crate::signature::{Headers, SignatureError, Verified};

/// The most a fetched certificate chain may weigh.
const MAX_CERTIFICATE_BYTES: usize = 64 * 1024;

/// How long fetching a certificate may take.
const CERTIFICATE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a URL whose certificate could not be had is not asked again.
const FAILURE_MEMORY: Duration = Duration::from_secs(60);

/// Certificate fetches a source may start in a minute: PayPal needs one per
/// certificate it rotates to; a sender making up URLs gets no more.
pub const FETCHES_PER_MINUTE: usize = 10;
const MINUTE: Duration = Duration::from_secs(60);

/// Makes ring this process's rustls crypto provider (once; later calls do
/// nothing), so every HTTP client built here or by a library finds one.
pub fn install_crypto() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Err only if another provider was installed first, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Why an HTTP client could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    #[error("TLS setup: {0}")]
    Tls(String),
    #[error("HTTP client: {0}")]
    Build(String),
    /// A root certificate given is unreadable or unusable.
    #[error("roots: {0}")]
    Roots(String),
}

/// Why the certificate a delivery names could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertificateError {
    /// The provider refused what was fetched, saying why (for the log).
    #[error("{0}")]
    Unusable(String),
    /// The provider refused what was fetched.
    #[error("{url}: {error}")]
    Refused { url: String, error: SignatureError },
    /// The fetch failed.
    #[error("{url}: {error}")]
    Unfetched {
        url: String,
        error: CertificateFetchError,
    },
    /// The task fetching it ended without an outcome.
    #[error("the certificate fetch stopped: {0}")]
    Stopped(String),
}

/// Why a certificate could not be fetched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertificateFetchError {
    #[error("cannot connect: {0}")]
    Connect(String),
    /// Any other answer than 200.
    #[error("answered {0} (redirects are not followed)")]
    Status(reqwest::StatusCode),
    /// The answer's body broke off.
    #[error("{0}")]
    Read(String),
    #[error("more than {MAX_CERTIFICATE_BYTES} bytes")]
    TooLarge,
}

/// hookd's `User-Agent` on what it sends of its own.
const USER_AGENT: &str = concat!("hookd/", env!("CARGO_PKG_VERSION"));

/// A client whose requests give up after `timeout`.
pub fn client(timeout: Duration) -> Result<reqwest::Client, ClientError> {
    built(builder(timeout)?.user_agent(USER_AGENT))
}

/// The same client without a `User-Agent` of its own: a proxy's, which passes
/// on the client's headers as they came (reqwest still adds `Accept: */*` to a
/// request without one, which says the same as none).
pub fn transparent_client(timeout: Duration) -> Result<reqwest::Client, ClientError> {
    built(builder(timeout)?)
}

fn built(builder: reqwest::ClientBuilder) -> Result<reqwest::Client, ClientError> {
    builder
        .build()
        .map_err(|e| ClientError::Build(e.to_string()))
}

/// A client builder trusting the system's roots.
fn builder(timeout: Duration) -> Result<reqwest::ClientBuilder, ClientError> {
    let roots = system_roots();
    if roots.is_empty() {
        log::warn!("no system root certificates: https URLs will not verify");
    }
    builder_trusting(timeout, roots, &[])
}

/// A client trusting `roots`, connecting to the address given for each host of
/// `resolve` instead of asking DNS.
fn client_trusting(
    timeout: Duration,
    roots: rustls::RootCertStore,
    resolve: &[(&str, SocketAddr)],
) -> Result<reqwest::Client, ClientError> {
    built(builder_trusting(timeout, roots, resolve)?.user_agent(USER_AGENT))
}

fn builder_trusting(
    timeout: Duration,
    roots: rustls::RootCertStore,
    resolve: &[(&str, SocketAddr)],
) -> Result<reqwest::ClientBuilder, ClientError> {
    install_crypto();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut builder = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none());
    for (host, addr) in resolve {
        builder = builder.resolve(host, *addr);
    }
    Ok(builder)
}

/// The system's root certificates, as rustls-native-certs finds them.
fn system_roots() -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(found.certs);
    roots
}

/// Where certificates are fetched from and what their chains must lead to.
struct Connection {
    client: reqwest::Client,
    roots: Vec<TrustAnchor<'static>>,
}

/// What a fetch gave, for every delivery waiting on it: why not, on failure.
type Outcome = Shared<BoxFuture<'static, Result<(), CertificateError>>>;

/// The signing certificates an instance's deliveries name (PayPal's), fetched
/// on their behalf: see the module's comment for the limits.
pub struct Certificates {
    /// Made on the first fetch (reading the system's roots takes a moment).
    connection: OnceLock<Result<Arc<Connection>, ClientError>>,
    state: Arc<Mutex<FetchState>>,
}

#[derive(Default)]
struct FetchState {
    /// The fetches under way, by URL.
    in_flight: HashMap<String, Outcome>,
    /// The URLs whose certificate could not be had, and when.
    failed: HashMap<String, Instant>,
    /// When each source's latest fetches started (`FETCHES_PER_MINUTE` at most).
    started: HashMap<String, VecDeque<Instant>>,
}

impl FetchState {
    fn failed_lately(&mut self, url: &str, now: Instant) -> bool {
        self.failed
            .retain(|_, at| now.duration_since(*at) < FAILURE_MEMORY);
        self.failed.contains_key(url)
    }

    /// Counts a fetch `source` starts now, if it may.
    fn may_start(&mut self, source: &str, now: Instant) -> bool {
        let started = self.started.entry(source.to_string()).or_default();
        while started
            .front()
            .is_some_and(|at| now.duration_since(*at) >= MINUTE)
        {
            started.pop_front();
        }
        let may = started.len() < FETCHES_PER_MINUTE;
        if may {
            started.push_back(now);
        }
        may
    }
}

fn lock(state: &Mutex<FetchState>) -> MutexGuard<'_, FetchState> {
    // A panic while holding it leaves maps that are still consistent.
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Default for Certificates {
    fn default() -> Self {
        Self::new()
    }
}

impl Certificates {
    /// Fetching over the system's DNS, trusting the system's roots.
    pub fn new() -> Self {
        Certificates {
            connection: OnceLock::new(),
            state: Arc::default(),
        }
    }

    /// Fetching from `addr` for each of `hosts`, trusting only the PEM
    /// certificates `roots`, for the connection and the chains served alike:
    /// a stand-in for the provider's hosts (tests).
    pub fn stand_in(hosts: &[&str], addr: SocketAddr, roots: &[u8]) -> Result<Self, ClientError> {
        let mut store = rustls::RootCertStore::empty();
        for certificate in CertificateDer::pem_slice_iter(roots) {
            let certificate = certificate.map_err(|e| ClientError::Roots(e.to_string()))?;
            store
                .add(certificate)
                .map_err(|e| ClientError::Roots(e.to_string()))?;
        }
        let resolve: Vec<(&str, SocketAddr)> = hosts.iter().map(|h| (*h, addr)).collect();
        let connection = Connection {
            client: client_trusting(CERTIFICATE_TIMEOUT, store.clone(), &resolve)?,
            roots: store.roots,
        };
        let certificates = Self::new();
        let _ = certificates.connection.set(Ok(Arc::new(connection)));
        Ok(certificates)
    }

    fn connection(&self) -> Result<Arc<Connection>, ClientError> {
        self.connection
            .get_or_init(|| {
                let client = client(CERTIFICATE_TIMEOUT)?;
                static ROOTS: LazyLock<Vec<TrustAnchor<'static>>> =
                    LazyLock::new(|| system_roots().roots);
                Ok(Arc::new(Connection {
                    client,
                    roots: ROOTS.clone(),
                }))
            })
            .clone()
    }

    /// Checks again a delivery to `source` whose signature did not match with
    /// what the source holds, once the key material its provider names
    /// (PayPal's certificate URL) is fetched and handed to the provider; a
    /// mismatch when it names none. Providers' `verify` stays synchronous and
    /// offline: only a delivery whose certificate is neither pinned nor cached
    /// waits on the network, and for one fetch of its URL, shared.
    pub async fn verify_after_fetching(
        &self,
        source: &str,
        verifier: &Verifier<'_>,
        headers: &(impl Headers + ?Sized),
        body: &[u8],
        now: i64,
    ) -> Result<Verified, SignatureError> {
        let provider = verifier.scheme.provider();
        let headers_of = providers::AnyHeaders(headers);
        if provider.to_fetch(&headers_of)?.is_none() {
            return Err(SignatureError::Mismatch);
        }
        let connection = self
            .connection()
            .map_err(|e| SignatureError::Unavailable(e.to_string()))?;
        let outcome = {
            let mut state = lock(&self.state);
            let at = Instant::now();
            // Asked again under the lock: a fetch that ended meanwhile cached
            // its certificate before it left `in_flight`.
            let Some(url) = provider.to_fetch(&headers_of)? else {
                drop(state);
                return verifier.verify(headers, body, now);
            };
            match state.in_flight.get(url.as_str()).cloned() {
                Some(outcome) => outcome,
                None if state.failed_lately(url.as_str(), at) => {
                    return Err(SignatureError::Unavailable(format!(
                        "{url}: failed less than {}s ago",
                        FAILURE_MEMORY.as_secs()
                    )));
                }
                None if !state.may_start(source, at) => {
                    return Err(SignatureError::Unavailable(format!(
                        "{url}: source {source} started {FETCHES_PER_MINUTE} certificate \
                         fetches in the last minute"
                    )));
                }
                None => {
                    let outcome = self.start(connection, verifier.scheme.clone(), url.clone());
                    state.in_flight.insert(url.to_string(), outcome.clone());
                    outcome
                }
            }
        };
        outcome
            .await
            .map_err(|e| SignatureError::Unavailable(e.to_string()))?;
        verifier.verify(headers, body, now)
    }

    /// Fetches `url` in a task of its own (it ends even if every delivery
    /// waiting for it is gone), hands the chain to the provider, and leaves
    /// `in_flight` (remembering a failure); the caller, holding the lock,
    /// files the outcome under `url`.
    fn start(&self, connection: Arc<Connection>, scheme: Scheme, url: reqwest::Url) -> Outcome {
        let state = self.state.clone();
        let task = tokio::spawn(async move {
            let result = match fetch_certificate(&connection.client, &url).await {
                Ok(pem) => scheme
                    .provider()
                    .fetched(&url, &pem, &connection.roots)
                    .map_err(|e| match e {
                        SignatureError::Unavailable(why) => CertificateError::Unusable(why),
                        error => CertificateError::Refused {
                            url: url.to_string(),
                            error,
                        },
                    }),
                Err(error) => Err(CertificateError::Unfetched {
                    url: url.to_string(),
                    error,
                }),
            };
            let mut state = lock(&state);
            state.in_flight.remove(url.as_str());
            if let Err(why) = &result {
                log::warn!("cannot use the signing certificate {why}");
                state.failed.insert(url.to_string(), Instant::now());
            }
            result
        });
        async move {
            task.await
                .unwrap_or_else(|e| Err(CertificateError::Stopped(e.to_string())))
        }
        .boxed()
        .shared()
    }
}

/// GETs a certificate chain: an answer other than 200 (a redirect too) is an
/// error, and so is one beyond `MAX_CERTIFICATE_BYTES`.
async fn fetch_certificate(
    client: &reqwest::Client,
    url: &reqwest::Url,
) -> Result<Vec<u8>, CertificateFetchError> {
    let mut response = client
        .get(url.clone())
        .send()
        .await
        .map_err(|e| CertificateFetchError::Connect(e.to_string()))?;
    if response.status() != reqwest::StatusCode::OK {
        return Err(CertificateFetchError::Status(response.status()));
    }
    let mut pem = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| CertificateFetchError::Read(e.to_string()))?
    {
        if pem.len() + chunk.len() > MAX_CERTIFICATE_BYTES {
            return Err(CertificateFetchError::TooLarge);
        }
        pem.extend_from_slice(&chunk);
    }
    Ok(pem)
}
