//! A delivery's body, parsed once at the edge: identity (event id, provider type,
//! hookd kind), the canonical fingerprint used for dedupe, and the payment fields
//! support staff search by. Pure: no HTTP, no database.

use std::borrow::Cow;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::config::Source;
use crate::domain::{MAX_ID_LEN, storable_id};
use crate::providers::{self, AnyHeaders, Missing};
use crate::signature::Headers;

#[derive(Debug, Clone)]
pub struct IncomingEvent {
    pub source: String,
    pub event_id: String,
    pub event_type: String,
    pub kind: Option<String>,
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
    pub fingerprint_ignore: Vec<String>,
    /// Set when the source dedupes on the body (its scheme leaves the id or type
    /// unsigned): the key a copy of this body under any id is a duplicate by.
    /// It is the stable fingerprint, so a copy is what the dedupe by id would
    /// also call the same event.
    pub body_key: Option<[u8; 32]>,
    pub payment_id: Option<String>,
    pub customer_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    /// The body is not JSON (or not its provider's own format).
    #[error("{0}")]
    NotJson(String),
    #[error("no event id ({0})")]
    MissingId(String),
    #[error("no event type ({0})")]
    MissingType(String),
    #[error("{0} is longer than 255 bytes")]
    TooLong(&'static str),
    #[error("{0} contains a NUL character")]
    Nul(&'static str),
    #[error("{0}")]
    NoEvents(String),
}

impl IncomingEvent {
    /// Parses a delivery whose signature has already been verified.
    pub fn parse(
        source: &Source,
        headers: &(impl Headers + ?Sized),
        body: &[u8],
    ) -> Result<Self, EventError> {
        let payload = providers::of(&source.scheme)
            .payload(body)
            .map_err(EventError::NotJson)?;
        Self::of(source, &AnyHeaders(headers), body, payload)
    }

    /// Parses a verified request into the events it carries (one, unless its
    /// provider sends several per request); each keeps the bytes that prove it
    /// (the body, or its item of it).
    pub fn parse_all(
        source: &Source,
        headers: &(impl Headers + ?Sized),
        body: &[u8],
    ) -> Result<Vec<Self>, EventError> {
        let payload = providers::of(&source.scheme)
            .payload(body)
            .map_err(EventError::NotJson)?;
        providers::of(&source.scheme)
            .events(body, payload)
            .map_err(EventError::NoEvents)?
            .into_iter()
            .map(|item| {
                let kept = item.body.as_deref().unwrap_or(body);
                Self::of(source, &AnyHeaders(headers), kept, item.payload)
            })
            .collect()
    }

    fn of(
        source: &Source,
        headers: &dyn Headers,
        body: &[u8],
        payload: Value,
    ) -> Result<Self, EventError> {
        let (event_id, event_type) = identity(source, headers, &payload)?;
        // PostgreSQL text cannot hold these: refused the same way on every resend.
        for (what, value) in [("event id", &event_id), ("event type", &event_type)] {
            if value.len() > MAX_ID_LEN {
                return Err(EventError::TooLong(what));
            }
            if value.contains('\0') {
                return Err(EventError::Nul(what));
            }
        }
        let kind = source.kind_of(&event_type, &payload).map(String::from);
        let fields = providers::of(&source.scheme).index_fields(&payload);
        let signature_headers = source
            .scheme
            .signed_header_names()
            .into_iter()
            .filter_map(|name| {
                let value = headers.header(name)?;
                Some((name.to_string(), Value::String(value.to_string())))
            })
            .collect::<Map<String, Value>>();
        let stable = stable_fingerprint(&payload, &source.fingerprint_ignore);
        Ok(IncomingEvent {
            source: source.name.clone(),
            event_id,
            event_type,
            kind,
            fingerprint: fingerprint(&payload),
            stable_fingerprint: stable,
            body_key: source.dedupe_on_body.then_some(stable),
            fingerprint_ignore: source.fingerprint_ignore.clone(),
            payment_id: fields.payment_id.filter(|id| storable_id(id)),
            customer_id: fields.customer_id.filter(|id| storable_id(id)),
            payload,
            body: body.to_vec(),
            signature_headers: Value::Object(signature_headers),
        })
    }

    /// The payload as the `payload` column (jsonb) can hold it: jsonb refuses the
    /// NUL character, so any in a string or key becomes U+FFFD there. The exact
    /// body is kept beside it, and the fingerprint is of the payload as sent.
    pub fn storable_payload(&self) -> Cow<'_, Value> {
        if has_nul(&self.payload) {
            Cow::Owned(without_nul(&self.payload))
        } else {
            Cow::Borrowed(&self.payload)
        }
    }
}

fn has_nul(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(has_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
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
    providers::of(&source.scheme)
        .identity(headers, payload)
        .map_err(|missing| match missing {
            Missing::Id(what) => EventError::MissingId(what),
            Missing::Type(what) => EventError::MissingType(what),
        })
}

/// SHA-256 of the canonical JSON (keys sorted, no whitespace), so a provider that
/// re-serialises a resend still matches the first delivery.
pub fn fingerprint(payload: &Value) -> [u8; 32] {
    let mut canonical = Vec::with_capacity(256);
    write_canonical(payload, &mut canonical);
    Sha256::digest(&canonical).into()
}

/// The fingerprint of `payload` without the fields at `ignore` (JSON pointers;
/// absent ones are skipped).
pub fn stable_fingerprint(payload: &Value, ignore: &[String]) -> [u8; 32] {
    if ignore.iter().all(|p| payload.pointer(p).is_none()) {
        return fingerprint(payload);
    }
    let mut trimmed = payload.clone();
    for pointer in ignore {
        remove_pointer(&mut trimmed, pointer);
    }
    fingerprint(&trimmed)
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

fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_scalar(key, out);
                out.push(b':');
                write_canonical(item, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        scalar => write_scalar(scalar, out),
    }
}

fn write_scalar(value: &(impl serde::Serialize + ?Sized), out: &mut Vec<u8>) {
    // Writing a string or scalar into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}

#[cfg(test)]
mod tests;
