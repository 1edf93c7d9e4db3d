//! Whether a delivery is its provider's: the scheme's check, and where the
//! request names a signing certificate hookd does not hold yet (PayPal's), the
//! check again once it is fetched. The one verifier of `POST /webhooks/{source}`
//! and `hookd verify`.

use crate::config::{Source, is_development_credential};
use crate::outbound::Certificates;
use crate::providers;
use crate::signature::{Headers, SignatureError, Verified};

/// The signature alone (what `hookd verify` checks), fetching a certificate
/// the request names when it is needed.
pub async fn signature(
    certificates: &Certificates,
    source: &Source,
    headers: &(impl Headers + ?Sized),
    body: &[u8],
    at: i64,
) -> Result<Verified, SignatureError> {
    let verifier = source.verifier();
    match verifier.verify(headers, body, at) {
        Err(SignatureError::Mismatch) => {
            certificates
                .verify_after_fetching(&source.name, &verifier, headers, body, at)
                .await
        }
        verified => verified,
    }
}

/// A request as received: its credentials (Adyen's basic auth), then its
/// signature.
pub async fn request(
    certificates: &Certificates,
    source: &Source,
    headers: &(impl Headers + ?Sized),
    body: &[u8],
    at: i64,
) -> Result<Verified, SignatureError> {
    source
        .scheme
        .provider()
        .authenticate(&providers::AnyHeaders(headers))?;
    signature(certificates, source, headers, body, at).await
}

/// Whether a verified delivery was signed with a credential the shipped
/// `hookd.toml` makes public: such a delivery is taken from this machine only.
pub fn signed_with_a_shipped_credential(source: &Source, verified: &Verified) -> bool {
    let signer = usize::try_from(verified.signed_with - 1)
        .ok()
        .and_then(|i| source.secrets.get(i));
    signer.is_some_and(|s| is_development_credential(s.expose()))
        || source.scheme.provider().development_credential().is_some()
}
