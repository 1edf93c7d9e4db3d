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
mod github;
mod gocardless;
mod hmac;
mod mollie;
mod paddle;
mod paypal;
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

use crate::domain::PaymentKind;
use crate::keys::{self, Problem};
use crate::signature::{
    Envelope, Headers, KeyFormat, Keys, Secret, SignatureError, Signed, Verified,
};
pub use api::Lister;
pub use hmac::{Encoding, GenericHmac, Locator};
use shape::{IndexFields, PaymentShape};
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
    Mollie,
}

/// The provider of a configured scheme.
pub fn of(scheme: &Scheme) -> &dyn Provider {
    match scheme {
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
        Scheme::Mollie => &mollie::Mollie,
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
    keyless!(mollie::Mollie, Scheme::Mollie),
];

/// The scheme a source names, configured from its own keys.
pub fn configure(
    name: &str,
    table: toml::Table,
    key: &dyn Fn(&str) -> String,
    common: &[&str],
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
        let mut known: Vec<&str> = common.to_vec();
        known.extend(entry.keys);
        return Err((key(unknown), keys::unknown_key(unknown, &known)));
    }
    (entry.configure)(table, key)
}

/// The scheme names a source may use, as the configuration writes them.
pub fn scheme_names() -> Vec<&'static str> {
    REGISTRY.iter().map(|e| e.provider.name()).collect()
}

/// What a provider does, as data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Whether sources of the scheme take `secrets` (PayPal signs with its
    /// certificates instead: its sources may not set any).
    pub takes_secrets: bool,
    /// Whether the provider's events state amounts. GoCardless's state none: its
    /// refunds then count without one, and the payment view says amounts are unknown.
    pub sends_amounts: bool,
    /// Whether `payload` is the body's own JSON text, parsed (false for a
    /// provider that reads another format, or whose events are parts of it).
    pub payload_is_body: bool,
    /// Whether a several-event request is kept whole, once, beside its events
    /// (the signature covers only the whole): each event keeps its own item's
    /// bytes, and the request proves their origin. Events stored before kept
    /// the whole request each: a retry or a forward of one reads its own item
    /// of it ([`own_item`]).
    pub keeps_request: bool,
    /// Whether the signature covers the event id (true unless it travels beside
    /// the signed body).
    pub signs_id: bool,
    /// Whether the signature covers the event type.
    pub signs_type: bool,
    /// Whether a request only names its event, which is fetched from the
    /// provider's API at receipt ([`Provider::receipt_fetch`]): its sources
    /// need an `api_key`.
    pub names_only: bool,
}

impl Capabilities {
    /// Most providers': secrets, amounts, one event a request that is the
    /// body's own JSON, its id and type signed.
    pub const DEFAULT: Capabilities = Capabilities {
        takes_secrets: true,
        sends_amounts: true,
        payload_is_body: true,
        keeps_request: false,
        signs_id: true,
        signs_type: true,
        names_only: false,
    };
}

/// What a provider defines (see the module comment).
pub trait Provider: KeyFormat + Simulator + Sync {
    /// Its API listing past events, or what the provider offers instead (one
    /// line, after "cannot reconcile: ").
    fn lister(&self) -> Result<&'static Lister, &'static str> {
        Err(Lister::NONE)
    }

    /// What the provider does, as data; each of the readers below reads one.
    fn capabilities(&self) -> Capabilities {
        Capabilities::DEFAULT
    }

    fn takes_secrets(&self) -> bool {
        self.capabilities().takes_secrets
    }

    fn sends_amounts(&self) -> bool {
        self.capabilities().sends_amounts
    }

    fn payload_is_body(&self) -> bool {
        self.capabilities().payload_is_body
    }

    fn keeps_request(&self) -> bool {
        self.capabilities().keeps_request
    }

    fn signs_id(&self) -> bool {
        self.capabilities().signs_id
    }

    fn signs_type(&self) -> bool {
        self.capabilities().signs_type
    }

    fn names_only(&self) -> bool {
        self.capabilities().names_only
    }

    /// For a provider whose requests only name their event (Mollie's
    /// `id=tr_…`): where the event is fetched at receipt, with the source's
    /// key (what the API answers is the event, stored as delivered), and the
    /// payload stored, ignored, when the API does not know the id. The error:
    /// the request names nothing that can be asked for.
    fn receipt_fetch(&self, _body: &[u8]) -> Option<Result<(api::Fetch, Value), String>> {
        None
    }

    /// Where the event is read, for a delivery that only names it (Stripe's
    /// thin events): handlers see what the source's API answers there, fetched
    /// with its `api_key` before they run; a failed fetch is a failed run.
    /// `None` when the payload is the event; the error says why it cannot be
    /// asked for.
    fn event_fetch(&self, _payload: &Value) -> Option<Result<api::Fetch, String>> {
        None
    }

    /// The scheme's name in `[[sources]]` and in stored events.
    fn name(&self) -> &'static str;

    /// The headers a delivery's signature depends on (all names the scheme
    /// accepts): kept with the event so its signature can be checked again later.
    fn signed_header_names(&self) -> Vec<&str>;

    /// Checks what a request carries besides its signature (Adyen's Basic
    /// credentials). Not part of the proof kept with an event.
    fn authenticate(&self, _headers: &dyn Headers) -> Result<(), SignatureError> {
        Ok(())
    }

    /// The key (in the source's table) of a shipped development credential the
    /// source uses beyond its secrets (PayPal's signing key or shipped
    /// certificate): refused as the shipped secrets are.
    fn development_credential(&self) -> Option<String> {
        None
    }

    /// Checks a request against every secret; `now` is Unix seconds.
    fn verify(
        &self,
        keys: &Keys<'_>,
        headers: &dyn Headers,
        body: &[u8],
        now: i64,
    ) -> Result<Verified, SignatureError>;

    /// Key material `verify` found the request naming but lacking, to fetch
    /// before verifying again (PayPal's certificate URL, when the source fetches
    /// and has not cached it); the error is a URL that may not be fetched.
    /// `verify` stays synchronous and offline: the caller fetches (see
    /// `outbound::Certificates`) and hands the bytes to [`Provider::fetched`].
    fn to_fetch(&self, _headers: &dyn Headers) -> Result<Option<reqwest::Url>, SignatureError> {
        Ok(None)
    }

    /// Checks what was fetched from `url` against the system's `roots` and keeps
    /// it for `verify`.
    fn fetched(
        &self,
        _url: &reqwest::Url,
        _bytes: &[u8],
        _roots: &[rustls::pki_types::TrustAnchor<'static>],
    ) -> Result<(), SignatureError> {
        Ok(())
    }

    /// The signature of a request whose signed text covers only a checksum of
    /// the body (PayPal's CRC32), which another body with the same checksum
    /// could carry: receiving binds it to the first body it was accepted with.
    fn checksum_signature(&self, _headers: &dyn Headers) -> Option<Vec<u8>> {
        None
    }

    /// How a refused signature is answered: 401, unless the provider documents
    /// another status (GoCardless's 498).
    fn refused_signature(&self) -> SignatureRefusal {
        SignatureRefusal::Unauthorized
    }

    /// The tolerance of a source that sets none.
    fn default_tolerance(&self) -> Duration {
        Duration::from_secs(5 * 60)
    }

    /// When the provider says an event happened, from its payload, for a
    /// scheme whose signature covers no time: a genuine body can be sent again
    /// at any time, and is taken as new once its key was purged
    /// (`key_retention`), so the desk's event page shows this time. `None`
    /// where the signature covers a time, or the payload carries none.
    fn unsigned_time(&self, _payload: &Value) -> Option<chrono::DateTime<chrono::Utc>> {
        None
    }

    /// The JSON a verified body stands for: the body itself, unless the
    /// provider sends another format (Braintree's form of base64 XML). The
    /// error says why it cannot be read.
    fn payload(&self, body: &[u8]) -> Result<Value, String> {
        serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))
    }

    /// The events a verified request carries: the body itself, unless the
    /// provider sends several per request.
    fn events(&self, _body: &[u8], payload: Value) -> Result<Vec<Item>, String> {
        Ok(vec![Item {
            payload,
            body: None,
        }])
    }

    /// Its keys that name files: a relative path in them is read from the
    /// configuration file's folder.
    fn path_keys(&self) -> &'static [&'static str] {
        &[]
    }

    /// Where a kept request's events are, for a provider that `keeps_request`:
    /// a JSON pointer to their array, so forgetting a customer rewrites their
    /// items in it and leaves their batch-mates' as they came.
    fn request_events(&self) -> &'static str {
        ""
    }

    /// Checks what was kept of a delivery (its body, or its item's bytes for a
    /// provider that sends several events per request) against every secret:
    /// the proof of origin on the desk.
    fn verify_kept(
        &self,
        keys: &Keys<'_>,
        headers: &dyn Headers,
        kept: &[u8],
        now: i64,
    ) -> Result<Verified, SignatureError> {
        self.verify(keys, headers, kept, now)
    }

    /// The answer the provider expects on success.
    fn answer(&self) -> Answer {
        Answer::Json
    }

    /// The kind of an event whose type the source's `event_types` does not list,
    /// when it depends on the payload (Adyen's `success`, Square's status).
    fn kind_of(&self, _event_type: &str, _payload: &Value) -> Option<PaymentKind> {
        None
    }

    /// The payment facts of an event; the error is why it cannot be applied.
    fn payment_facts(&self, payload: &Value) -> Result<crate::domain::PaymentFacts, String> {
        self.payment_shape().payment_facts(payload)
    }

    /// Payment and customer ids for the history index, best effort.
    fn index_fields(&self, payload: &Value) -> IndexFields {
        self.payment_shape().index_fields(payload)
    }

    /// Other names `hookd secret --scheme` accepts for it.
    fn aliases(&self) -> &'static [&'static str] {
        &[]
    }

    /// The event id and provider type of a delivery, or which of them is missing.
    fn identity(&self, headers: &dyn Headers, payload: &Value)
    -> Result<(String, String), Missing>;

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

    /// The `mask` a source starts from: where the provider puts e-mails,
    /// names, phones, addresses, card fingerprints and client-side secrets.
    /// None for a provider whose events carry links, not people (GoCardless),
    /// or whose shape is the sender's own (`standard`, `hmac`): their sources
    /// list their fields themselves.
    fn default_mask(&self) -> Vec<String> {
        Vec::new()
    }

    /// For a provider whose requests name the certificate that signed them
    /// (one that takes no secrets): where the certificate came from, and whose
    /// it must be, as `hookd verify` says.
    fn certificate_named_by(&self) -> &'static str {
        "the URL the request"
    }

    fn certificate_owner(&self) -> &'static str {
        "the provider's"
    }

    /// The secrets the shipped `hookd.toml` gives its sources of this
    /// provider: public, so accepted only in development, on loopback.
    fn development_secrets(&self) -> &'static [&'static str] {
        &[]
    }

    /// Where the provider's bodies carry payment facts.
    fn payment_shape(&self) -> PaymentShape {
        PaymentShape::NEUTRAL
    }
}

/// The time at `pointer` in a payload: RFC 3339 text, or Unix seconds.
fn time_at(payload: &Value, pointer: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    match payload.pointer(pointer)? {
        Value::String(text) => chrono::DateTime::parse_from_rfc3339(text)
            .ok()
            .map(|t| t.with_timezone(&chrono::Utc)),
        Value::Number(seconds) => chrono::DateTime::from_timestamp(seconds.as_i64()?, 0),
        _ => None,
    }
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

/// One event of a request: its JSON, and the bytes kept for it when they are
/// not the whole body (an item of a several-event request).
#[derive(Debug, Clone)]
pub struct Item {
    pub payload: Value,
    pub body: Option<Vec<u8>>,
}

/// How a provider wants a delivery with a bad signature answered (the status
/// itself is chosen where every failure gets its status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureRefusal {
    /// 401 Unauthorized.
    Unauthorized,
    /// 498 Token Invalid, as GoCardless documents.
    TokenInvalid,
}

/// The answer a provider expects when a request is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// hookd's own `{"status":"accepted","event_id":…}`.
    Json,
    /// A fixed body the provider looks for (Adyen's `[accepted]`).
    Fixed {
        content_type: &'static str,
        body: &'static str,
    },
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
        of(self).name()
    }

    pub fn key_bytes<'s>(&self, secret: &'s Secret) -> Result<Cow<'s, [u8]>, String> {
        of(self).key_bytes(secret)
    }

    pub fn signed_header_names(&self) -> Vec<&str> {
        of(self).signed_header_names()
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
        of(self.scheme).authenticate(&AnyHeaders(headers))?;
        self.verify(headers, body, now)
    }

    /// Checks what was kept of a delivery (see [`Provider::verify_kept`]).
    pub fn verify_kept(
        &self,
        headers: &(impl Headers + ?Sized),
        kept: &[u8],
        now: i64,
    ) -> Result<Verified, SignatureError> {
        let provider = of(self.scheme);
        let keys = Keys {
            format: provider,
            secrets: self.secrets,
            tolerance: self.tolerance,
        };
        provider.verify_kept(&keys, &AnyHeaders(headers), kept, now)
    }

    /// Checks a delivery's signature against every secret; `now` is Unix seconds.
    pub fn verify(
        &self,
        headers: &(impl Headers + ?Sized),
        body: &[u8],
        now: i64,
    ) -> Result<Verified, SignatureError> {
        let provider = of(self.scheme);
        let keys = Keys {
            format: provider,
            secrets: self.secrets,
            tolerance: self.tolerance,
        };
        provider.verify(&keys, &AnyHeaders(headers), body, now)
    }
}

/// Any headers as a trait object, for providers.
pub struct AnyHeaders<'a, H: ?Sized>(pub &'a H);

impl<H: Headers + ?Sized> Headers for AnyHeaders<'_, H> {
    fn header(&self, name: &str) -> Option<&str> {
        self.0.header(name)
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
) -> Result<Signed, String> {
    let provider = of(scheme);
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
    let provider = of(scheme);
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
mod tests;

/// Owned JSON pointers.
fn pointers(list: &[&str]) -> Vec<String> {
    list.iter().map(|p| (*p).to_string()).collect()
}
