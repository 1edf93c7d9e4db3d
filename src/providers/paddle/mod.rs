//! Paddle Billing: `Paddle-Signature: ts=T;h1=HEX[;h1=HEX…]` where HEX =
//! HMAC-SHA256(the endpoint's secret key as text, `T:` + raw body). Every `h1` is
//! tried (Paddle sends several while a key rotates; its SDK reads only the last),
//! unknown parts are ignored, and `ts` must be within the tolerance on both sides
//! (5 s unless the source sets one, as Paddle's SDKs allow). The id and type are
//! the signed body's `event_id` and `event_type`. Amounts are strings of minor
//! units ("34800" is 348.00 USD); a refund or chargeback is an adjustment of a
//! transaction, told apart by `data.action`.

mod reconcile;

use std::collections::HashMap;
use std::time::Duration;

use rand::RngExt;
use serde_json::Value;

use super::errors::{FactsError, Signing, SigningError, each_storable};
use super::hmac::{Refusals, TimedTags};
use super::shape::IndexFields;
use super::{Body, Missing, Provider, Signature, Simulator, body_identity, non_empty};
use crate::domain::{PaymentFacts, PaymentKind, Refund};
use crate::signature::{Envelope, Headers, KeyFormat, Secret, Signed};

const HEADER: &str = "Paddle-Signature";
/// `ts=T;h1=HEX[;h1=HEX…]`, white space around each key and value taken off.
const SIGNED: TimedTags = TimedTags {
    header: HEADER,
    separator: ';',
    lenient: true,
    timestamp: "ts",
    tag: "h1",
    joiner: ":",
    refusals: Refusals {
        unpaired: "expected key=value parts separated by ;",
        two_timestamps: "more than one ts",
        not_hex: "h1 is not hex",
        no_timestamp: "no ts=",
        no_tag: "no h1 signature",
    },
};

pub struct Paddle;

impl KeyFormat for Paddle {}

/// Paddle's types whose kind is their type alone: every Paddle source maps them unlisted.
const EVENT_TYPES: [(&str, PaymentKind); 2] = [
    ("transaction.completed", PaymentKind::Succeeded),
    ("transaction.payment_failed", PaymentKind::Failed),
];

/// The types of an adjustment (a refund, credit or chargeback of a transaction).
const ADJUSTMENTS: [&str; 2] = ["adjustment.created", "adjustment.updated"];

/// What an adjustment is, by its `data.action` and `data.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Adjustment {
    /// A refund Paddle has approved: money goes back.
    ApprovedRefund,
    Chargeback,
    /// A refund not (yet) approved, a credit, a chargeback warning or reversal…
    Other,
}

fn adjustment(payload: &Value) -> Option<Adjustment> {
    let event_type = payload.get("event_type").and_then(Value::as_str)?;
    if !ADJUSTMENTS.contains(&event_type) {
        return None;
    }
    let data = |field| payload.pointer(field).and_then(Value::as_str);
    Some(match (data("/data/action"), data("/data/status")) {
        (Some("refund"), Some("approved")) => Adjustment::ApprovedRefund,
        (Some("chargeback"), _) => Adjustment::Chargeback,
        _ => Adjustment::Other,
    })
}

/// A Paddle amount: a string of digits in minor units. Absent or null is none.
fn amount(payload: &Value, pointer: &str) -> Result<Option<i64>, FactsError> {
    let path = || {
        format!(
            "data{}",
            pointer.trim_start_matches("/data").replace('/', ".")
        )
    };
    match payload.pointer(pointer) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text))
            if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) =>
        {
            text.parse::<i64>()
                .map(Some)
                .map_err(|_| FactsError::invalid(path(), format!("{text:?} is too large to store")))
        }
        Some(other) => Err(FactsError::invalid(
            path(),
            format!(
                "is {other}, not an amount in minor units (a string of digits, as Paddle sends)"
            ),
        )),
    }
}

fn text_at(payload: &Value, pointer: &str) -> Option<String> {
    non_empty(payload.pointer(pointer))
}

impl Provider for Paddle {
    fn lister(&self) -> Result<&'static super::Lister, &'static str> {
        Ok(&reconcile::LISTER)
    }

    fn development_secrets(&self) -> &'static [&'static str] {
        &["pdl_ntfset_dev_paddle_0123456789"]
    }

    fn default_mask(&self) -> Vec<String> {
        super::pointers(&[
            "/data/email",
            "/data/name",
            "/data/payments/*/method_details/card/cardholder_name",
        ])
    }

    fn name(&self) -> &'static str {
        "paddle"
    }

    /// Each notification of an event has its own `notification_id`, and the
    /// event as Paddle's API lists it has none: the same event either way.
    fn default_fingerprint_ignore(&self) -> Vec<String> {
        vec!["/notification_id".to_string()]
    }

    fn signed_header_names(&self) -> Vec<&str> {
        vec![HEADER]
    }

    fn signature(&self) -> Option<Signature<'_>> {
        Some(Signature::Timed(SIGNED))
    }

    /// Paddle's SDKs allow 5 seconds.
    fn default_tolerance(&self) -> Duration {
        Duration::from_secs(5)
    }

    fn identity(&self, _: &dyn Headers, payload: &Value) -> Result<(String, String), Missing> {
        body_identity(payload, "event_id", "event_type")
    }

    fn default_event_types(&self) -> HashMap<String, String> {
        EVENT_TYPES
            .iter()
            .map(|(provider, kind)| (provider.to_string(), kind.as_str().to_string()))
            .collect()
    }

    /// An approved refund is a refund, a chargeback a dispute; other adjustments
    /// (refunds awaiting approval, credits, chargeback warnings) have no kind.
    fn kind_of(&self, _event_type: &str, payload: &Value) -> Option<PaymentKind> {
        match adjustment(payload)? {
            Adjustment::ApprovedRefund => Some(PaymentKind::Refunded),
            Adjustment::Chargeback => Some(PaymentKind::DisputeOpened),
            Adjustment::Other => None,
        }
    }

    /// A transaction names the payment by its own `data.id` and states its
    /// `grand_total`; an adjustment names it by `data.transaction_id`, and an
    /// approved refund states itself (its id and `totals.total`), never the
    /// payment's amount.
    fn payment_facts(&self, payload: &Value) -> Result<PaymentFacts, FactsError> {
        let kind = adjustment(payload);
        let (pointer, field) = match kind {
            Some(_) => ("/data/transaction_id", "data.transaction_id"),
            None => ("/data/id", "data.id"),
        };
        let payment_id =
            text_at(payload, pointer).ok_or_else(|| FactsError::Missing(field.into()))?;
        let refund = match kind {
            Some(Adjustment::ApprovedRefund) => Some(Refund {
                id: text_at(payload, "/data/id")
                    .ok_or_else(|| FactsError::Missing("data.id".into()))?,
                amount: amount(payload, "/data/totals/total")?
                    .ok_or_else(|| FactsError::Missing("data.totals.total".into()))?,
            }),
            _ => None,
        };
        let facts = PaymentFacts {
            payment_id,
            amount: match kind {
                Some(_) => None,
                None => amount(payload, "/data/details/totals/grand_total")?,
            },
            amount_refunded: None,
            currency: text_at(payload, "/data/currency_code"),
            customer_id: text_at(payload, "/data/customer_id"),
            refund,
        };
        each_storable(facts)
    }

    fn index_fields(&self, payload: &Value) -> IndexFields {
        let event_type = payload.get("event_type").and_then(Value::as_str);
        let own_id = |prefix: &str| {
            event_type
                .is_some_and(|t| t.starts_with(prefix))
                .then(|| text_at(payload, "/data/id"))
                .flatten()
        };
        IndexFields {
            payment_id: own_id("transaction.").or_else(|| text_at(payload, "/data/transaction_id")),
            customer_id: own_id("customer.").or_else(|| text_at(payload, "/data/customer_id")),
        }
    }
}

impl Simulator for Paddle {
    fn sign(&self, key: &[u8], body: &[u8], envelope: &Envelope<'_>) -> Signing<Signed> {
        Ok(SIGNED.sign(key, body, envelope.timestamp))
    }

    /// As Paddle shows an endpoint's secret key: `pdl_ntfset_`, 26 lowercase
    /// letters and digits, `_`, 32 letters and digits (the whole text is the key).
    fn new_secret(&self) -> Secret {
        let mut rng = rand::rng();
        let setting: String = (&mut rng)
            .sample_iter(rand::distr::Alphanumeric)
            .map(|b| char::from(b).to_ascii_lowercase())
            .take(26)
            .collect();
        let key: String = rng
            .sample_iter(rand::distr::Alphanumeric)
            .take(32)
            .map(char::from)
            .collect();
        Secret::new(format!("pdl_ntfset_{setting}_{key}"))
    }

    fn signing_id(&self, body: &Body<'_>) -> Result<String, SigningError> {
        body.member("event_id", "a Paddle body")
    }

    fn signing_type(&self, body: &Body<'_>) -> Result<String, SigningError> {
        body.member("event_type", "a Paddle body")
    }

    /// `evt_` and 26 lowercase hex digits, in the body's `event_id`.
    fn new_id(&self, random: &[u8; 16]) -> (String, Option<String>) {
        (
            format!("evt_{}", hex::encode(&random[..13])),
            Some("/event_id".into()),
        )
    }
}

#[cfg(test)]
mod tests;
