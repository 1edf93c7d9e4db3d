//! Standard Webhooks (<https://www.standardwebhooks.com>), also sent by Svix with
//! `svix-*` header names. `webhook-signature: v1,B64[ v1,B64…]` where B64 =
//! base64(HMAC-SHA256(key, `ID.T.` + raw body)) and the key is the base64-decoded
//! secret after its `whsec_` prefix.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

use super::{Envelope, Headers, SignatureError, Verified, Verifier, hmac_sha256};

const ID: [&str; 2] = ["webhook-id", "svix-id"];
const TIMESTAMP: [&str; 2] = ["webhook-timestamp", "svix-timestamp"];
const SIGNATURE: [&str; 2] = ["webhook-signature", "svix-signature"];
/// Every header name the scheme reads.
pub(super) const HEADERS: [&str; 6] = [
    ID[0],
    ID[1],
    TIMESTAMP[0],
    TIMESTAMP[1],
    SIGNATURE[0],
    SIGNATURE[1],
];

pub(super) fn key_bytes(secret: &str) -> Result<Vec<u8>, String> {
    let encoded = secret.strip_prefix("whsec_").unwrap_or(secret);
    match BASE64.decode(encoded) {
        Ok(key) if !key.is_empty() => Ok(key),
        Ok(_) => Err("is empty after the whsec_ prefix".to_string()),
        Err(_) => Err("is not base64 after the whsec_ prefix".to_string()),
    }
}

/// The webhook-id of a delivery, under either header name.
pub fn event_id(headers: &(impl Headers + ?Sized)) -> Option<&str> {
    first_header(headers, &ID).map(|(_, v)| v)
}

fn first_header<'h>(
    headers: &'h (impl Headers + ?Sized),
    names: &[&'static str; 2],
) -> Option<(&'static str, &'h str)> {
    names
        .iter()
        .find_map(|name| headers.header(name).map(|value| (*name, value)))
}

fn required<'h>(
    headers: &'h (impl Headers + ?Sized),
    names: &[&'static str; 2],
) -> Result<(&'static str, &'h str), SignatureError> {
    first_header(headers, names).ok_or_else(|| SignatureError::Missing(names[0].to_string()))
}

pub(super) fn verify(
    verifier: &Verifier<'_>,
    headers: &(impl Headers + ?Sized),
    body: &[u8],
    now: i64,
) -> Result<Verified, SignatureError> {
    let (_, id) = required(headers, &ID)?;
    let (timestamp_header, timestamp_text) = required(headers, &TIMESTAMP)?;
    let (signature_header, signatures) = required(headers, &SIGNATURE)?;
    let timestamp = super::parse_unix_seconds(timestamp_header, timestamp_text)?;
    let mut candidates = Vec::new();
    for item in signatures.split_whitespace() {
        let Some((version, encoded)) = item.split_once(',') else {
            return Err(SignatureError::malformed(
                signature_header,
                "expected v1,<base64>",
            ));
        };
        if version != "v1" {
            continue;
        }
        let tag = BASE64
            .decode(encoded)
            .map_err(|_| SignatureError::malformed(signature_header, "v1 is not base64"))?;
        candidates.push(tag);
    }
    if candidates.is_empty() {
        return Err(SignatureError::malformed(
            signature_header,
            "no v1 signature",
        ));
    }
    let message = [
        id.as_bytes(),
        b".",
        timestamp_text.trim().as_bytes(),
        b".",
        body,
    ];
    let verified = verifier.find_signer(&message, &candidates)?;
    verifier.check_timestamp(timestamp, now)?;
    Ok(verified)
}

pub(super) fn sign(key: &[u8], body: &[u8], envelope: &Envelope<'_>) -> Vec<(String, String)> {
    let t = envelope.timestamp.to_string();
    let id = envelope.event_id;
    let tag = hmac_sha256(key, &[id.as_bytes(), b".", t.as_bytes(), b".", body]);
    vec![
        (ID[0].to_string(), id.to_string()),
        (TIMESTAMP[0].to_string(), t),
        (
            SIGNATURE[0].to_string(),
            format!("v1,{}", BASE64.encode(tag)),
        ),
    ]
}
