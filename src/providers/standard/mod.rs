//! Standard Webhooks (<https://www.standardwebhooks.com>), also sent by Svix with
//! `svix-*` header names. `webhook-signature: v1,B64[ v1,B64…]` where B64 =
//! base64(HMAC-SHA256(key, `ID.T.` + raw body)) and the key is the base64-decoded
//! secret after its `whsec_` prefix. The id is the signed `webhook-id` header,
//! the type the body's `type`.

use std::borrow::Cow;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::Value;

use super::errors::{SecretError, Signing, SigningError};
use super::{Body, Missing, Provider, Simulator, non_empty_str, type_in_body};
use crate::signature::{
    Envelope, Headers, KeyFormat, Keys, Secret, SignatureError, Signed, Verified, hmac_sha256,
    parse_unix_seconds,
};

const ID: [&str; 2] = ["webhook-id", "svix-id"];
const TIMESTAMP: [&str; 2] = ["webhook-timestamp", "svix-timestamp"];
const SIGNATURE: [&str; 2] = ["webhook-signature", "svix-signature"];

pub struct Standard;

impl KeyFormat for Standard {
    fn key_bytes<'s>(&self, secret: &'s Secret) -> Result<Cow<'s, [u8]>, SecretError> {
        let encoded = secret
            .expose()
            .strip_prefix("whsec_")
            .unwrap_or(secret.expose());
        match BASE64.decode(encoded) {
            Ok(key) if !key.is_empty() => Ok(Cow::Owned(key)),
            Ok(_) => Err(SecretError::EmptyAfter("whsec_")),
            Err(_) => Err(SecretError::NotEncoded {
                encoding: "base64",
                prefix: "whsec_",
            }),
        }
    }
}

/// The webhook-id of a delivery, under either header name.
fn event_id(headers: &dyn Headers) -> Option<&str> {
    first_header(headers, &ID).map(|(_, v)| v)
}

fn first_header<'h>(
    headers: &'h dyn Headers,
    names: &[&'static str; 2],
) -> Option<(&'static str, &'h str)> {
    names
        .iter()
        .find_map(|name| headers.header(name).map(|value| (*name, value)))
}

fn required<'h>(
    headers: &'h dyn Headers,
    names: &[&'static str; 2],
) -> Result<(&'static str, &'h str), SignatureError> {
    first_header(headers, names).ok_or_else(|| SignatureError::Missing(names[0].to_string()))
}

impl Provider for Standard {
    fn development_secrets(&self) -> &'static [&'static str] {
        &["whsec_aG9va2QtZGV2LXN0YW5kYXJkLXNlY3JldC1rZXktMzJi"]
    }

    fn name(&self) -> &'static str {
        "standard"
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["svix"]
    }

    fn signed_header_names(&self) -> Vec<&str> {
        [ID, TIMESTAMP, SIGNATURE].concat()
    }

    fn verify(
        &self,
        keys: &Keys<'_>,
        headers: &dyn Headers,
        body: &[u8],
        now: i64,
    ) -> Result<Verified, SignatureError> {
        let (_, id) = required(headers, &ID)?;
        let (timestamp_header, timestamp_text) = required(headers, &TIMESTAMP)?;
        let (signature_header, signatures) = required(headers, &SIGNATURE)?;
        let timestamp = parse_unix_seconds(timestamp_header, timestamp_text)?;
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
        let verified = keys.find_signer(&message, &candidates)?;
        keys.check_timestamp(timestamp, now)?;
        Ok(verified)
    }

    fn identity(
        &self,
        headers: &dyn Headers,
        payload: &Value,
    ) -> Result<(String, String), Missing> {
        let id = event_id(headers)
            .and_then(non_empty_str)
            .ok_or_else(|| Missing::Id("webhook-id header".into()))?;
        let ty = type_in_body(payload, "type")?;
        Ok((id, ty))
    }
}

impl Simulator for Standard {
    fn sign(&self, key: &[u8], body: &[u8], envelope: &Envelope<'_>) -> Signing<Signed> {
        let t = envelope.timestamp.to_string();
        let id = envelope.event_id;
        let tag = hmac_sha256(key, &[id.as_bytes(), b".", t.as_bytes(), b".", body]);
        Ok(Signed::headers(vec![
            (ID[0].to_string(), id.to_string()),
            (TIMESTAMP[0].to_string(), t),
            (
                SIGNATURE[0].to_string(),
                format!("v1,{}", BASE64.encode(tag)),
            ),
        ]))
    }

    /// `whsec_` and the base64 of 32 random bytes.
    fn new_secret(&self) -> Secret {
        let bytes: [u8; 32] = rand::random();
        Secret::new(format!("whsec_{}", BASE64.encode(bytes)))
    }

    /// The body's `id`, or one derived from its content.
    fn signing_id(&self, body: &Body<'_>) -> Result<String, SigningError> {
        Ok(body
            .text("id")
            .unwrap_or_else(|| format!("msg_{}", body.content_id())))
    }

    fn new_id(&self, random: &[u8; 16]) -> (String, Option<String>) {
        (
            format!("msg_{}", hex::encode(&random[..12])),
            Some("/id".into()),
        )
    }
}
