//! Razorpay: `X-Razorpay-Signature` is hex HMAC-SHA256(the webhook secret as
//! text, raw body). Razorpay signs no timestamp, so there is no replay window
//! beyond the dedupe. The event id travels beside the signed body in
//! `x-razorpay-event-id`; the type is the signed body's `event`. The payment,
//! refund or dispute an event is about is in `payload.{payment,refund,dispute}.entity`,
//! amounts in paise (minor units).

use std::collections::HashMap;

use serde_json::Value;

use super::errors::{FactsError, Signing, SigningError, minor_amount, storable};
use super::hmac::HeaderHmac;
use super::shape::IndexFields;
use super::{
    Body, Capabilities, Missing, Provider, Signature, Simulator, id_in_header, kind_table,
    non_empty, type_in_body,
};
use crate::domain::{PaymentFacts, PaymentKind, Refund};
use crate::signature::{Envelope, Headers, KeyFormat, Signed};

const SIGNATURE: &str = "X-Razorpay-Signature";
/// The hex tag of the raw body, as sent.
const SIGNED: HeaderHmac<'static> = HeaderHmac::hex(SIGNATURE);
const EVENT_ID: &str = "x-razorpay-event-id";

pub struct Razorpay;

impl KeyFormat for Razorpay {}

/// Razorpay's events for the built-in kinds: every Razorpay source maps them unlisted.
const EVENT_TYPES: [(&str, PaymentKind); 4] = [
    ("payment.captured", PaymentKind::Succeeded),
    ("payment.failed", PaymentKind::Failed),
    ("refund.processed", PaymentKind::Refunded),
    ("payment.dispute.created", PaymentKind::DisputeOpened),
];

/// The entity an event is about, by its type, and where that entity names the
/// payment.
fn entity_of(event_type: &str) -> Option<(&'static str, &'static str)> {
    if event_type.starts_with("payment.dispute.") {
        Some(("dispute", "payment_id"))
    } else if event_type.starts_with("payment.") {
        Some(("payment", "id"))
    } else if event_type.starts_with("refund.") {
        Some(("refund", "payment_id"))
    } else {
        None
    }
}

fn entity<'v>(payload: &'v Value, name: &str) -> Option<&'v Value> {
    payload.pointer(&format!("/payload/{name}/entity"))
}

fn event_type(payload: &Value) -> &str {
    payload.get("event").and_then(Value::as_str).unwrap_or("")
}

/// An amount in paise, if stated.
fn amount(entity: &Value, path: &str) -> Result<Option<i64>, FactsError> {
    minor_amount(entity.get("amount"), || format!("{path}.amount"))
}

impl Provider for Razorpay {
    fn lister(&self) -> Result<&'static super::Lister, &'static str> {
        Err(
            "Razorpay's API lists no past webhook events: resend them from the Dashboard's \
         webhook logs",
        )
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            signs_id: false,
            ..Capabilities::DEFAULT
        }
    }

    fn development_secrets(&self) -> &'static [&'static str] {
        &["dev-razorpay-webhook-secret"]
    }

    fn default_mask(&self) -> Vec<String> {
        super::pointers(&[
            "/payload/payment/entity/email",
            "/payload/payment/entity/contact",
            "/payload/payment/entity/vpa",
            "/payload/payment/entity/card/name",
        ])
    }

    fn name(&self) -> &'static str {
        "razorpay"
    }

    fn signed_header_names(&self) -> Vec<&str> {
        vec![SIGNATURE, EVENT_ID]
    }

    fn signature(&self) -> Option<Signature<'_>> {
        Some(Signature::header(SIGNED))
    }

    fn identity(
        &self,
        headers: &dyn Headers,
        payload: &Value,
    ) -> Result<(String, String), Missing> {
        Ok((
            id_in_header(headers, EVENT_ID)?,
            type_in_body(payload, "event")?,
        ))
    }

    /// The event's `created_at` (Unix seconds).
    fn unsigned_time(&self, payload: &Value) -> Option<chrono::DateTime<chrono::Utc>> {
        super::time_at(payload, "/created_at")
    }

    fn default_event_types(&self) -> HashMap<String, String> {
        kind_table(&EVENT_TYPES)
    }

    /// A payment states its amount, currency and customer; a refund its own id
    /// and amount; a dispute only which payment it is about.
    fn payment_facts(&self, payload: &Value) -> Result<PaymentFacts, FactsError> {
        let ty = event_type(payload);
        let (name, payment_field) = entity_of(ty).ok_or_else(|| FactsError::NotAboutPayment {
            what: "event",
            name: ty.into(),
        })?;
        let path = format!("payload.{name}.entity");
        let entity = entity(payload, name)
            .filter(|e| e.is_object())
            .ok_or_else(|| FactsError::NoObject(path.clone()))?;
        let payment_id = non_empty(entity.get(payment_field))
            .ok_or_else(|| FactsError::Missing(format!("{path}.{payment_field}")))?;
        let stated = amount(entity, &path)?;
        let refund = match name {
            "refund" => Some(Refund {
                id: non_empty(entity.get("id"))
                    .ok_or_else(|| FactsError::Missing(format!("{path}.id")))?,
                amount: stated.ok_or_else(|| FactsError::Missing(format!("{path}.amount")))?,
            }),
            _ => None,
        };
        let facts = PaymentFacts {
            payment_id,
            amount: if name == "payment" { stated } else { None },
            amount_refunded: None,
            currency: non_empty(entity.get("currency")),
            customer_id: match name {
                "payment" => non_empty(entity.get("customer_id")),
                _ => None,
            },
            refund,
        };
        storable(facts)
    }

    fn index_fields(&self, payload: &Value) -> IndexFields {
        let Some((name, payment_field)) = entity_of(event_type(payload)) else {
            return IndexFields::default();
        };
        let entity = entity(payload, name);
        IndexFields {
            payment_id: non_empty(entity.and_then(|e| e.get(payment_field))),
            customer_id: non_empty(entity.and_then(|e| e.get("customer_id"))),
        }
    }
}

impl Simulator for Razorpay {
    fn sign(&self, key: &[u8], body: &[u8], envelope: &Envelope<'_>) -> Signing<Signed> {
        Ok(Signed::headers(vec![
            SIGNED.sign(key, &[body]),
            (EVENT_ID.to_string(), envelope.event_id.to_string()),
        ]))
    }

    /// An event id derived from the body's content.
    fn signing_id(&self, body: &Body<'_>) -> Result<String, SigningError> {
        Ok(body.content_id())
    }

    fn signing_type(&self, body: &Body<'_>) -> Result<String, SigningError> {
        body.member("event", "a Razorpay body")
    }

    /// 14 characters, as Razorpay's event ids are; the header carries it.
    fn new_id(&self, random: &[u8; 16]) -> (String, Option<String>) {
        (hex::encode(&random[..7]), None)
    }
}

#[cfg(test)]
mod tests;
