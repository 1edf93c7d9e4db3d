//! Generic HMAC (Shopify and the like): the id and type are wherever the source's
//! `id_header`/`id_pointer` and `type_header`/`type_pointer` say; only pointers
//! into the body are signed. The MAC is `crate::signature`'s.

use serde_json::Value;

use super::{Body, Missing, Provider, locate};
use crate::signature::{Encoding, GenericHmac, Headers, Locator};

/// A generic source with no keys of its own, for what does not depend on them
/// (the secret format, the payment shape).
pub static ANY: GenericHmac = GenericHmac {
    signature_header: String::new(),
    encoding: Encoding::Hex,
    prefix: String::new(),
    id: Locator::Header(String::new()),
    event_type: Locator::Header(String::new()),
    timestamp_header: None,
};

fn describe(locator: &Locator) -> String {
    match locator {
        Locator::Header(name) => format!("{name} header"),
        Locator::Pointer(pointer) => format!("body{pointer}"),
    }
}

impl Provider for GenericHmac {
    fn name(&self) -> &'static str {
        "hmac"
    }

    fn identity(
        &self,
        headers: &dyn Headers,
        payload: &Value,
    ) -> Result<(String, String), Missing> {
        let id =
            locate(&self.id, headers, payload).ok_or_else(|| Missing::Id(describe(&self.id)))?;
        let ty = locate(&self.event_type, headers, payload)
            .ok_or_else(|| Missing::Type(describe(&self.event_type)))?;
        Ok((id, ty))
    }

    fn signs_id(&self) -> bool {
        matches!(self.id, Locator::Pointer(_))
    }

    fn signs_type(&self) -> bool {
        matches!(self.event_type, Locator::Pointer(_))
    }

    fn signing_id(&self, body: &Body<'_>) -> Result<String, String> {
        match &self.id {
            Locator::Pointer(p) => body
                .pointer(p)
                .ok_or_else(|| format!("the body has no {p}")),
            Locator::Header(_) => Ok(body.text("id").unwrap_or_else(|| body.content_id())),
        }
    }

    fn signing_type(&self, body: &Body<'_>) -> Result<String, String> {
        match &self.event_type {
            Locator::Pointer(p) => body
                .pointer(p)
                .ok_or_else(|| format!("the body has no {p}")),
            Locator::Header(_) => body
                .text("type")
                .ok_or_else(|| "the body needs a \"type\"".into()),
        }
    }

    fn new_id(&self, random: &[u8; 16]) -> (String, Option<String>) {
        let field = match &self.id {
            Locator::Pointer(p) => p.clone(),
            Locator::Header(_) => "/id".into(),
        };
        (hex::encode(&random[..12]), Some(field))
    }
}
