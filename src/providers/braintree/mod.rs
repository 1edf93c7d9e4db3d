//! Braintree: the body is a form (`application/x-www-form-urlencoded`) of
//! `bt_payload`, the base64 of an XML notification, and `bt_signature`,
//! `public_key|hex(HMAC-SHA1(SHA1(private_key), bt_payload))` pairs joined by
//! `&` (one per API key of the merchant). A secret is `PUBLIC_KEY:PRIVATE_KEY`;
//! the pair naming its public key must match, as Braintree's SDKs check it (the
//! payload as sent, or with a trailing newline added). The notification is
//! stored as JSON (`{"kind","timestamp","subject":{…}}`, see [`xml`]); it has
//! no id, so the id is `{kind}:{subject id}:{timestamp}` and the type `kind`.
//! Braintree retries for hours with the first timestamp and its SDKs check no
//! age, so no tolerance applies: a resend is a duplicate by its id. Amounts are
//! decimals of the transaction's `currency-iso-code`; a refund is a `credit`
//! transaction naming the sale it refunds in `refunded-transaction-id`.

use std::borrow::Cow;
use std::collections::HashMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, KeyInit, Mac};
use rand::RngExt;
use serde_json::Value;
use sha1::{Digest, Sha1};
use subtle::ConstantTimeEq;

use super::errors::{FactsError, PayloadError, SecretError, Signing, SigningError, storable};
use super::shape::IndexFields;
use super::{Body, Capabilities, Missing, Provider, Simulator, kind_table, non_empty};
use crate::domain::{PaymentFacts, PaymentKind, Refund};
use crate::money::minor_units;
use crate::signature::{
    Envelope, Headers, KeyFormat, Keys, Secret, SignatureError, Signed, Verified,
};

mod xml;

const SIGNATURE: &str = "bt_signature";
const PAYLOAD: &str = "bt_payload";
const FORM: &str = "application/x-www-form-urlencoded";

/// Ruby's `Base64.encode64`, which Braintree's gateway uses, breaks lines here.
const LINE: usize = 60;

pub struct Braintree;

/// Braintree's kinds whose hookd kind never depends on the payload.
const EVENT_TYPES: [(&str, PaymentKind); 1] = [("dispute_opened", PaymentKind::DisputeOpened)];

/// A secret's public and private key.
fn key_pair(secret: &[u8]) -> Option<(&str, &str)> {
    let (public, private) = std::str::from_utf8(secret).ok()?.split_once(':')?;
    (!public.is_empty() && !private.is_empty()).then_some((public, private))
}

/// What Braintree's SDKs compare: the hex HMAC-SHA1 of the payload keyed with
/// the SHA-1 of the private key.
fn signature(private_key: &str, payload: &[&[u8]]) -> String {
    let key = Sha1::digest(private_key.as_bytes());
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = <Hmac<Sha1> as KeyInit>::new_from_slice(&key)
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    for part in payload {
        mac.update(part);
    }
    hex::encode(mac.finalize().into_bytes())
}

/// The form's `bt_signature` and `bt_payload`, each as decoded from the form.
fn form(body: &[u8]) -> (Option<String>, Option<String>) {
    let (mut signature, mut payload) = (None, None);
    for (name, value) in form_urlencoded::parse(body) {
        let slot = match name.as_ref() {
            SIGNATURE => &mut signature,
            PAYLOAD => &mut payload,
            _ => continue,
        };
        slot.get_or_insert_with(|| value.into_owned());
    }
    (signature, payload)
}

/// Whether a payload is what the SDKs accept: base64 and line feeds only.
fn is_base64_text(payload: &str) -> bool {
    payload
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=' | b'\n'))
}

/// The notification a verified `bt_payload` carries, as JSON.
fn notification(payload: &str) -> Result<Value, PayloadError> {
    let compact: String = payload.chars().filter(|c| *c != '\n').collect();
    let bytes = BASE64
        .decode(compact)
        .map_err(|_| PayloadError::NotEncoded {
            field: PAYLOAD,
            encoding: "base64",
        })?;
    let text = String::from_utf8(bytes).map_err(|_| PayloadError::NotEncoded {
        field: PAYLOAD,
        encoding: "UTF-8 XML",
    })?;
    xml::to_json(&text).map_err(|e| PayloadError::Unreadable {
        field: PAYLOAD,
        problem: e.to_string(),
    })
}

/// The id of the object a notification's subject holds (a transaction, a
/// dispute…): the first with one.
fn subject_id(payload: &Value) -> Option<String> {
    payload
        .get("subject")?
        .as_object()?
        .values()
        .find_map(|object| text(object, "id"))
}

/// Where `--new-ids` puts a fresh id when the subject holds no object with one
/// (`check`): an element Braintree's SDKs do not read.
const REPLAY_SUBJECT: &str = "hookd-replay";

fn text(value: &Value, field: &str) -> Option<String> {
    non_empty(value.get(field))
}

fn kind(payload: &Value) -> &str {
    payload.get("kind").and_then(Value::as_str).unwrap_or("")
}

/// A transaction that gives money back: Braintree's refunds.
fn is_credit(payload: &Value) -> bool {
    payload
        .pointer("/subject/transaction/type")
        .and_then(Value::as_str)
        == Some("credit")
}

/// What a notification is about, by its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum About {
    Transaction,
    Dispute,
}

fn about(payload: &Value) -> Option<About> {
    let kind = kind(payload);
    if kind.starts_with("transaction_") {
        Some(About::Transaction)
    } else if kind.starts_with("dispute_") {
        Some(About::Dispute)
    } else {
        None
    }
}

/// The customer of a transaction: `customer-id`, or the `customer` it holds.
fn customer(transaction: &Value) -> Option<String> {
    text(transaction, "customer-id").or_else(|| non_empty(transaction.pointer("/customer/id")))
}

/// A Braintree id from random bytes: 8 lowercase letters and digits.
fn braintree_id(random: &[u8]) -> String {
    const ALPHABET: &[u8; 36] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    random
        .iter()
        .take(8)
        .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
        .collect()
}

impl KeyFormat for Braintree {
    /// The pair as written; both halves must be there.
    fn key_bytes<'s>(&self, secret: &'s Secret) -> Result<Cow<'s, [u8]>, SecretError> {
        match key_pair(secret.expose().as_bytes()) {
            Some(_) => Ok(Cow::Borrowed(secret.expose().as_bytes())),
            None => Err(SecretError::Not(
                "\"PUBLIC_KEY:PRIVATE_KEY\" (the API key pair from Braintree's control panel)",
            )),
        }
    }
}

impl Provider for Braintree {
    fn lister(&self) -> Result<&'static super::Lister, &'static str> {
        Err(
            "Braintree's API lists no past webhook notifications: search the transactions \
         instead",
        )
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            payload_is_body: false,
            ..Capabilities::DEFAULT
        }
    }

    fn development_secrets(&self) -> &'static [&'static str] {
        &["dev_braintree_public:dev_braintree_private_0123456789"]
    }

    fn default_mask(&self) -> Vec<String> {
        super::pointers(&[
            "/subject/transaction/customer",
            "/subject/transaction/billing",
            "/subject/transaction/shipping",
            "/subject/transaction/customer-ip",
            "/subject/transaction/credit-card/cardholder-name",
            "/subject/transaction/credit-card/unique-number-identifier",
            "/subject/customer",
        ])
    }

    fn name(&self) -> &'static str {
        "braintree"
    }

    /// The signature is in the body.
    fn signed_header_names(&self) -> Vec<&str> {
        Vec::new()
    }

    /// Each secret in order: the first pair naming its public key is compared
    /// (as the SDKs do), in constant time, as lowercase hex.
    fn verify(
        &self,
        keys: &Keys<'_>,
        _headers: &dyn Headers,
        body: &[u8],
        _now: i64,
    ) -> Result<Verified, SignatureError> {
        let in_body = |where_: &str, detail| SignatureError::InBody {
            where_: where_.into(),
            detail,
        };
        let (signatures, payload) = form(body);
        let signatures = signatures
            .filter(|s| !s.is_empty())
            .ok_or_else(|| in_body(SIGNATURE, "missing"))?;
        let payload = payload
            .filter(|p| !p.is_empty())
            .ok_or_else(|| in_body(PAYLOAD, "missing"))?;
        if !is_base64_text(&payload) {
            return Err(in_body(PAYLOAD, "has characters base64 does not use"));
        }
        let pairs: Vec<(&str, &str)> = signatures
            .split('&')
            .filter_map(|pair| pair.split_once('|'))
            .map(|(public, rest)| (public, rest.split('|').next().unwrap_or(rest)))
            .collect();
        if pairs.is_empty() {
            return Err(in_body(SIGNATURE, "no public_key|signature pair"));
        }
        for (position, secret) in keys.secrets.iter().enumerate() {
            let Some((public, private)) = key_pair(secret.expose().as_bytes()) else {
                continue;
            };
            let Some((_, given)) = pairs.iter().find(|(p, _)| *p == public) else {
                continue;
            };
            let candidates = [
                signature(private, &[payload.as_bytes()]),
                signature(private, &[payload.as_bytes(), b"\n"]),
            ];
            if candidates
                .iter()
                .any(|c| bool::from(c.as_bytes().ct_eq(given.as_bytes())))
            {
                return Ok(Verified {
                    signed_with: i32::try_from(position + 1).unwrap_or(i32::MAX),
                });
            }
        }
        Err(SignatureError::Mismatch)
    }

    fn payload(&self, body: &[u8]) -> Result<Value, PayloadError> {
        let (_, payload) = form(body);
        notification(&payload.ok_or(PayloadError::NoField(PAYLOAD))?)
    }

    /// `{kind}:{subject id}:{timestamp}`; the subject id is empty for a
    /// subject with none (the `check` Braintree's control panel sends).
    fn identity(&self, _: &dyn Headers, payload: &Value) -> Result<(String, String), Missing> {
        let kind =
            text(payload, "kind").ok_or_else(|| Missing::Type("notification.kind".into()))?;
        let timestamp = text(payload, "timestamp")
            .ok_or_else(|| Missing::Id("notification.timestamp".into()))?;
        let subject_id = subject_id(payload).unwrap_or_default();
        Ok((format!("{kind}:{subject_id}:{timestamp}"), kind))
    }

    /// The notification's `timestamp`.
    fn unsigned_time(&self, payload: &Value) -> Option<chrono::DateTime<chrono::Utc>> {
        super::time_at(payload, "/timestamp")
    }

    fn default_event_types(&self) -> HashMap<String, String> {
        kind_table(&EVENT_TYPES)
    }

    /// A settled sale is a payment, a settled credit a refund; a declined
    /// settlement of a sale is a failed payment (of a credit, no kind).
    fn kind_of(&self, event_type: &str, payload: &Value) -> Option<PaymentKind> {
        let credit = is_credit(payload);
        match event_type {
            "transaction_settled" if credit => Some(PaymentKind::Refunded),
            "transaction_settled" => Some(PaymentKind::Succeeded),
            "transaction_settlement_declined" if !credit => Some(PaymentKind::Failed),
            _ => None,
        }
    }

    /// A sale names the payment by its id and states its amount and customer;
    /// a credit names it by `refunded-transaction-id` and states itself; a
    /// dispute names it by its `transaction.id`.
    fn payment_facts(&self, payload: &Value) -> Result<PaymentFacts, FactsError> {
        let about = about(payload).ok_or_else(|| FactsError::NotAboutPayment {
            what: "kind",
            name: kind(payload).to_string(),
        })?;
        let (name, pointer) = match about {
            About::Transaction => ("transaction", "/subject/transaction"),
            About::Dispute => ("dispute", "/subject/dispute"),
        };
        let path = format!("subject.{name}");
        let object = payload
            .pointer(pointer)
            .filter(|o| o.is_object())
            .ok_or_else(|| FactsError::NoObject(path.clone()))?;
        let currency = text(object, "currency-iso-code");
        let amount = || -> Result<Option<i64>, FactsError> {
            let Some(decimal) = text(object, "amount") else {
                return Ok(None);
            };
            let currency = currency.as_deref().ok_or_else(|| {
                FactsError::invalid(
                    format!("{path}.currency-iso-code"),
                    "is missing (the amount's)",
                )
            })?;
            minor_units(&decimal, currency)
                .map(Some)
                .map_err(|error| FactsError::Money {
                    path: format!("{path}.amount"),
                    error,
                })
        };
        let id = |field: &str| {
            text(object, field).ok_or_else(|| FactsError::Missing(format!("{path}.{field}")))
        };
        let facts = match about {
            About::Transaction if is_credit(payload) => PaymentFacts {
                payment_id: id("refunded-transaction-id")?,
                amount: None,
                amount_refunded: None,
                currency: currency.clone(),
                customer_id: customer(object),
                refund: Some(Refund {
                    id: id("id")?,
                    amount: amount()?
                        .ok_or_else(|| FactsError::Missing(format!("{path}.amount")))?,
                }),
            },
            About::Transaction => PaymentFacts {
                payment_id: id("id")?,
                amount: amount()?,
                amount_refunded: None,
                currency: currency.clone(),
                customer_id: customer(object),
                refund: None,
            },
            About::Dispute => PaymentFacts {
                payment_id: non_empty(object.pointer("/transaction/id"))
                    .ok_or_else(|| FactsError::Missing(format!("{path}.transaction.id")))?,
                amount: None,
                amount_refunded: None,
                currency,
                customer_id: None,
                refund: None,
            },
        };
        storable(facts)
    }

    fn index_fields(&self, payload: &Value) -> IndexFields {
        match self.payment_facts(payload) {
            Ok(facts) => IndexFields {
                payment_id: Some(facts.payment_id),
                customer_id: facts.customer_id,
            },
            Err(_) => IndexFields::default(),
        }
    }
}

impl Simulator for Braintree {
    /// The body is the notification as JSON (what hookd stores); the form
    /// Braintree would post for it replaces it.
    fn sign(&self, key: &[u8], body: &[u8], _: &Envelope<'_>) -> Signing<Signed> {
        let (public, private) = key_pair(key).ok_or(SigningError::Key(
            "the secret is not PUBLIC_KEY:PRIVATE_KEY".into(),
        ))?;
        let notification: Value =
            serde_json::from_slice(body).map_err(|e| SigningError::NotJson(e.to_string()))?;
        let document =
            xml::from_json(&notification).map_err(|e| SigningError::Unwritable(e.to_string()))?;
        let encoded = BASE64.encode(document);
        let mut payload = String::with_capacity(encoded.len() + encoded.len() / LINE + 1);
        for line in encoded.as_bytes().chunks(LINE) {
            payload.push_str(&String::from_utf8_lossy(line));
            payload.push('\n');
        }
        let tag = signature(private, &[payload.as_bytes()]);
        let form = form_urlencoded::Serializer::new(String::new())
            .append_pair(SIGNATURE, &format!("{public}|{tag}"))
            .append_pair(PAYLOAD, &payload)
            .finish();
        Ok(Signed {
            headers: vec![("Content-Type".into(), FORM.into())],
            body: Some(form.into_bytes()),
        })
    }

    /// An API key pair as Braintree issues them: a 16-character public key and
    /// a 32-hex-digit private key.
    fn new_secret(&self) -> Secret {
        let public: String = rand::rng()
            .sample_iter(rand::distr::Alphanumeric)
            .map(|b| char::from(b).to_ascii_lowercase())
            .take(16)
            .collect();
        let private = hex::encode(rand::random::<[u8; 16]>());
        Secret::new(format!("{public}:{private}"))
    }

    fn signing_id(&self, body: &Body<'_>) -> Result<String, SigningError> {
        self.identity(&Vec::<(String, String)>::new(), body.value)
            .map(|(id, _)| id)
            .map_err(|_| SigningError::needs("a Braintree body", "a \"kind\" and a \"timestamp\""))
    }

    fn signing_type(&self, body: &Body<'_>) -> Result<String, SigningError> {
        body.member("kind", "a Braintree body")
    }

    /// A fresh id for the subject: the notification's own id is derived from it.
    fn new_id(&self, random: &[u8; 16]) -> (String, Option<String>) {
        (braintree_id(random), None)
    }

    /// Gives the subject (the transaction, the dispute) a fresh id; a credit
    /// keeps naming its sale and a dispute its transaction. A subject without
    /// one gets an element of its own holding it.
    fn renew_ids(&self, body: &mut Value, random: &[u8; 16]) -> (String, bool) {
        let fresh = Value::String(braintree_id(random));
        let Some(subject) = body.get_mut("subject").and_then(Value::as_object_mut) else {
            return (braintree_id(random), false);
        };
        let slot = subject
            .values_mut()
            .filter_map(|object| object.get_mut("id"))
            .find(|id| id.is_string());
        match slot {
            Some(slot) => *slot = fresh,
            None => {
                subject.insert(REPLAY_SUBJECT.into(), serde_json::json!({ "id": fresh }));
            }
        }
        match self.identity(&Vec::<(String, String)>::new(), body) {
            Ok((id, _)) => (id, true),
            Err(_) => (braintree_id(random), false),
        }
    }
}

#[cfg(test)]
mod tests;
