//! Stripe: `Stripe-Signature: t=T,v1=HEX[,v1=HEX…]` where HEX = HMAC-SHA256(secret
//! string, `T.` + raw body); every `v1` is tried (Stripe sends several while a
//! secret rolls), other schemes (`v0`) are ignored. The id and type are in the
//! signed body, payment facts in `data.object`; secrets are `whsec_` and 32
//! letters and digits.
//!
//! A thin event (an event destination's notification, `"object":
//! "v2.core.event"`) is signed the same way but only names its event: handlers
//! see the event read from `GET /v2/core/events/{id}` with the source's
//! `api_key` (for a `v1.` type, with the resource its `related_object.url`
//! names as `data.object`), and a `v1.` type's kind is its classic type's.

mod reconcile;

use std::collections::HashMap;

use rand::RngExt;
use serde_json::Value;

use super::api::Fetch;
use super::errors::{FetchError, Signing, SigningError};
use super::hmac::{Refusals, TimedTags};
use super::shape::PaymentShape;
use super::{Body, Missing, Provider, Signature, Simulator, body_identity, kind_table};
use crate::domain::PaymentKind;
use crate::signature::{Envelope, Headers, KeyFormat, Secret, Signed};

const HEADER: &str = "Stripe-Signature";
/// `t=T,v1=HEX[,v1=HEX…]`, each part trimmed.
const SIGNED: TimedTags = TimedTags {
    header: HEADER,
    separator: ',',
    lenient: false,
    timestamp: "t",
    tag: "v1",
    joiner: ".",
    refusals: Refusals {
        unpaired: "expected key=value pairs",
        two_timestamps: "more than one timestamp",
        not_hex: "v1 is not hex",
        no_timestamp: "no t=",
        no_tag: "no v1 signature",
    },
};
/// The `object` of a thin event.
const THIN: &str = "v2.core.event";
/// Where a thin event's event is read, and the API version `/v2` asks for.
const EVENTS_V2: &str = "/v2/core/events/";
const V2_VERSION: [(&str, &str); 1] = [("Stripe-Version", "2024-09-30.acacia")];

/// Whether a payload is a thin event.
fn thin(payload: &Value) -> bool {
    payload.get("object").and_then(Value::as_str) == Some(THIN)
}

pub struct Stripe;

impl KeyFormat for Stripe {}

/// Stripe's types for the built-in kinds: every Stripe source maps them unlisted.
const EVENT_TYPES: [(&str, PaymentKind); 4] = [
    ("payment_intent.succeeded", PaymentKind::Succeeded),
    ("payment_intent.payment_failed", PaymentKind::Failed),
    ("charge.refunded", PaymentKind::Refunded),
    ("charge.dispute.created", PaymentKind::DisputeOpened),
];

/// Parts of a Stripe event that may differ between two deliveries of it.
const VOLATILE_FIELDS: [&str; 2] = ["/pending_webhooks", "/request"];

/// Stripe's facts are its `data.object`: a PaymentIntent, Charge, Dispute or
/// Refund (its `payment_intent` first), with the cumulative `amount_refunded`
/// only; a Customer's own id indexes its customer.
pub(super) const SHAPE: PaymentShape = PaymentShape {
    object: "/data/object",
    path: "data.object",
    payment_id: &["payment_intent", "id"],
    customer: "customer",
    single_refunds: false,
    payment_objects: Some(&["payment_intent", "charge", "dispute", "refund"]),
    customer_object: Some("customer"),
};

impl Provider for Stripe {
    fn lister(&self) -> Result<&'static super::Lister, &'static str> {
        Ok(&reconcile::LISTER)
    }

    fn development_secrets(&self) -> &'static [&'static str] {
        &[
            "whsec_dev_stripe_current_0123456789",
            "whsec_dev_stripe_previous_0123456789",
        ]
    }

    fn default_mask(&self) -> Vec<String> {
        default_mask()
    }

    fn name(&self) -> &'static str {
        "stripe"
    }

    fn signed_header_names(&self) -> Vec<&str> {
        vec![HEADER]
    }

    fn signature(&self) -> Option<Signature<'_>> {
        Some(Signature::Timed(SIGNED))
    }

    fn identity(&self, _: &dyn Headers, payload: &Value) -> Result<(String, String), Missing> {
        body_identity(payload, "id", "type")
    }

    fn default_event_types(&self) -> HashMap<String, String> {
        kind_table(&EVENT_TYPES)
    }

    /// A thin event is read from `/v2/core/events/{id}`; for a `v1.` type, whose
    /// v2 event names its v1 resource without carrying it, the resource its
    /// `related_object.url` names is read too, as the event's `data.object`.
    /// Both carry `Stripe-Context` when the notification names one (a
    /// connected account's event).
    fn event_fetch(&self, payload: &Value) -> Option<Result<Fetch, FetchError>> {
        if !thin(payload) {
            return None;
        }
        let text = |pointer: &str| payload.pointer(pointer).and_then(Value::as_str);
        let mut headers: Vec<(&'static str, String)> = V2_VERSION
            .iter()
            .map(|(k, v)| (*k, v.to_string()))
            .collect();
        if let Some(context) = text("/context").filter(|c| !c.is_empty()) {
            headers.push(("Stripe-Context", context.to_string()));
        }
        let classic = text("/type").is_some_and(|t| t.starts_with("v1."));
        let fetch = Fetch::of(EVENTS_V2, text("/id").unwrap_or_default(), headers);
        Some(fetch.map(|fetch| Fetch {
            related_object: classic,
            ..fetch
        }))
    }

    /// A thin event's `v1.` type has the kind of the classic type it names.
    fn kind_of(&self, event_type: &str, payload: &Value) -> Option<PaymentKind> {
        let classic = event_type.strip_prefix("v1.").filter(|_| thin(payload))?;
        EVENT_TYPES
            .iter()
            .find(|(ty, _)| *ty == classic)
            .map(|(_, kind)| *kind)
    }

    fn default_fingerprint_ignore(&self) -> Vec<String> {
        VOLATILE_FIELDS.map(String::from).to_vec()
    }

    fn payment_shape(&self) -> PaymentShape {
        SHAPE
    }
}

impl Simulator for Stripe {
    fn sign(&self, key: &[u8], body: &[u8], envelope: &Envelope<'_>) -> Signing<Signed> {
        Ok(SIGNED.sign(key, body, envelope.timestamp))
    }

    /// `whsec_` and 32 letters and digits (the whole string is the key).
    fn new_secret(&self) -> Secret {
        let tail: String = rand::rng()
            .sample_iter(rand::distr::Alphanumeric)
            .take(32)
            .map(char::from)
            .collect();
        Secret::new(format!("whsec_{tail}"))
    }

    fn signing_id(&self, body: &Body<'_>) -> Result<String, SigningError> {
        body.member("id", "a Stripe body")
    }

    fn new_id(&self, random: &[u8; 16]) -> (String, Option<String>) {
        (
            format!("evt_{}", hex::encode(&random[..12])),
            Some("/id".into()),
        )
    }
}

/// Where Stripe's objects hold an address, an e-mail, a phone, a name, an IP
/// address, a card fingerprint or a client-side secret: charges and
/// PaymentIntents (billing and shipping details, a failed payment's method),
/// customers, invoices (`customer_*`), Checkout Sessions (`customer_details`,
/// `shipping_details`, `collected_information`), PaymentMethods, SetupIntents,
/// mandates (`customer_acceptance`), disputes (`evidence`), Issuing cardholders
/// and Connect persons. Each is covered in `data.object` and, for an update, in
/// `data.previous_attributes` (the same shape).
fn default_mask() -> Vec<String> {
    const OBJECT: &[&str] = &[
        "/client_secret",
        "/email",
        "/name",
        "/phone",
        "/phone_number",
        "/first_name",
        "/last_name",
        "/dob",
        "/address",
        "/shipping",
        "/billing",
        "/individual",
        "/receipt_email",
        "/billing_details",
        "/customer_email",
        "/customer_name",
        "/customer_phone",
        "/customer_address",
        "/customer_shipping",
        "/customer_tax_ids",
        "/customer_details",
        "/shipping_details",
        "/collected_information",
        "/customer_acceptance/online",
        "/card/fingerprint",
        "/payment_method_details/card/fingerprint",
        "/charges/data/*/billing_details",
        "/charges/data/*/shipping",
        "/charges/data/*/payment_method_details/card/fingerprint",
        "/last_payment_error/payment_method/billing_details",
        "/last_payment_error/payment_method/card/fingerprint",
        "/last_setup_error/payment_method/billing_details",
        "/last_setup_error/payment_method/card/fingerprint",
        "/evidence/customer_email_address",
        "/evidence/customer_name",
        "/evidence/customer_purchase_ip",
        "/evidence/billing_address",
        "/evidence/shipping_address",
    ];
    ["/data/object", "/data/previous_attributes"]
        .iter()
        .flat_map(|at| OBJECT.iter().map(move |p| format!("{at}{p}")))
        .collect()
}

#[cfg(test)]
mod tests;
