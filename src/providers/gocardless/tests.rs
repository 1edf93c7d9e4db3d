use serde_json::json;

use super::*;
use crate::providers::Scheme;
use crate::providers::test_kit::{self, Vectors, header};
use crate::signature::{SignatureError, Verified};

const NOW: i64 = 1_700_000_000;

fn verifier(secrets: &[crate::signature::Secret]) -> crate::providers::Verifier<'_> {
    test_kit::verifier(&Scheme::GoCardless, secrets)
}

fn check(
    keys: &[&str],
    signature: &str,
    body: &[u8],
    now: i64,
) -> Result<Verified, SignatureError> {
    let headers = vec![(HEADER.to_string(), signature.to_string())];
    test_kit::verify(&Scheme::GoCardless, keys, &headers, body, now)
}

/// The `Webhook-Signature` hookd sends with `body`, signed with `key`.
fn signature(key: &str, body: &[u8]) -> String {
    let event = ("e", "payments.confirmed");
    let signed = test_kit::signed(&Scheme::GoCardless, key, body, event, NOW);
    header(&signed.headers, HEADER)
}

// --- Known answers from GoCardless's own SDK (tests/vectors/gocardless.json) ---

type Case = test_kit::SecretCase;

/// The id and type of each event of a request, as hookd reads them.
fn identities(body: &[u8], payload: Value) -> Vec<(String, String)> {
    let events = GoCardless.events(body, payload).expect("events");
    let identity = |e: &Item| GoCardless.identity(&Vec::new(), &e.payload);
    events
        .iter()
        .map(|e| identity(e).expect("identity"))
        .collect()
}

fn vectors() -> Vectors<Case> {
    test_kit::vectors(include_str!("../../../tests/vectors/gocardless.json"))
}

fn hookd_accepts(case: &Case) -> bool {
    check(&[&case.secret], &case.signature, case.body.as_bytes(), NOW).is_ok()
}

#[test]
fn every_sdk_case_gets_the_sdks_verdict() {
    let vectors = vectors();
    assert!(vectors.cases.len() >= 8);
    // hookd signs as GoCardless does: the same header for the secret used.
    test_kit::sdk_verdicts(&vectors.cases, hookd_accepts, signature);
    for case in &vectors.cases {
        if case.valid {
            // And hookd reads the same events out of the body as the SDK.
            let payload: Value = serde_json::from_str(&case.body).expect("json");
            let ids: Vec<String> = identities(case.body.as_bytes(), payload)
                .into_iter()
                .map(|(id, _)| id)
                .collect();
            assert_eq!(ids, case.parsed_ids, "{}", case.name);
        }
    }
}

#[test]
fn the_sdks_quirks_are_decided() {
    // Each quirk is an input outside GoCardless's docs; hookd's verdict and why.
    let decided = [
        // Both decode hex of either case.
        ("signature_uppercase", true, true),
        // Node's hex decoding stops at the first pair that is not hex, so the
        // SDK accepts a good signature with anything appended; hookd reads the
        // whole header as hex and refuses it.
        ("signature_with_trailing_garbage", true, false),
        // The same leniency: a trailing odd digit is dropped by Node.
        ("signature_with_odd_trailing_digit", true, false),
        // Neither trims (HTTP itself drops a trailing space before either sees it).
        ("signature_leading_space", false, false),
    ];
    let vectors = vectors();
    assert_eq!(vectors.quirks.len(), decided.len());
    for (case, (name, sdk, hookd)) in vectors.quirks.iter().zip(decided) {
        assert_eq!(case.name, name);
        assert_eq!(case.valid, sdk, "{name}: the SDK's verdict");
        assert_eq!(hookd_accepts(case), hookd, "{name}");
    }
}

// --- Verification and signing ---

const BODY: &[u8] = br#"{"events":[{"id":"EV1","resource_type":"payments","action":"confirmed","links":{"payment":"PM1"}}]}"#;

#[test]
fn signed_bodies_verify_and_tampering_is_refused() {
    let tag = signature("secret-a", BODY);
    assert_eq!(tag.len(), 64);
    assert_eq!(
        check(&["secret-a"], &tag, BODY, NOW),
        Ok(Verified { signed_with: 1 })
    );
    let tampered = String::from_utf8_lossy(BODY).replace("PM1", "PM2");
    let mismatch = Err(SignatureError::Mismatch);
    assert_eq!(
        check(&["secret-a"], &tag, tampered.as_bytes(), NOW),
        mismatch,
        "body"
    );
    assert_eq!(check(&["secret-b"], &tag, BODY, NOW), mismatch, "secret");
    let mut flipped = hex::decode(&tag).expect("hex");
    flipped[31] ^= 1;
    assert_eq!(
        check(&["secret-a"], &hex::encode(flipped), BODY, NOW),
        mismatch,
        "tag"
    );
    assert_eq!(
        check(&["secret-a"], &tag[..62], BODY, NOW),
        mismatch,
        "short"
    );
}

#[test]
fn the_missing_or_unreadable_header_says_so() {
    let secrets = test_kit::secrets(&["secret-a"]);
    let none: Vec<(String, String)> = Vec::new();
    assert_eq!(
        verifier(&secrets).verify(&none, BODY, NOW),
        Err(SignatureError::Missing(HEADER.into()))
    );
    for bad in ["sha256=abc", "zz", "abc"] {
        assert_eq!(
            check(&["secret-a"], bad, BODY, NOW),
            Err(SignatureError::malformed(HEADER, "not hex")),
            "{bad}"
        );
    }
}

#[test]
fn every_secret_is_tried_and_the_one_used_is_reported() {
    let keys = ["new-secret", "old-secret"];
    let with = |key| check(&keys, &signature(key, BODY), BODY, NOW);
    assert_eq!(with("new-secret"), Ok(Verified { signed_with: 1 }));
    assert_eq!(with("old-secret"), Ok(Verified { signed_with: 2 }));
    assert_eq!(with("other-secret"), Err(SignatureError::Mismatch));
}

#[test]
fn gocardless_signs_no_time_so_no_delivery_is_too_old_or_too_new() {
    let tag = signature("secret-a", BODY);
    for now in [0, NOW - 86_400 * 365, NOW + 86_400 * 365] {
        assert!(check(&["secret-a"], &tag, BODY, now).is_ok(), "{now}");
    }
}

#[test]
fn a_refused_signature_is_answered_498_and_amounts_are_not_sent() {
    assert_eq!(
        GoCardless.refused_signature(),
        SignatureRefusal::TokenInvalid
    );
    assert!(!GoCardless.sends_amounts());
    assert_eq!(
        Scheme::Stripe.provider().refused_signature(),
        SignatureRefusal::Unauthorized
    );
}

// --- Events, identity, kinds and payment facts ---

fn event(id: &str, resource: &str, action: &str, links: Value) -> Value {
    json!({"id": id, "created_at": "2024-06-12T10:32:47.123Z", "resource_type": resource,
           "action": action, "links": links,
           "details": {"origin": "gocardless", "cause": action}, "metadata": {}})
}

#[test]
fn each_event_of_a_request_is_its_own_with_its_id_and_type() {
    let body = json!({"events": [
        event("EV1", "payments", "confirmed", json!({"payment": "PM1"})),
        event("EV2", "refunds", "paid", json!({"refund": "RF1", "payment": "PM1"})),
    ], "meta": {"webhook_id": "WB1"}});
    let bytes = serde_json::to_vec(&body).expect("json");
    assert_eq!(
        identities(&bytes, body),
        [
            ("EV1".to_string(), "payments.confirmed".to_string()),
            ("EV2".to_string(), "refunds.paid".to_string())
        ]
    );
    for (body, why) in [
        (json!({}), "the body has no events list"),
        (json!({"events": []}), "events is empty"),
        (json!({"events": [1]}), "an item of events is not an object"),
    ] {
        let bytes = serde_json::to_vec(&body).expect("json");
        assert_eq!(
            GoCardless
                .events(&bytes, body)
                .map(|items| items.len())
                .map_err(|e| e.to_string()),
            Err(why.to_string())
        );
    }
    let no_action = json!({"id": "EV3", "resource_type": "payments"});
    assert_eq!(
        GoCardless.identity(&Vec::new(), &no_action),
        Err(Missing::Type("events[].action".into()))
    );
    assert_eq!(
        GoCardless.identity(&Vec::new(), &json!({"action": "paid"})),
        Err(Missing::Id("events[].id".into()))
    );
}

#[test]
fn each_event_keeps_its_item_as_it_came_and_a_whole_request_yields_it() {
    // Spacing and escapes as a sender may write them: the bytes are kept as sent.
    let bytes = br#"{ "events" : [ {"id":"EV1","resource_type":"payments","action":"confirmed",
        "links":{"payment":"PM1"}} ,{"id": "EV2", "resource_type": "refunds",
        "action": "paid", "links": {"payment": "PM\u0031"}} ], "meta": {}}"#;
    let payload: Value = serde_json::from_slice(bytes).expect("json");
    let events = GoCardless.events(bytes, payload).expect("events");
    let kept: Vec<&[u8]> = events
        .iter()
        .map(|e| e.body.as_deref().expect("its own bytes"))
        .collect();
    assert_eq!(
        kept,
        [
            &br#"{"id":"EV1","resource_type":"payments","action":"confirmed",
        "links":{"payment":"PM1"}}"#[..],
            &br#"{"id": "EV2", "resource_type": "refunds",
        "action": "paid", "links": {"payment": "PM\u0031"}}"#[..],
        ]
    );
    assert_eq!(events[1].payload["links"]["payment"], "PM1");
    // A body that is the whole request (as events stored before requests were
    // kept once have it) yields the event's own item; an item yields nothing:
    // it is the event's own already.
    let scheme = Scheme::GoCardless;
    let (payload, item) = crate::providers::own_item(&scheme, &Vec::new(), bytes, "EV2")
        .expect("its item of the request");
    assert_eq!(
        (payload["id"].as_str(), item.as_slice()),
        (Some("EV2"), kept[1])
    );
    assert_eq!(
        crate::providers::own_item(&scheme, &Vec::new(), kept[1], "EV2"),
        None
    );
}

#[test]
fn the_documented_types_have_their_kinds_and_others_none() {
    let table = GoCardless.default_event_types();
    let kind = |ty: &str| table.get(ty).map(String::as_str);
    assert_eq!(kind("payments.confirmed"), Some("payment_succeeded"));
    assert_eq!(kind("payments.paid_out"), Some("payment_succeeded"));
    assert_eq!(kind("payments.failed"), Some("payment_failed"));
    assert_eq!(kind("refunds.paid"), Some("payment_refunded"));
    assert_eq!(kind("payments.charged_back"), Some("dispute_opened"));
    for other in ["payments.created", "refunds.created", "mandates.active"] {
        assert_eq!(kind(other), None, "{other}");
    }
}

#[test]
fn payment_facts_name_the_payment_and_customer_and_no_amounts() {
    let paid = event(
        "EV1",
        "payments",
        "confirmed",
        json!({"payment": "PM1", "customer": "CU1", "mandate": "MD1"}),
    );
    assert_eq!(
        GoCardless.payment_facts(&paid),
        Ok(PaymentFacts {
            payment_id: "PM1".into(),
            customer_id: Some("CU1".into()),
            ..PaymentFacts::default()
        })
    );
    let refund = event(
        "EV2",
        "refunds",
        "paid",
        json!({"refund": "RF1", "payment": "PM1"}),
    );
    assert_eq!(
        GoCardless.payment_facts(&refund),
        Ok(PaymentFacts {
            payment_id: "PM1".into(),
            ..PaymentFacts::default()
        })
    );
    assert_eq!(
        GoCardless.index_fields(&refund),
        IndexFields {
            payment_id: Some("PM1".into()),
            customer_id: None
        }
    );
    let mandate = event("EV3", "mandates", "active", json!({"mandate": "MD1"}));
    assert_eq!(
        GoCardless
            .payment_facts(&mandate)
            .map_err(|e| e.to_string()),
        Err("links.payment is missing".into())
    );
    let long = event(
        "EV4",
        "payments",
        "failed",
        json!({"payment": "P".repeat(300)}),
    );
    assert!(GoCardless.payment_facts(&long).is_err());
}

#[test]
fn hookd_sign_takes_the_first_event_and_new_ids_go_into_every_event() {
    let mut value = json!({"events": [
        event("EV1", "payments", "confirmed", json!({"payment": "PM1"})),
        event("EV2", "refunds", "paid", json!({"payment": "PM1"})),
    ]});
    let body = Body {
        bytes: b"{}",
        value: &value,
    };
    assert_eq!(GoCardless.signing_id(&body), Ok("EV1".into()));
    assert_eq!(
        GoCardless.signing_type(&body),
        Ok("payments.confirmed".into())
    );
    let (id, placed) = GoCardless.renew_ids(&mut value, &[7; 16]);
    assert!(placed);
    assert_eq!((id.len(), &id[..2]), (14, "EV"));
    assert_eq!(value["events"][0]["id"], json!(id));
    let second = value["events"][1]["id"].as_str().expect("id");
    assert!(second.starts_with("EV") && second != id, "{second}");
}
