//! Checkout.com: `Cko-Signature` is hex HMAC-SHA256(the webhook's signature key
//! as text, raw body). Checkout.com signs no timestamp, so there is no replay
//! window beyond the dedupe. An optional fixed `authorization` key, set beside
//! the webhook in Checkout.com's dashboard, must also arrive verbatim as the
//! `Authorization` header. The id (`id`) and type (`type`) are in the signed
//! body; the payment is `data` (a refund is an action of it, `data.action_id`;
//! a dispute names it by `data.payment_id`), amounts in minor units.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;

use super::errors::{FactsError, Signing, SigningError, minor_amount, storable};
use super::hmac::HeaderHmac;
use super::shape::IndexFields;
use super::{
    Body, Missing, Provider, Scheme, Signature, Simulator, body_identity, kind_table, non_empty,
};
use crate::config_keys::{self as keys, Problem};
use crate::domain::{PaymentFacts, PaymentKind, Refund};
use crate::signature::{Envelope, Headers, KeyFormat, Secret, SignatureError, Signed};

const SIGNATURE: &str = "Cko-Signature";
/// The hex tag of the raw body, as sent.
const SIGNED: HeaderHmac<'static> = HeaderHmac::hex(SIGNATURE);
const AUTHORIZATION: &str = "Authorization";

/// A source of scheme `checkout`, with its own keys.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Checkout {
    /// The value every request's `Authorization` header must have.
    pub authorization: Option<Secret>,
}

impl std::fmt::Debug for Checkout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkout")
            .field("authorization", &super::redacted(&self.authorization))
            .finish()
    }
}

/// A Checkout.com source with no keys of its own, for what does not depend on them.
pub static ANY: Checkout = Checkout {
    authorization: None,
};

/// The keys only scheme `checkout` takes.
pub const KEYS: &[&str] = &["authorization"];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCheckout {
    authorization: Option<String>,
}

pub fn configure(table: toml::Table, key: &dyn Fn(&str) -> String) -> Result<Scheme, Problem> {
    let raw: RawCheckout = keys::read(table, key)?;
    let authorization = match raw.authorization {
        None => None,
        Some(value) if !value.trim().is_empty() && value.trim() == value => {
            Some(Secret::new(value))
        }
        Some(_) => {
            return Err((
                key("authorization"),
                "must be the authorization header key set in Checkout.com's dashboard \
                 (not empty, no surrounding spaces)"
                    .into(),
            ));
        }
    };
    Ok(Scheme::Checkout(Checkout { authorization }))
}

/// Checkout.com's types for the built-in kinds: every Checkout.com source maps
/// them unlisted. A dispute is opened when it is received or, where Checkout.com
/// sends no `dispute_received`, when evidence is first required.
const EVENT_TYPES: [(&str, PaymentKind); 5] = [
    ("payment_captured", PaymentKind::Succeeded),
    ("payment_declined", PaymentKind::Failed),
    ("payment_refunded", PaymentKind::Refunded),
    ("dispute_received", PaymentKind::DisputeOpened),
    ("dispute_evidence_required", PaymentKind::DisputeOpened),
];

fn event_type(payload: &Value) -> &str {
    payload.get("type").and_then(Value::as_str).unwrap_or("")
}

fn is_dispute(event_type: &str) -> bool {
    event_type.starts_with("dispute_")
}

/// Where an event names the payment, as a pointer and as messages write it.
fn payment_pointer(event_type: &str) -> (&'static str, &'static str) {
    if is_dispute(event_type) {
        ("/data/payment_id", "data.payment_id")
    } else {
        ("/data/id", "data.id")
    }
}

/// An amount in minor units, if stated.
fn amount(payload: &Value) -> Result<Option<i64>, FactsError> {
    minor_amount(payload.pointer("/data/amount"), || "data.amount".into())
}

impl KeyFormat for Checkout {}

impl Provider for Checkout {
    fn lister(&self) -> Result<&'static super::Lister, &'static str> {
        Err(
            "Checkout.com's API lists events by payment only (GET /payments/{id}/actions): \
         ask for a payment's events there",
        )
    }

    fn development_secrets(&self) -> &'static [&'static str] {
        &["dev-checkout-signature-key"]
    }

    fn default_mask(&self) -> Vec<String> {
        super::pointers(&[
            "/data/customer",
            "/data/shipping",
            "/data/source/name",
            "/data/source/phone",
            "/data/source/billing_address",
            "/data/source/fingerprint",
        ])
    }

    fn name(&self) -> &'static str {
        "checkout"
    }

    /// The authorization key is never kept with an event.
    fn signed_header_names(&self) -> Vec<&str> {
        vec![SIGNATURE]
    }

    fn authenticate(&self, headers: &dyn Headers) -> Result<(), SignatureError> {
        let Some(expected) = &self.authorization else {
            return Ok(());
        };
        let given = headers
            .header(AUTHORIZATION)
            .ok_or_else(|| SignatureError::Missing(AUTHORIZATION.into()))?;
        if expected.is(given.as_bytes()) {
            Ok(())
        } else {
            Err(SignatureError::Mismatch)
        }
    }

    fn signature(&self) -> Option<Signature<'_>> {
        Some(Signature::header(SIGNED))
    }

    fn identity(&self, _: &dyn Headers, payload: &Value) -> Result<(String, String), Missing> {
        body_identity(payload, "id", "type")
    }

    /// The event's `created_on`.
    fn unsigned_time(&self, payload: &Value) -> Option<chrono::DateTime<chrono::Utc>> {
        super::time_at(payload, "/created_on")
    }

    fn default_event_types(&self) -> HashMap<String, String> {
        kind_table(&EVENT_TYPES)
    }

    /// A payment event states the payment's amount, currency and customer; a
    /// refund is the action `data.action_id` of `data.amount`; a dispute only
    /// names the payment.
    fn payment_facts(&self, payload: &Value) -> Result<PaymentFacts, FactsError> {
        let ty = event_type(payload);
        if !payload.get("data").is_some_and(Value::is_object) {
            return Err(FactsError::NoObject("data".into()));
        }
        let (pointer, field) = payment_pointer(ty);
        let payment_id =
            non_empty(payload.pointer(pointer)).ok_or_else(|| FactsError::Missing(field.into()))?;
        let stated = amount(payload)?;
        let refund = match ty {
            "payment_refunded" => Some(Refund {
                id: non_empty(payload.pointer("/data/action_id"))
                    .ok_or_else(|| FactsError::Missing("data.action_id".into()))?,
                amount: stated.ok_or_else(|| FactsError::Missing("data.amount".into()))?,
            }),
            _ => None,
        };
        let payment = !is_dispute(ty) && refund.is_none();
        let facts = PaymentFacts {
            payment_id,
            amount: if payment { stated } else { None },
            amount_refunded: None,
            currency: non_empty(payload.pointer("/data/currency")),
            customer_id: non_empty(payload.pointer("/data/customer/id")),
            refund,
        };
        storable(facts)
    }

    fn index_fields(&self, payload: &Value) -> IndexFields {
        let ty = event_type(payload);
        let about_payment = ty.starts_with("payment_") || is_dispute(ty);
        IndexFields {
            payment_id: about_payment
                .then(|| non_empty(payload.pointer(payment_pointer(ty).0)))
                .flatten(),
            customer_id: non_empty(payload.pointer("/data/customer/id")),
        }
    }
}

impl Simulator for Checkout {
    fn sign(&self, key: &[u8], body: &[u8], _: &Envelope<'_>) -> Signing<Signed> {
        let mut headers = vec![SIGNED.sign(key, &[body])];
        if let Some(authorization) = &self.authorization {
            headers.push((
                AUTHORIZATION.to_string(),
                authorization.expose().to_string(),
            ));
        }
        Ok(Signed::headers(headers))
    }

    fn signing_id(&self, body: &Body<'_>) -> Result<String, SigningError> {
        body.member("id", "a Checkout.com body")
    }

    /// `evt_` and 26 lowercase hex digits, in the body's `id`.
    fn new_id(&self, random: &[u8; 16]) -> (String, Option<String>) {
        (
            format!("evt_{}", hex::encode(&random[..13])),
            Some("/id".into()),
        )
    }
}

#[cfg(test)]
mod tests;
