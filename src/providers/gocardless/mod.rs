//! GoCardless: `Webhook-Signature` is hex HMAC-SHA256(the endpoint's secret as
//! text, raw body). GoCardless signs no timestamp, so there is no replay window
//! beyond the dedupe, and it answers a refused signature with 498 Token Invalid.
//! One request carries several events, `{"events":[…],"meta":{…}}`; each event's
//! id is its `id`, its type `{resource_type}.{action}` (`payments.confirmed`),
//! and what it is about is in `links` (`payment`, `refund`, `customer`).
//! GoCardless states no amounts in its events: a payment's amount and refunds
//! are only in its API.

mod reconcile;

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::errors::{FactsError, PayloadError, Signing, SigningError, storable};
use super::hmac::HeaderHmac;
use super::shape::IndexFields;
use super::{
    Body, Capabilities, Item, Missing, Provider, Signature, SignatureRefusal, Simulator,
    kind_table, non_empty,
};
use crate::domain::{PaymentFacts, PaymentKind};
use crate::signature::{Envelope, Headers, KeyFormat, Signed};

const HEADER: &str = "Webhook-Signature";
/// The hex tag of the raw body, as sent (either case, not trimmed).
const SIGNED: HeaderHmac<'static> = HeaderHmac::hex(HEADER);
const EVENTS: &str = "events";
/// A request whose events list is not one list of items as it came.
const UNREADABLE: PayloadError =
    PayloadError::Events("the body's events list cannot be read as it came");

pub struct GoCardless;

impl KeyFormat for GoCardless {}

/// GoCardless's types for the built-in kinds: every GoCardless source maps them unlisted.
const EVENT_TYPES: [(&str, PaymentKind); 5] = [
    ("payments.confirmed", PaymentKind::Succeeded),
    ("payments.paid_out", PaymentKind::Succeeded),
    ("payments.failed", PaymentKind::Failed),
    ("refunds.paid", PaymentKind::Refunded),
    ("payments.charged_back", PaymentKind::DisputeOpened),
];

/// A member of an event's `links`.
fn link(event: &Value, name: &str) -> Option<String> {
    non_empty(event.get("links").and_then(|links| links.get(name)))
}

/// A request's events as the bytes each came as.
#[derive(Deserialize)]
struct RawEvents<'a> {
    #[serde(borrow)]
    events: Vec<&'a RawValue>,
}

/// The events of a request, or why it has none.
fn events_of(payload: &Value) -> Result<&Vec<Value>, PayloadError> {
    let list = payload
        .get(EVENTS)
        .and_then(Value::as_array)
        .ok_or(PayloadError::Events("the body has no events list"))?;
    if list.is_empty() {
        return Err(PayloadError::Empty(EVENTS));
    }
    if !list.iter().all(Value::is_object) {
        return Err(PayloadError::Events("an item of events is not an object"));
    }
    Ok(list)
}

/// 12 characters of GoCardless's ids (digits and upper-case letters) from
/// random bytes and an event's index.
fn id_tail(random: &[u8; 16], index: usize) -> String {
    const ALPHABET: &[u8; 36] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    random[..12]
        .iter()
        .enumerate()
        .map(|(i, b)| char::from(ALPHABET[(usize::from(*b) + index * (i + 5)) % ALPHABET.len()]))
        .collect()
}

impl Provider for GoCardless {
    fn lister(&self) -> Result<&'static super::Lister, &'static str> {
        Ok(&reconcile::LISTER)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            sends_amounts: false,
            keeps_request: true,
            payload_is_body: false,
            ..Capabilities::DEFAULT
        }
    }

    fn development_secrets(&self) -> &'static [&'static str] {
        &["dev-gocardless-webhook-secret"]
    }

    fn name(&self) -> &'static str {
        "gocardless"
    }

    fn signed_header_names(&self) -> Vec<&str> {
        vec![HEADER]
    }

    /// The header is decoded as sent (hex, either case), not trimmed.
    fn signature(&self) -> Option<Signature<'_>> {
        Some(Signature::header(SIGNED))
    }

    fn refused_signature(&self) -> SignatureRefusal {
        SignatureRefusal::TokenInvalid
    }

    /// Each event with its item's bytes exactly as they came, which a retry
    /// and a forward read.
    fn events(&self, body: &[u8], mut payload: Value) -> Result<Vec<Item>, PayloadError> {
        events_of(&payload)?;
        let raw: RawEvents<'_> = serde_json::from_slice(body).map_err(|_| UNREADABLE)?;
        let parsed = payload
            .get_mut(EVENTS)
            .and_then(Value::as_array_mut)
            .map(std::mem::take)
            .unwrap_or_default();
        // Both read the one `events` member of one body: an item each.
        if parsed.len() != raw.events.len() {
            return Err(UNREADABLE);
        }
        Ok(parsed
            .into_iter()
            .zip(raw.events)
            .map(|(payload, bytes)| Item {
                payload,
                body: Some(bytes.get().as_bytes().to_vec()),
            })
            .collect())
    }

    fn request_events(&self) -> &'static str {
        "/events"
    }

    fn identity(&self, _: &dyn Headers, event: &Value) -> Result<(String, String), Missing> {
        let id = non_empty(event.get("id")).ok_or_else(|| Missing::Id("events[].id".into()))?;
        let part = |name: &str| {
            non_empty(event.get(name)).ok_or_else(|| Missing::Type(format!("events[].{name}")))
        };
        let resource = part("resource_type")?;
        let action = part("action")?;
        Ok((id, format!("{resource}.{action}")))
    }

    /// The event's `created_at`.
    fn unsigned_time(&self, payload: &Value) -> Option<chrono::DateTime<chrono::Utc>> {
        super::time_at(payload, "/created_at")
    }

    fn default_event_types(&self) -> HashMap<String, String> {
        kind_table(&EVENT_TYPES)
    }

    /// The payment is `links.payment` (a refund's too), the customer
    /// `links.customer` when the event names one. No amounts: GoCardless sends
    /// none, so a refund adds no refund fact (see [`Provider::sends_amounts`]).
    fn payment_facts(&self, event: &Value) -> Result<PaymentFacts, FactsError> {
        let payment_id =
            link(event, "payment").ok_or_else(|| FactsError::Missing("links.payment".into()))?;
        let facts = PaymentFacts {
            payment_id,
            customer_id: link(event, "customer"),
            ..PaymentFacts::default()
        };
        storable(facts)
    }

    fn index_fields(&self, event: &Value) -> IndexFields {
        IndexFields {
            payment_id: link(event, "payment"),
            customer_id: link(event, "customer"),
        }
    }
}

impl Simulator for GoCardless {
    fn sign(&self, key: &[u8], body: &[u8], _: &Envelope<'_>) -> Signing<Signed> {
        Ok(Signed::headers(vec![SIGNED.sign(key, &[body])]))
    }

    fn signing_id(&self, body: &Body<'_>) -> Result<String, SigningError> {
        body.pointer("/events/0/id").ok_or(SigningError::needs(
            "a GoCardless body",
            "events with an \"id\"",
        ))
    }

    fn signing_type(&self, body: &Body<'_>) -> Result<String, SigningError> {
        let first = body
            .value
            .pointer("/events/0")
            .ok_or(SigningError::needs("a GoCardless body", "an events list"))?;
        self.identity(&Vec::<(String, String)>::new(), first)
            .map(|(_, event_type)| event_type)
            .map_err(|_| SigningError::needs("the first event", "a resource_type and an action"))
    }

    /// `EV` and 12 digits and upper-case letters, in the first event's `id`.
    fn new_id(&self, random: &[u8; 16]) -> (String, Option<String>) {
        (
            format!("EV{}", id_tail(random, 0)),
            Some("/events/0/id".into()),
        )
    }

    /// A fresh id for every event of the body.
    fn renew_ids(&self, body: &mut Value, random: &[u8; 16]) -> (String, bool) {
        let mut first = None;
        let list = body.get_mut(EVENTS).and_then(Value::as_array_mut);
        for (i, event) in list.into_iter().flatten().enumerate() {
            if let Some(slot) = event.get_mut("id") {
                let id = format!("EV{}", id_tail(random, i));
                first.get_or_insert_with(|| id.clone());
                *slot = Value::String(id);
            }
        }
        match first {
            Some(id) => (id, true),
            None => (self.new_id(random).0, false),
        }
    }
}

#[cfg(test)]
mod tests;
