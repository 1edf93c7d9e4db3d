//! Square: `x-square-hmacsha256-signature` is base64 HMAC-SHA256(signature key
//! as text, notification URL + raw body), where the URL is the one set in
//! Square's dashboard (`notification_url`), verbatim, query included. Square
//! signs no timestamp, so there is no replay window beyond the dedupe. The id
//! (`event_id`) and type (`type`) are in the signed body; payments, refunds and
//! disputes are in `data.object.{payment,refund,dispute}`, amounts in minor
//! units. Whether a payment or refund event is a kind depends on its `status`.

mod reconcile;

use std::borrow::Cow;
use std::collections::HashMap;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;
use serde_json::Value;

use super::errors::{FactsError, SecretError, Signing, SigningError, minor_amount, storable};
use super::hmac::HeaderHmac;
use super::shape::IndexFields;
use super::{
    Body, Encoding, Missing, Provider, Scheme, Signature, Simulator, body_identity, kind_table,
    non_empty, uuid_from,
};
use crate::config_keys::{self as keys, Problem};
use crate::domain::{PaymentFacts, PaymentKind, Refund};
use crate::signature::{Envelope, Headers, KeyFormat, Secret, Signed};

const SIGNATURE: &str = "x-square-hmacsha256-signature";
/// The padded base64 tag of the notification URL and raw body, compared as
/// sent, like Square's SDK (no trimming).
const SIGNED: HeaderHmac<'static> = HeaderHmac {
    header: SIGNATURE,
    prefix: "",
    encoding: Encoding::Base64,
    trim: false,
    unprefixed: "",
};

/// A source of scheme `square`, with its own keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Square {
    /// The URL Square's dashboard sends to, as written there: part of what is signed.
    pub notification_url: String,
}

/// A Square source with no keys of its own, for what does not depend on them.
pub static ANY: Square = Square {
    notification_url: String::new(),
};

/// The keys only scheme `square` takes.
pub const KEYS: &[&str] = &["notification_url"];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSquare {
    notification_url: Option<String>,
}

pub fn configure(table: toml::Table, key: &dyn Fn(&str) -> String) -> Result<Scheme, Problem> {
    let raw: RawSquare = keys::read(table, key)?;
    let problem = |what: &str| (key("notification_url"), what.to_string());
    let url = raw.notification_url.ok_or_else(|| {
        problem("is required for scheme \"square\": the URL set in Square's dashboard")
    })?;
    // Kept as written (a parsed URL may gain a `/`): Square signs the text.
    let is_web_url = reqwest::Url::parse(&url)
        .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some());
    if !is_web_url || url.trim() != url {
        return Err(problem(&format!(
            "{url:?} is not an http(s) URL (write it exactly as Square's dashboard shows it)"
        )));
    }
    Ok(Scheme::Square(Square {
        notification_url: url,
    }))
}

/// Square's types whose kind never depends on the payload.
const EVENT_TYPES: [(&str, PaymentKind); 1] = [("dispute.created", PaymentKind::DisputeOpened)];

/// The object an event is about: `data.object.payment` and the like.
fn object<'v>(payload: &'v Value, name: &str) -> Option<&'v Value> {
    payload.pointer(&format!("/data/object/{name}"))
}

fn status<'v>(payload: &'v Value, name: &str) -> Option<&'v str> {
    object(payload, name)?.get("status")?.as_str()
}

/// Which object a type is about, and where that object names the payment.
fn payment_of(event_type: &str) -> Option<(&'static str, &'static str)> {
    match event_type.split_once('.')?.0 {
        "payment" => Some(("payment", "/id")),
        "refund" => Some(("refund", "/payment_id")),
        "dispute" => Some(("dispute", "/disputed_payment/payment_id")),
        _ => None,
    }
}

/// An amount in minor units, if stated: `money` is `amount_money`, or a
/// payment's `total_money` (the amount with the tip, which a refund may return).
fn amount(object: &Value, money: &str, path: &str) -> Result<Option<i64>, FactsError> {
    minor_amount(object.pointer(&format!("/{money}/amount")), || {
        format!("{path}.{money}.amount")
    })
}

impl KeyFormat for Square {
    /// The signature key is used as written; the SDK refuses an empty one.
    fn key_bytes<'s>(&self, secret: &'s Secret) -> Result<Cow<'s, [u8]>, SecretError> {
        if secret.expose().is_empty() {
            return Err(SecretError::Empty);
        }
        Ok(Cow::Borrowed(secret.expose().as_bytes()))
    }
}

impl Provider for Square {
    fn lister(&self) -> Result<&'static super::Lister, &'static str> {
        Ok(&reconcile::LISTER)
    }

    fn development_secrets(&self) -> &'static [&'static str] {
        &["dev-square-signature-key"]
    }

    fn default_mask(&self) -> Vec<String> {
        super::pointers(&[
            "/data/object/customer/email_address",
            "/data/object/customer/given_name",
            "/data/object/customer/family_name",
            "/data/object/customer/phone_number",
            "/data/object/customer/address",
            "/data/object/payment/buyer_email_address",
            "/data/object/payment/billing_address",
            "/data/object/payment/shipping_address",
            "/data/object/payment/card_details/card/fingerprint",
        ])
    }

    fn name(&self) -> &'static str {
        "square"
    }

    fn signed_header_names(&self) -> Vec<&str> {
        vec![SIGNATURE]
    }

    /// The header is compared as sent, like Square's SDK: no trimming, padded
    /// base64 only.
    fn signature(&self) -> Option<Signature<'_>> {
        Some(Signature::Header {
            hmac: SIGNED,
            signed_before: self.notification_url.as_bytes(),
        })
    }

    fn identity(&self, _: &dyn Headers, payload: &Value) -> Result<(String, String), Missing> {
        body_identity(payload, "event_id", "type")
    }

    /// The event's `created_at`.
    fn unsigned_time(&self, payload: &Value) -> Option<chrono::DateTime<chrono::Utc>> {
        super::time_at(payload, "/created_at")
    }

    fn default_event_types(&self) -> HashMap<String, String> {
        kind_table(&EVENT_TYPES)
    }

    /// A payment is a kind once `COMPLETED`, `FAILED` or `CANCELED` (an approved
    /// or pending one is not yet); a refund once `COMPLETED`.
    fn kind_of(&self, event_type: &str, payload: &Value) -> Option<PaymentKind> {
        match event_type {
            "payment.created" | "payment.updated" => match status(payload, "payment")? {
                "COMPLETED" => Some(PaymentKind::Succeeded),
                "FAILED" | "CANCELED" => Some(PaymentKind::Failed),
                _ => None,
            },
            "refund.created" | "refund.updated" => {
                (status(payload, "refund")? == "COMPLETED").then_some(PaymentKind::Refunded)
            }
            _ => None,
        }
    }

    /// A payment states its amount and customer; a refund its own id and
    /// amount; a dispute only which payment it is about.
    fn payment_facts(&self, payload: &Value) -> Result<PaymentFacts, FactsError> {
        let event_type = payload.get("type").and_then(Value::as_str).unwrap_or("");
        let (name, payment_pointer) =
            payment_of(event_type).ok_or_else(|| FactsError::NotAboutPayment {
                what: "type",
                name: event_type.into(),
            })?;
        let path = format!("data.object.{name}");
        let object = object(payload, name)
            .filter(|o| o.is_object())
            .ok_or_else(|| FactsError::NoObject(path.clone()))?;
        let payment_id = non_empty(object.pointer(payment_pointer)).ok_or_else(|| {
            FactsError::Missing(format!("{path}{}", payment_pointer.replace('/', ".")))
        })?;
        let stated = match object.get("total_money") {
            Some(_) if name == "payment" => amount(object, "total_money", &path)?,
            _ => amount(object, "amount_money", &path)?,
        };
        // Only a completed refund returned money, whatever a source maps its type to.
        let completed = object.get("status").and_then(Value::as_str) == Some("COMPLETED");
        let refund = match name {
            "refund" if completed => Some(Refund {
                id: non_empty(object.get("id"))
                    .ok_or_else(|| FactsError::Missing(format!("{path}.id")))?,
                amount: stated
                    .ok_or_else(|| FactsError::Missing(format!("{path}.amount_money.amount")))?,
            }),
            _ => None,
        };
        let facts = PaymentFacts {
            payment_id,
            amount: if name == "payment" { stated } else { None },
            amount_refunded: None,
            currency: non_empty(object.pointer("/amount_money/currency")),
            customer_id: non_empty(object.get("customer_id")),
            refund,
        };
        storable(facts)
    }

    fn index_fields(&self, payload: &Value) -> IndexFields {
        let event_type = payload.get("type").and_then(Value::as_str).unwrap_or("");
        let Some((name, payment_pointer)) = payment_of(event_type) else {
            return IndexFields::default();
        };
        let object = object(payload, name);
        IndexFields {
            payment_id: non_empty(object.and_then(|o| o.pointer(payment_pointer))),
            customer_id: non_empty(object.and_then(|o| o.get("customer_id"))),
        }
    }
}

impl Simulator for Square {
    fn sign(&self, key: &[u8], body: &[u8], _: &Envelope<'_>) -> Signing<Signed> {
        Ok(Signed::headers(vec![
            SIGNED.sign(key, &[self.notification_url.as_bytes(), body]),
        ]))
    }

    /// 22 base64url characters (16 random bytes), as Square's signature keys look.
    fn new_secret(&self) -> Secret {
        Secret::new(URL_SAFE_NO_PAD.encode(rand::random::<[u8; 16]>()))
    }

    fn signing_id(&self, body: &Body<'_>) -> Result<String, SigningError> {
        body.member("event_id", "a Square body")
    }

    fn new_id(&self, random: &[u8; 16]) -> (String, Option<String>) {
        (uuid_from(random), Some("/event_id".into()))
    }
}

#[cfg(test)]
mod tests;
