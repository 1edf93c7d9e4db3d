//! Standard Webhooks (Svix): the id is the signed `webhook-id` header, the type
//! the body's `type`; secrets are `whsec_` and base64. The MAC is
//! `crate::signature`'s.

use base64::Engine;
use serde_json::Value;

use super::{Body, Missing, Provider, body_member, non_empty_str};
use crate::signature::{Headers, Secret, standard_event_id};

pub struct Standard;

impl Provider for Standard {
    fn name(&self) -> &'static str {
        "standard"
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["svix"]
    }

    /// `whsec_` and the base64 of 32 random bytes.
    fn new_secret(&self) -> Secret {
        let bytes: [u8; 32] = rand::random();
        Secret::new(format!(
            "whsec_{}",
            base64::engine::general_purpose::STANDARD.encode(bytes)
        ))
    }

    fn identity(
        &self,
        headers: &dyn Headers,
        payload: &Value,
    ) -> Result<(String, String), Missing> {
        let id = standard_event_id(headers)
            .and_then(non_empty_str)
            .ok_or_else(|| Missing::Id("webhook-id header".into()))?;
        let ty = body_member(payload, "type").ok_or_else(|| Missing::Type("body.type".into()))?;
        Ok((id, ty))
    }

    /// The body's `id`, or one derived from its content.
    fn signing_id(&self, body: &Body<'_>) -> Result<String, String> {
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
