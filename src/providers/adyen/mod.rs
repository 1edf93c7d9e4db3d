//! Adyen's standard notifications: one request carries several events,
//! `{"live":"…","notificationItems":[{"NotificationRequestItem":{…}},…]}`, and
//! each item is signed on its own, inside the body: `additionalData.hmacSignature`
//! is base64 HMAC-SHA256 (the key is the hex Adyen's Customer Area shows) over
//! `pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:eventCode:success`,
//! missing fields as empty strings. Every item of a request must verify. Adyen
//! signs no timestamp, so there is no replay window beyond the dedupe. Optional
//! HTTP Basic credentials (`basic_auth`) are checked as well. Adyen looks for the
//! answer `[accepted]`.

use std::borrow::Cow;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::errors::{
    FactsError, PayloadError, SecretError, Signing, SigningError, minor_amount, storable,
};
use super::{Answer, Body, Item, Missing, Provider, Scheme, Simulator, non_empty};
use crate::config_keys::{self as keys, Problem};
use crate::domain::{PaymentFacts, PaymentKind, Refund};
use crate::signature::{
    Envelope, Headers, KeyFormat, Keys, Secret, SignatureError, Signed, Verified, hmac_sha256,
};

use super::shape::IndexFields;

/// A source of scheme `adyen`, with its own keys.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Adyen {
    /// `user:pass` the requests must carry as HTTP Basic credentials.
    pub basic_auth: Option<Secret>,
}

impl std::fmt::Debug for Adyen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adyen")
            .field("basic_auth", &super::redacted(&self.basic_auth))
            .finish()
    }
}

/// An Adyen source with no keys of its own, for what does not depend on them.
pub static ANY: Adyen = Adyen { basic_auth: None };

/// The keys only scheme `adyen` takes.
pub const KEYS: &[&str] = &["basic_auth"];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAdyen {
    basic_auth: Option<String>,
}

pub fn configure(table: toml::Table, key: &dyn Fn(&str) -> String) -> Result<Scheme, Problem> {
    let raw: RawAdyen = keys::read(table, key)?;
    let basic_auth = match raw.basic_auth {
        None => None,
        Some(pair) if pair.split_once(':').is_some_and(|(u, _)| !u.is_empty()) => {
            Some(Secret::new(pair))
        }
        Some(_) => {
            return Err((
                key("basic_auth"),
                "must be \"user:password\", as set in Adyen's Customer Area".into(),
            ));
        }
    };
    Ok(Scheme::Adyen(Adyen { basic_auth }))
}

const ITEMS: &str = "notificationItems";
const ITEM: &str = "NotificationRequestItem";
const SIGNATURE: &str = "hmacSignature";
const AUTHORIZATION: &str = "Authorization";

/// A notification as Adyen sends it, each item kept as the bytes it came as.
#[derive(Deserialize)]
struct Notification<'a> {
    #[serde(rename = "notificationItems", borrow)]
    items: Vec<Entry<'a>>,
}

#[derive(Deserialize)]
struct Entry<'a> {
    #[serde(rename = "NotificationRequestItem", borrow)]
    item: &'a RawValue,
}

/// An item of a notification: the bytes it came as, and its JSON object.
type RawItem<'a> = (&'a [u8], Map<String, Value>);

/// The items of a notification, each as its bytes and its JSON object, or why
/// there are none. Verifying and storing both read items through this one
/// parse, so what is verified is what is stored.
fn items(body: &[u8]) -> Result<Vec<RawItem<'_>>, &'static str> {
    let notification: Notification<'_> = serde_json::from_slice(body)
        .map_err(|_| "not a notification with a notificationItems list")?;
    if notification.items.is_empty() {
        return Err("notificationItems is empty");
    }
    notification
        .items
        .into_iter()
        .map(|entry| {
            let bytes = entry.item.get().as_bytes();
            match serde_json::from_slice(bytes) {
                Ok(Value::Object(item)) => Ok((bytes, item)),
                _ => Err("an item of notificationItems has no NotificationRequestItem object"),
            }
        })
        .collect()
}

/// Refuses an item whose signed fields are not as Adyen writes them: the
/// signing string joins them with `:` unescaped, so only fields that cannot hold
/// a `:` (and a value, currency and success of their fixed shapes) keep one
/// signature from standing for another item. Only `merchantReference` may hold
/// a `:`: every field after it has a fixed shape.
fn check_shapes(item: &Map<String, Value>) -> Result<(), &'static str> {
    for name in [
        "pspReference",
        "originalReference",
        "merchantAccountCode",
        "eventCode",
    ] {
        if field(item, name).contains(':') {
            return Err("a reference, merchant account or event code holds a ':'");
        }
    }
    let amount = item.get("amount");
    let value = text(amount.and_then(|a| a.get("value")));
    if !value.chars().all(|c| c.is_ascii_digit()) {
        return Err("amount.value is not a whole number");
    }
    let currency = text(amount.and_then(|a| a.get("currency")));
    if !currency.chars().all(|c| c.is_ascii_alphabetic()) {
        return Err("amount.currency is not a currency code");
    }
    if !matches!(field(item, "success").as_str(), "true" | "false") {
        return Err("success is neither true nor false");
    }
    Ok(())
}

/// One item's signature, checked against every key.
fn verify_item(
    keys: &Keys<'_>,
    index: usize,
    item: &Map<String, Value>,
) -> Result<Verified, SignatureError> {
    let where_ = format!("notificationItems[{index}].additionalData.hmacSignature");
    let encoded = item
        .get("additionalData")
        .and_then(|d| d.get(SIGNATURE))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| SignatureError::InBody {
            where_: where_.clone(),
            detail: "missing",
        })?;
    let tag = BASE64.decode(encoded).map_err(|_| SignatureError::InBody {
        where_: where_.clone(),
        detail: "not base64",
    })?;
    check_shapes(item).map_err(|detail| SignatureError::InBody {
        where_: format!("notificationItems[{index}]"),
        detail,
    })?;
    let message = signing_string(item);
    keys.find_signer(&[message.as_bytes()], &[tag])
}

/// A field as Adyen's signing string writes it: text as is, numbers and
/// booleans as JSON writes them, anything missing as the empty string.
fn field(item: &Map<String, Value>, name: &str) -> String {
    text(item.get(name))
}

fn text(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        _ => String::new(),
    }
}

/// The string Adyen signs for an item.
fn signing_string(item: &Map<String, Value>) -> String {
    let amount = item.get("amount");
    [
        field(item, "pspReference"),
        field(item, "originalReference"),
        field(item, "merchantAccountCode"),
        field(item, "merchantReference"),
        text(amount.and_then(|a| a.get("value"))),
        text(amount.and_then(|a| a.get("currency"))),
        field(item, "eventCode"),
        field(item, "success"),
    ]
    .join(":")
}

/// 16 digits, as Adyen's references are, from random bytes and an item's index.
fn psp_reference(random: &[u8; 16], index: usize) -> String {
    random
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let mixed = usize::from(*b) + index * (i + 7);
            char::from(b'0' + u8::try_from(mixed % 10).unwrap_or(0))
        })
        .collect()
}

/// Adyen's `success`, which it sends as the text `"true"` or `"false"`.
fn succeeded(item: &Value) -> bool {
    match item.get("success") {
        Some(Value::String(s)) => s.eq_ignore_ascii_case("true"),
        Some(Value::Bool(b)) => *b,
        _ => false,
    }
}

fn code(item: &Value) -> &str {
    item.get("eventCode").and_then(Value::as_str).unwrap_or("")
}

impl KeyFormat for Adyen {
    /// Adyen shows HMAC keys as hex.
    fn key_bytes<'s>(&self, secret: &'s Secret) -> Result<Cow<'s, [u8]>, SecretError> {
        match hex::decode(secret.expose().trim()) {
            Ok(key) if !key.is_empty() => Ok(Cow::Owned(key)),
            _ => Err(SecretError::Not(
                "an Adyen HMAC key (hex, as the Customer Area shows it)",
            )),
        }
    }
}

impl Provider for Adyen {
    fn lister(&self) -> Result<&'static super::Lister, &'static str> {
        Err(
            "Adyen's API lists no past events: resend them from the Customer Area \
         (Developers > Webhooks > Event logs)",
        )
    }

    fn development_secrets(&self) -> &'static [&'static str] {
        &["686F6F6B642D6465762D616479656E2D686D61632D6B65792D30313233343536"]
    }

    fn default_mask(&self) -> Vec<String> {
        // Into one notification item: each is stored as an event of its own.
        super::pointers(&[
            "/additionalData/shopperEmail",
            "/additionalData/shopperName",
            "/additionalData/shopperIP",
            "/additionalData/shopperTelephone",
            "/additionalData/cardHolderName",
            "/additionalData/billingAddress.street",
            "/additionalData/billingAddress.houseNumberOrName",
            "/additionalData/billingAddress.postalCode",
            "/additionalData/billingAddress.city",
            "/additionalData/deliveryAddress.street",
            "/additionalData/deliveryAddress.houseNumberOrName",
            "/additionalData/deliveryAddress.postalCode",
            "/additionalData/deliveryAddress.city",
        ])
    }

    fn name(&self) -> &'static str {
        "adyen"
    }

    /// The signatures are in the body; the Basic credentials are never kept.
    fn signed_header_names(&self) -> Vec<&str> {
        Vec::new()
    }

    fn authenticate(&self, headers: &dyn Headers) -> Result<(), SignatureError> {
        let Some(expected) = &self.basic_auth else {
            return Ok(());
        };
        let value = headers
            .header(AUTHORIZATION)
            .ok_or_else(|| SignatureError::Missing(AUTHORIZATION.into()))?;
        let given = value
            .trim()
            .split_once(' ')
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("basic"))
            .and_then(|(_, encoded)| BASE64.decode(encoded.trim()).ok())
            .ok_or_else(|| {
                SignatureError::malformed(AUTHORIZATION, "expected Basic credentials")
            })?;
        if expected.is(&given) {
            Ok(())
        } else {
            Err(SignatureError::Mismatch)
        }
    }

    /// Every item must be signed by one of the secrets; the position reported is
    /// the oldest any item used, so a secret is never retired while in use.
    fn verify(
        &self,
        keys: &Keys<'_>,
        _headers: &dyn Headers,
        body: &[u8],
        _now: i64,
    ) -> Result<Verified, SignatureError> {
        let items = items(body).map_err(|detail| SignatureError::InBody {
            where_: "body".into(),
            detail,
        })?;
        let mut oldest = 0;
        for (i, (_, item)) in items.iter().enumerate() {
            oldest = oldest.max(verify_item(keys, i, item)?.signed_with);
        }
        Ok(Verified {
            signed_with: oldest,
        })
    }

    /// What is kept of an event is its item, which carries its own signature.
    fn verify_kept(
        &self,
        keys: &Keys<'_>,
        _headers: &dyn Headers,
        kept: &[u8],
        _now: i64,
    ) -> Result<Verified, SignatureError> {
        match serde_json::from_slice(kept) {
            Ok(Value::Object(item)) => verify_item(keys, 0, &item),
            _ => Err(SignatureError::InBody {
                where_: "the kept item".into(),
                detail: "not a NotificationRequestItem",
            }),
        }
    }

    /// Each item, kept as the bytes it came as (they are what its signature
    /// proves, and what a retry or a forward reads).
    fn events(&self, body: &[u8], _: Value) -> Result<Vec<Item>, PayloadError> {
        Ok(items(body)
            .map_err(PayloadError::Events)?
            .into_iter()
            .map(|(bytes, item)| Item {
                payload: Value::Object(item),
                body: Some(bytes.to_vec()),
            })
            .collect())
    }

    fn answer(&self) -> Answer {
        Answer::Fixed {
            content_type: "text/plain",
            body: "[accepted]",
        }
    }

    /// `{pspReference}:{eventCode}:{success}`: Adyen sends one event code for a
    /// payment reference once per outcome.
    fn identity(&self, _: &dyn Headers, item: &Value) -> Result<(String, String), Missing> {
        let psp = non_empty(item.get("pspReference"))
            .ok_or_else(|| Missing::Id("NotificationRequestItem.pspReference".into()))?;
        let code = non_empty(item.get("eventCode"))
            .ok_or_else(|| Missing::Type("NotificationRequestItem.eventCode".into()))?;
        let success = if succeeded(item) { "true" } else { "false" };
        Ok((format!("{psp}:{code}:{success}"), code))
    }

    /// Adyen's `eventDate` (RFC 3339, with its offset).
    fn unsigned_time(&self, payload: &Value) -> Option<chrono::DateTime<chrono::Utc>> {
        super::time_at(payload, "/eventDate")
    }

    fn kind_of(&self, event_type: &str, item: &Value) -> Option<PaymentKind> {
        let success = succeeded(item);
        match event_type {
            "AUTHORISATION" if success => Some(PaymentKind::Succeeded),
            "AUTHORISATION" => Some(PaymentKind::Failed),
            "CAPTURE" if success => Some(PaymentKind::Succeeded),
            "REFUND" if success => Some(PaymentKind::Refunded),
            "CHARGEBACK" | "NOTIFICATION_OF_CHARGEBACK" => Some(PaymentKind::DisputeOpened),
            _ => None,
        }
    }

    /// An authorisation names the payment by its own pspReference; every later
    /// event (capture, refund, chargeback) by `originalReference`. Only an
    /// authorisation or capture states the payment's amount: a refund's or
    /// chargeback's value is its own.
    fn payment_facts(&self, item: &Value) -> Result<PaymentFacts, FactsError> {
        let code = code(item);
        let own = code == "AUTHORISATION";
        let reference = if own {
            "pspReference"
        } else {
            "originalReference"
        };
        let payment_id = non_empty(item.get(reference))
            .ok_or_else(|| FactsError::Missing(format!("NotificationRequestItem.{reference}")))?;
        let value = minor_amount(item.pointer("/amount/value"), || {
            "NotificationRequestItem.amount.value".into()
        })?;
        let currency = non_empty(item.pointer("/amount/currency"));
        let refund = match code {
            "REFUND" if succeeded(item) => {
                let id = non_empty(item.get("pspReference")).ok_or_else(|| {
                    FactsError::Missing("NotificationRequestItem.pspReference".into())
                })?;
                let amount = value.ok_or(FactsError::Needs {
                    what: "a REFUND item",
                    field: "amount.value",
                })?;
                Some(Refund { id, amount })
            }
            _ => None,
        };
        let facts = PaymentFacts {
            payment_id,
            amount: if own || code == "CAPTURE" {
                value
            } else {
                None
            },
            amount_refunded: None,
            currency,
            customer_id: non_empty(item.pointer("/additionalData/shopperReference")),
            refund,
        };
        storable(facts)
    }

    fn index_fields(&self, item: &Value) -> IndexFields {
        let facts = self.payment_facts(item).ok();
        IndexFields {
            payment_id: facts.as_ref().map(|f| f.payment_id.clone()),
            customer_id: non_empty(item.pointer("/additionalData/shopperReference")),
        }
    }
}

/// A body to sign without its list of items, or with an entry of it without one.
const NO_ITEMS: SigningError = SigningError::needs("an Adyen body", "a notificationItems list");
const NO_ITEM: SigningError =
    SigningError::needs("each notificationItems entry", "a NotificationRequestItem");

impl Simulator for Adyen {
    /// The body with every item's `hmacSignature` filled in.
    fn sign(&self, key: &[u8], body: &[u8], _: &Envelope<'_>) -> Signing<Signed> {
        let mut payload: Value =
            serde_json::from_slice(body).map_err(|e| SigningError::NotJson(e.to_string()))?;
        let list = payload
            .get_mut(ITEMS)
            .and_then(Value::as_array_mut)
            .ok_or(NO_ITEMS)?;
        for entry in list {
            let item = entry
                .get_mut(ITEM)
                .and_then(Value::as_object_mut)
                .ok_or(NO_ITEM)?;
            let tag = BASE64.encode(hmac_sha256(key, &[signing_string(item).as_bytes()]));
            let data = item
                .entry("additionalData")
                .or_insert_with(|| Value::Object(Map::new()));
            let Value::Object(data) = data else {
                return Err(SigningError::Unwritable(
                    "additionalData must be an object".into(),
                ));
            };
            data.insert(SIGNATURE.into(), Value::String(tag));
        }
        let mut headers = Vec::new();
        if let Some(pair) = &self.basic_auth {
            headers.push((
                AUTHORIZATION.to_string(),
                format!("Basic {}", BASE64.encode(pair.expose())),
            ));
        }
        Ok(Signed {
            headers,
            body: Some(
                serde_json::to_vec(&payload)
                    .map_err(|e| SigningError::Unwritable(e.to_string()))?,
            ),
        })
    }

    /// HMAC keys as Adyen shows them: 64 hex digits, upper case.
    fn new_secret(&self) -> Secret {
        Secret::new(hex::encode_upper(rand::random::<[u8; 32]>()))
    }

    fn signing_id(&self, body: &Body<'_>) -> Result<String, SigningError> {
        let first = body
            .value
            .pointer("/notificationItems/0/NotificationRequestItem")
            .ok_or(NO_ITEMS)?;
        self.identity(&Vec::<(String, String)>::new(), first)
            .map(|(id, _)| id)
            .map_err(|_| SigningError::needs("the first item", "a pspReference and an eventCode"))
    }

    fn signing_type(&self, body: &Body<'_>) -> Result<String, SigningError> {
        body.pointer("/notificationItems/0/NotificationRequestItem/eventCode")
            .ok_or(SigningError::needs("the first item", "an eventCode"))
    }

    /// A fresh pspReference (16 digits) for the first item.
    fn new_id(&self, random: &[u8; 16]) -> (String, Option<String>) {
        (
            psp_reference(random, 0),
            Some("/notificationItems/0/NotificationRequestItem/pspReference".into()),
        )
    }

    /// A fresh pspReference for every item; later events of a payment keep
    /// naming it by its `originalReference`, which is left as it is.
    fn renew_ids(&self, body: &mut Value, random: &[u8; 16]) -> (String, bool) {
        let mut first = None;
        let list = body.get_mut(ITEMS).and_then(Value::as_array_mut);
        for (i, entry) in list.into_iter().flatten().enumerate() {
            if let Some(slot) = entry.pointer_mut("/NotificationRequestItem/pspReference") {
                let psp = psp_reference(random, i);
                first.get_or_insert_with(|| psp.clone());
                *slot = Value::String(psp);
            }
        }
        match first {
            Some(psp) => (psp, true),
            None => (psp_reference(random, 0), false),
        }
    }
}
