//! Signature headers malformed in every way for each scheme, genuine signatures
//! of another body or at the wrong time, and genuinely signed bodies that are
//! not events hookd can take.

use hookd::providers::sign;
use hookd::signature::Envelope;

use super::{Cases, EVENT, SOURCES, Session, post, webhook, webhook_family};
use crate::support::shipped_settings;

surface!(
    "signatures",
    165,
    signature_cases_get_answers_below_500_and_store_nothing
);

fn cases(cases: &mut Cases, _: &Session) {
    for source in SOURCES {
        signature_cases(cases, source);
        signed_body_cases(cases, source);
    }
}

/// Signs `body` as `source`'s provider would, at `timestamp`, with its first secret.
fn signed(
    source: &str,
    body: &[u8],
    id: &str,
    event_type: &str,
    timestamp: i64,
) -> Vec<(String, String)> {
    let settings = shipped_settings();
    let source = settings.source(source).expect("shipped source");
    let envelope = Envelope {
        event_id: id,
        event_type,
        timestamp,
    };
    sign(&source.scheme, &source.secrets[0], body, &envelope)
        .expect("sign")
        .headers
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Signature headers malformed in every way, per scheme, and genuine signatures
/// of the wrong body or at the wrong time.
fn signature_cases(cases: &mut Cases, source: &str) {
    let family = webhook_family(source);
    let path = webhook(source);
    let t = now();
    let hex64 = "ab".repeat(32);
    let b64 = "q80=".repeat(11);
    let mut with = |name: &str, headers: &[(&str, String)]| {
        let mut r = post(&path).json(EVENT);
        for (n, v) in headers {
            r = r.header(n, v);
        }
        cases.anon(family, format!("signature: {name}"), r);
    };
    match source {
        "stripe" => {
            let h = "Stripe-Signature";
            let values = [
                ("empty", String::new()),
                ("t= only", "t=".into()),
                ("v1= only", "v1=".into()),
                ("t without v1", format!("t={t}")),
                ("v1 without t", format!("v1={hex64}")),
                ("empty v1", format!("t={t},v1=")),
                ("non-numeric t", format!("t=abc,v1={hex64}")),
                (
                    "t=99999999999999999999",
                    format!("t=99999999999999999999,v1={hex64}"),
                ),
                ("negative t", format!("t=-1,v1={hex64}")),
                ("t=i64::MIN", format!("t=-9223372036854775808,v1={hex64}")),
                ("t=i64::MAX", format!("t=9223372036854775807,v1={hex64}")),
                ("two t", format!("t={t},t={t},v1={hex64}")),
                ("non-hex v1", format!("t={t},v1={}", "zz".repeat(32))),
                ("odd-length hex", format!("t={t},v1=abc")),
                ("4,000-digit v1", format!("t={t},v1={}", "ab".repeat(2000))),
                (
                    "1,500 v1 entries",
                    format!("t={t},{}", vec![format!("v1={hex64}"); 1500].join(",")),
                ),
                ("no equals sign", "garbage".into()),
                ("only commas", ",,,,,,".into()),
                ("empty item", format!("t={t},,v1={hex64}")),
                ("uppercase keys", format!("T={t},V1={hex64}")),
                ("spaces around", format!(" t = {t} , v1 = {hex64} ")),
                ("semicolons", format!("t={t};v1={hex64}")),
                ("v0 only", format!("t={t},v0={hex64}")),
                ("31-byte tag", format!("t={t},v1={}", "ab".repeat(31))),
                ("t with decimals", format!("t={t}.5,v1={hex64}")),
                ("120 KB value", format!("t={t},v1={}", "a".repeat(120_000))),
            ];
            for (name, value) in values {
                with(name, &[(h, value)]);
            }
            with("arabic digits", &[(h, format!("t=١٢٣,v1={hex64}"))]);
            with(
                "two headers",
                &[
                    (h, format!("t={t},v1={hex64}")),
                    (h, format!("t={t},v1={hex64}")),
                ],
            );
        }
        "standard" => {
            let id = ("webhook-id", "msg_hostile".to_string());
            let ts = ("webhook-timestamp", t.to_string());
            let sig = ("webhook-signature", format!("v1,{b64}"));
            with("all missing", &[]);
            with("no id", &[ts.clone(), sig.clone()]);
            with("no timestamp", &[id.clone(), sig.clone()]);
            with("no signature", &[id.clone(), ts.clone()]);
            with(
                "all empty",
                &[
                    ("webhook-id", String::new()),
                    ("webhook-timestamp", String::new()),
                    ("webhook-signature", String::new()),
                ],
            );
            let stamps = [
                ("timestamp abc", "abc"),
                ("timestamp 99999999999999999999", "99999999999999999999"),
                ("timestamp -1", "-1"),
                ("timestamp i64::MIN", "-9223372036854775808"),
                ("timestamp 1.5", "1.5"),
                ("timestamp 1e9", "1e9"),
                ("timestamp 0x10", "0x10"),
            ];
            for (name, stamp) in stamps {
                with(
                    name,
                    &[id.clone(), ("webhook-timestamp", stamp.into()), sig.clone()],
                );
            }
            let sigs = [
                ("signature v1", "v1".to_string()),
                ("signature v1,", "v1,".into()),
                ("signature not base64", "v1,!!!!".into()),
                ("signature v2 only", format!("v2,{b64}")),
                ("signature of 5 bytes", "v1,AAAAAAA=".into()),
                ("signature 100 KB", format!("v1,{}", "A".repeat(100_000))),
                (
                    "1,000 signatures",
                    vec![format!("v1,{b64}"); 1000].join(" "),
                ),
                ("signature v1a", format!("v1a,{b64}")),
                ("tab-separated signatures", format!("v1,{b64}\tv1,{b64}")),
                ("base64url signature", "v1,-_-_-_-_".into()),
                ("unpadded base64", "v1,q80".into()),
                ("whsec_ prefix in the signature", format!("v1,whsec_{b64}")),
            ];
            for (name, value) in sigs {
                with(
                    name,
                    &[id.clone(), ts.clone(), ("webhook-signature", value)],
                );
            }
            with(
                "10 KB webhook-id",
                &[("webhook-id", "m".repeat(10_000)), ts.clone(), sig.clone()],
            );
            with(
                "svix names, garbage",
                &[
                    ("svix-id", "x".into()),
                    ("svix-timestamp", "y".into()),
                    ("svix-signature", "z".into()),
                ],
            );
            with(
                "webhook and svix names disagree",
                &[
                    id.clone(),
                    ts.clone(),
                    sig.clone(),
                    ("svix-id", "other".into()),
                    ("svix-timestamp", "0".into()),
                    ("svix-signature", "v1,AAAA".into()),
                ],
            );
            with(
                "latin-1 webhook-id",
                &[("webhook-id", "caf\u{e9}".into()), ts.clone(), sig.clone()],
            );
        }
        "github" => {
            let h = "X-Hub-Signature-256";
            let values = [
                ("empty", String::new()),
                ("sha256=", "sha256=".into()),
                ("sha256 without =", format!("sha256{hex64}")),
                ("sha1=", format!("sha1={}", "ab".repeat(20))),
                ("non-hex", format!("sha256={}", "zz".repeat(32))),
                ("odd-length hex", "sha256=abc".into()),
                ("uppercase prefix", format!("SHA256={hex64}")),
                ("trailing text", format!("sha256={hex64} trailing")),
                ("100 KB hex", format!("sha256={}", "ab".repeat(50_000))),
                ("two tags", format!("sha256={hex64},sha256={hex64}")),
            ];
            for (name, value) in values {
                with(
                    name,
                    &[
                        (h, value),
                        ("X-GitHub-Event", "push".into()),
                        ("X-GitHub-Delivery", "d-1".into()),
                    ],
                );
            }
            with(
                "only X-Hub-Signature (sha1)",
                &[("X-Hub-Signature", format!("sha1={}", "ab".repeat(20)))],
            );
            with("no delivery or event", &[(h, format!("sha256={hex64}"))]);
        }
        _ => {
            let h = "X-Shopify-Hmac-Sha256";
            let values = [
                ("empty", String::new()),
                ("not base64", "!!!!".into()),
                ("only padding", "====".into()),
                ("hex instead of base64", hex64.clone()),
                ("base64url alphabet", "-_-_-_-_".into()),
                ("unpadded", "q80".into()),
                ("100 KB base64", "A".repeat(100_000)),
                ("whitespace inside", "q8 0=".into()),
            ];
            for (name, value) in values {
                with(
                    name,
                    &[
                        (h, value),
                        ("X-Shopify-Webhook-Id", "w-1".into()),
                        ("X-Shopify-Topic", "orders/create".into()),
                    ],
                );
            }
            with("no id or topic", &[(h, b64.clone())]);
        }
    }
    // Genuine signatures of another body, and of this one at times outside the
    // tolerance (both directions, the extremes of the clock included).
    let (id, event_type) = match source {
        "standard" => ("msg_hostile", "x"),
        "github" => ("d-1", "push"),
        "shop" => ("w-1", "orders/create"),
        _ => ("evt_hostile", "x"),
    };
    let other = signed(source, b"{}", id, event_type, t);
    let r = post(&path).headers(&other).body(EVENT);
    cases.anon(family, "signature: tag of another body", r);
    if matches!(source, "stripe" | "standard") {
        for (name, at) in [
            ("signed at 0", 0),
            ("signed at -1", -1),
            ("signed at i64::MIN", i64::MIN),
            ("signed at i64::MAX", i64::MAX),
            ("signed 301 s ago", t - 301),
            ("signed 301 s ahead", t + 301),
        ] {
            let r = post(&path)
                .headers(&signed(source, EVENT, id, event_type, at))
                .body(EVENT);
            cases.anon(family, format!("signature: {name}"), r);
        }
    }
}

/// Genuinely signed bodies that are not events hookd can take: these reach the
/// body parser. None is a valid event, and none carries an escaped NUL.
fn signed_body_cases(cases: &mut Cases, source: &str) {
    let family = webhook_family(source);
    let path = webhook(source);
    let long = "x".repeat(300);
    let wide = "é".repeat(128);
    let mut bad: Vec<(String, Vec<u8>, String, String)> = Vec::new();
    let mut body = |name: &str, bytes: Vec<u8>| {
        bad.push((
            name.to_string(),
            bytes,
            "id_ok".to_string(),
            "push".to_string(),
        ));
    };
    body("not JSON", b"hello".to_vec());
    body("10,000 [", "[".repeat(10_000).into_bytes());
    body(
        "10,000 nested objects",
        r#"{"a":"#.repeat(10_000).into_bytes(),
    );
    body(
        "1e999999",
        br#"{"id":"evt_s","type":"x","n":1e999999}"#.to_vec(),
    );
    body(
        "lone surrogate",
        br#"{"id":"evt_s","type":"x","s":"\ud800"}"#.to_vec(),
    );
    body(
        "invalid UTF-8",
        b"{\"id\":\"evt_s\",\"type\":\"x\",\"s\":\"\xff\"}".to_vec(),
    );
    body("empty", Vec::new());
    body(
        "byte order mark",
        [b"\xef\xbb\xbf".as_slice(), EVENT].concat(),
    );
    body("trailing garbage", [EVENT, b"]".as_slice()].concat());
    body("UTF-16LE", EVENT.iter().flat_map(|b| [*b, 0]).collect());
    match source {
        "stripe" => {
            let mut event = |name: &str, text: String| body(name, text.into_bytes());
            event("empty object", "{}".into());
            event("array", "[]".into());
            event("null", "null".into());
            event("string", r#""evt_s""#.into());
            event("empty id", r#"{"id":"","type":"x"}"#.into());
            event("blank id", r#"{"id":"   ","type":"x"}"#.into());
            event("object id", r#"{"id":{"id":"evt_s"},"type":"x"}"#.into());
            event("empty type", r#"{"id":"evt_s","type":""}"#.into());
            event("array type", r#"{"id":"evt_s","type":["x"]}"#.into());
            event("300-byte id", format!(r#"{{"id":"{long}","type":"x"}}"#));
            event(
                "256-byte multibyte id",
                format!(r#"{{"id":"{wide}","type":"x"}}"#),
            );
            event(
                "300-byte type",
                format!(r#"{{"id":"evt_s","type":"{long}"}}"#),
            );
            event(
                "duplicate ids, both unusable",
                r#"{"id":"","type":"x","id":null}"#.into(),
            );
            event(
                "duplicate types, both unusable",
                r#"{"type":"","id":"","type":""}"#.into(),
            );
        }
        _ => {
            // Identity from headers (standard: id; github, shop: both).
            let event_type = if source == "shop" {
                "orders/create"
            } else {
                "push"
            };
            let ok = if source == "standard" {
                r#"{"type":"x"}"#
            } else {
                r#"{"action":"opened"}"#
            };
            bad.push((
                "empty id".into(),
                ok.into(),
                String::new(),
                event_type.into(),
            ));
            bad.push((
                "300-byte id".into(),
                ok.into(),
                long.clone(),
                event_type.into(),
            ));
            bad.push((
                "256-byte multibyte id".into(),
                ok.into(),
                wide.clone(),
                event_type.into(),
            ));
            if source == "standard" {
                bad.push(("no type".into(), b"{}".to_vec(), "id_ok".into(), "x".into()));
                bad.push((
                    "empty type".into(),
                    br#"{"type":""}"#.to_vec(),
                    "id_ok".into(),
                    "x".into(),
                ));
                bad.push((
                    "300-byte type".into(),
                    format!(r#"{{"type":"{long}"}}"#).into_bytes(),
                    "id_ok".into(),
                    "x".into(),
                ));
                bad.push((
                    "array body".into(),
                    b"[]".to_vec(),
                    "id_ok".into(),
                    "x".into(),
                ));
            } else {
                bad.push((
                    "empty type".into(),
                    ok.into(),
                    "id_ok".into(),
                    String::new(),
                ));
                bad.push((
                    "300-byte type".into(),
                    ok.into(),
                    "id_ok".into(),
                    long.clone(),
                ));
            }
            if source == "github" {
                let action = format!(r#"{{"action":"{long}"}}"#);
                bad.push((
                    "300-byte action".into(),
                    action.into_bytes(),
                    "id_ok".into(),
                    "push".into(),
                ));
            }
        }
    }
    for (name, bytes, id, event_type) in bad {
        let headers = signed(source, &bytes, &id, &event_type, now());
        cases.anon(
            family,
            format!("signed, {name}"),
            post(&path).headers(&headers).body(bytes),
        );
    }
}
