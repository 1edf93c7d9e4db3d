//! Properties of the pure edge code, over thousands of generated inputs: the
//! verifier of every scheme never panics and never accepts made-up headers, a
//! genuine signature verifies and any change to the body refutes it; parsing any
//! bytes as any shipped source never panics and what it accepts is well-formed;
//! the fingerprint of a JSON value is the same however its keys are ordered,
//! spaced or its strings escaped.

use std::time::Duration;

use hookd::config::Source;
use hookd::event::{IncomingEvent, fingerprint};
use hookd::providers::{Encoding, GenericHmac, Locator, Scheme, Verifier, sign};
use hookd::signature::{Envelope, Secret, SignatureError, Verified};
use proptest::prelude::*;
use serde_json::{Number, Value};

use crate::support::shipped_settings;

const TOLERANCE: Duration = Duration::from_secs(300);

/// Every shipped scheme with its secrets, and two generic HMAC variants: hex with a
/// prefix, JSON-pointer identity and a timestamp header; base64 with none.
fn schemes() -> Vec<(Scheme, Vec<Secret>)> {
    let mut all: Vec<(Scheme, Vec<Secret>)> = shipped_settings()
        .sources
        .into_iter()
        .map(|s| (s.scheme, s.secrets))
        .collect();
    all.push((
        Scheme::Hmac(GenericHmac {
            signature_header: "X-Signature".into(),
            encoding: Encoding::Hex,
            prefix: "sha256=".into(),
            id: Locator::Pointer("/id".into()),
            event_type: Locator::Pointer("/type".into()),
            timestamp_header: Some("X-Timestamp".into()),
        }),
        vec![Secret::new("first-secret"), Secret::new("second-secret")],
    ));
    all.push((
        Scheme::Hmac(GenericHmac {
            signature_header: "X-Sig".into(),
            encoding: Encoding::Base64,
            prefix: String::new(),
            id: Locator::Header("X-Id".into()),
            event_type: Locator::Header("X-Type".into()),
            timestamp_header: None,
        }),
        vec![Secret::new("k")],
    ));
    all
}

fn has_timestamp(scheme: &Scheme) -> bool {
    match scheme {
        Scheme::Stripe | Scheme::Standard | Scheme::Paddle => true,
        Scheme::Github
        | Scheme::Adyen(_)
        | Scheme::Square(_)
        | Scheme::Razorpay
        | Scheme::Checkout(_)
        | Scheme::GoCardless
        | Scheme::Braintree
        | Scheme::Mollie(_) => false,
        Scheme::PayPal(_) => true,
        Scheme::Hmac(opts) => opts.timestamp_header.is_some(),
    }
}

const HEADER_NAMES: [&str; 29] = [
    "Stripe-Signature",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "svix-id",
    "svix-timestamp",
    "svix-signature",
    "X-Hub-Signature-256",
    "X-GitHub-Event",
    "X-GitHub-Delivery",
    "X-Shopify-Hmac-Sha256",
    "X-Shopify-Webhook-Id",
    "X-Shopify-Topic",
    "X-Signature",
    "X-Timestamp",
    "X-Sig",
    "X-Id",
    "X-Type",
    "Paddle-Signature",
    "x-square-hmacsha256-signature",
    "X-Razorpay-Signature",
    "x-razorpay-event-id",
    "Cko-Signature",
    "Authorization",
    "PAYPAL-TRANSMISSION-ID",
    "PAYPAL-TRANSMISSION-TIME",
    "PAYPAL-TRANSMISSION-SIG",
    "PAYPAL-CERT-URL",
    "PAYPAL-AUTH-ALGO",
];

/// A fragment of a header value: numbers of every size, hex, base64, anything.
fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        "[0-9]{15,30}",
        "[0-9a-fA-F]{0,70}",
        "[A-Za-z0-9+/=_-]{0,60}",
        "\\PC{0,12}",
        Just(String::new()),
    ]
}

/// A header value shaped like a signature header of some scheme, or not at all.
fn header_value() -> impl Strategy<Value = String> {
    let prefixes = vec![
        "t=", "v1=", "v0=", "v1,", "v2,", "sha256=", "whsec_", "ts=", "h1=", "", "=",
    ];
    let item = (prop::sample::select(prefixes), piece()).prop_map(|(p, v)| format!("{p}{v}"));
    let separators = vec![",", " ", ";", "\t", ", ", ""];
    prop_oneof![
        (
            prop::collection::vec(item, 0..6),
            prop::sample::select(separators)
        )
            .prop_map(|(items, sep)| items.join(sep)),
        "\\PC{0,300}",
    ]
}

fn header_name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(HEADER_NAMES.to_vec()).prop_map(|n| {
            // Case does not matter to the lookup; vary it.
            if n.len() % 2 == 0 { n.to_ascii_lowercase() } else { n.to_string() }
        }),
        1 => "[A-Za-z-]{1,16}",
    ]
}

fn timestamp_text() -> impl Strategy<Value = String> {
    prop_oneof![
        (1_699_999_000i64..1_700_001_000).prop_map(|t| t.to_string()),
        any::<i64>().prop_map(|t| t.to_string()),
        piece(),
    ]
}

fn hex_text() -> impl Strategy<Value = String> {
    prop_oneof!["[0-9a-f]{64}", piece()]
}

fn base64_text() -> impl Strategy<Value = String> {
    prop_oneof!["[A-Za-z0-9+/]{43}=", piece()]
}

/// Made-up headers: any names and values, or each scheme's headers, all present
/// and well-shaped but for what only the secret could produce.
fn headers() -> impl Strategy<Value = Vec<(String, String)>> {
    let pair = |name: &'static str, value: BoxedStrategy<String>| {
        value.prop_map(move |v| (name.to_string(), v))
    };
    let stripe_item = prop_oneof![
        timestamp_text().prop_map(|t| format!("t={t}")),
        hex_text().prop_map(|h| format!("v1={h}")),
        (piece(), piece()).prop_map(|(k, v)| format!("{k}={v}")),
    ];
    let stripe = prop::collection::vec(stripe_item, 1..5)
        .prop_map(|items| vec![("Stripe-Signature".to_string(), items.join(","))]);
    let standard_signatures = prop::collection::vec(base64_text(), 1..4).prop_map(|tags| {
        tags.iter()
            .map(|t| format!("v1,{t}"))
            .collect::<Vec<_>>()
            .join(" ")
    });
    let standard = (
        pair("webhook-id", piece().boxed()),
        pair("webhook-timestamp", timestamp_text().boxed()),
        pair("webhook-signature", standard_signatures.boxed()),
    )
        .prop_map(|(a, b, c)| vec![a, b, c]);
    let github = (
        pair(
            "X-Hub-Signature-256",
            hex_text().prop_map(|h| format!("sha256={h}")).boxed(),
        ),
        pair("X-GitHub-Event", piece().boxed()),
        pair("X-GitHub-Delivery", piece().boxed()),
    )
        .prop_map(|(a, b, c)| vec![a, b, c]);
    let hmac = (
        pair("X-Shopify-Hmac-Sha256", base64_text().boxed()),
        pair(
            "X-Signature",
            hex_text().prop_map(|h| format!("sha256={h}")).boxed(),
        ),
        pair("X-Timestamp", timestamp_text().boxed()),
        pair("X-Sig", base64_text().boxed()),
    )
        .prop_map(|(a, b, c, d)| vec![a, b, c, d]);
    prop_oneof![
        prop::collection::vec((header_name(), header_value()), 0..10),
        stripe,
        standard,
        github,
        hmac,
    ]
}

/// Clock readings, the extremes included.
fn now() -> impl Strategy<Value = i64> {
    prop_oneof![
        any::<i64>(),
        Just(i64::MIN),
        Just(i64::MAX),
        Just(0),
        1_600_000_000i64..1_900_000_000,
    ]
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..512)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn made_up_headers_never_verify_and_never_panic(
        which in any::<prop::sample::Index>(),
        headers in headers(),
        body in body(),
        now in now(),
    ) {
        let schemes = schemes();
        let (scheme, secrets) = &schemes[which.index(schemes.len())];
        let verifier = Verifier { scheme, secrets, tolerance: TOLERANCE };
        let verdict = verifier.verify(&headers, &body, now);
        prop_assert!(verdict.is_err(), "{} accepted {headers:?}", scheme.name());
    }

    #[test]
    fn a_genuine_signature_verifies_and_any_change_refutes_it(
        which in any::<prop::sample::Index>(),
        body in body(),
        event_id in "\\PC{0,40}",
        at in now(),
        flip in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let schemes = schemes();
        let (scheme, secrets) = &schemes[which.index(schemes.len())];
        // Adyen signs fields inside a notification, not any bytes: its own tests
        // change each signed field of each item. PayPal signs with a private key,
        // not secrets, and an RFC 3339 time the extreme clocks have none of: its
        // own tests cover tampering, rotation and the tolerance. Braintree signs a
        // form it writes from a notification: its own tests change the form.
        prop_assume!(!matches!(
            scheme,
            Scheme::Adyen(_) | Scheme::PayPal(_) | Scheme::Braintree
        ));
        let verifier = Verifier { scheme, secrets, tolerance: TOLERANCE };
        let envelope = Envelope { event_id: &event_id, event_type: "payment.succeeded", timestamp: at };
        let headers = sign(scheme, &secrets[0], &body, &envelope).expect("sign").headers;
        prop_assert_eq!(verifier.verify(&headers, &body, at), Ok(Verified { signed_with: 1 }));
        let last = secrets.last().expect("a secret");
        let rotated = sign(scheme, last, &body, &envelope).expect("sign").headers;
        let position = i32::try_from(secrets.len()).expect("few secrets");
        prop_assert_eq!(verifier.verify(&rotated, &body, at), Ok(Verified { signed_with: position }));
        if !body.is_empty() {
            let mut changed = body.clone();
            changed[flip.index(body.len())] ^= 1 << bit;
            prop_assert_eq!(verifier.verify(&headers, &changed, at), Err(SignatureError::Mismatch));
        }
        let mut longer = body.clone();
        longer.push(b' ');
        prop_assert_eq!(verifier.verify(&headers, &longer, at), Err(SignatureError::Mismatch));
        let tolerance = i64::try_from(TOLERANCE.as_secs()).expect("seconds");
        if let (Some(later), Some(earlier)) = (at.checked_add(tolerance + 1), at.checked_sub(tolerance + 1)) {
            let expect_late = if has_timestamp(scheme) { Err(SignatureError::TooOld { seconds: TOLERANCE.as_secs() + 1 }) } else { Ok(Verified { signed_with: 1 }) };
            let expect_early = if has_timestamp(scheme) { Err(SignatureError::TooNew { seconds: TOLERANCE.as_secs() + 1 }) } else { Ok(Verified { signed_with: 1 }) };
            prop_assert_eq!(verifier.verify(&headers, &body, later), expect_late);
            prop_assert_eq!(verifier.verify(&headers, &body, earlier), expect_early);
        }
    }
}

/// A JSON value that remembers the order its object keys were written in.
#[derive(Debug, Clone)]
enum Json {
    Null,
    Bool(bool),
    Number(Number),
    Str(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    fn to_value(&self) -> Value {
        match self {
            Json::Null => Value::Null,
            Json::Bool(b) => Value::Bool(*b),
            Json::Number(n) => Value::Number(n.clone()),
            Json::Str(s) => Value::String(s.clone()),
            Json::Array(items) => Value::Array(items.iter().map(Json::to_value).collect()),
            Json::Object(fields) => Value::Object(
                fields
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_value()))
                    .collect(),
            ),
        }
    }
}

/// Strings providers might send: any text (no lone surrogates: Rust strings cannot
/// hold them), and the awkward characters in particular.
fn odd_string() -> impl Strategy<Value = String> {
    let awkward = vec![
        '\0',
        '\u{1}',
        '\u{1f}',
        '\u{7f}',
        '"',
        '\\',
        '/',
        '\n',
        '\t',
        '\u{2028}',
        '\u{2029}',
        '\u{feff}',
        '\u{fffd}',
        '\u{ffff}',
        'é',
        '\u{10ffff}',
        '😀',
        '\u{300}',
    ];
    prop_oneof![
        "\\PC{0,16}",
        any::<String>().prop_map(|s| s.chars().take(16).collect()),
        prop::collection::vec(prop::sample::select(awkward), 0..8)
            .prop_map(|chars| chars.into_iter().collect()),
    ]
}

fn number() -> impl Strategy<Value = Number> {
    let extremes = vec![
        f64::MAX,
        f64::MIN,
        f64::MIN_POSITIVE,
        5e-324,
        -5e-324,
        1e308,
        1e-308,
        0.1,
        -0.0,
        0.0,
        9_007_199_254_740_993.0,
    ];
    prop_oneof![
        any::<i64>().prop_map(Number::from),
        any::<u64>().prop_map(Number::from),
        Just(Number::from(i64::MIN)),
        Just(Number::from(u64::MAX)),
        any::<f64>().prop_filter_map("finite", Number::from_f64),
        prop::sample::select(extremes).prop_filter_map("finite", Number::from_f64),
    ]
}

fn json() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        number().prop_map(Json::Number),
        odd_string().prop_map(Json::Str),
    ];
    leaf.prop_recursive(5, 96, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Json::Array),
            prop::collection::vec((odd_string(), inner), 0..8).prop_map(|fields| {
                // One value per key, as in a JSON object hookd would store.
                let mut seen = std::collections::HashSet::new();
                Json::Object(
                    fields
                        .into_iter()
                        .filter(|(k, _)| seen.insert(k.clone()))
                        .collect(),
                )
            }),
        ]
    })
}

/// How a provider might re-serialise: keys in another order, other whitespace,
/// and non-ASCII characters as `\u` escapes (as `ensure_ascii` serialisers do).
#[derive(Debug, Clone, Copy)]
struct Style {
    reverse: bool,
    rotate: usize,
    spaces: bool,
    ascii: bool,
}

fn write_string(text: &str, ascii: bool, out: &mut String) {
    if !ascii {
        out.push_str(&serde_json::to_string(text).expect("a string serialises"));
        return;
    }
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04X}"));
                }
            }
        }
    }
    out.push('"');
}

fn write(json: &Json, style: Style, out: &mut String) {
    let gap = if style.spaces { " \n\t " } else { "" };
    match json {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Json::Number(n) => out.push_str(&n.to_string()),
        Json::Str(s) => write_string(s, style.ascii, out),
        Json::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(gap);
                write(item, style, out);
            }
            out.push_str(gap);
            out.push(']');
        }
        Json::Object(fields) => {
            let mut order: Vec<&(String, Json)> = fields.iter().collect();
            if style.reverse {
                order.reverse();
            }
            if !order.is_empty() {
                let by = style.rotate % order.len();
                order.rotate_left(by);
            }
            out.push('{');
            for (i, (key, value)) in order.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(gap);
                write_string(key, style.ascii, out);
                out.push_str(gap);
                out.push(':');
                out.push_str(gap);
                write(value, style, out);
            }
            out.push_str(gap);
            out.push('}');
        }
    }
}

/// Keys in the order generated, no whitespace, strings as serde_json writes them.
const PLAIN: Style = Style {
    reverse: false,
    rotate: 0,
    spaces: false,
    ascii: false,
};

fn text_of(json: &Json, style: Style) -> String {
    let mut out = String::new();
    write(json, style, &mut out);
    out
}

fn style() -> impl Strategy<Value = Style> {
    (any::<bool>(), 0usize..8, any::<bool>(), any::<bool>()).prop_map(
        |(reverse, rotate, spaces, ascii)| Style {
            reverse,
            rotate,
            spaces,
            ascii,
        },
    )
}

/// An id as providers send it, or as they should not.
fn id_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => "[a-z0-9_]{1,20}".prop_map(Value::from),
        2 => odd_string().prop_map(Value::from),
        1 => "\\PC{250,300}".prop_map(Value::from),
        1 => number().prop_map(Value::Number),
        1 => json().prop_map(|j| j.to_value()),
    ]
}

fn amount_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => (0i64..1_000_000).prop_map(Value::from),
        1 => number().prop_map(Value::Number),
        1 => json().prop_map(|j| j.to_value()),
    ]
}

/// A body with an event's and a payment's fields (in Stripe's and the neutral
/// shape at once), each well-formed or not, so that parsing often succeeds and
/// the payment facts are read.
fn event_like() -> impl Strategy<Value = Vec<u8>> {
    let event_type = prop_oneof![
        Just("payment_intent.succeeded".to_string()),
        Just("charge.refunded".to_string()),
        Just("payment.succeeded".to_string()),
        odd_string(),
    ];
    let object_kind = prop::sample::select(vec!["payment_intent", "charge", "customer", "x"]);
    (
        (id_value(), event_type, object_kind),
        (
            id_value(),
            amount_value(),
            amount_value(),
            id_value(),
            id_value(),
        ),
    )
        .prop_map(
            |((id, event_type, kind), (payment, amount, refunded, currency, customer))| {
                let object = serde_json::json!({
                    "id": payment, "object": kind, "payment_intent": payment, "amount": amount,
                    "amount_refunded": refunded, "currency": currency, "customer": customer,
                });
                let body = serde_json::json!({
                    "id": id,
                    "type": event_type,
                    "data": {
                        "object": object, "payment_id": payment, "amount": amount,
                        "amount_refunded": refunded, "currency": currency, "customer_id": customer,
                    },
                });
                serde_json::to_vec(&body).expect("json")
            },
        )
}

/// Made-up headers plus the identity headers of the header-identified schemes.
fn delivery_headers() -> impl Strategy<Value = Vec<(String, String)>> {
    let names = vec![
        "webhook-id",
        "svix-id",
        "X-GitHub-Delivery",
        "X-GitHub-Event",
        "X-Shopify-Webhook-Id",
        "X-Shopify-Topic",
    ];
    let value = prop_oneof![
        "[a-z0-9_/.]{1,20}",
        Just("payments/succeeded".to_string()),
        "\\PC{0,300}",
        Just("   ".to_string()),
    ];
    (
        headers(),
        prop::collection::vec((prop::sample::select(names), value), 0..6),
    )
        .prop_map(|(mut all, identity)| {
            all.extend(identity.into_iter().map(|(n, v)| (n.to_string(), v)));
            all
        })
}

fn delivery_body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        body(),
        json().prop_map(|j| text_of(
            &j,
            Style {
                reverse: false,
                rotate: 0,
                spaces: false,
                ascii: false
            }
        )
        .into_bytes()),
        event_like(),
    ]
}

fn check_parse(
    source: &Source,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<(), TestCaseError> {
    let Ok(events) = IncomingEvent::parse_all(source, headers, body) else {
        return Ok(());
    };
    // A provider sending one JSON event per request stores that body as the payload.
    let one_json_event = !matches!(
        source.scheme,
        Scheme::Adyen(_) | Scheme::GoCardless | Scheme::Braintree
    );
    for event in &events {
        for (what, text) in [
            ("event id", event.event_id.as_str()),
            ("event type", event.event_type.as_str()),
        ] {
            prop_assert!(!text.is_empty() && text.len() <= 255, "{what} {text:?}");
            prop_assert_eq!(text.trim(), text, "{} is trimmed", what);
        }
        if one_json_event {
            let parsed: Value = serde_json::from_slice(body).expect("accepted bodies are JSON");
            prop_assert_eq!(&event.payload, &parsed);
        }
        prop_assert_eq!(event.fingerprint, fingerprint(&event.payload));
        prop_assert_eq!(event.source.as_str(), source.name.as_str());
        let provider = source.scheme.provider();
        if let Ok(facts) = provider.payment_facts(&event.payload) {
            prop_assert!(!facts.payment_id.is_empty());
            prop_assert!(facts.amount.is_none_or(|a| a >= 0));
            prop_assert!(facts.amount_refunded.is_none_or(|a| a >= 0));
            prop_assert!(facts.refund.is_none_or(|r| r.amount >= 0));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn parsing_any_delivery_as_any_source_never_panics(
        which in any::<prop::sample::Index>(),
        headers in delivery_headers(),
        body in delivery_body(),
    ) {
        let settings = shipped_settings();
        let source = &settings.sources[which.index(settings.sources.len())];
        check_parse(source, &headers, &body)?;
    }

    #[test]
    fn texts_of_one_value_share_a_fingerprint_whatever_the_key_order_spacing_and_escapes(
        json in json(),
        style in style(),
    ) {
        // What hookd sees of a resend: another text, the same numbers as digits.
        let text = text_of(&json, style);
        let reparsed: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("our own text is JSON ({e}): {text}"));
        let plain = text_of(&json, PLAIN);
        let first: Value = serde_json::from_str(&plain).expect("plain text is JSON");
        prop_assert_eq!(fingerprint(&first), fingerprint(&reparsed), "{} / {}", plain, text);
    }

    #[test]
    fn a_value_and_its_reordered_text_share_a_fingerprint(json in json(), style in style()) {
        let value = json.to_value();
        let text = text_of(&json, style);
        let reparsed: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("our own text is JSON ({e}): {text}"));
        prop_assert_eq!(fingerprint(&reparsed), fingerprint(&value), "{}", text);
    }

    #[test]
    fn a_different_value_has_a_different_fingerprint(json in json(), key in odd_string()) {
        // Wrapping or extending a value changes its canonical text, so its digest.
        let value = json.to_value();
        let wrapped = Value::Array(vec![value.clone()]);
        prop_assert_ne!(fingerprint(&wrapped), fingerprint(&value));
        if let Value::Object(mut map) = value.clone()
            && !map.contains_key(&key)
        {
            map.insert(key, Value::Null);
            prop_assert_ne!(fingerprint(&Value::Object(map)), fingerprint(&value));
        }
    }
}

/// A resend that spells a number differently (here with a trailing zero) is the
/// same event. Both spellings denote one decimal, whose nearest double is
/// 0x123454e3fbbcc9ad; a correctly rounding parser reads both as that double.
#[test]
fn one_number_spelled_two_ways_has_one_fingerprint() {
    let first: Value =
        serde_json::from_str(r#"{"id":"evt_f","rate":5.624641259502565e-221}"#).expect("json");
    let resent: Value =
        serde_json::from_str(r#"{"id":"evt_f","rate":5.6246412595025650e-221}"#).expect("json");
    assert_eq!(
        fingerprint(&first),
        fingerprint(&resent),
        "{first} and {resent} are one event"
    );
}
