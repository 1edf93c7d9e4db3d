use serde_json::json;

use super::*;
use crate::providers::Scheme;
use crate::providers::test_kit::{self, Vectors, header};
use crate::signature::SignatureError;

const NOW: i64 = 1_700_000_000;

fn verify(secrets: &[&str], signature: &str, body: &[u8], now: i64) -> Result<i32, SignatureError> {
    let headers = vec![(SIGNATURE.to_string(), signature.to_string())];
    test_kit::verify(&Scheme::Razorpay, secrets, &headers, body, now).map(|v| v.signed_with)
}

/// The headers hookd sends with `body`, signed with `secret`.
fn signed(secret: &str, body: &[u8], event_id: &str) -> Vec<(String, String)> {
    let event = (event_id, "payment.captured");
    test_kit::signed(&Scheme::Razorpay, secret, body, event, NOW).headers
}

fn signature(secret: &str, body: &[u8]) -> String {
    header(&signed(secret, body, "evt"), SIGNATURE)
}

// --- Known answers from Razorpay's own SDK (tests/vectors/razorpay.json) ---

type Case = test_kit::SecretCase;

fn vectors() -> Vectors<Case> {
    test_kit::vectors(include_str!("../../../tests/vectors/razorpay.json"))
}

fn hookd_accepts(case: &Case) -> bool {
    verify(&[&case.secret], &case.signature, case.body.as_bytes(), NOW).is_ok()
}

#[test]
fn every_sdk_case_gets_the_sdks_verdict_and_hookd_signs_as_razorpay_does() {
    let vectors = vectors();
    assert!(vectors.cases.len() >= 6);
    test_kit::sdk_verdicts(&vectors.cases, hookd_accepts, signature);
}

#[test]
fn the_sdks_quirks_and_where_hookd_differs() {
    let decided = [
        // The SDK compares text; hookd compares the decoded bytes (Razorpay
        // sends lowercase, and the case of hex hides nothing).
        ("signature_uppercase", true),
        // Neither trims (HTTP drops a trailing space before either sees it).
        ("signature_trailing_space", false),
        // The SDK accepts an empty secret; hookd refuses one at startup, so it
        // never verifies with one (the HMAC itself is the same).
        ("empty_secret", true),
    ];
    let vectors = vectors();
    assert_eq!(vectors.quirks.len(), decided.len());
    for (case, (name, hookd)) in vectors.quirks.iter().zip(decided) {
        assert_eq!(case.name, name);
        assert_eq!(hookd_accepts(case), hookd, "{name}");
    }
}

// --- Verification and signing ---

const BODY: &[u8] =
    br#"{"event":"payment.captured","payload":{"payment":{"entity":{"id":"pay_1"}}}}"#;

#[test]
fn signed_bodies_verify_and_tampering_is_refused() {
    let tag = signature("secret-a", BODY);
    assert_eq!(verify(&["secret-a"], &tag, BODY, NOW), Ok(1));
    let mut tampered = BODY.to_vec();
    tampered[12] ^= 1;
    assert_eq!(
        verify(&["secret-a"], &tag, &tampered, NOW),
        Err(SignatureError::Mismatch)
    );
    assert_eq!(
        verify(&["secret-b"], &tag, BODY, NOW),
        Err(SignatureError::Mismatch)
    );
    let mut flipped = hex::decode(&tag).expect("hex");
    flipped[0] ^= 1;
    assert_eq!(
        verify(&["secret-a"], &hex::encode(flipped), BODY, NOW),
        Err(SignatureError::Mismatch)
    );
}

#[test]
fn the_event_id_travels_unsigned_beside_the_body() {
    let headers = signed("secret-a", BODY, "KpQ7wq8zGmQk1F");
    assert_eq!(headers.as_slice().header(EVENT_ID), Some("KpQ7wq8zGmQk1F"));
    let value: Value = serde_json::from_slice(BODY).expect("json");
    assert_eq!(
        Razorpay.identity(&headers, &value),
        Ok(("KpQ7wq8zGmQk1F".into(), "payment.captured".into()))
    );
    // Another id does not change the signature: the id is not signed, and so
    // sources dedupe on the body.
    let other = signed("secret-a", BODY, "another-id");
    assert_eq!(
        other.as_slice().header(SIGNATURE),
        headers.as_slice().header(SIGNATURE)
    );
    assert!(!Razorpay.signs_id() && Razorpay.signs_type());
    assert!(Razorpay.leaves_identity_unsigned());
    let none: Vec<(String, String)> = Vec::new();
    assert_eq!(
        Razorpay.identity(&none, &value),
        Err(Missing::Id("x-razorpay-event-id header".into()))
    );
    assert_eq!(
        Razorpay.identity(&headers, &json!({"payload": {}})),
        Err(Missing::Type("body.event".into()))
    );
}

#[test]
fn the_missing_or_unreadable_header_says_so() {
    let secrets = test_kit::secrets(&["secret-a"]);
    let verifier = test_kit::verifier(&Scheme::Razorpay, &secrets);
    let none: Vec<(String, String)> = Vec::new();
    assert_eq!(
        verifier.verify(&none, BODY, NOW),
        Err(SignatureError::Missing(SIGNATURE.into()))
    );
    assert_eq!(
        verify(&["secret-a"], "zz", BODY, NOW),
        Err(SignatureError::malformed(SIGNATURE, "not hex"))
    );
}

#[test]
fn every_secret_is_tried_and_the_one_used_is_reported() {
    let secrets = ["new-secret", "old-secret"];
    assert_eq!(
        verify(&secrets, &signature("new-secret", BODY), BODY, NOW),
        Ok(1)
    );
    assert_eq!(
        verify(&secrets, &signature("old-secret", BODY), BODY, NOW),
        Ok(2)
    );
    assert_eq!(
        verify(&secrets, &signature("other", BODY), BODY, NOW),
        Err(SignatureError::Mismatch)
    );
}

#[test]
fn razorpay_signs_no_time_so_no_delivery_is_too_old_or_too_new() {
    let tag = signature("secret-a", BODY);
    for now in [0, NOW - 86_400 * 365, NOW + 86_400 * 365] {
        assert_eq!(verify(&["secret-a"], &tag, BODY, now), Ok(1), "{now}");
    }
}

// --- Kinds and payment facts ---

fn payment(event: &str, customer: Option<&str>) -> Value {
    json!({"entity": "event", "event": event, "contains": ["payment"], "payload": {"payment": {
        "entity": {"id": "pay_1", "entity": "payment", "amount": 50000, "currency": "INR",
                   "customer_id": customer, "email": "a@example.com"}}}})
}

fn refund() -> Value {
    json!({"event": "refund.processed", "payload": {
        "refund": {"entity": {"id": "rfnd_1", "payment_id": "pay_1", "amount": 20000, "currency": "INR"}},
        "payment": {"entity": {"id": "pay_1", "amount": 50000, "amount_refunded": 20000}}}})
}

fn dispute() -> Value {
    json!({"event": "payment.dispute.created", "payload": {
        "payment": {"entity": {"id": "pay_1", "amount": 50000}},
        "dispute": {"entity": {"id": "disp_1", "payment_id": "pay_1", "amount": 50000, "currency": "INR"}}}})
}

#[test]
fn the_four_events_are_the_kinds_and_the_rest_has_none() {
    let kinds = Razorpay.default_event_types();
    let kind = |t: &str| kinds.get(t).map(String::as_str);
    assert_eq!(kind("payment.captured"), Some("payment_succeeded"));
    assert_eq!(kind("payment.failed"), Some("payment_failed"));
    assert_eq!(kind("refund.processed"), Some("payment_refunded"));
    assert_eq!(kind("payment.dispute.created"), Some("dispute_opened"));
    for other in ["payment.authorized", "refund.created", "order.paid"] {
        assert_eq!(kind(other), None, "{other}");
        assert_eq!(Razorpay.kind_of(other, &payment(other, None)), None);
    }
}

#[test]
fn payments_state_paise_currency_and_customer_refunds_their_own_amount() {
    assert_eq!(
        Razorpay.payment_facts(&payment("payment.captured", Some("cust_1"))),
        Ok(PaymentFacts {
            payment_id: "pay_1".into(),
            amount: Some(50000),
            amount_refunded: None,
            currency: Some("INR".into()),
            customer_id: Some("cust_1".into()),
            refund: None,
        })
    );
    // No customer_id: the email is not taken for one.
    let facts = Razorpay
        .payment_facts(&payment("payment.failed", None))
        .expect("valid");
    assert_eq!(facts.customer_id, None);
    assert_eq!(
        Razorpay.payment_facts(&refund()),
        Ok(PaymentFacts {
            payment_id: "pay_1".into(),
            amount: None,
            amount_refunded: None,
            currency: Some("INR".into()),
            customer_id: None,
            refund: Some(Refund {
                id: "rfnd_1".into(),
                amount: 20000
            }),
        })
    );
    let facts = Razorpay.payment_facts(&dispute()).expect("valid");
    assert_eq!(
        (facts.payment_id.as_str(), facts.amount, facts.refund),
        ("pay_1", None, None)
    );
    assert_eq!(
        Razorpay.index_fields(&payment("payment.authorized", Some("cust_1"))),
        IndexFields {
            payment_id: Some("pay_1".into()),
            customer_id: Some("cust_1".into())
        }
    );
}

#[test]
fn malformed_entities_say_why() {
    let mut no_id = payment("payment.captured", None);
    no_id["payload"]["payment"]["entity"]["id"] = Value::Null;
    let mut negative = payment("payment.captured", None);
    negative["payload"]["payment"]["entity"]["amount"] = json!(-1);
    let mut text_amount = payment("payment.captured", None);
    text_amount["payload"]["payment"]["entity"]["amount"] = json!("500.00");
    let mut no_refund_amount = refund();
    no_refund_amount["payload"]["refund"]["entity"]["amount"] = Value::Null;
    let mut no_disputed = dispute();
    no_disputed["payload"]["dispute"]["entity"]["payment_id"] = json!("");
    let cases = [
        (no_id, "payload.payment.entity.id is missing"),
        (
            negative,
            "payload.payment.entity.amount is not a non-negative integer",
        ),
        (
            text_amount,
            "payload.payment.entity.amount is not a non-negative integer",
        ),
        (no_refund_amount, "payload.refund.entity.amount is missing"),
        (no_disputed, "payload.dispute.entity.payment_id is missing"),
        (
            json!({"event": "refund.processed", "payload": {}}),
            "payload.refund.entity is missing or not an object",
        ),
        (
            json!({"event": "order.paid"}),
            "event \"order.paid\" is not about a payment",
        ),
    ];
    test_kit::refuses_facts(&Razorpay, cases.into());
}

#[test]
fn hookd_sign_derives_the_id_from_the_body_and_a_new_id_goes_in_the_header() {
    let value = json!({"event": "payment.captured"});
    let body = Body {
        bytes: b"{\"event\":\"payment.captured\"}",
        value: &value,
    };
    assert_eq!(Razorpay.signing_id(&body), Ok(body.content_id()));
    assert_eq!(Razorpay.signing_type(&body), Ok("payment.captured".into()));
    let (id, field) = Razorpay.new_id(&[7; 16]);
    assert_eq!((id.len(), field), (14, None));
}
