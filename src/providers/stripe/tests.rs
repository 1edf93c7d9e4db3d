//! Stripe's own checks: its default mask against its fixtures.

use serde_json::Value;

use super::{SHAPE, default_mask};
use crate::domain::PaymentFacts;
use crate::mask::{Cover, MASKED, cover};
use crate::providers::shape::IndexFields;
use serde_json::json;

/// Keys that hold an address, an e-mail, a phone or a name, or an object of
/// them (a string or number anywhere under one is personal).
const PERSONAL_KEYS: &[&str] = &[
    "address",
    "billing",
    "billing_details",
    "business_name",
    "collected_information",
    "customer_address",
    "customer_details",
    "customer_email",
    "customer_name",
    "customer_phone",
    "customer_shipping",
    "customer_tax_ids",
    "dob",
    "email",
    "first_name",
    "individual",
    "individual_name",
    "ip_address",
    "last_name",
    "name",
    "online",
    "phone",
    "phone_number",
    "receipt_email",
    "shipping",
    "shipping_details",
    "user_agent",
];

/// The personal strings and numbers of `value` still shown (`path` names each).
fn unmasked(value: &Value, path: &str, personal: bool, shown: &mut Vec<String>) {
    let under = |key: &str| personal || PERSONAL_KEYS.contains(&key);
    match value {
        Value::Object(members) => members
            .iter()
            .for_each(|(k, v)| unmasked(v, &format!("{path}/{k}"), under(k), shown)),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .for_each(|(i, v)| unmasked(v, &format!("{path}/{i}"), personal, shown)),
        Value::String(text) if personal && !text.starts_with(MASKED) => {
            shown.push(format!("{path}: {text}"));
        }
        Value::Number(n) if personal => shown.push(format!("{path}: {n}")),
        _ => {}
    }
}

#[test]
fn stripes_defaults_cover_every_address_email_phone_and_name_of_the_fixtures() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/stripe");
    let mut files = Vec::new();
    for folder in [root.to_string(), format!("{root}/objects")] {
        for entry in std::fs::read_dir(&folder).expect("fixtures") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|x| x == "json") {
                files.push(path);
            }
        }
    }
    assert!(files.len() >= 18, "{files:?}");
    files.sort();
    let pointers = default_mask();
    let mut shown = Vec::new();
    for file in files {
        let mut event: Value =
            serde_json::from_slice(&std::fs::read(&file).expect("read")).expect("json");
        let mut personal = Vec::new();
        unmasked(&event, "", false, &mut personal);
        cover(&mut event, &pointers, Cover::Mask);
        let name = file
            .strip_prefix(root)
            .unwrap_or(&file)
            .display()
            .to_string();
        unmasked(&event, &name, false, &mut shown);
        if file.parent().is_some_and(|p| p.ends_with("objects")) {
            assert!(
                !personal.is_empty(),
                "{} holds no personal data",
                file.display()
            );
        }
    }
    assert!(shown.is_empty(), "{shown:#?}");
}

#[test]
fn stripe_payment_facts_prefer_the_payment_intent() {
    let charge = json!({"data":{"object":{"id":"ch_1","object":"charge","payment_intent":"pi_9",
        "amount":1000,"amount_refunded":400,"currency":"eur","customer":{"id":"cus_2"}}}});
    let facts = SHAPE.payment_facts(&charge).expect("valid");
    assert_eq!(
        facts,
        PaymentFacts {
            payment_id: "pi_9".into(),
            amount: Some(1000),
            amount_refunded: Some(400),
            currency: Some("eur".into()),
            customer_id: Some("cus_2".into()),
            refund: None,
        }
    );
    let intent = json!({"data":{"object":{"id":"pi_3","amount":5,"customer":null}}});
    let facts = SHAPE.payment_facts(&intent).expect("valid");
    assert_eq!(
        (facts.payment_id.as_str(), facts.customer_id),
        ("pi_3", None)
    );
}

#[test]
fn malformed_payment_payloads_say_why() {
    let cases = [
        (json!({"data":{}}), "data.object is missing"),
        (
            json!({"data":{"object":{"amount":1}}}),
            "neither payment_intent nor id",
        ),
        (
            json!({"data":{"object":{"id":"pi","amount":"10"}}}),
            "data.object.amount",
        ),
        (
            json!({"data":{"object":{"id":"pi","amount":-1}}}),
            "data.object.amount",
        ),
    ];
    for (payload, reason) in cases {
        let err = SHAPE
            .payment_facts(&payload)
            .expect_err("malformed")
            .to_string();
        assert!(err.contains(reason), "{err} should mention {reason}");
    }
}

#[test]
fn stripe_states_only_its_refunds_total() {
    let stripe = json!({"data":{"object":{"id":"ch_1","payment_intent":"pi_1",
        "amount_refunded":300,"refund_id":"re_1","refund_amount":300}}});
    let facts = SHAPE.payment_facts(&stripe).expect("valid");
    assert_eq!((facts.refund, facts.amount_refunded), (None, Some(300)));
}

#[test]
fn stripe_customers_are_indexed_as_customers_not_payments() {
    let customer = json!({"data":{"object":{"id":"cus_1","object":"customer"}}});
    assert_eq!(
        SHAPE.index_fields(&customer),
        IndexFields {
            payment_id: None,
            customer_id: Some("cus_1".into())
        }
    );
}
