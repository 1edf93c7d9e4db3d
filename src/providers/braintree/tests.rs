use serde::Deserialize;
use serde_json::json;

use super::*;
use crate::providers::test_kit::{self, Vectors};
use crate::providers::{Scheme, sign};

const KEYS: &str = "hookdpublickey01:0123456789abcdef0123456789abcdef";
const OLD_KEYS: &str = "oldpublickey0001:ffffffffffffffffffffffffffffffff";
const NOW: i64 = 1_700_000_000;

fn verify(secrets: &[&str], body: &[u8], now: i64) -> Result<Verified, SignatureError> {
    test_kit::verify(&Scheme::Braintree, secrets, &[], body, now)
}

/// The form hookd sends for a notification, signed with `keys`.
fn signed(keys: &str, notification: &Value) -> Vec<u8> {
    let body = serde_json::to_vec(notification).expect("json");
    let event = ("e", "transaction_settled");
    let signed = test_kit::signed(&Scheme::Braintree, keys, &body, event, NOW);
    assert_eq!(
        signed.headers,
        [("Content-Type".to_string(), FORM.to_string())]
    );
    signed.body.expect("a form")
}

fn settled() -> Value {
    json!({
        "timestamp": "2024-06-12T10:32:47Z",
        "kind": "transaction_settled",
        "subject": {"transaction": {
            "id": "txn1", "status": "settled", "type": "sale", "amount": "10.00",
            "currency-iso-code": "USD", "customer-id": "cust1",
            "add-ons": [], "descriptor": {"name": null, "phone": "555 & <0>"}
        }}
    })
}

/// The form with one field replaced.
fn with_field(body: &[u8], field: &str, value: &str) -> Vec<u8> {
    with_field_text(body, field, value).into_bytes()
}

fn with_field_text(body: &[u8], field: &str, value: &str) -> String {
    let mut out = form_urlencoded::Serializer::new(String::new());
    for (name, old) in form_urlencoded::parse(body) {
        out.append_pair(&name, if name == field { value } else { &old });
    }
    out.finish()
}

fn field(body: &[u8], name: &str) -> String {
    form_urlencoded::parse(body)
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.into_owned())
        .expect("field")
}

// --- Known answers from Braintree's own SDK (tests/vectors/braintree.json) ---

#[derive(Deserialize)]
struct Case {
    name: String,
    public_key: String,
    private_key: String,
    body: String,
    valid: bool,
    sdk: Option<Read>,
}

#[derive(Deserialize)]
struct Read {
    kind: String,
    timestamp_unix: i64,
    subject_id: String,
}

#[test]
fn hookd_agrees_with_the_sdk_on_every_vector() {
    let vectors: Vectors<Case> =
        test_kit::vectors(include_str!("../../../tests/vectors/braintree.json"));
    assert!(vectors.cases.iter().filter(|c| c.valid).count() >= 5);
    assert!(vectors.cases.iter().filter(|c| !c.valid).count() >= 4);
    for case in vectors.cases.iter().chain(&vectors.quirks) {
        let secret = format!("{}:{}", case.public_key, case.private_key);
        // The SDK judges regardless of age: so does hookd, at any clock.
        let verdict = verify(&[&secret], case.body.as_bytes(), i64::MAX);
        assert_eq!(verdict.is_ok(), case.valid, "{}: {verdict:?}", case.name);
        let Some(read) = &case.sdk else { continue };
        let payload = Braintree.payload(case.body.as_bytes()).expect("readable");
        let (id, kind) = Braintree
            .identity(&Vec::<(String, String)>::new(), &payload)
            .expect("identity");
        assert_eq!(kind, read.kind, "{}", case.name);
        let timestamp = payload["timestamp"].as_str().expect("timestamp");
        let at = chrono::DateTime::parse_from_rfc3339(timestamp).expect("rfc 3339");
        assert_eq!(at.timestamp(), read.timestamp_unix, "{}", case.name);
        assert_eq!(
            id,
            format!("{}:{}:{timestamp}", read.kind, read.subject_id),
            "{}",
            case.name
        );
    }
}

// --- Signing and verifying ---

#[test]
fn a_signed_form_verifies_and_reads_back_as_the_notification_signed() {
    let body = signed(KEYS, &settled());
    assert_eq!(verify(&[KEYS], &body, NOW), Ok(Verified { signed_with: 1 }));
    assert_eq!(Braintree.payload(&body), Ok(settled()));
    // As Braintree's gateway writes it: base64 in lines of 60, a final newline.
    let payload = field(&body, PAYLOAD);
    assert!(payload.ends_with('\n'));
    assert!(payload.lines().all(|l| l.len() <= LINE));
    assert!(field(&body, SIGNATURE).starts_with("hookdpublickey01|"));
}

#[test]
fn rotation_reports_the_secret_whose_public_key_signed() {
    let body = signed(KEYS, &settled());
    assert_eq!(
        verify(&[OLD_KEYS, KEYS], &body, NOW),
        Ok(Verified { signed_with: 2 })
    );
    // Braintree signs with every API key of the merchant, one pair each.
    let old = signed(OLD_KEYS, &settled());
    let both = format!("{}&{}", field(&old, SIGNATURE), field(&body, SIGNATURE));
    let body = with_field(&body, SIGNATURE, &both);
    assert_eq!(verify(&[KEYS], &body, NOW), Ok(Verified { signed_with: 1 }));
    assert_eq!(
        verify(&[OLD_KEYS, KEYS], &body, NOW),
        Ok(Verified { signed_with: 1 })
    );
}

#[test]
fn a_changed_payload_signature_or_private_key_is_refused() {
    let body = signed(KEYS, &settled());
    let mut changed = settled();
    changed["subject"]["transaction"]["amount"] = json!("1000.00");
    let other = signed(KEYS, &changed);
    let forged = with_field(&body, PAYLOAD, &field(&other, PAYLOAD));
    assert_eq!(verify(&[KEYS], &forged, NOW), Err(SignatureError::Mismatch));
    let tag = field(&body, SIGNATURE);
    let flipped = format!("{}0", &tag[..tag.len() - 1]);
    let flipped = if flipped == tag {
        format!("{}1", &tag[..tag.len() - 1])
    } else {
        flipped
    };
    let forged = with_field(&body, SIGNATURE, &flipped);
    assert_eq!(verify(&[KEYS], &forged, NOW), Err(SignatureError::Mismatch));
    let same_public = "hookdpublickey01:00000000000000000000000000000000";
    assert_eq!(
        verify(&[same_public], &body, NOW),
        Err(SignatureError::Mismatch)
    );
    assert_eq!(
        verify(&[OLD_KEYS], &body, NOW),
        Err(SignatureError::Mismatch)
    );
}

#[test]
fn a_form_without_its_fields_says_which() {
    let body = signed(KEYS, &settled());
    let only = |name: &str| {
        form_urlencoded::Serializer::new(String::new())
            .append_pair(name, &field(&body, name))
            .finish()
    };
    let cases = [
        (only(PAYLOAD), "bt_signature: missing"),
        (only(SIGNATURE), "bt_payload: missing"),
        (
            with_field_text(&body, SIGNATURE, "no pair here"),
            "bt_signature: no public_key|signature pair",
        ),
        (
            with_field_text(&body, PAYLOAD, "a b"),
            "bt_payload: has characters base64 does not use",
        ),
        ("{\"kind\":\"check\"}".to_string(), "bt_signature: missing"),
    ];
    for (form, message) in cases {
        let error = verify(&[KEYS], form.as_bytes(), NOW).expect_err("refused");
        assert_eq!(error.to_string(), message, "{form}");
    }
}

#[test]
fn no_tolerance_applies_to_the_signed_timestamp() {
    let body = signed(KEYS, &settled());
    for now in [0, NOW, i64::MAX, i64::MIN] {
        assert!(verify(&[KEYS], &body, now).is_ok(), "{now}");
    }
}

#[test]
fn secrets_must_be_key_pairs() {
    for bad in ["", "no-colon", ":private", "public:"] {
        assert!(Braintree.key_bytes(&Secret::new(bad)).is_err(), "{bad:?}");
    }
    assert!(Braintree.key_bytes(&Secret::new(KEYS)).is_ok());
    let fresh = Braintree.new_secret();
    let (public, private) = fresh.expose().split_once(':').expect("a pair");
    assert_eq!((public.len(), private.len()), (16, 32));
    assert!(Braintree.key_bytes(&fresh).is_ok());
}

#[test]
fn what_cannot_be_written_as_braintree_xml_is_refused_when_signing() {
    let envelope = Envelope {
        event_id: "e",
        event_type: "t",
        timestamp: NOW,
    };
    let cases = [
        (
            json!({"kind": "check", "amount": 10}),
            "Braintree's values are text",
        ),
        (
            json!({"kind": "check", "ok": true}),
            "Braintree's values are text",
        ),
        (
            json!({"kind": "check", "bad name": "x"}),
            "not an XML element name",
        ),
        (json!({"kind": "check", "subject": {}}), "empty object"),
        (json!({"kind": "nul\u{0}"}), "which XML cannot carry"),
        (json!(["not", "an", "object"]), "a JSON object"),
    ];
    for (body, reason) in cases {
        let bytes = serde_json::to_vec(&body).expect("json");
        let error = sign(&Scheme::Braintree, &Secret::new(KEYS), &bytes, &envelope)
            .expect_err("refused")
            .to_string();
        assert!(error.contains(reason), "{body}: {error}");
    }
}

#[test]
fn unreadable_payloads_say_why() {
    let form = |xml: &str| {
        form_urlencoded::Serializer::new(String::new())
            .append_pair(PAYLOAD, &BASE64.encode(xml))
            .finish()
    };
    let cases = [
        ("bt_signature=x".to_string(), "the form has no bt_payload"),
        ("bt_payload=%21%21".to_string(), "bt_payload is not base64"),
        (form("<notification>"), "bt_payload: not XML"),
        (
            form("<other><kind>x</kind></other>"),
            "the root element is <other>",
        ),
        (
            form("<!DOCTYPE n [<!ENTITY a \"aaaa\">]><notification>&a;</notification>"),
            "bt_payload: not XML",
        ),
    ];
    for (body, reason) in cases {
        let error = Braintree
            .payload(body.as_bytes())
            .expect_err("unreadable")
            .to_string();
        assert!(error.contains(reason), "{body}: {error}");
    }
}

#[test]
fn xml_reads_as_braintree_writes_it() {
    let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<notification>
  <timestamp type="datetime">2024-06-12T10:32:47Z</timestamp>
  <kind>check</kind>
  <subject><check type="boolean">true</check><none nil="true"/><list type="array"><a>1</a><b><c>2</c></b></list><empty/></subject>
</notification>"#;
    assert_eq!(
        xml::to_json(xml),
        Ok(json!({"timestamp": "2024-06-12T10:32:47Z", "kind": "check",
            "subject": {"check": "true", "none": null, "list": ["1", {"c": "2"}], "empty": ""}}))
    );
}

// --- Identity, kinds and payment facts ---

fn with_transaction(kind: &str, transaction: Value) -> Value {
    json!({"timestamp": "2024-06-12T10:32:47Z", "kind": kind, "subject": {"transaction": transaction}})
}

#[test]
fn the_id_is_kind_subject_id_and_timestamp() {
    let none = Vec::<(String, String)>::new();
    assert_eq!(
        Braintree.identity(&none, &settled()),
        Ok((
            "transaction_settled:txn1:2024-06-12T10:32:47Z".to_string(),
            "transaction_settled".to_string()
        ))
    );
    let check =
        json!({"timestamp": "2024-06-12T10:32:47Z", "kind": "check", "subject": {"check": "true"}});
    assert_eq!(
        Braintree.identity(&none, &check).map(|(id, _)| id),
        Ok("check::2024-06-12T10:32:47Z".to_string())
    );
    assert_eq!(
        Braintree.identity(&none, &json!({"timestamp": "t"})),
        Err(Missing::Type("notification.kind".into()))
    );
    assert_eq!(
        Braintree.identity(&none, &json!({"kind": "check"})),
        Err(Missing::Id("notification.timestamp".into()))
    );
}

#[test]
fn kinds_follow_the_transaction_type() {
    let sale = with_transaction("transaction_settled", json!({"id": "t", "type": "sale"}));
    let credit = with_transaction("transaction_settled", json!({"id": "r", "type": "credit"}));
    let declined = with_transaction(
        "transaction_settlement_declined",
        json!({"id": "t", "type": "sale"}),
    );
    let declined_credit = with_transaction(
        "transaction_settlement_declined",
        json!({"id": "r", "type": "credit"}),
    );
    let kind = |payload: &Value| Braintree.kind_of(payload["kind"].as_str().unwrap_or(""), payload);
    assert_eq!(kind(&sale), Some(PaymentKind::Succeeded));
    assert_eq!(kind(&credit), Some(PaymentKind::Refunded));
    assert_eq!(kind(&declined), Some(PaymentKind::Failed));
    assert_eq!(kind(&declined_credit), None);
    assert_eq!(kind(&json!({"kind": "subscription_canceled"})), None);
    assert_eq!(
        Braintree
            .default_event_types()
            .get("dispute_opened")
            .map(String::as_str),
        Some("dispute_opened")
    );
}

#[test]
fn payment_facts_of_sales_credits_and_disputes() {
    let facts = Braintree.payment_facts(&settled()).expect("facts");
    assert_eq!(
        facts,
        PaymentFacts {
            payment_id: "txn1".into(),
            amount: Some(1000),
            amount_refunded: None,
            currency: Some("USD".into()),
            customer_id: Some("cust1".into()),
            refund: None,
        }
    );
    let yen = with_transaction(
        "transaction_settled",
        json!({"id": "t", "type": "sale", "amount": "1050", "currency-iso-code": "JPY",
            "customer": {"id": "c9"}}),
    );
    let facts = Braintree.payment_facts(&yen).expect("facts");
    assert_eq!(
        (facts.amount, facts.customer_id.as_deref()),
        (Some(1050), Some("c9"))
    );
    let credit = with_transaction(
        "transaction_settled",
        json!({"id": "r1", "type": "credit", "amount": "2.50", "currency-iso-code": "EUR",
            "refunded-transaction-id": "txn1"}),
    );
    let facts = Braintree.payment_facts(&credit).expect("facts");
    assert_eq!(
        (facts.payment_id.as_str(), facts.amount, facts.refund),
        (
            "txn1",
            None,
            Some(Refund {
                id: "r1".into(),
                amount: 250
            })
        )
    );
    let dispute = json!({"kind": "dispute_opened", "subject": {"dispute": {"id": "d1",
        "amount": "250.00", "currency-iso-code": "USD", "transaction": {"id": "txn1"}}}});
    let facts = Braintree.payment_facts(&dispute).expect("facts");
    assert_eq!((facts.payment_id.as_str(), facts.amount), ("txn1", None));
    assert_eq!(
        Braintree.index_fields(&settled()),
        IndexFields {
            payment_id: Some("txn1".into()),
            customer_id: Some("cust1".into())
        }
    );
}

#[test]
fn unusable_payment_facts_say_why() {
    let cases = [
        (
            json!({"kind": "check"}),
            "kind \"check\" is not about a payment",
        ),
        (
            json!({"kind": "transaction_settled", "subject": {}}),
            "subject.transaction is missing",
        ),
        (
            with_transaction("transaction_settled", json!({"type": "sale"})),
            "subject.transaction.id is missing",
        ),
        (
            with_transaction("transaction_settled", json!({"id": "t", "amount": "1.00"})),
            "subject.transaction.currency-iso-code is missing",
        ),
        (
            with_transaction(
                "transaction_settled",
                json!({"id": "t", "amount": "1.001", "currency-iso-code": "USD"}),
            ),
            "subject.transaction.amount: the amount \"1.001\" has 3 decimals",
        ),
        (
            with_transaction(
                "transaction_settled",
                json!({"id": "r", "type": "credit",
                "amount": "1.00", "currency-iso-code": "USD"}),
            ),
            "subject.transaction.refunded-transaction-id is missing",
        ),
        (
            json!({"kind": "dispute_opened", "subject": {"dispute": {"id": "d"}}}),
            "subject.dispute.transaction.id is missing",
        ),
    ];
    for (payload, reason) in cases {
        let error = Braintree
            .payment_facts(&payload)
            .expect_err("unusable")
            .to_string();
        assert!(error.contains(reason), "{payload}: {error}");
    }
}

#[test]
fn new_ids_go_to_the_subject_and_name_the_event() {
    let mut body = settled();
    let (id, placed) = Braintree.renew_ids(&mut body, &[7; 16]);
    let fresh = body["subject"]["transaction"]["id"]
        .as_str()
        .expect("id")
        .to_string();
    assert!(placed);
    assert_ne!(fresh, "txn1");
    assert_eq!(fresh.len(), 8);
    assert_eq!(
        id,
        format!("transaction_settled:{fresh}:2024-06-12T10:32:47Z")
    );
    let mut check = json!({"kind": "check", "timestamp": "t", "subject": {"check": "true"}});
    let (id, placed) = Braintree.renew_ids(&mut check, &[7; 16]);
    assert!(placed);
    assert_eq!(id, format!("check:{fresh}:t"));
    assert_eq!(check["subject"]["check"], "true");
    assert!(
        !Braintree
            .renew_ids(&mut json!({"kind": "check"}), &[7; 16])
            .1
    );
}

#[test]
fn a_secret_that_is_not_a_key_pair_stops_loading_naming_it() {
    let config = |secret: &str| {
        format!(
            "[[sources]]\nname = \"bt\"\nscheme = \"braintree\"\nsecrets = [\"{KEYS}\", \"{secret}\"]\n"
        )
    };
    let load = |text: &str| {
        crate::config::Settings::from_toml("test.toml", text, &HashMap::new())
            .map(|s| s.sources[0].scheme.clone())
            .map_err(|e| e.to_string())
    };
    assert_eq!(load(&config(OLD_KEYS)), Ok(Scheme::Braintree));
    let error = load(&config("only-a-private-key")).expect_err("refused");
    assert!(
        error.contains("sources[0].secrets[1]: is not \"PUBLIC_KEY:PRIVATE_KEY\""),
        "{error}"
    );
    assert_eq!(error.lines().count(), 1, "{error}");
}
