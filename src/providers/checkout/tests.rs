use serde::Deserialize;
use serde_json::json;

use super::*;
use crate::providers::test_kit::{self, Vectors};

const NOW: i64 = 1_700_000_000;

fn with_authorization(value: &str) -> Scheme {
    Scheme::Checkout(Checkout {
        authorization: Some(Secret::new(value)),
    })
}

fn verify_request(
    scheme: &Scheme,
    secrets: &[&str],
    headers: &[(String, String)],
    body: &[u8],
) -> Result<i32, SignatureError> {
    test_kit::verifier(scheme, &test_kit::secrets(secrets))
        .verify_request(headers, body, NOW)
        .map(|v| v.signed_with)
}

fn plain() -> Scheme {
    Scheme::Checkout(ANY.clone())
}

fn header(value: &str) -> Vec<(String, String)> {
    vec![(SIGNATURE.to_string(), value.to_string())]
}

/// The headers hookd sends with `body` for `scheme`, signed with `key`.
fn signed(scheme: &Scheme, key: &str, body: &[u8]) -> Vec<(String, String)> {
    let event = ("evt_1", "payment_captured");
    let mut headers = test_kit::signed(scheme, key, body, event, NOW).headers;
    headers.retain(|(name, _)| name != "Content-Type");
    headers
}

// --- Known answers computed from the documented formula (tests/vectors/checkout.json) ---

#[derive(Deserialize)]
struct Case {
    name: String,
    key: String,
    body: String,
    signature: String,
    signed_with_key: Option<String>,
    valid: bool,
}

#[test]
fn every_vector_gets_its_verdict_and_hookd_signs_the_same() {
    let vectors: Vectors<Case> =
        test_kit::vectors(include_str!("../../../tests/vectors/checkout.json"));
    assert!(vectors.cases.len() >= 5);
    for case in &vectors.cases {
        let verdict = verify_request(
            &plain(),
            &[&case.key],
            &header(&case.signature),
            case.body.as_bytes(),
        );
        assert_eq!(verdict.is_ok(), case.valid, "{}", case.name);
        if case.valid || case.signed_with_key.is_some() {
            let key = case.signed_with_key.as_deref().unwrap_or(&case.key);
            assert_eq!(
                signed(&plain(), key, case.body.as_bytes()),
                header(&case.signature),
                "{}",
                case.name
            );
        }
    }
}

// --- Verification, signing and the authorization key ---

const BODY: &[u8] =
    br#"{"id":"evt_1","type":"payment_captured","data":{"id":"pay_1","amount":100}}"#;

#[test]
fn signed_bodies_verify_and_tampering_is_refused() {
    let headers = signed(&plain(), "key-a", BODY);
    assert_eq!(verify_request(&plain(), &["key-a"], &headers, BODY), Ok(1));
    let tampered = String::from_utf8(BODY.to_vec())
        .expect("utf-8")
        .replace("100", "10");
    assert_eq!(
        verify_request(&plain(), &["key-a"], &headers, tampered.as_bytes()),
        Err(SignatureError::Mismatch)
    );
    assert_eq!(
        verify_request(&plain(), &["key-b"], &headers, BODY),
        Err(SignatureError::Mismatch)
    );
    assert_eq!(
        verify_request(&plain(), &["key-a"], &[], BODY),
        Err(SignatureError::Missing(SIGNATURE.into()))
    );
    assert_eq!(
        verify_request(&plain(), &["key-a"], &header("sha256=00"), BODY),
        Err(SignatureError::malformed(SIGNATURE, "not hex"))
    );
}

#[test]
fn every_signature_key_is_tried_and_the_one_used_is_reported() {
    let keys = ["new-key", "old-key"];
    let check = |key| verify_request(&plain(), &keys, &signed(&plain(), key, BODY), BODY);
    assert_eq!(check("new-key"), Ok(1));
    assert_eq!(check("old-key"), Ok(2));
    assert_eq!(check("other-key"), Err(SignatureError::Mismatch));
}

#[test]
fn checkout_signs_no_time_so_no_delivery_is_too_old_or_too_new() {
    let headers = signed(&plain(), "key-a", BODY);
    let secrets = [Secret::new("key-a")];
    for now in [0, NOW - 86_400 * 365, NOW + 86_400 * 365] {
        let scheme = plain();
        let verifier = test_kit::verifier(&scheme, &secrets);
        assert!(verifier.verify(&headers, BODY, now).is_ok(), "{now}");
    }
}

#[test]
fn the_authorization_key_when_set_must_arrive_verbatim() {
    let scheme = with_authorization("Bearer cko-webhook-7f3a");
    let headers = signed(&scheme, "key-a", BODY);
    assert!(headers.contains(&(AUTHORIZATION.into(), "Bearer cko-webhook-7f3a".into())));
    assert_eq!(verify_request(&scheme, &["key-a"], &headers, BODY), Ok(1));
    let signature_only = signed(&plain(), "key-a", BODY);
    assert_eq!(
        verify_request(&scheme, &["key-a"], &signature_only, BODY),
        Err(SignatureError::Missing(AUTHORIZATION.into()))
    );
    for wrong in [
        "Bearer cko-webhook-7f3b",
        "bearer cko-webhook-7f3a",
        "",
        "Bearer",
    ] {
        let mut headers = signature_only.clone();
        headers.push((AUTHORIZATION.into(), wrong.into()));
        assert_eq!(
            verify_request(&scheme, &["key-a"], &headers, BODY),
            Err(SignatureError::Mismatch),
            "{wrong:?}"
        );
    }
    // The key is never kept with the event, nor shown.
    assert_eq!(scheme.signed_header_names(), vec![SIGNATURE]);
    assert!(!format!("{scheme:?}").contains("7f3a"));
}

// --- Configuration ---

fn source(extra: &str) -> Result<crate::config::Settings, String> {
    let text =
        format!("[[sources]]\nname = \"cko\"\nscheme = \"checkout\"\nsecrets = [\"k\"]\n{extra}\n");
    crate::config::Settings::from_toml("t.toml", &text, &Default::default())
        .map_err(|e| e.to_string())
}

#[test]
fn the_authorization_key_is_optional_and_never_blank() {
    let settings = source("").expect("valid");
    assert_eq!(
        settings.source("cko").map(|s| s.scheme.clone()),
        Some(plain())
    );
    let settings = source("authorization = \"abc 123\"").expect("valid");
    assert_eq!(
        settings.source("cko").map(|s| s.scheme.clone()),
        Some(with_authorization("abc 123"))
    );
    for bad in ["", "  ", " abc"] {
        let e = source(&format!("authorization = {bad:?}")).expect_err(bad);
        assert!(
            e.contains("sources[0].authorization") && e.contains("not empty"),
            "{bad:?}: {e}"
        );
    }
    let e = source("basic_auth = \"u:p\"").expect_err("another scheme's key");
    assert!(e.contains("only applies to scheme \"adyen\""), "{e}");
}

#[test]
fn the_authorization_key_may_come_from_the_environment() {
    let env = [(
        "HOOKD_SOURCE_CKO_AUTHORIZATION".to_string(),
        "from-env".to_string(),
    )]
    .into_iter()
    .collect();
    let text = "[[sources]]\nname = \"cko\"\nscheme = \"checkout\"\nsecrets = [\"k\"]\n\
                authorization = \"from-file\"\n";
    let settings = crate::config::Settings::from_toml("t.toml", text, &env).expect("valid");
    assert_eq!(
        settings.source("cko").map(|s| s.scheme.clone()),
        Some(with_authorization("from-env"))
    );
}

// --- Kinds and payment facts ---

fn payment(ty: &str, customer: Option<&str>) -> Value {
    let mut data = json!({"id": "pay_1", "action_id": "act_1", "amount": 6540, "currency": "EUR"});
    if let Some(customer) = customer {
        data["customer"] = json!({"id": customer, "email": "a@example.com"});
    }
    json!({"id": "evt_1", "type": ty, "data": data})
}

fn refund() -> Value {
    json!({"id": "evt_2", "type": "payment_refunded",
           "data": {"id": "pay_1", "action_id": "act_r1", "amount": 1000, "currency": "EUR"}})
}

fn dispute(ty: &str) -> Value {
    json!({"id": "evt_3", "type": ty, "data": {"id": "dsp_1", "payment_id": "pay_1",
           "amount": 6540, "currency": "EUR", "reason_code": "10.4"}})
}

#[test]
fn the_documented_types_are_the_kinds_and_the_rest_has_none() {
    let kinds = ANY.default_event_types();
    let kind = |t: &str| kinds.get(t).map(String::as_str);
    assert_eq!(kind("payment_captured"), Some("payment_succeeded"));
    assert_eq!(kind("payment_declined"), Some("payment_failed"));
    assert_eq!(kind("payment_refunded"), Some("payment_refunded"));
    assert_eq!(kind("dispute_received"), Some("dispute_opened"));
    assert_eq!(kind("dispute_evidence_required"), Some("dispute_opened"));
    for other in [
        "payment_approved",
        "payment_pending",
        "dispute_won",
        "card_verified",
    ] {
        assert_eq!(kind(other), None, "{other}");
    }
}

#[test]
fn payments_state_minor_units_currency_and_customer_refunds_their_action() {
    assert_eq!(
        ANY.payment_facts(&payment("payment_captured", Some("cus_1"))),
        Ok(PaymentFacts {
            payment_id: "pay_1".into(),
            amount: Some(6540),
            amount_refunded: None,
            currency: Some("EUR".into()),
            customer_id: Some("cus_1".into()),
            refund: None,
        })
    );
    let declined = ANY
        .payment_facts(&payment("payment_declined", None))
        .expect("valid");
    assert_eq!((declined.amount, declined.customer_id), (Some(6540), None));
    assert_eq!(
        ANY.payment_facts(&refund()),
        Ok(PaymentFacts {
            payment_id: "pay_1".into(),
            amount: None,
            amount_refunded: None,
            currency: Some("EUR".into()),
            customer_id: None,
            refund: Some(Refund {
                id: "act_r1".into(),
                amount: 1000
            }),
        })
    );
    for ty in ["dispute_received", "dispute_evidence_required"] {
        let facts = ANY.payment_facts(&dispute(ty)).expect("valid");
        assert_eq!(
            (facts.payment_id.as_str(), facts.amount, facts.refund),
            ("pay_1", None, None),
            "{ty}"
        );
    }
    assert_eq!(
        ANY.index_fields(&dispute("dispute_won")),
        IndexFields {
            payment_id: Some("pay_1".into()),
            customer_id: None
        }
    );
    assert_eq!(
        ANY.index_fields(&payment("payment_approved", Some("cus_1"))),
        IndexFields {
            payment_id: Some("pay_1".into()),
            customer_id: Some("cus_1".into())
        }
    );
}

#[test]
fn malformed_payment_data_says_why() {
    let mut no_action = refund();
    no_action["data"]["action_id"] = Value::Null;
    let mut no_amount = refund();
    no_amount["data"]["amount"] = Value::Null;
    let mut decimal = payment("payment_captured", None);
    decimal["data"]["amount"] = json!(65.4);
    let mut no_payment = dispute("dispute_received");
    no_payment["data"]["payment_id"] = json!(" ");
    let cases = [
        (no_action, "data.action_id is missing"),
        (no_amount, "data.amount is missing"),
        (decimal, "data.amount is not a non-negative integer"),
        (no_payment, "data.payment_id is missing"),
        (
            json!({"id": "e", "type": "payment_captured", "data": {"amount": 1}}),
            "data.id is missing",
        ),
        (
            json!({"id": "e", "type": "payment_captured"}),
            "data is missing or not an object",
        ),
    ];
    test_kit::refuses_facts(&ANY, cases.into());
}

#[test]
fn hookd_sign_takes_the_body_id_and_a_new_id_goes_into_it() {
    let value = json!({"id": "evt_7", "type": "payment_captured"});
    let body = Body {
        bytes: b"{}",
        value: &value,
    };
    assert_eq!(ANY.signing_id(&body), Ok("evt_7".into()));
    assert_eq!(ANY.signing_type(&body), Ok("payment_captured".into()));
    let (id, field) = ANY.new_id(&[7; 16]);
    assert_eq!((id.len(), field.as_deref()), (30, Some("/id")));
    let value = json!({"id": "evt_1", "type": "payment_captured"});
    assert_eq!(
        ANY.identity(&Vec::<(String, String)>::new(), &value),
        Ok(("evt_1".into(), "payment_captured".into()))
    );
}
