//! The certificates PayPal's deliveries name: fetched ones cached until their
//! `notAfter` (evicted one at a time), their subject and expiry read, and a
//! signature checked against one.

use super::*;

/// Fetched certificates at most held; when full, the one used longest ago
/// makes room (only PayPal's chain-checked certificates get in).
pub(super) const CACHE_LIMIT: usize = 64;

/// A fetched certificate, as cached.
pub(super) struct Fetched {
    pub(super) certificate: CertificateDer<'static>,
    /// Its `notAfter`, Unix seconds: it is dropped then.
    pub(super) not_after: i64,
    /// Whether its subject is the sandbox's.
    pub(super) sandbox: bool,
    /// When it was last used, on the cache's own clock.
    pub(super) used: u64,
}

/// Certificates fetched from their URLs and found to be PayPal's, by URL.
#[derive(Default)]
pub(super) struct Cache {
    pub(super) entries: HashMap<String, Fetched>,
    /// Counts uses, to find the one used longest ago.
    clock: u64,
}

impl Cache {
    /// The certificate cached for `url` at `now` (Unix seconds), if it has not
    /// expired and a source that is `sandbox` or not may use it.
    pub(super) fn get(
        &mut self,
        url: &str,
        now: i64,
        sandbox: bool,
    ) -> Option<CertificateDer<'static>> {
        if self.entries.get(url)?.not_after <= now {
            self.entries.remove(url);
            return None;
        }
        self.clock += 1;
        let entry = self.entries.get_mut(url)?;
        if entry.sandbox && !sandbox {
            return None;
        }
        entry.used = self.clock;
        Some(entry.certificate.clone())
    }

    /// Keeps a certificate for `url`: expired ones go first, then, if the cache
    /// is still full, the one used longest ago (never all at once).
    pub(super) fn insert(&mut self, url: &str, mut fetched: Fetched, now: i64) {
        self.entries.retain(|_, e| e.not_after > now);
        if self.entries.len() >= CACHE_LIMIT && !self.entries.contains_key(url) {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(u, _)| u.clone());
            if let Some(oldest) = oldest {
                self.entries.remove(&oldest);
            }
        }
        self.clock += 1;
        fetched.used = self.clock;
        self.entries.insert(url.to_string(), fetched);
    }
}

/// Shared by every PayPal source of the process.
pub(super) static FETCHED_CERTIFICATES: LazyLock<Mutex<Cache>> = LazyLock::new(Mutex::default);

pub(super) fn cached(url: &str, sandbox: bool) -> Option<CertificateDer<'static>> {
    let now = chrono::Utc::now().timestamp();
    FETCHED_CERTIFICATES
        .lock()
        .ok()
        .and_then(|mut cache| cache.get(url, now, sandbox))
}

/// Why a certificate cannot be PayPal's signing certificate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum CertificateError {
    #[error("not an X.509 certificate ({0})")]
    NotX509(String),
    #[error("its subject has {0} common names, not one")]
    CommonNames(usize),
}

/// The common name of a certificate's subject (its only one), and its
/// `notAfter` in Unix seconds.
pub(super) fn subject_and_expiry(
    certificate: &CertificateDer<'_>,
) -> Result<(String, i64), CertificateError> {
    use x509_cert::der::Decode;
    use x509_cert::der::asn1::{PrintableStringRef, Utf8StringRef};
    const COMMON_NAME: x509_cert::spki::ObjectIdentifier =
        x509_cert::spki::ObjectIdentifier::new_unwrap("2.5.4.3");
    let parsed = x509_cert::Certificate::from_der(certificate)
        .map_err(|e| CertificateError::NotX509(e.to_string()))?;
    let tbs = &parsed.tbs_certificate;
    let names: Vec<String> = tbs
        .subject
        .0
        .iter()
        .flat_map(|rdn| rdn.0.iter())
        .filter(|atv| atv.oid == COMMON_NAME)
        .map(|atv| {
            atv.value
                .decode_as::<Utf8StringRef<'_>>()
                .map(|s| s.as_str().to_string())
                .or_else(|_| {
                    atv.value
                        .decode_as::<PrintableStringRef<'_>>()
                        .map(|s| s.as_str().to_string())
                })
                .unwrap_or_default()
        })
        .collect();
    let [name] = names.as_slice() else {
        return Err(CertificateError::CommonNames(names.len()));
    };
    let not_after = tbs.validity.not_after.to_unix_duration().as_secs();
    Ok((name.clone(), i64::try_from(not_after).unwrap_or(i64::MAX)))
}

/// Whether `signature` over `message` is `certificate`'s key's.
pub(super) fn signed_by(
    certificate: &CertificateDer<'_>,
    message: &[u8],
    signature: &[u8],
) -> bool {
    webpki::EndEntityCert::try_from(certificate).is_ok_and(|cert| {
        cert.verify_signature(webpki::ring::RSA_PKCS1_2048_8192_SHA256, message, signature)
            .is_ok()
    })
}
