use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;

use super::*;
use crate::providers::{Encoding, GenericHmac, Locator, Scheme};
use crate::signature::Secret;

fn source(scheme: Scheme) -> Source {
    let scheme_leaves_identity_unsigned = scheme.provider().leaves_identity_unsigned();
    let mut event_types = HashMap::new();
    event_types.insert(
        "payment_intent.succeeded".into(),
        "payment_succeeded".into(),
    );
    Source {
        name: SourceName::configured("s"),
        scheme,
        secrets: vec![Secret::new("x")],
        secrets_key: "sources[0].secrets".into(),
        tolerance: Duration::from_secs(300),
        event_types,
        fingerprint_ignore: vec!["/pending_webhooks".into(), "/request".into()].into(),
        dedupe_on_body: scheme_leaves_identity_unsigned,
        mask: Vec::new(),
        expect_events_within: None,
        reconcile: Default::default(),
    }
}

fn no_headers() -> Vec<(String, String)> {
    Vec::new()
}

#[test]
fn the_fingerprint_ignores_key_order_and_whitespace() {
    let a: Value = serde_json::from_str(r#"{"b":1,"a":{"y":[1,2],"x":"é"}}"#).expect("json");
    let b: Value =
        serde_json::from_str("{ \"a\" : { \"x\" : \"\\u00e9\", \"y\" : [ 1 , 2 ] },\n \"b\" : 1 }")
            .expect("json");
    assert_eq!(fingerprint(&a), fingerprint(&b));
    let c: Value = serde_json::from_str(r#"{"b":2,"a":{"y":[1,2],"x":"é"}}"#).expect("json");
    assert_ne!(fingerprint(&a), fingerprint(&c));
    let d: Value = serde_json::from_str(r#"{"b":1,"a":{"y":[2,1],"x":"é"}}"#).expect("json");
    assert_ne!(fingerprint(&a), fingerprint(&d), "array order matters");
}

#[test]
fn pointers_to_several_items_of_one_array_leave_out_those_items_whatever_their_order() {
    let ignore =
        |pointers: &[&str]| -> Vec<String> { pointers.iter().map(|p| p.to_string()).collect() };
    let two_first = ignore(&["/items/0", "/items/1"]);
    let stable = |payload: Value, ignore: &[String]| stable_fingerprint(&payload, ignore);
    // The third item counts; the first two do not.
    assert_ne!(
        stable(json!({"items": [1, 2, 100]}), &two_first),
        stable(json!({"items": [1, 2, 999]}), &two_first)
    );
    assert_eq!(
        stable(json!({"items": [1, 2, 100]}), &two_first),
        stable(json!({"items": [7, 8, 100]}), &two_first)
    );
    assert_eq!(
        stable(json!({"items": [1, 2, 100]}), &two_first),
        stable(
            json!({"items": [7, 8, 100]}),
            &ignore(&["/items/1", "/items/0"])
        )
    );
    // Indices are numbers: 10 is later than 9.
    let items: Vec<u32> = (0..12).collect();
    let mut other = items.clone();
    other[11] = 99;
    let late = ignore(&["/items/9", "/items/10"]);
    assert_ne!(
        stable(json!({ "items": items }), &late),
        stable(json!({ "items": other }), &late)
    );
}

#[test]
fn stripe_events_take_id_and_type_from_the_body_and_map_the_kind() {
    let body = br#"{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","object":"payment_intent","customer":"cus_1"}}}"#;
    let e = IncomingEvent::parse(&source(Scheme::Stripe), &no_headers(), body).expect("valid");
    assert_eq!(e.event_id, "evt_1");
    assert_eq!(e.event_type, "payment_intent.succeeded");
    assert_eq!(e.kind.as_deref(), Some("payment_succeeded"));
    assert_eq!(e.payment_id.as_deref(), Some("pi_1"));
    assert_eq!(e.customer_id.as_deref(), Some("cus_1"));
}

#[test]
fn bad_bodies_are_explained() {
    let s = source(Scheme::Stripe);
    let parse = |body: &[u8]| IncomingEvent::parse(&s, &no_headers(), body);
    assert!(matches!(parse(b"not json"), Err(EventError::NotJson(_))));
    assert!(matches!(
        parse(br#"{"type":"x"}"#),
        Err(EventError::MissingId(_))
    ));
    assert!(matches!(
        parse(br#"{"id":"","type":"x"}"#),
        Err(EventError::MissingId(_))
    ));
    assert!(matches!(
        parse(br#"{"id":"e"}"#),
        Err(EventError::MissingType(_))
    ));
    assert!(matches!(parse(b"[1,2]"), Err(EventError::MissingId(_))));
    let long = format!(r#"{{"id":"{}","type":"x"}}"#, "e".repeat(256));
    assert_eq!(
        parse(long.as_bytes()).err(),
        Some(EventError::Word(WordError::TooLong("event id")))
    );
}

#[test]
fn github_types_carry_the_action() {
    let headers = vec![
        ("X-GitHub-Delivery".to_string(), "d-1".to_string()),
        ("X-GitHub-Event".to_string(), "pull_request".to_string()),
    ];
    let e = IncomingEvent::parse(&source(Scheme::Github), &headers, br#"{"action":"opened"}"#)
        .expect("valid");
    assert_eq!(
        (e.event_id.as_str(), e.event_type.as_str()),
        ("d-1", "pull_request.opened")
    );
    let e =
        IncomingEvent::parse(&source(Scheme::Github), &headers, br#"{"ref":"x"}"#).expect("valid");
    assert_eq!(e.event_type, "pull_request");
    assert_eq!(e.kind, None);
}

#[test]
fn generic_sources_read_headers_or_pointers() {
    let scheme = Scheme::Hmac(GenericHmac {
        signature_header: "X-Sig".into(),
        encoding: Encoding::Hex,
        prefix: String::new(),
        id: Locator::Pointer("/meta/id".into()),
        event_type: Locator::Header("X-Topic".into()),
        timestamp_header: None,
    });
    let headers = vec![("x-topic".to_string(), "payment_succeeded".to_string())];
    let body = br#"{"meta":{"id":42},"data":{"payment_id":"p1","customer_id":"c1"}}"#;
    let e = IncomingEvent::parse(&source(scheme), &headers, body).expect("valid");
    assert_eq!(e.event_id, "42");
    assert_eq!(
        e.kind.as_deref(),
        Some("payment_succeeded"),
        "built-in names map to themselves"
    );
    assert_eq!(e.payment_id.as_deref(), Some("p1"));
    assert_eq!(e.customer_id.as_deref(), Some("c1"));
}

#[test]
fn nul_characters_are_kept_in_the_body_and_fingerprint_and_replaced_in_the_jsonb_copy() {
    let body = br#"{"id":"evt_1","type":"x","a\u0000":"b\u0000c","list":["\u0000"]}"#;
    let s = source(Scheme::Stripe);
    let e = IncomingEvent::parse(&s, &no_headers(), body).expect("valid");
    assert_eq!(e.body, body.to_vec());
    assert_eq!(e.payload["a\u{0}"], "b\u{0}c");
    let stored = e.storable_payload();
    assert_eq!(stored["a\u{fffd}"], "b\u{fffd}c");
    assert_eq!(stored["list"][0], "\u{fffd}");
    assert_ne!(
        fingerprint(&stored),
        e.fingerprint,
        "the fingerprint is of what was sent"
    );
    let plain =
        IncomingEvent::parse(&s, &no_headers(), br#"{"id":"evt_2","type":"x"}"#).expect("valid");
    assert!(matches!(
        plain.storable_payload(),
        std::borrow::Cow::Borrowed(_)
    ));
    let nul_id = IncomingEvent::parse(&s, &no_headers(), br#"{"id":"e\u0000","type":"x"}"#);
    assert_eq!(
        nul_id.err(),
        Some(EventError::Word(WordError::Nul("event id")))
    );
}

#[test]
fn the_headers_a_signature_depends_on_are_kept() {
    let headers = vec![
        ("X-GitHub-Delivery".to_string(), "d-1".to_string()),
        ("X-GitHub-Event".to_string(), "push".to_string()),
        ("X-Hub-Signature-256".to_string(), "sha256=00".to_string()),
        ("User-Agent".to_string(), "GitHub-Hookshot".to_string()),
    ];
    let e = IncomingEvent::parse(&source(Scheme::Github), &headers, b"{}").expect("valid");
    assert_eq!(
        e.signature_headers,
        json!({"X-Hub-Signature-256": "sha256=00", "X-GitHub-Event": "push",
               "X-GitHub-Delivery": "d-1"})
    );
}

#[test]
fn the_stable_fingerprint_leaves_out_the_ignored_fields_only() {
    let ignore = vec!["/pending_webhooks".to_string(), "/request".to_string()];
    let first: Value = serde_json::from_str(
        r#"{"id":"evt_1","pending_webhooks":1,"request":{"id":"req_1"},"data":{"amount":5}}"#,
    )
    .expect("json");
    let resend: Value = serde_json::from_str(
        r#"{"id":"evt_1","pending_webhooks":3,"request":{"id":null},"data":{"amount":5}}"#,
    )
    .expect("json");
    let changed: Value = serde_json::from_str(
        r#"{"id":"evt_1","pending_webhooks":1,"request":{"id":"req_1"},"data":{"amount":6}}"#,
    )
    .expect("json");
    assert_ne!(fingerprint(&first), fingerprint(&resend));
    assert_eq!(
        stable_fingerprint(&first, &ignore),
        stable_fingerprint(&resend, &ignore)
    );
    assert_ne!(
        stable_fingerprint(&first, &ignore),
        stable_fingerprint(&changed, &ignore)
    );
    // Nothing to leave out: the same as the whole fingerprint.
    let plain = json!({"id": "evt_2"});
    assert_eq!(stable_fingerprint(&plain, &ignore), fingerprint(&plain));
    // Escaped pointer tokens and array items.
    let odd = json!({"a/b": 1, "list": [1, 2], "keep": true});
    let pointers = vec!["/a~1b".to_string(), "/list/0".to_string()];
    assert_eq!(
        stable_fingerprint(&odd, &pointers),
        fingerprint(&json!({"list": [2], "keep": true}))
    );
}

/// The canonical form as hookd first wrote it: a copy of the payload with the
/// ignored fields removed, serialised again. The one-walk fingerprints must give
/// the same bytes' digests, or rows stored before would stop matching.
mod as_first_written {
    use serde_json::Value;
    use sha2::{Digest, Sha256};

    pub fn fingerprint(payload: &Value) -> [u8; 32] {
        let mut canonical = Vec::new();
        write(payload, &mut canonical);
        Sha256::digest(&canonical).into()
    }

    pub fn stable(payload: &Value, ignore: &[String]) -> [u8; 32] {
        if ignore.iter().all(|p| payload.pointer(p).is_none()) {
            return fingerprint(payload);
        }
        let mut trimmed = payload.clone();
        super::remove_pointers(&mut trimmed, ignore);
        fingerprint(&trimmed)
    }

    fn write(value: &Value, out: &mut Vec<u8>) {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                out.push(b'{');
                for (i, (key, item)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    serde_json::to_writer(&mut *out, key).expect("vec");
                    out.push(b':');
                    write(item, out);
                }
                out.push(b'}');
            }
            Value::Array(items) => {
                out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write(item, out);
                }
                out.push(b']');
            }
            scalar => serde_json::to_writer(&mut *out, scalar).expect("vec"),
        }
    }
}

fn json_value() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    let key = prop::sample::select(vec![
        "a",
        "b",
        "request",
        "pending_webhooks",
        "id",
        "x/y",
        "t~n",
        "é",
        "q\"",
        "n\u{0}",
        "",
    ]);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e12f64..1e12)
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "[a-z\"\\\\\u{0}-\u{1f}é😀]{0,6}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 40, 5, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..5).prop_map(|members| {
                Value::Object(
                    members
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v))
                        .collect(),
                )
            }),
        ]
    })
}

proptest::proptest! {
    #[test]
    fn one_walk_fingerprints_are_the_ones_first_written(
        payload in json_value(),
        ignore in proptest::collection::vec(proptest::sample::select(vec![
            "/request", "/pending_webhooks", "/a", "/a/b", "/a/request", "/b/0", "/a/0/id",
            "/x~1y", "/t~0n", "/request/id", "", "a/b", "/", "/a/01", "/b/+1",
        ]), 0..4),
    ) {
        let ignore: Vec<String> = ignore.into_iter().map(String::from).collect();
        let prints = Fingerprints::of_payload(&payload, &ignore);
        proptest::prop_assert_eq!(prints.full, as_first_written::fingerprint(&payload));
        proptest::prop_assert_eq!(prints.stable, as_first_written::stable(&payload, &ignore));
        let text = serde_json::to_string(&payload).expect("json");
        proptest::prop_assert_eq!(prints.has_nul, text.contains("\\u0000"));
    }
}

#[test]
fn a_body_that_is_its_payload_goes_to_the_store_as_sent() {
    let body = br#"{"id":"evt_1","type":"payment_intent.succeeded","amount":150}"#;
    let e = IncomingEvent::parse(&source(Scheme::Stripe), &no_headers(), body).expect("valid");
    assert_eq!(e.payload_text(), Some(&body[..]));
    let nul = br#"{"id":"evt_1","type":"payment_intent.succeeded","note":"a\u0000b"}"#;
    let e = IncomingEvent::parse(&source(Scheme::Stripe), &no_headers(), nul).expect("valid");
    assert_eq!(
        e.payload_text(),
        None,
        "jsonb refuses NUL: the cleaned value goes"
    );
    assert!(e.payload_has_nul);
    // Numbers other than 64-bit integers go as serde read them: PostgreSQL's
    // numeric refuses `1e-20000`, which serde reads as 0.
    for odd in [
        &br#"{"id":"evt_1","type":"t","n":1e-20000}"#[..],
        br#"{"id":"evt_1","type":"t","n":1.5}"#,
    ] {
        let e = IncomingEvent::parse(&source(Scheme::Stripe), &no_headers(), odd).expect("valid");
        assert_eq!(e.payload_text(), None);
    }
}

#[test]
fn a_request_signed_only_whole_is_shared_by_its_events_once_and_bounded() {
    let s = source(Scheme::GoCardless);
    let request = |count: usize| {
        let events: Vec<Value> = (0..count)
            .map(|n| json!({"id": format!("EV{n}"), "resource_type": "payments", "action": "paid_out"}))
            .collect();
        serde_json::to_vec(&json!({"events": events})).expect("json")
    };
    let body = request(3);
    let events = IncomingEvent::parse_all(&s, &no_headers(), &body).expect("valid");
    let kept = events[0].request.clone().expect("the request is kept");
    assert_eq!(kept.body, body);
    assert_eq!(kept.sha256, <[u8; 32]>::from(Sha256::digest(&body)));
    for (n, event) in events.iter().enumerate() {
        // One copy for all, each event with its own item.
        assert!(Arc::ptr_eq(event.request.as_ref().expect("kept"), &kept));
        let item: Value = serde_json::from_slice(&event.body).expect("json");
        assert_eq!(item["id"], format!("EV{n}"));
    }
    // A provider that signs each event keeps no request apart.
    let one = IncomingEvent::parse(
        &source(Scheme::Stripe),
        &no_headers(),
        br#"{"id":"e","type":"t"}"#,
    )
    .expect("valid");
    assert!(one.request.is_none());

    assert_eq!(
        IncomingEvent::parse_all(&s, &no_headers(), &request(MAX_EVENTS_PER_REQUEST))
            .map(|e| e.len()),
        Ok(MAX_EVENTS_PER_REQUEST)
    );
    assert_eq!(
        IncomingEvent::parse_all(&s, &no_headers(), &request(MAX_EVENTS_PER_REQUEST + 1))
            .map(|e| e.len()),
        Err(EventError::TooManyEvents(MAX_EVENTS_PER_REQUEST + 1))
    );
}
