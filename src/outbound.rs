//! hookd's own HTTP client, for forwarding events, replaying fixtures and
//! fetching the signing certificates a provider names (PayPal's): TLS by rustls
//! with the ring provider and the system's root certificates, no redirects
//! followed (a forward's answer is the answer of the URL configured; a
//! certificate comes from the host allowed, or not at all).

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use rustls::pki_types::TrustAnchor;

use crate::providers::{self, Verifier};
use crate::signature::{Headers, SignatureError, Verified};

/// The most a fetched certificate chain may weigh.
const MAX_CERTIFICATE_BYTES: usize = 64 * 1024;

/// How long fetching a certificate may take.
const CERTIFICATE_TIMEOUT: Duration = Duration::from_secs(10);

/// Makes ring this process's rustls crypto provider (once; later calls do
/// nothing), so every HTTP client built here or by a library finds one.
pub fn install_crypto() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Err only if another provider was installed first, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A client whose requests give up after `timeout`.
pub fn client(timeout: Duration) -> Result<reqwest::Client, String> {
    builder(timeout)?
        .user_agent(concat!("hookd/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| format!("HTTP client: {e}"))
}

/// The same client without a `User-Agent` of its own: a proxy's, which passes
/// on the client's headers as they came (reqwest still adds `Accept: */*` to a
/// request without one, which says the same as none).
pub fn transparent_client(timeout: Duration) -> Result<reqwest::Client, String> {
    builder(timeout)?
        .build()
        .map_err(|e| format!("HTTP client: {e}"))
}

fn builder(timeout: Duration) -> Result<reqwest::ClientBuilder, String> {
    install_crypto();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = system_roots();
    if roots.is_empty() {
        log::warn!("no system root certificates: https URLs will not verify");
    }
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none()))
}

/// The system's root certificates, as rustls-native-certs finds them.
fn system_roots() -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(found.certs);
    roots
}

/// Checks again a delivery whose signature did not match with what the source
/// holds, once the key material its provider names (PayPal's certificate URL)
/// is fetched and handed to the provider; a mismatch when it names none.
/// Providers' `verify` stays synchronous and offline; only a delivery whose
/// certificate is neither pinned nor cached waits on the network.
pub async fn verify_after_fetching(
    verifier: &Verifier<'_>,
    headers: &(impl Headers + ?Sized),
    body: &[u8],
    now: i64,
) -> Result<Verified, SignatureError> {
    let provider = providers::of(verifier.scheme);
    let Some(url) = provider.to_fetch(&providers::AnyHeaders(headers))? else {
        return Err(SignatureError::Mismatch);
    };
    let pem = fetch_certificate(&url).await.map_err(|why| {
        log::warn!("cannot fetch the signing certificate {url}: {why}");
        SignatureError::Unavailable(format!("{url}: {why}"))
    })?;
    static ROOTS: LazyLock<Vec<TrustAnchor<'static>>> = LazyLock::new(|| system_roots().roots);
    provider.fetched(&url, &pem, &ROOTS)?;
    verifier.verify(headers, body, now)
}

/// GETs a certificate chain: an answer other than 200 (a redirect too) is an
/// error, and so is one beyond `MAX_CERTIFICATE_BYTES`.
async fn fetch_certificate(url: &reqwest::Url) -> Result<Vec<u8>, String> {
    static CLIENT: LazyLock<Result<reqwest::Client, String>> =
        LazyLock::new(|| client(CERTIFICATE_TIMEOUT));
    let client = CLIENT.as_ref().map_err(Clone::clone)?;
    let mut response = client
        .get(url.clone())
        .send()
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    if response.status() != reqwest::StatusCode::OK {
        return Err(format!(
            "answered {} (redirects are not followed)",
            response.status()
        ));
    }
    let mut pem = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        if pem.len() + chunk.len() > MAX_CERTIFICATE_BYTES {
            return Err(format!("more than {MAX_CERTIFICATE_BYTES} bytes"));
        }
        pem.extend_from_slice(&chunk);
    }
    Ok(pem)
}
