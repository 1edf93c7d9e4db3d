//! GitHub: the delivery id and event name travel in headers beside the signed
//! body (`X-GitHub-Delivery`, `X-GitHub-Event`, with the body's `action`
//! appended); events are named by file when signing. The MAC is
//! `crate::signature`'s (`X-Hub-Signature-256`).

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{Body, Missing, Provider, body_member, non_empty_str, uuid_from};
use crate::signature::{GITHUB_DELIVERY, GITHUB_EVENT, Headers};

pub struct Github;

impl Provider for Github {
    fn name(&self) -> &'static str {
        "github"
    }

    fn identity(
        &self,
        headers: &dyn Headers,
        payload: &Value,
    ) -> Result<(String, String), Missing> {
        let id = headers
            .header(GITHUB_DELIVERY)
            .and_then(non_empty_str)
            .ok_or_else(|| Missing::Id(format!("{GITHUB_DELIVERY} header")))?;
        let name = headers
            .header(GITHUB_EVENT)
            .and_then(non_empty_str)
            .ok_or_else(|| Missing::Type(format!("{GITHUB_EVENT} header")))?;
        let ty = match body_member(payload, "action") {
            Some(action) => format!("{name}.{action}"),
            None => name,
        };
        Ok((id, ty))
    }

    fn signs_id(&self) -> bool {
        false
    }

    fn signs_type(&self) -> bool {
        false
    }

    fn names_events_by_file(&self) -> bool {
        true
    }

    /// A delivery id derived from the body's content.
    fn signing_id(&self, body: &Body<'_>) -> Result<String, String> {
        Ok(uuid_from(&Sha256::digest(body.bytes)))
    }

    fn signing_type(&self, _: &Body<'_>) -> Result<String, String> {
        Err("GitHub events are named by their file name (push.json → push)".into())
    }

    fn new_id(&self, random: &[u8; 16]) -> (String, Option<String>) {
        (uuid_from(random), None)
    }
}
