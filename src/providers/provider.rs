//! What a provider is to hookd: the [`Provider`] trait (verifying, identifying,
//! reading payment facts and answering), its [`Capabilities`] as data, and the
//! small types it speaks in.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;

use super::api;
use super::errors::{FactsError, FetchError, PayloadError, SigningError};
use super::hmac::{HeaderHmac, TimedTags};
use super::shape::{IndexFields, PaymentShape};
use super::*;
use crate::domain::PaymentKind;
use crate::signature::{Headers, KeyFormat, Keys, SignatureError, Verified};

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
    fn receipt_fetch(&self, _body: &[u8]) -> Option<Result<(api::Fetch, Value), FetchError>> {
        None
    }

    /// Where the event is read, for a delivery that only names it (Stripe's
    /// thin events): handlers see what the source's API answers there, fetched
    /// with its `api_key` before they run; a failed fetch is a failed run.
    /// `None` when the payload is the event; the error says why it cannot be
    /// asked for.
    fn event_fetch(&self, _payload: &Value) -> Option<Result<api::Fetch, FetchError>> {
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

    /// What `serve` warns of at startup for a source as configured (one line
    /// after the source's name): a way in that costs the merchant.
    fn exposure(&self) -> Option<String> {
        None
    }

    /// The query a request to this source must carry besides what
    /// [`Simulator::sign`] gives (Mollie's URL token), as `hookd replay`
    /// adds it to the source's URL.
    fn delivery_query(&self) -> Option<String> {
        None
    }

    /// The key (in the source's table) of a shipped development credential the
    /// source uses beyond its secrets (PayPal's signing key or shipped
    /// certificate): refused as the shipped secrets are.
    fn development_credential(&self) -> Option<String> {
        None
    }

    /// Its signature, when it is one of the kinds providers share; `None`
    /// for a provider that checks its own in [`Provider::verify`].
    fn signature(&self) -> Option<Signature<'_>> {
        None
    }

    /// Checks a request against every secret; `now` is Unix seconds. A
    /// provider with neither a shared [`Signature`] nor its own check refuses
    /// every request.
    fn verify(
        &self,
        keys: &Keys<'_>,
        headers: &dyn Headers,
        body: &[u8],
        now: i64,
    ) -> Result<Verified, SignatureError> {
        match self.signature() {
            Some(Signature::Header {
                hmac,
                signed_before,
            }) => hmac.verify(keys, headers, &[signed_before, body]),
            Some(Signature::Timed(timed)) => timed.verify(keys, headers, body, now),
            None => Err(SignatureError::Mismatch),
        }
    }

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
    fn payload(&self, body: &[u8]) -> Result<Value, PayloadError> {
        serde_json::from_slice(body).map_err(|e| PayloadError::NotJson(e.to_string()))
    }

    /// The events a verified request carries: the body itself, unless the
    /// provider sends several per request.
    fn events(&self, _body: &[u8], payload: Value) -> Result<Vec<Item>, PayloadError> {
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
    fn payment_facts(&self, payload: &Value) -> Result<crate::domain::PaymentFacts, FactsError> {
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
pub(super) fn time_at(payload: &Value, pointer: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    match payload.pointer(pointer)? {
        Value::String(text) => chrono::DateTime::parse_from_rfc3339(text)
            .ok()
            .map(|t| t.with_timezone(&chrono::Utc)),
        Value::Number(seconds) => chrono::DateTime::from_timestamp(seconds.as_i64()?, 0),
        _ => None,
    }
}

/// The kinds of signature providers share, stated as data in each one's folder.
#[derive(Debug, Clone, Copy)]
pub enum Signature<'a> {
    /// One header holding the tag of the raw body, after what `signed_before`
    /// holds (Square's notification URL; empty for most).
    Header {
        hmac: HeaderHmac<'a>,
        signed_before: &'a [u8],
    },
    /// One header holding a timestamp and tags of it and the raw body.
    Timed(TimedTags),
}

impl<'a> Signature<'a> {
    /// The tag of the raw body alone, in one header.
    pub const fn header(hmac: HeaderHmac<'a>) -> Self {
        Signature::Header {
            hmac,
            signed_before: b"",
        }
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

    /// A top-level string member, or that `body` (as messages name it: "a
    /// Stripe body") needs it.
    pub fn member(&self, field: &'static str, body: &'static str) -> Result<String, SigningError> {
        self.text(field)
            .ok_or(SigningError::NeedsMember { body, field })
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
    /// An empty 200 that says nothing of the event, not even whether it was
    /// seen before (no `Idempotent-Replayed`), and the same for an event that
    /// conflicts with the one stored (kept beside it): for a request anyone can
    /// send (Mollie's unsigned id), which must not tell which payments exist or
    /// what state they are in.
    Nothing,
}
