//! A delivery's body, parsed once at the edge: identity (event id, provider type,
//! hookd kind), the canonical fingerprint used for dedupe, and the payment fields
//! support staff search by. Pure: no HTTP, no database.

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

pub use crate::words::{EventId, EventType, Kind, SourceName, WordError};
pub use canonical::Fingerprints;

use crate::config::Source;
use crate::domain::storable_id;
use crate::providers::{self, AnyHeaders, Missing};
use crate::signature::Headers;

#[derive(Debug, Clone)]
pub struct IncomingEvent {
    pub source: SourceName,
    /// Its source's scheme when it arrived (a reload may change the source's).
    pub scheme: &'static str,
    pub event_id: EventId,
    pub event_type: EventType,
    pub kind: Option<Kind>,
    pub payload: Value,
    /// The body exactly as received: kept so the signature can be checked again.
    pub body: Vec<u8>,
    /// The headers the signature depends on, as received (a JSON object).
    pub signature_headers: Value,
    /// SHA-256 of the canonical JSON of the whole payload (`payload_sha256`).
    pub fingerprint: [u8; 32],
    /// The same without the source's `fingerprint_ignore` fields: two deliveries
    /// of one event that differ only there are the same event.
    pub stable_fingerprint: [u8; 32],
    /// The source's `fingerprint_ignore`, which `stable_fingerprint` left out.
    pub fingerprint_ignore: Arc<[String]>,
    /// A NUL character somewhere in the payload's strings or keys.
    pub payload_has_nul: bool,
    /// The body is the payload's JSON text as sent (not a provider's other
    /// format, nor one event of several) and holds only 64-bit integers as
    /// numbers, which jsonb reads as serde did: the store can send it as it is.
    pub body_as_jsonb: bool,
    /// Set when the source dedupes on the body (its scheme leaves the id or type
    /// unsigned): the key a copy of this body under any id is a duplicate by.
    /// It is the stable fingerprint, so a copy is what the dedupe by id would
    /// also call the same event.
    pub body_key: Option<[u8; 32]>,
    pub payment_id: Option<String>,
    pub customer_id: Option<String>,
    /// The whole request, when its provider signs only the whole while it
    /// carries several events (GoCardless): shared by its events, kept once
    /// beside them, and what proves each one's origin. `body` is then the
    /// event's own item of it.
    pub request: Option<Arc<KeptRequest>>,
}

/// A request kept once for all its events.
#[derive(Debug, PartialEq, Eq)]
pub struct KeptRequest {
    /// SHA-256 of the body: the request's key among its source's.
    pub sha256: [u8; 32],
    pub body: Vec<u8>,
}

/// Events one request may carry at most: past it the request is refused whole
/// (413), before anything of it is stored. GoCardless sends at most 250 a
/// request; ten times that leaves room without letting one request's events
/// grow without end.
pub const MAX_EVENTS_PER_REQUEST: usize = 2_500;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    /// The body is not JSON (or not its provider's own format).
    #[error("{0}")]
    NotJson(providers::PayloadError),
    #[error("no event id ({0})")]
    MissingId(String),
    #[error("no event type ({0})")]
    MissingType(String),
    #[error(transparent)]
    Word(#[from] WordError),
    #[error("{0}")]
    NoEvents(String),
    #[error(
        "the request carries {0} events; at most {MAX_EVENTS_PER_REQUEST} are taken in one request"
    )]
    TooManyEvents(usize),
}

impl IncomingEvent {
    /// Parses a delivery whose signature has already been verified.
    pub fn parse(
        source: &Source,
        headers: &(impl Headers + ?Sized),
        body: &[u8],
    ) -> Result<Self, EventError> {
        let provider = source.scheme.provider();
        let payload = provider.payload(body).map_err(EventError::NotJson)?;
        let verbatim = provider.payload_is_body();
        Self::from_parts(source, &AnyHeaders(headers), body, payload, verbatim)
    }

    /// Parses a verified request into the events it carries (one, unless its
    /// provider sends several per request); each keeps the bytes that prove it
    /// (the body, or its item of it).
    pub fn parse_all(
        source: &Source,
        headers: &(impl Headers + ?Sized),
        body: &[u8],
    ) -> Result<Vec<Self>, EventError> {
        let provider = source.scheme.provider();
        let payload = provider.payload(body).map_err(EventError::NotJson)?;
        let verbatim = provider.payload_is_body();
        let items = provider
            .events(body, payload)
            .map_err(|e| EventError::NoEvents(e.to_string()))?;
        if items.len() > MAX_EVENTS_PER_REQUEST {
            return Err(EventError::TooManyEvents(items.len()));
        }
        // One copy of the request for all its events, however many.
        let request = provider.keeps_request().then(|| {
            Arc::new(KeptRequest {
                sha256: Sha256::digest(body).into(),
                body: body.to_vec(),
            })
        });
        items
            .into_iter()
            .map(|item| {
                let (kept, verbatim) = match &item.body {
                    Some(own) => (own.as_slice(), false),
                    None => (body, verbatim),
                };
                let mut event =
                    Self::from_parts(source, &AnyHeaders(headers), kept, item.payload, verbatim)?;
                event.request = request.clone();
                Ok(event)
            })
            .collect()
    }

    fn from_parts(
        source: &Source,
        headers: &dyn Headers,
        body: &[u8],
        payload: Value,
        payload_is_body: bool,
    ) -> Result<Self, EventError> {
        let (event_id, event_type) = identity(source, headers, &payload)?;
        // PostgreSQL text cannot hold some: refused the same way on every resend.
        let (event_id, event_type) = (EventId::parse(event_id)?, EventType::parse(event_type)?);
        let kind = source.kind_of(&event_type, &payload).map(Kind::configured);
        let fields = source.scheme.provider().index_fields(&payload);
        let signature_headers = source
            .scheme
            .signed_header_names()
            .into_iter()
            .filter_map(|name| {
                let value = headers.header(name)?;
                Some((name.to_string(), Value::String(value.to_string())))
            })
            .collect::<Map<String, Value>>();
        let prints = Fingerprints::of_payload(&payload, &source.fingerprint_ignore);
        Ok(IncomingEvent {
            source: source.name.clone(),
            scheme: source.scheme.name(),
            event_id,
            event_type,
            kind,
            fingerprint: prints.full,
            stable_fingerprint: prints.stable,
            body_key: source.dedupe_on_body.then_some(prints.stable),
            fingerprint_ignore: source.fingerprint_ignore.clone(),
            payload_has_nul: prints.has_nul,
            // Other numbers go as serde read them: `1e-20000` is 0 to serde,
            // and PostgreSQL's numeric refuses its text.
            body_as_jsonb: payload_is_body && !prints.has_float,
            payment_id: fields.payment_id.filter(|id| storable_id(id)),
            customer_id: fields.customer_id.filter(|id| storable_id(id)),
            payload,
            body: body.to_vec(),
            signature_headers: Value::Object(signature_headers),
            request: None,
        })
    }

    /// The payload as the `payload` column (jsonb) can hold it: jsonb refuses the
    /// NUL character, so any in a string or key becomes U+FFFD there. The exact
    /// body is kept beside it, and the fingerprint is of the payload as sent.
    pub fn storable_payload(&self) -> Cow<'_, Value> {
        if self.payload_has_nul {
            Cow::Owned(without_nul(&self.payload))
        } else {
            Cow::Borrowed(&self.payload)
        }
    }

    /// The payload's JSON text, when the body is that text and jsonb can take it
    /// as it is (the server parses it; nothing is serialised again here).
    pub fn payload_text(&self) -> Option<&[u8]> {
        (self.body_as_jsonb && !self.payload_has_nul).then_some(self.body.as_slice())
    }
}

fn without_nul(value: &Value) -> Value {
    let clean = |s: &str| s.replace('\0', "\u{fffd}");
    match value {
        Value::String(s) => Value::String(clean(s)),
        Value::Array(items) => Value::Array(items.iter().map(without_nul).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (clean(k), without_nul(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The event id and type, where the source's provider puts them.
fn identity(
    source: &Source,
    headers: &dyn Headers,
    payload: &Value,
) -> Result<(String, String), EventError> {
    source
        .scheme
        .provider()
        .identity(headers, payload)
        .map_err(|missing| match missing {
            Missing::Id(what) => EventError::MissingId(what),
            Missing::Type(what) => EventError::MissingType(what),
        })
}

/// SHA-256 of the canonical JSON (keys sorted, no whitespace), so a provider that
/// re-serialises a resend still matches the first delivery.
pub fn fingerprint(payload: &Value) -> [u8; 32] {
    Fingerprints::of_payload(payload, &[]).full
}

/// The fingerprint of `payload` without the fields at `ignore` (JSON pointers;
/// absent ones are skipped).
pub fn stable_fingerprint(payload: &Value, ignore: &[String]) -> [u8; 32] {
    Fingerprints::of_payload(payload, ignore).stable
}

/// Removes the values the JSON pointers name, each as it names it in the
/// whole value: the later items of an array first, so that removing one never
/// shifts another pointer onto its neighbour (`/items/0` and `/items/1` remove
/// those two, never the third).
fn remove_pointers(value: &mut Value, pointers: &[String]) {
    let mut ordered: Vec<&String> = pointers.iter().collect();
    ordered.sort_by(|a, b| pointer_order(b).cmp(&pointer_order(a)));
    for pointer in ordered {
        remove_pointer(value, pointer);
    }
}

/// A pointer's segments, array indices compared as numbers.
fn pointer_order(pointer: &str) -> Vec<(Option<usize>, &str)> {
    pointer
        .split('/')
        .map(|segment| (segment.parse().ok(), segment))
        .collect()
}

/// Removes the value a JSON pointer names (an object member or an array item).
fn remove_pointer(value: &mut Value, pointer: &str) {
    let Some((parent, last)) = pointer.rsplit_once('/') else {
        return;
    };
    let last = last.replace("~1", "/").replace("~0", "~");
    match value.pointer_mut(parent) {
        Some(Value::Object(map)) => {
            map.remove(&last);
        }
        Some(Value::Array(items)) => {
            if let Ok(index) = last.parse::<usize>()
                && index < items.len()
            {
                items.remove(index);
            }
        }
        _ => {}
    }
}

mod canonical;
#[cfg(test)]
mod tests;
