//! Payment and webhook providers: one folder each, owning everything its provider
//! defines — its config keys, how a request is verified and signed, the events a
//! request carries, where each event's id and type live and whether the
//! signature covers them, the answer the provider expects, the default type →
//! kind rules and fingerprint-ignored fields, where payment facts live, the ids
//! `hookd sign` and `--new-ids` write, and the format of a fresh secret. Pure: no
//! HTTP, no database.
//!
//! A new provider is a folder implementing [`Provider`] and [`Simulator`], a
//! variant of [`Scheme`] and a line in [`REGISTRY`]; the compiler checks [`of`]
//! covers every variant. This file is the only one outside a provider's folder
//! that names it (`tools/provider_names.py` counts).

mod adyen;
pub mod api;
mod braintree;
mod checkout;
pub mod errors;
mod github;
mod gocardless;
mod hmac;
mod mollie;
mod paddle;
mod paypal;
mod provider;
mod razorpay;
pub mod shape;
mod simulator;
mod square;
mod standard;
mod stripe;

use std::borrow::Cow;
use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::config_keys::{self as keys, Problem};
use crate::domain::PaymentKind;
use crate::signature::{Envelope, Headers, Keys, Secret, SignatureError, Signed, Verified};
pub use api::Lister;
pub use errors::{FactsError, FetchError, PayloadError, SecretError, SigningError};
pub use hmac::{Encoding, GenericHmac, Locator};
use provider::time_at;
pub use provider::*;
#[cfg(test)]
use shape::PaymentShape;
pub use simulator::Simulator;

/// A configured source's provider, with the keys only it takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scheme {
    Stripe,
    Standard,
    Github,
    Hmac(GenericHmac),
    Adyen(adyen::Adyen),
    Paddle,
    Square(square::Square),
    Razorpay,
    Checkout(checkout::Checkout),
    GoCardless,
    PayPal(paypal::PayPal),
    Braintree,
    Mollie(mollie::Mollie),
}

impl Scheme {
    /// The provider of a configured scheme.
    pub fn provider(&self) -> &dyn Provider {
        match self {
            Scheme::Stripe => &stripe::Stripe,
            Scheme::Standard => &standard::Standard,
            Scheme::Github => &github::Github,
            Scheme::Hmac(opts) => opts,
            Scheme::Adyen(opts) => opts,
            Scheme::Paddle => &paddle::Paddle,
            Scheme::Square(opts) => opts,
            Scheme::Razorpay => &razorpay::Razorpay,
            Scheme::Checkout(opts) => opts,
            Scheme::GoCardless => &gocardless::GoCardless,
            Scheme::PayPal(opts) => opts,
            Scheme::Braintree => &braintree::Braintree,
            Scheme::Mollie(opts) => opts,
        }
    }
}

/// Reads a provider's own keys of a source into its [`Scheme`]; the function
/// names a key as messages show it.
pub type Configure = fn(toml::Table, &dyn Fn(&str) -> String) -> Result<Scheme, Problem>;

/// How a `[[sources]]` table's `scheme` becomes a [`Scheme`]: the provider's
/// name, its own keys (any other key a source sets beyond the common ones is an
/// error naming it), and how it reads them.
pub struct Entry {
    pub provider: &'static dyn Provider,
    /// The keys only this provider takes.
    pub keys: &'static [&'static str],
    /// Its keys, read and checked.
    pub configure: Configure,
}

/// The entry of a provider that takes no keys of its own.
macro_rules! keyless {
    ($provider:expr, $scheme:expr) => {
        Entry {
            provider: &$provider,
            keys: &[],
            configure: |_, _| Ok($scheme),
        }
    };
}

/// The entry of a provider whose module reads its own keys (`KEYS`,
/// `configure`) into its options (`ANY` stands for any of them).
macro_rules! with_keys {
    ($module:ident) => {
        Entry {
            provider: &$module::ANY,
            keys: $module::KEYS,
            configure: $module::configure,
        }
    };
}

/// Every provider: the one list a new one is added to.
pub static REGISTRY: [Entry; 13] = [
    keyless!(stripe::Stripe, Scheme::Stripe),
    keyless!(standard::Standard, Scheme::Standard),
    keyless!(github::Github, Scheme::Github),
    with_keys!(hmac),
    with_keys!(adyen),
    keyless!(paddle::Paddle, Scheme::Paddle),
    with_keys!(square),
    keyless!(razorpay::Razorpay, Scheme::Razorpay),
    with_keys!(checkout),
    keyless!(gocardless::GoCardless, Scheme::GoCardless),
    with_keys!(paypal),
    keyless!(braintree::Braintree, Scheme::Braintree),
    with_keys!(mollie),
];

/// The scheme a source names, configured from its own keys (`others`: the
/// source's other keys, which an unknown key's message lists too).
pub fn configure(
    name: &str,
    table: toml::Table,
    key: &dyn Fn(&str) -> String,
    others: &[&str],
) -> Result<Scheme, Problem> {
    let Some(entry) = REGISTRY
        .iter()
        .find(|e| e.provider.name() == name || e.provider.aliases().contains(&name))
    else {
        return Err((
            key("scheme"),
            format!("{name:?} is not one of {}", scheme_names().join(", ")),
        ));
    };
    if let Some(unknown) = table.keys().find(|k| !entry.keys.contains(&k.as_str())) {
        // Another provider's key is named as such; anything else is unknown.
        if let Some(owner) = REGISTRY.iter().find(|e| e.keys.contains(&unknown.as_str())) {
            return Err((
                key(unknown),
                format!("only applies to scheme \"{}\"", owner.provider.name()),
            ));
        }
        let mut known: Vec<&str> = others.to_vec();
        known.extend(entry.keys);
        return Err((key(unknown), keys::unknown_key(unknown, &known)));
    }
    (entry.configure)(table, key)
}

/// The scheme names a source may use, as the configuration writes them.
pub fn scheme_names() -> Vec<&'static str> {
    REGISTRY.iter().map(|e| e.provider.name()).collect()
}

/// The provider named `name` (or one of its aliases), for what does not depend
/// on a source's own keys (secret formats, payment facts of stored events).
pub fn named(name: &str) -> Option<&'static dyn Provider> {
    REGISTRY
        .iter()
        .map(|e| e.provider)
        .find(|p| p.name() == name || p.aliases().contains(&name))
}

/// Every name `hookd secret --scheme` accepts (not PayPal's, which takes no secrets).
pub fn names() -> Vec<&'static str> {
    REGISTRY
        .iter()
        .filter(|e| e.provider.takes_secrets())
        .flat_map(|e| {
            std::iter::once(e.provider.name()).chain(e.provider.aliases().iter().copied())
        })
        .collect()
}

impl Scheme {
    pub fn name(&self) -> &'static str {
        self.provider().name()
    }

    pub fn key_bytes<'s>(&self, secret: &'s Secret) -> Result<Cow<'s, [u8]>, SecretError> {
        self.provider().key_bytes(secret)
    }

    pub fn signed_header_names(&self) -> Vec<&str> {
        self.provider().signed_header_names()
    }
}

/// One configured source as the verifier sees it.
#[derive(Debug, Clone, Copy)]
pub struct Verifier<'a> {
    pub scheme: &'a Scheme,
    pub secrets: &'a [Secret],
    pub tolerance: Duration,
}

impl Verifier<'_> {
    /// Checks a request as received: its credentials, then its signature.
    pub fn verify_request(
        &self,
        headers: &(impl Headers + ?Sized),
        body: &[u8],
        now: i64,
    ) -> Result<Verified, SignatureError> {
        self.scheme.provider().authenticate(&AnyHeaders(headers))?;
        self.verify(headers, body, now)
    }

    /// Checks what was kept of a delivery (see [`Provider::verify_kept`]).
    pub fn verify_kept(
        &self,
        headers: &(impl Headers + ?Sized),
        kept: &[u8],
        now: i64,
    ) -> Result<Verified, SignatureError> {
        let (provider, keys) = self.keys();
        provider.verify_kept(&keys, &AnyHeaders(headers), kept, now)
    }

    /// Checks a delivery's signature against every secret; `now` is Unix seconds.
    pub fn verify(
        &self,
        headers: &(impl Headers + ?Sized),
        body: &[u8],
        now: i64,
    ) -> Result<Verified, SignatureError> {
        let (provider, keys) = self.keys();
        provider.verify(&keys, &AnyHeaders(headers), body, now)
    }

    /// The source's provider, and its secrets as that provider reads them.
    fn keys(&self) -> (&dyn Provider, Keys<'_>) {
        let provider = self.scheme.provider();
        let keys = Keys {
            format: provider,
            secrets: self.secrets,
            tolerance: self.tolerance,
        };
        (provider, keys)
    }
}

/// A source's own credential as `Debug` shows it: whether it is set, never
/// its value.
fn redacted(secret: &Option<Secret>) -> Option<&'static str> {
    secret.as_ref().map(|_| "[redacted]")
}

/// Any headers as a trait object, for providers.
pub struct AnyHeaders<'a, H: ?Sized>(pub &'a H);

impl<H: Headers + ?Sized> Headers for AnyHeaders<'_, H> {
    fn header(&self, name: &str) -> Option<&str> {
        self.0.header(name)
    }

    fn query(&self) -> Option<&str> {
        self.0.query()
    }
}

/// What `scheme`'s provider would send with `body`, signed with `secret`: the one
/// implementation of each scheme's signing, shared by `hookd sign`, `hookd replay`
/// and the tests. The headers start with the body's `Content-Type`: JSON unless
/// the provider names its own.
pub fn sign(
    scheme: &Scheme,
    secret: &Secret,
    body: &[u8],
    envelope: &Envelope<'_>,
) -> Result<Signed, SigningError> {
    let provider = scheme.provider();
    let key = provider.key_bytes(secret)?;
    let mut signed = provider.sign(&key, body, envelope)?;
    let typed = signed
        .headers
        .iter()
        .position(|(name, _)| name.eq_ignore_ascii_case("Content-Type"));
    let content_type = match typed {
        Some(i) => signed.headers.remove(i),
        None => ("Content-Type".to_string(), "application/json".to_string()),
    };
    signed.headers.insert(0, content_type);
    Ok(signed)
}

/// The item of a kept request that is the event `event_id`, and the bytes a
/// forward sends for it, when an event of a provider that keeps the request
/// kept the whole of it as its body (as events stored before requests were
/// kept once did); `None` when the body is the event's own item already.
pub fn own_item(
    scheme: &Scheme,
    headers: &dyn Headers,
    request: &[u8],
    event_id: &str,
) -> Option<(Value, Vec<u8>)> {
    let provider = scheme.provider();
    if !provider.keeps_request() {
        return None;
    }
    let parsed = provider.payload(request).ok()?;
    let item = provider
        .events(request, parsed)
        .ok()?
        .into_iter()
        .find(|item| {
            provider
                .identity(headers, &item.payload)
                .is_ok_and(|(id, _)| id == event_id)
        })?;
    let bytes = match item.body {
        Some(bytes) => bytes,
        None => serde_json::to_vec(&item.payload).ok()?,
    };
    Some((item.payload, bytes))
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

/// A provider's static type → kind pairs as a source's `event_types`.
fn kind_table(pairs: &[(&str, PaymentKind)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(provider, kind)| (provider.to_string(), kind.as_str().to_string()))
        .collect()
}

/// A top-level member of the body, as an id or type.
fn body_member(payload: &Value, field: &str) -> Option<String> {
    non_empty(payload.get(field))
}

/// The event id at the body's top-level `field`, or that it is missing.
fn id_in_body(payload: &Value, field: &str) -> Result<String, Missing> {
    body_member(payload, field).ok_or_else(|| Missing::Id(format!("body.{field}")))
}

/// The event type at the body's top-level `field`, or that it is missing.
fn type_in_body(payload: &Value, field: &str) -> Result<String, Missing> {
    body_member(payload, field).ok_or_else(|| Missing::Type(format!("body.{field}")))
}

/// The id and type of a body that carries both as top-level members.
fn body_identity(payload: &Value, id: &str, ty: &str) -> Result<(String, String), Missing> {
    Ok((id_in_body(payload, id)?, type_in_body(payload, ty)?))
}

/// The event id in the header `name` (beside the signed body).
fn id_in_header(headers: &dyn Headers, name: &str) -> Result<String, Missing> {
    header_member(headers, name).ok_or_else(|| Missing::Id(format!("{name} header")))
}

/// The event type in the header `name`.
fn type_in_header(headers: &dyn Headers, name: &str) -> Result<String, Missing> {
    header_member(headers, name).ok_or_else(|| Missing::Type(format!("{name} header")))
}

fn header_member(headers: &dyn Headers, name: &str) -> Option<String> {
    headers.header(name).and_then(non_empty_str)
}

/// A value located in a delivery, for the generic scheme.
fn locate(locator: &Locator, headers: &dyn Headers, payload: &Value) -> Option<String> {
    match locator {
        Locator::Header(name) => headers.header(name).and_then(non_empty_str),
        Locator::Pointer(pointer) => non_empty(payload.pointer(pointer)),
    }
}

#[cfg(test)]
mod signing_tests;
#[cfg(test)]
mod test_kit;
#[cfg(test)]
mod tests;

/// Owned JSON pointers.
fn pointers(list: &[&str]) -> Vec<String> {
    list.iter().map(|p| (*p).to_string()).collect()
}
