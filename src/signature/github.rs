//! GitHub: `X-Hub-Signature-256: sha256=HEX`, HMAC-SHA256(secret, raw body). No
//! timestamp, so no replay window; the delivery id is `X-GitHub-Delivery`.

use super::{Envelope, Headers, SignatureError, Verified, Verifier, hmac_sha256};

const SIGNATURE: &str = "X-Hub-Signature-256";
pub const EVENT: &str = "X-GitHub-Event";
pub const DELIVERY: &str = "X-GitHub-Delivery";
/// Every header name the scheme reads.
pub(super) const HEADERS: [&str; 3] = [SIGNATURE, EVENT, DELIVERY];

pub(super) fn verify(
    verifier: &Verifier<'_>,
    headers: &(impl Headers + ?Sized),
    body: &[u8],
) -> Result<Verified, SignatureError> {
    let value = headers
        .header(SIGNATURE)
        .ok_or_else(|| SignatureError::Missing(SIGNATURE.to_string()))?;
    let hex_tag = value
        .trim()
        .strip_prefix("sha256=")
        .ok_or_else(|| SignatureError::malformed(SIGNATURE, "expected sha256=<hex>"))?;
    let tag = hex::decode(hex_tag).map_err(|_| SignatureError::malformed(SIGNATURE, "not hex"))?;
    verifier.find_signer(&[body], &[tag])
}

/// GitHub names the event by its header; the body's `action`, if any, is appended
/// by the event parser.
pub(super) fn sign(key: &[u8], body: &[u8], envelope: &Envelope<'_>) -> Vec<(String, String)> {
    let tag = hmac_sha256(key, &[body]);
    let event_name = envelope
        .event_type
        .split_once('.')
        .map_or(envelope.event_type, |(name, _)| name);
    vec![
        (
            SIGNATURE.to_string(),
            format!("sha256={}", hex::encode(tag)),
        ),
        (EVENT.to_string(), event_name.to_string()),
        (DELIVERY.to_string(), envelope.event_id.to_string()),
    ]
}
