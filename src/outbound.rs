//! hookd's own HTTP client, for forwarding events and replaying fixtures: TLS by
//! rustls with the ring provider and the system's root certificates, no
//! redirects followed (a forward's answer is the answer of the URL configured).

use std::sync::Arc;
use std::time::Duration;

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
    install_crypto();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        log::warn!("no system root certificates: https URLs will not verify");
    }
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("hookd/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| format!("HTTP client: {e}"))
}
