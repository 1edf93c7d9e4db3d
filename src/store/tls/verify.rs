//! The server certificate check each `sslmode` asks for (the roots it trusts,
//! and the lenient verifier of `require`), and one-line explanations of failures.

use std::error::Error as StdError;
use std::io;
use std::path::Path;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::{DatabaseUrlError, SslMode, UrlParams};

pub(super) fn verifier(
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
pub(super) fn io_text(error: &io::Error) -> String {
    let text = error.to_string();
    match error.raw_os_error() {
        Some(code) => text
            .strip_suffix(&format!(" (os error {code})"))
            .map_or(text.clone(), str::to_string),
        None => text,
    }
}
