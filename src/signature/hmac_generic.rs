//! The generic scheme: HMAC-SHA256 over the raw body in a configured header, hex or
//! base64, with an optional prefix (`sha256=`) and an optional timestamp header that
//! is checked against the tolerance (it is not part of the signed message).

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

use super::{
    Encoding, Envelope, GenericHmac, Headers, Locator, SignatureError, Verified, Verifier,
    hmac_sha256,
};

pub(super) fn verify(
    verifier: &Verifier<'_>,
    opts: &GenericHmac,
    headers: &(impl Headers + ?Sized),
    body: &[u8],
    now: i64,
) -> Result<Verified, SignatureError> {
    let header = opts.signature_header.as_str();
    let value = headers
        .header(header)
        .ok_or_else(|| SignatureError::Missing(header.to_string()))?;
    let encoded = value
        .trim()
        .strip_prefix(opts.prefix.as_str())
        .ok_or_else(|| SignatureError::malformed(header, "missing the configured prefix"))?;
    let tag = match opts.encoding {
        Encoding::Hex => hex::decode(encoded).map_err(|_| "not hex"),
        Encoding::Base64 => BASE64.decode(encoded).map_err(|_| "not base64"),
    }
    .map_err(|detail| SignatureError::malformed(header, detail))?;
    let verified = verifier.find_signer(&[body], &[tag])?;
    if let Some(timestamp_header) = &opts.timestamp_header {
        let text = headers
            .header(timestamp_header)
            .ok_or_else(|| SignatureError::Missing(timestamp_header.clone()))?;
        let timestamp = super::parse_unix_seconds(timestamp_header, text)?;
        verifier.check_timestamp(timestamp, now)?;
    }
    Ok(verified)
}

pub(super) fn sign(
    opts: &GenericHmac,
    key: &[u8],
    body: &[u8],
    envelope: &Envelope<'_>,
) -> Vec<(String, String)> {
    let tag = hmac_sha256(key, &[body]);
    let encoded = match opts.encoding {
        Encoding::Hex => hex::encode(tag),
        Encoding::Base64 => BASE64.encode(tag),
    };
    let mut headers = vec![(
        opts.signature_header.clone(),
        format!("{}{encoded}", opts.prefix),
    )];
    if let Locator::Header(name) = &opts.id {
        headers.push((name.clone(), envelope.event_id.to_string()));
    }
    if let Locator::Header(name) = &opts.event_type {
        headers.push((name.clone(), envelope.event_type.to_string()));
    }
    if let Some(name) = &opts.timestamp_header {
        headers.push((name.clone(), envelope.timestamp.to_string()));
    }
    headers
}
