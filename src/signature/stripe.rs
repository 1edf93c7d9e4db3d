//! `Stripe-Signature: t=T,v1=HEX[,v1=HEX…]` where HEX = HMAC-SHA256(secret string,
//! `T.` + raw body). Every `v1` is tried (Stripe sends several while a secret rolls);
//! other schemes (`v0`) are ignored.

use super::{Envelope, Headers, SignatureError, Verified, Verifier, hmac_sha256};

pub(super) const HEADER: &str = "Stripe-Signature";

pub(super) fn verify(
    verifier: &Verifier<'_>,
    headers: &(impl Headers + ?Sized),
    body: &[u8],
    now: i64,
) -> Result<Verified, SignatureError> {
    let value = headers
        .header(HEADER)
        .ok_or_else(|| SignatureError::Missing(HEADER.to_string()))?;
    let mut timestamp = None;
    let mut candidates = Vec::new();
    for item in value.split(',') {
        let Some((key, val)) = item.trim().split_once('=') else {
            return Err(SignatureError::malformed(
                HEADER,
                "expected key=value pairs",
            ));
        };
        match key {
            "t" if timestamp.is_none() => timestamp = Some(val),
            "t" => return Err(SignatureError::malformed(HEADER, "more than one timestamp")),
            "v1" => {
                let tag = hex::decode(val)
                    .map_err(|_| SignatureError::malformed(HEADER, "v1 is not hex"))?;
                candidates.push(tag);
            }
            _ => {}
        }
    }
    let timestamp_text = timestamp.ok_or_else(|| SignatureError::malformed(HEADER, "no t="))?;
    if candidates.is_empty() {
        return Err(SignatureError::malformed(HEADER, "no v1 signature"));
    }
    let timestamp = super::parse_unix_seconds(HEADER, timestamp_text)?;
    let verified = verifier.find_signer(&[timestamp_text.as_bytes(), b".", body], &candidates)?;
    verifier.check_timestamp(timestamp, now)?;
    Ok(verified)
}

pub(super) fn sign(key: &[u8], body: &[u8], envelope: &Envelope<'_>) -> Vec<(String, String)> {
    let t = envelope.timestamp.to_string();
    let tag = hmac_sha256(key, &[t.as_bytes(), b".", body]);
    vec![(HEADER.to_string(), format!("t={t},v1={}", hex::encode(tag)))]
}
