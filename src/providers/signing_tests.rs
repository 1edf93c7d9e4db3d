use std::time::Duration;

use super::*;
use crate::signature::*;

const NOW: i64 = 1_700_000_000;

fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A fresh secret in the format of the provider named `scheme`.
fn new_secret(scheme: &str) -> Option<Secret> {
    crate::providers::named(scheme).map(|provider| provider.new_secret())
}

fn secrets(values: &[&str]) -> Vec<Secret> {
    values.iter().map(|v| Secret::new(*v)).collect()
}

fn verifier<'a>(scheme: &'a Scheme, secrets: &'a [Secret]) -> Verifier<'a> {
    Verifier {
        scheme,
        secrets,
        tolerance: Duration::from_secs(300),
    }
}

fn shopify() -> Scheme {
    Scheme::Hmac(GenericHmac {
        signature_header: "X-Shopify-Hmac-Sha256".into(),
        encoding: Encoding::Base64,
        prefix: String::new(),
        id: Locator::Header("X-Shopify-Webhook-Id".into()),
        event_type: Locator::Header("X-Shopify-Topic".into()),
        timestamp_header: None,
    })
}

fn envelope(timestamp: i64) -> Envelope<'static> {
    Envelope {
        event_id: "evt_1",
        event_type: "payment_intent.succeeded",
        timestamp,
    }
}

// --- Known answers from published or independently computed vectors ---

#[test]
fn standard_webhooks_matches_the_specification_example() {
    let scheme = Scheme::Standard;
    let keys = secrets(&["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]);
    let body = br#"{"test": 2432232314}"#;
    let h = headers(&[
        ("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek"),
        ("webhook-timestamp", "1614265330"),
        (
            "webhook-signature",
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
        ),
    ]);
    let verified = verifier(&scheme, &keys).verify(&h, body, 1_614_265_330);
    assert_eq!(verified, Ok(Verified { signed_with: 1 }));

    let env = Envelope {
        event_id: "msg_p5jXN8AQM9LWM0D4loKWxJek",
        event_type: "test",
        timestamp: 1_614_265_330,
    };
    let signed = sign(&scheme, &keys[0], body, &env).expect("sign").headers;
    assert_eq!(
        signed.as_slice().header("webhook-signature"),
        Some("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
    );
}

#[test]
fn standard_webhooks_accepts_svix_header_names() {
    let keys = secrets(&["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]);
    let h = headers(&[
        ("svix-id", "msg_p5jXN8AQM9LWM0D4loKWxJek"),
        ("svix-timestamp", "1614265330"),
        (
            "svix-signature",
            "v1a,ignored v1,bm9wZQ== v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
        ),
    ]);
    let verified =
        verifier(&Scheme::Standard, &keys).verify(&h, br#"{"test": 2432232314}"#, 1_614_265_330);
    assert_eq!(verified, Ok(Verified { signed_with: 1 }));
}

#[test]
fn github_matches_the_documented_example() {
    // From GitHub's "Validating webhook deliveries" documentation.
    let keys = secrets(&["It's a Secret to Everybody"]);
    let h = headers(&[(
        "X-Hub-Signature-256",
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
    )]);
    assert_eq!(
        verifier(&Scheme::Github, &keys).verify(&h, b"Hello, World!", NOW),
        Ok(Verified { signed_with: 1 })
    );
}

#[test]
fn stripe_matches_an_independently_computed_vector() {
    // python3: hmac.new(b'whsec_test_secret', b'1700000000.' + body, sha256).hexdigest()
    let keys = secrets(&["whsec_test_secret"]);
    let body = br#"{"id":"evt_1","type":"payment_intent.succeeded"}"#;
    let expected = "22d8dc182f5c588077683bd378368e29765bfe5df2560112b4f28fef120f0e31";
    let h = headers(&[("Stripe-Signature", &format!("t=1700000000,v1={expected}"))]);
    assert_eq!(
        verifier(&Scheme::Stripe, &keys).verify(&h, body, NOW),
        Ok(Verified { signed_with: 1 })
    );
    let signed = sign(&Scheme::Stripe, &keys[0], body, &envelope(NOW))
        .expect("sign")
        .headers;
    assert_eq!(
        signed.as_slice().header("Stripe-Signature"),
        Some(format!("t=1700000000,v1={expected}").as_str())
    );
}

#[test]
fn shopify_style_hmac_matches_an_independently_computed_vector() {
    // python3: base64(hmac.new(b'shop_secret', b'{"id":"ord_1"}', sha256).digest())
    let keys = secrets(&["shop_secret"]);
    let h = headers(&[(
        "X-Shopify-Hmac-Sha256",
        "cd/78wHwq1T2K+bNQfDK5Hnzh4q6NswfFUHBdhEHV64=",
    )]);
    assert_eq!(
        verifier(&shopify(), &keys).verify(&h, br#"{"id":"ord_1"}"#, NOW),
        Ok(Verified { signed_with: 1 })
    );
}

// --- Round trips and rotation, for every scheme ---

fn all_schemes() -> Vec<(Scheme, Vec<Secret>)> {
    vec![
        (Scheme::Stripe, secrets(&["whsec_old", "whsec_new"])),
        (
            Scheme::Standard,
            secrets(&["whsec_b2xkLXNlY3JldA==", "whsec_bmV3LXNlY3JldA=="]),
        ),
        (Scheme::Github, secrets(&["gh-old", "gh-new"])),
        (shopify(), secrets(&["shop-old", "shop-new"])),
        (
            Scheme::Hmac(GenericHmac {
                signature_header: "X-Signature".into(),
                encoding: Encoding::Hex,
                prefix: "sha256=".into(),
                id: Locator::Pointer("/id".into()),
                event_type: Locator::Pointer("/type".into()),
                timestamp_header: Some("X-Timestamp".into()),
            }),
            secrets(&["generic-old", "generic-new"]),
        ),
    ]
}

#[test]
fn every_scheme_verifies_what_it_signs_with_each_secret_and_reports_which() {
    let body = br#"{"id":"evt_1","type":"payment_intent.succeeded"}"#;
    for (scheme, keys) in all_schemes() {
        for (i, secret) in keys.iter().enumerate() {
            let h = sign(&scheme, secret, body, &envelope(NOW))
                .expect("sign")
                .headers;
            let got = verifier(&scheme, &keys).verify(&h, body, NOW);
            let want = Ok(Verified {
                signed_with: i32::try_from(i + 1).expect("small"),
            });
            assert_eq!(got, want, "{}", scheme.name());
        }
    }
}

#[test]
fn every_scheme_refuses_a_changed_body_and_an_unknown_secret() {
    let body = br#"{"id":"evt_1","type":"payment_intent.succeeded"}"#;
    for (scheme, keys) in all_schemes() {
        let h = sign(&scheme, &keys[0], body, &envelope(NOW))
            .expect("sign")
            .headers;
        let tampered = br#"{"id":"evt_1","type":"payment_intent.succeeded" }"#;
        assert_eq!(
            verifier(&scheme, &keys).verify(&h, tampered, NOW),
            Err(SignatureError::Mismatch),
            "{}",
            scheme.name()
        );
        assert_eq!(
            verifier(&scheme, &keys[1..]).verify(&h, body, NOW),
            Err(SignatureError::Mismatch),
            "{}",
            scheme.name()
        );
    }
}

#[test]
fn timestamped_schemes_refuse_deliveries_outside_the_tolerance_both_ways() {
    let body = b"{}";
    for (scheme, keys) in all_schemes() {
        if scheme == Scheme::Github || scheme == shopify() {
            continue;
        }
        let v = verifier(&scheme, &keys);
        let old = sign(&scheme, &keys[0], body, &envelope(NOW - 301))
            .expect("sign")
            .headers;
        assert_eq!(
            v.verify(&old, body, NOW),
            Err(SignatureError::TooOld { seconds: 301 })
        );
        let new = sign(&scheme, &keys[0], body, &envelope(NOW + 301))
            .expect("sign")
            .headers;
        assert_eq!(
            v.verify(&new, body, NOW),
            Err(SignatureError::TooNew { seconds: 301 })
        );
        let edge = sign(&scheme, &keys[0], body, &envelope(NOW - 300))
            .expect("sign")
            .headers;
        assert!(v.verify(&edge, body, NOW).is_ok(), "{}", scheme.name());
    }
}

#[test]
fn stripe_tries_every_v1_and_ignores_other_schemes() {
    let keys = secrets(&["whsec_a"]);
    let body = b"{}";
    let good = sign(&Scheme::Stripe, &keys[0], body, &envelope(NOW))
        .expect("sign")
        .headers;
    let good_v1 = good[1].1.split(",v1=").nth(1).expect("v1");
    let header = format!("t={NOW},v0=zz-not-hex,v1={},v1={good_v1}", "00".repeat(32));
    let h = headers(&[("stripe-signature", &header)]);
    assert!(
        verifier(&Scheme::Stripe, &keys)
            .verify(&h, body, NOW)
            .is_ok()
    );
}

#[test]
fn failure_reasons_name_the_problem() {
    let keys = secrets(&["whsec_a"]);
    let v = verifier(&Scheme::Stripe, &keys);
    let reason = |pairs: &[(&str, &str)]| {
        v.verify(&headers(pairs), b"{}", NOW)
            .expect_err("must fail")
            .to_string()
    };
    assert_eq!(reason(&[]), "missing Stripe-Signature header");
    assert!(reason(&[("Stripe-Signature", "garbage")]).starts_with("malformed"));
    assert!(reason(&[("Stripe-Signature", "t=1,t=2,v1=00")]).starts_with("malformed"));
    assert!(reason(&[("Stripe-Signature", "v1=00")]).starts_with("malformed"));
    assert!(reason(&[("Stripe-Signature", "t=abc,v1=00")]).starts_with("malformed"));
    assert!(reason(&[("Stripe-Signature", "t=1700000000")]).starts_with("malformed"));
    assert_eq!(
        reason(&[("Stripe-Signature", "t=1700000000,v1=00")]),
        "signature mismatch"
    );

    let std_keys = secrets(&["whsec_b2xkLXNlY3JldA=="]);
    let sv = verifier(&Scheme::Standard, &std_keys);
    let err = sv
        .verify(&headers(&[("webhook-timestamp", "1")]), b"{}", NOW)
        .expect_err("must fail");
    assert_eq!(err.to_string(), "missing webhook-id header");

    let gh = secrets(&["x"]);
    let err = verifier(&Scheme::Github, &gh)
        .verify(&headers(&[("X-Hub-Signature-256", "md5=00")]), b"{}", NOW)
        .expect_err("must fail");
    assert!(err.to_string().starts_with("malformed X-Hub-Signature-256"));
}

#[test]
fn secrets_never_show_in_debug_output() {
    let s = Secret::new("whsec_do_not_print");
    assert!(!format!("{s:?}").contains("do_not_print"));
}

#[test]
fn standard_secrets_must_be_base64() {
    assert!(
        Scheme::Standard
            .key_bytes(&Secret::new("whsec_not base64!"))
            .is_err()
    );
    assert!(
        Scheme::Standard
            .key_bytes(&Secret::new("b2xkLXNlY3JldA=="))
            .is_ok()
    );
}

#[test]
fn new_secrets_have_the_scheme_format_sign_and_verify_and_never_repeat() {
    let body = br#"{"id":"evt_1","type":"payment_intent.succeeded"}"#;
    for (scheme, _) in all_schemes() {
        let secret = new_secret(scheme.name()).expect("a known scheme");
        let again = new_secret(scheme.name()).expect("a known scheme");
        assert_ne!(secret, again, "{}", scheme.name());
        let key = scheme.key_bytes(&secret).expect("a usable secret");
        assert!(
            key.len() >= 32,
            "{}: {} key bytes",
            scheme.name(),
            key.len()
        );
        let h = sign(&scheme, &secret, body, &envelope(NOW))
            .expect("sign")
            .headers;
        let keys = [secret];
        assert!(verifier(&scheme, &keys).verify(&h, body, NOW).is_ok());
    }
    let standard = new_secret("svix").expect("svix");
    assert!(standard.expose().starts_with("whsec_"));
    assert_eq!(
        Scheme::Standard.key_bytes(&standard).map(|k| k.len()),
        Ok(32)
    );
    let stripe = new_secret("stripe").expect("stripe");
    assert!(stripe.expose().starts_with("whsec_") && stripe.expose().len() == 38);
    let github = new_secret("github").expect("github");
    assert!(github.expose().len() == 64 && hex::decode(github.expose()).is_ok());
    // PayPal takes no secrets: `hookd secret` does not offer it.
    assert!(!crate::providers::names().contains(&"paypal"));
}

#[test]
fn only_ids_and_types_read_from_the_body_count_as_signed() {
    let hmac = |id: Locator, event_type: Locator| {
        Scheme::Hmac(GenericHmac {
            signature_header: "S".into(),
            encoding: Encoding::Hex,
            prefix: String::new(),
            id,
            event_type,
            timestamp_header: None,
        })
    };
    let header = || Locator::Header("H".into());
    let pointer = || Locator::Pointer("/p".into());
    let cases = [
        (Scheme::Stripe, true, true),
        (Scheme::Standard, true, true),
        (Scheme::Github, false, false),
        (hmac(header(), header()), false, false),
        (hmac(pointer(), header()), true, false),
        (hmac(header(), pointer()), false, true),
        (hmac(pointer(), pointer()), true, true),
    ];
    for (scheme, id, event_type) in cases {
        let provider = scheme.provider();
        assert_eq!(
            (provider.signs_id(), provider.signs_type()),
            (id, event_type),
            "{scheme:?}"
        );
        assert_eq!(provider.leaves_identity_unsigned(), !(id && event_type));
    }
}
