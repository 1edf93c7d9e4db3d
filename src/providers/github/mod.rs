//! GitHub: `X-Hub-Signature-256: sha256=HEX`, HMAC-SHA256(secret, raw body). No
//! timestamp, so no replay window. The delivery id and event name travel in
//! headers beside the signed body (`X-GitHub-Delivery`, `X-GitHub-Event`, with
//! the body's `action` appended); events are named by file when signing.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::errors::{Signing, SigningError};
use super::hmac::HeaderHmac;
use super::{
    Body, Capabilities, Encoding, Missing, Provider, Signature, Simulator, body_member,
    id_in_header, type_in_header, uuid_from,
};
use crate::signature::{Envelope, Headers, KeyFormat, Signed};

const SIGNATURE: &str = "X-Hub-Signature-256";
/// `sha256=` and the hex tag of the raw body, trimmed.
const SIGNED: HeaderHmac<'static> = HeaderHmac {
    header: SIGNATURE,
    prefix: "sha256=",
    encoding: Encoding::Hex,
    trim: true,
    unprefixed: "expected sha256=<hex>",
};
const GITHUB_EVENT: &str = "X-GitHub-Event";
const GITHUB_DELIVERY: &str = "X-GitHub-Delivery";

pub struct Github;

impl KeyFormat for Github {}

impl Provider for Github {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            signs_id: false,
            signs_type: false,
            ..Capabilities::DEFAULT
        }
    }

    fn development_secrets(&self) -> &'static [&'static str] {
        &["dev-github-secret"]
    }

    fn default_mask(&self) -> Vec<String> {
        super::pointers(&[
            "/pusher",
            "/head_commit/author",
            "/head_commit/committer",
            "/commits/*/author",
            "/commits/*/committer",
        ])
    }

    fn name(&self) -> &'static str {
        "github"
    }

    fn signed_header_names(&self) -> Vec<&str> {
        vec![SIGNATURE, GITHUB_EVENT, GITHUB_DELIVERY]
    }

    fn signature(&self) -> Option<Signature<'_>> {
        Some(Signature::header(SIGNED))
    }

    fn identity(
        &self,
        headers: &dyn Headers,
        payload: &Value,
    ) -> Result<(String, String), Missing> {
        let id = id_in_header(headers, GITHUB_DELIVERY)?;
        let name = type_in_header(headers, GITHUB_EVENT)?;
        let ty = match body_member(payload, "action") {
            Some(action) => format!("{name}.{action}"),
            None => name,
        };
        Ok((id, ty))
    }
}

impl Simulator for Github {
    /// GitHub names the event by its header; the body's `action`, if any, is
    /// appended when the event is parsed.
    fn sign(&self, key: &[u8], body: &[u8], envelope: &Envelope<'_>) -> Signing<Signed> {
        let event_name = envelope
            .event_type
            .split_once('.')
            .map_or(envelope.event_type, |(name, _)| name);
        Ok(Signed::headers(vec![
            SIGNED.sign(key, &[body]),
            (GITHUB_EVENT.to_string(), event_name.to_string()),
            (GITHUB_DELIVERY.to_string(), envelope.event_id.to_string()),
        ]))
    }

    fn names_events_by_file(&self) -> bool {
        true
    }

    /// A delivery id derived from the body's content.
    fn signing_id(&self, body: &Body<'_>) -> Result<String, SigningError> {
        Ok(uuid_from(&Sha256::digest(body.bytes)))
    }

    fn signing_type(&self, _: &Body<'_>) -> Result<String, SigningError> {
        Err(SigningError::NotInBody(
            "GitHub events are named by their file name (push.json → push)",
        ))
    }

    fn new_id(&self, random: &[u8; 16]) -> (String, Option<String>) {
        (uuid_from(random), None)
    }
}
