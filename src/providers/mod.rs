//! Payment and webhook providers: one file each, owning what its provider defines
//! beyond the MAC itself — where the event id and type live and whether the
//! signature covers them, the default type → kind rules and fingerprint-ignored
//! fields, where payment facts live, the ids `hookd sign` and `--new-ids` write,
//! and the format of a fresh secret. Pure: no HTTP, no database.
//!
//! A new provider is a file implementing [`Provider`] and a line in [`of`] (the
//! compiler checks that every [`Scheme`] has one) and in [`ALL`].

mod github;
mod hmac;
pub mod shape;
mod standard;
mod stripe;

use std::collections::HashMap;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::signature::{Headers, Locator, Scheme, Secret};
use shape::PaymentShape;

/// What a provider defines, beyond the signature's MAC (see the module comment).
pub trait Provider: Sync {
    /// The scheme's name in `[[sources]]` and in stored events.
    fn name(&self) -> &'static str;

    /// Other names `hookd secret --scheme` accepts for it.
    fn aliases(&self) -> &'static [&'static str] {
        &[]
    }

    /// A fresh random secret in the format the provider's dashboards use: 64 hex
    /// digits for providers that prescribe none.
    fn new_secret(&self) -> Secret {
        Secret::new(hex::encode(rand::random::<[u8; 32]>()))
    }

    /// The event id and provider type of a delivery, or which of them is missing.
    fn identity(&self, headers: &dyn Headers, payload: &Value)
    -> Result<(String, String), Missing>;

    /// Whether the signature covers the event id (true unless it travels beside
    /// the signed body).
    fn signs_id(&self) -> bool {
        true
    }

    /// Whether the signature covers the event type.
    fn signs_type(&self) -> bool {
        true
    }

    /// Whether the id or the type travels beside the signed body, where anyone
    /// holding one real delivery may change it.
    fn leaves_identity_unsigned(&self) -> bool {
        !self.signs_id() || !self.signs_type()
    }

    /// The `event_types` (provider type → kind) a source has before its own.
    fn default_event_types(&self) -> HashMap<String, String> {
        HashMap::new()
    }

    /// The `fingerprint_ignore` of a source that sets none.
    fn default_fingerprint_ignore(&self) -> Vec<String> {
        Vec::new()
    }

    /// Where the provider's bodies carry payment facts.
    fn payment_shape(&self) -> PaymentShape {
        PaymentShape::Neutral
    }

    /// Whether events are named by their file name when signing a file
    /// (`push.json` → `push`): the provider sends the type beside the body.
    fn names_events_by_file(&self) -> bool {
        false
    }

    /// The id the provider would send with `body` when the caller names none
    /// (`hookd sign`, `hookd replay`, the tests).
    fn signing_id(&self, body: &Body<'_>) -> Result<String, String>;

    /// The type the provider would send with `body` when the caller names none.
    fn signing_type(&self, body: &Body<'_>) -> Result<String, String> {
        body.text("type")
            .ok_or_else(|| "the body needs a \"type\"".into())
    }

    /// A fresh event id for `--new-ids` from random bytes, and the JSON pointer of
    /// the body member that carries it (none when it travels in a header).
    fn new_id(&self, random: &[u8; 16]) -> (String, Option<String>);
}

/// Which part of a delivery's identity is missing, described as the provider sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    Id(String),
    Type(String),
}

/// A body being signed: its bytes and its JSON.
#[derive(Debug, Clone, Copy)]
pub struct Body<'a> {
    pub bytes: &'a [u8],
    pub value: &'a Value,
}

impl Body<'_> {
    /// A top-level string member.
    pub fn text(&self, field: &str) -> Option<String> {
        self.value
            .get(field)
            .and_then(Value::as_str)
            .map(String::from)
    }

    /// A string or number at a JSON pointer.
    pub fn pointer(&self, pointer: &str) -> Option<String> {
        match self.value.pointer(pointer) {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        }
    }

    /// An id derived from the body's content.
    pub fn content_id(&self) -> String {
        hex::encode(&Sha256::digest(self.bytes)[..12])
    }
}

/// The provider of a configured scheme: the one place that lists them.
pub fn of(scheme: &Scheme) -> &dyn Provider {
    match scheme {
        Scheme::Stripe => &stripe::Stripe,
        Scheme::Standard => &standard::Standard,
        Scheme::Github => &github::Github,
        Scheme::Hmac(opts) => opts,
    }
}

/// Every provider, for what does not depend on a source's own keys (secret
/// formats, payment shapes of stored events).
pub static ALL: [&dyn Provider; 4] = [
    &stripe::Stripe,
    &standard::Standard,
    &github::Github,
    &hmac::ANY,
];

/// The provider named `name` (or one of its aliases).
pub fn named(name: &str) -> Option<&'static dyn Provider> {
    ALL.iter()
        .copied()
        .find(|p| p.name() == name || p.aliases().contains(&name))
}

/// Every name `hookd secret --scheme` accepts.
pub fn names() -> Vec<&'static str> {
    ALL.iter()
        .flat_map(|p| std::iter::once(p.name()).chain(p.aliases().iter().copied()))
        .collect()
}

/// Random bytes as a UUID's text.
fn uuid_from(bytes: &[u8]) -> String {
    let h = hex::encode(&bytes[..16]);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

fn non_empty_str(value: &str) -> Option<String> {
    let value = value.trim();
    (!value.is_empty()).then(|| value.to_string())
}

/// A string, or a number written as one (some providers use numeric ids).
fn non_empty(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(s) => non_empty_str(s),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A top-level member of the body, as an id or type.
fn body_member(payload: &Value, field: &str) -> Option<String> {
    non_empty(payload.get(field))
}

/// A value located in a delivery, for the generic scheme.
fn locate(locator: &Locator, headers: &dyn Headers, payload: &Value) -> Option<String> {
    match locator {
        Locator::Header(name) => headers.header(name).and_then(non_empty_str),
        Locator::Pointer(pointer) => non_empty(payload.pointer(pointer)),
    }
}

#[cfg(test)]
mod tests;
