use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use serde_json::json;

use super::*;

const KEY_1: &str = include_str!("../../../tests/paypal/key-1.pem");
const KEY_2: &str = include_str!("../../../tests/paypal/key-2.pem");
const VECTOR: &str = include_str!("../../../tests/paypal/openssl-vector.json");
const NOW: i64 = 1_780_000_000;

/// A self-signed certificate for an RSA key, made now.
fn certificate(key: &str) -> CertificateDer<'static> {
    let pair = KeyPair::from_pem(key).expect("RSA key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params
        .distinguished_name
        .push(DnType::CommonName, "messageverificationcerts.paypal.com");
    params
        .self_signed(&pair)
        .expect("certificate")
        .der()
        .clone()
}

fn signing_key(key: &str) -> Secret {
    let der = PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("key");
    Secret::new(BASE64.encode(der.secret_der()))
}

fn paypal(pinned: &[&str], signer: &str) -> PayPal {
    PayPal {
        webhook_id: "1JE4291016473214C".into(),
        certificates: pinned.iter().map(|k| certificate(k)).collect(),
        fetch_certificates: false,
        certificate_hosts: default_hosts(false),
        sandbox: false,
        signing_key: Some(signing_key(signer)),
    }
}

fn keys(tolerance: u64) -> Keys<'static> {
    Keys {
        format: &ANY,
        secrets: &[],
        tolerance: Duration::from_secs(tolerance),
    }
}

const BODY: &[u8] = br#"{"id":"WH-1","event_type":"PAYMENT.CAPTURE.COMPLETED"}"#;

fn signed(paypal: &PayPal, body: &[u8], at: i64) -> Vec<(String, String)> {
    let envelope = Envelope {
        event_id: "WH-1",
        event_type: "PAYMENT.CAPTURE.COMPLETED",
        timestamp: at,
    };
    paypal.sign(&[], body, &envelope).expect("sign").headers
}

fn with(headers: &[(String, String)], name: &str, value: &str) -> Vec<(String, String)> {
    let mut headers = headers.to_vec();
    let slot = headers.iter_mut().find(|(n, _)| n == name).expect("header");
    slot.1 = value.to_string();
    headers
}

#[test]
fn an_openssl_signature_over_paypals_string_verifies() {
    let vector: Value = serde_json::from_str(VECTOR).expect("vector");
    let text = |k: &str| vector[k].as_str().expect(k).to_string();
    let body = text("body");
    assert_eq!(
        signed_text(
            &text("transmission_id"),
            &text("transmission_time"),
            &text("webhook_id"),
            body.as_bytes()
        ),
        text("signed_string")
    );
    // Above 2^31: the CRC32 is written unsigned.
    assert_eq!(u64::from(crc32fast::hash(body.as_bytes())), vector["crc32"]);
    let source = paypal(&[KEY_1], KEY_1);
    let headers = vec![
        (TRANSMISSION_ID.to_string(), text("transmission_id")),
        (TRANSMISSION_TIME.to_string(), text("transmission_time")),
        (TRANSMISSION_SIG.to_string(), text("transmission_sig")),
        (
            CERT_URL.to_string(),
            "https://api.paypal.com/v1/notifications/certs/CERT-1".into(),
        ),
        (AUTH_ALGO.to_string(), "SHA256withRSA".into()),
    ];
    let at = chrono::DateTime::parse_from_rfc3339("2016-02-18T20:01:35Z")
        .expect("time")
        .timestamp();
    let verified = source.verify(&keys(300), &headers, body.as_bytes(), at);
    assert_eq!(verified, Ok(Verified { signed_with: 1 }));
    let other_hook = PayPal {
        webhook_id: "1JE4291016473214D".into(),
        ..source
    };
    assert_eq!(
        other_hook.verify(&keys(300), &headers, body.as_bytes(), at),
        Err(SignatureError::Mismatch)
    );
}

#[test]
fn sign_and_verify_round_trip_and_rotation_reports_the_certificate() {
    let source = paypal(&[KEY_1], KEY_1);
    let headers = signed(&source, BODY, NOW);
    assert_eq!(headers.header(AUTH_ALGO), Some("SHA256withRSA"));
    assert!(
        headers
            .header(TRANSMISSION_TIME)
            .expect("time")
            .ends_with('Z')
    );
    assert_eq!(
        source.verify(&keys(300), &headers, BODY, NOW),
        Ok(Verified { signed_with: 1 })
    );
    // Rotating: the new certificate pinned first, the old one second.
    let rotating = paypal(&[KEY_2, KEY_1], KEY_1);
    assert_eq!(
        rotating.verify(&keys(300), &headers, BODY, NOW),
        Ok(Verified { signed_with: 2 })
    );
    let replaced = paypal(&[KEY_2], KEY_2);
    assert_eq!(
        replaced.verify(&keys(300), &headers, BODY, NOW),
        Err(SignatureError::Mismatch)
    );
}

#[test]
fn tampering_with_anything_signed_is_a_mismatch() {
    let source = paypal(&[KEY_1], KEY_1);
    let headers = signed(&source, BODY, NOW);
    let mismatch = Err(SignatureError::Mismatch);
    let tampered_body = br#"{"id":"WH-2","event_type":"PAYMENT.CAPTURE.COMPLETED"}"#;
    assert_eq!(
        source.verify(&keys(300), &headers, tampered_body, NOW),
        mismatch
    );
    let other_id = with(
        &headers,
        TRANSMISSION_ID,
        "69cd13f0-d67a-11e5-baa3-778b53f4ae56",
    );
    assert_eq!(source.verify(&keys(300), &other_id, BODY, NOW), mismatch);
    let other_time = with(&headers, TRANSMISSION_TIME, "2026-05-28T20:26:41Z");
    assert_eq!(source.verify(&keys(300), &other_time, BODY, NOW), mismatch);
    // The certificate URL is not signed, and a pinned certificate ignores it.
    let other_url = with(&headers, CERT_URL, "https://example.com/cert.pem");
    assert!(source.verify(&keys(300), &other_url, BODY, NOW).is_ok());
}

#[test]
fn malformed_or_missing_headers_say_which() {
    let source = paypal(&[KEY_1], KEY_1);
    let headers = signed(&source, BODY, NOW);
    for name in [
        TRANSMISSION_ID,
        TRANSMISSION_TIME,
        TRANSMISSION_SIG,
        AUTH_ALGO,
    ] {
        let without: Vec<_> = headers.iter().filter(|(n, _)| n != name).cloned().collect();
        assert_eq!(
            source.verify(&keys(300), &without, BODY, NOW),
            Err(SignatureError::Missing(name.into()))
        );
    }
    let cases = [
        (AUTH_ALGO, "SHA1withRSA", "not SHA256withRSA"),
        (TRANSMISSION_SIG, "!!", "not base64"),
        (TRANSMISSION_TIME, "1780000000", "not an RFC 3339 time"),
    ];
    for (name, value, detail) in cases {
        assert_eq!(
            source.verify(&keys(300), &with(&headers, name, value), BODY, NOW),
            Err(SignatureError::malformed(name, detail))
        );
    }
}

#[test]
fn the_transmission_time_is_held_to_the_tolerance_both_ways() {
    let source = paypal(&[KEY_1], KEY_1);
    let old = signed(&source, BODY, NOW - 301);
    assert_eq!(
        source.verify(&keys(300), &old, BODY, NOW),
        Err(SignatureError::TooOld { seconds: 301 })
    );
    let new = signed(&source, BODY, NOW + 301);
    assert_eq!(
        source.verify(&keys(300), &new, BODY, NOW),
        Err(SignatureError::TooNew { seconds: 301 })
    );
    let edge = signed(&source, BODY, NOW - 300);
    assert!(source.verify(&keys(300), &edge, BODY, NOW).is_ok());
}

/// A CA made here, and a certificate for `key` with the common name `subject`
/// it issued.
fn issued(key: &str, subject: &str) -> (TrustAnchor<'static>, String) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "test CA");
    let ca =
        CertifiedIssuer::self_signed(params, KeyPair::generate().expect("CA key")).expect("CA");
    let ca_der = CertificateDer::from_pem_slice(ca.pem().as_bytes()).expect("CA der");
    let anchor = webpki::anchor_from_trusted_cert(&ca_der)
        .expect("anchor")
        .to_owned();
    let pair = KeyPair::from_pem(key).expect("RSA key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.distinguished_name.push(DnType::CommonName, subject);
    params
        .distinguished_name
        .push(DnType::OrganizationName, "PayPal, Inc.");
    let leaf = params.signed_by(&pair, &ca).expect("leaf");
    (anchor, format!("{}{}", leaf.pem(), ca.pem()))
}

#[test]
fn a_fetched_certificate_is_used_once_its_chain_is_trusted() {
    let source = PayPal {
        certificates: Vec::new(),
        fetch_certificates: true,
        certificate_hosts: vec!["api.paypal.com".into()],
        ..paypal(&[], KEY_1)
    };
    let url = format!(
        "https://api.paypal.com/v1/notifications/certs/CERT-{}",
        hex::encode(rand::random::<[u8; 8]>())
    );
    let headers = with(&signed(&source, BODY, NOW), CERT_URL, &url);
    // Not cached yet: a mismatch, and the URL is to fetch.
    assert_eq!(
        source.verify(&keys(300), &headers, BODY, NOW),
        Err(SignatureError::Mismatch)
    );
    let wanted = source
        .to_fetch(&headers)
        .expect("allowed")
        .expect("to fetch");
    assert_eq!(wanted.as_str(), url);
    let (anchor, chain) = issued(KEY_1, LIVE_SUBJECT);
    let (other_anchor, _) = issued(KEY_2, LIVE_SUBJECT);
    let refused = source.fetched(
        &wanted,
        chain.as_bytes(),
        std::slice::from_ref(&other_anchor),
    );
    assert!(
        matches!(&refused, Err(SignatureError::Unavailable(why)) if why.contains("not trusted")),
        "{refused:?}"
    );
    assert!(source.to_fetch(&headers).expect("allowed").is_some());
    source
        .fetched(&wanted, chain.as_bytes(), &[anchor])
        .expect("trusted");
    assert_eq!(source.to_fetch(&headers), Ok(None));
    assert_eq!(
        source.verify(&keys(300), &headers, BODY, NOW),
        Ok(Verified {
            signed_with: FETCHED
        })
    );
    // Without fetching, the cached certificate is not used.
    let pinned_only = PayPal {
        fetch_certificates: false,
        ..source.clone()
    };
    assert_eq!(
        pinned_only.verify(&keys(300), &headers, BODY, NOW),
        Err(SignatureError::Mismatch)
    );
    assert_eq!(pinned_only.to_fetch(&headers), Ok(None));
}

#[test]
fn a_fetched_certificate_must_name_paypal_as_its_subject() {
    let live = PayPal {
        fetch_certificates: true,
        ..paypal(&[], KEY_1)
    };
    let sandbox = PayPal {
        sandbox: true,
        certificate_hosts: default_hosts(true),
        ..live.clone()
    };
    let url = |n: &str| {
        reqwest::Url::parse(&format!(
            "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-{n}-{}",
            hex::encode(rand::random::<[u8; 8]>())
        ))
        .expect("url")
    };
    let refused = |source: &PayPal, subject: &str| {
        let (anchor, chain) = issued(KEY_1, subject);
        match source.fetched(&url("s"), chain.as_bytes(), &[anchor]) {
            Err(SignatureError::Unavailable(why)) => why,
            other => panic!("{subject}: {other:?}"),
        }
    };
    // A chain a trusted CA issued is not enough: the subject must be PayPal's.
    let why = refused(&live, "hookd.example");
    assert!(why.contains("not PayPal's signing certificate"), "{why}");
    assert!(refused(&live, SANDBOX_SUBJECT).contains(LIVE_SUBJECT));
    assert!(refused(&sandbox, "api.paypal.com").contains(SANDBOX_SUBJECT));
    // A sandbox source takes the sandbox's certificate; a live one never uses it.
    let (anchor, chain) = issued(KEY_1, SANDBOX_SUBJECT);
    let cert_url = url("ok");
    sandbox
        .fetched(&cert_url, chain.as_bytes(), &[anchor])
        .expect("the sandbox's certificate");
    let headers = with(&signed(&sandbox, BODY, NOW), CERT_URL, cert_url.as_str());
    assert_eq!(sandbox.to_fetch(&headers), Ok(None));
    assert_eq!(
        sandbox.verify(&keys(300), &headers, BODY, NOW),
        Ok(Verified {
            signed_with: FETCHED
        })
    );
    let live_listing_sandbox = PayPal {
        certificate_hosts: default_hosts(true),
        ..live.clone()
    };
    assert!(
        live_listing_sandbox
            .to_fetch(&headers)
            .expect("allowed")
            .is_some()
    );
}

#[test]
fn only_paypals_certificate_url_shape_is_fetched() {
    let source = PayPal {
        fetch_certificates: true,
        ..paypal(&[], KEY_1)
    };
    let headers = signed(&source, BODY, NOW);
    let refused = Err(SignatureError::malformed(
        CERT_URL,
        "not PayPal's certificate URL (https on port 443, a host on the source's \
         certificate_hosts, /v1/notifications/certs/CERT-…, no query)",
    ));
    for url in [
        "https://api.paypal.com:9/x?n=1",
        "https://api.paypal.com:9/v1/notifications/certs/CERT-1",
        "https://api.paypal.com:8443/v1/notifications/certs/CERT-1",
        "https://api.paypal.com/v1/notifications/certs/CERT-1?n=1",
        "https://api.paypal.com/v1/notifications/certs/CERT-1?",
        "https://api.paypal.com/v1/notifications/certs/CERT-1#x",
        "https://api.paypal.com/v1/notifications/certs/CERT-",
        "https://api.paypal.com/v1/notifications/certs/CERT-1/x",
        "https://api.paypal.com/v1/notifications/certs/CERT-%41",
        "https://api.paypal.com/v1/notifications/certs/1",
        "https://api.paypal.com/v1/notifications/certs/CERT-1/../CERT-2/x",
        "https://api.paypal.com/v2/notifications/certs/CERT-1",
        "http://api.paypal.com/v1/notifications/certs/CERT-1",
        "https://user@api.paypal.com/v1/notifications/certs/CERT-1",
        "https://api.paypal.com.evil.example/v1/notifications/certs/CERT-1",
        "https://evil.example/api.paypal.com/v1/notifications/certs/CERT-1",
        // A live source does not trust the sandbox.
        "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-1",
        "https://api-m.sandbox.paypal.com/v1/notifications/certs/CERT-1",
    ] {
        assert_eq!(
            source.to_fetch(&with(&headers, CERT_URL, url)),
            refused,
            "{url}"
        );
    }
    assert_eq!(
        source.to_fetch(&with(&headers, CERT_URL, "not a url")),
        Err(SignatureError::malformed(CERT_URL, "not a URL"))
    );
    for url in [
        "https://api.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-a5cafa77",
        "https://API-M.paypal.com:443/v1/notifications/certs/CERT-1",
    ] {
        let wanted = source.to_fetch(&with(&headers, CERT_URL, url));
        assert!(matches!(wanted, Ok(Some(_))), "{url}: {wanted:?}");
    }
    let sandbox = PayPal {
        sandbox: true,
        certificate_hosts: default_hosts(true),
        ..source
    };
    let url = "https://api-m.sandbox.paypal.com/v1/notifications/certs/CERT-1";
    assert!(matches!(
        sandbox.to_fetch(&with(&headers, CERT_URL, url)),
        Ok(Some(_))
    ));
}

fn cached_certificate(not_after: i64) -> Fetched {
    Fetched {
        certificate: certificate(KEY_1),
        not_after,
        sandbox: false,
        used: 0,
    }
}

#[test]
fn the_cache_makes_room_one_certificate_at_a_time_and_drops_one_at_its_not_after() {
    let mut cache = Cache::default();
    let url = |n: usize| format!("https://api.paypal.com/v1/notifications/certs/CERT-{n}");
    for n in 0..CACHE_LIMIT {
        cache.insert(&url(n), cached_certificate(NOW + 3600), NOW);
    }
    // The certificate in use stays while others come and go.
    assert!(cache.get(&url(0), NOW, false).is_some());
    cache.insert(&url(CACHE_LIMIT), cached_certificate(NOW + 3600), NOW);
    assert_eq!(cache.entries.len(), CACHE_LIMIT);
    assert!(cache.get(&url(0), NOW, false).is_some());
    assert!(cache.get(&url(1), NOW, false).is_none(), "used longest ago");
    assert!(cache.get(&url(2), NOW, false).is_some());
    assert!(cache.get(&url(CACHE_LIMIT), NOW, false).is_some());
    // At its notAfter a certificate is gone.
    cache.insert(&url(1), cached_certificate(NOW + 10), NOW);
    assert!(cache.get(&url(1), NOW + 9, false).is_some());
    assert!(cache.get(&url(1), NOW + 10, false).is_none());
    assert!(!cache.entries.contains_key(&url(1)));
    // A sandbox certificate serves sandbox sources only.
    let sandbox = Fetched {
        sandbox: true,
        ..cached_certificate(NOW + 3600)
    };
    cache.insert(&url(1), sandbox, NOW);
    assert!(cache.get(&url(1), NOW, false).is_none());
    assert!(cache.get(&url(1), NOW, true).is_some());
}

fn configured(toml: &str) -> Result<Scheme, Problem> {
    let table: toml::Table = toml.parse().expect("toml");
    configure(table, &|k| format!("sources[0].{k}"))
}

#[test]
fn configuration_needs_a_webhook_id_and_some_certificate() {
    let Ok(Scheme::PayPal(p)) = configured(r#"webhook_id = "WH1""#) else {
        panic!("valid");
    };
    assert!(p.fetch_certificates && p.certificates.is_empty() && p.signing_key.is_none());
    assert_eq!(p.certificate_hosts, LIVE_HOSTS);
    assert!(!p.sandbox);
    let Ok(Scheme::PayPal(sandbox)) = configured("webhook_id = \"WH1\"\nsandbox = true") else {
        panic!("valid");
    };
    assert!(sandbox.sandbox);
    assert_eq!(
        sandbox.certificate_hosts,
        [LIVE_HOSTS, SANDBOX_HOSTS].concat()
    );
    let problem = |toml: &str| configured(toml).expect_err("refused");
    assert_eq!(problem("").0, "sources[0].webhook_id");
    assert_eq!(
        problem("webhook_id = \"WH1\"\nfetch_certificates = false").0,
        "sources[0].certificates"
    );
    let (key, why) = problem("webhook_id = \"WH1\"\ncertificate_hosts = [\"https://x\"]");
    assert_eq!(key, "sources[0].certificate_hosts[0]");
    assert!(why.contains("not a host name"), "{why}");
    let (key, why) = problem("webhook_id = \"WH1\"\ncertificates = [\"tests/paypal/key-1.pem\"]");
    assert_eq!(key, "sources[0].certificates[0]");
    assert!(why.contains("no PEM certificate"), "{why}");
    let (key, why) =
        problem("webhook_id = \"WH1\"\nsigning_key = \"fixtures/paypal/dev-certificate.pem\"");
    assert_eq!(key, "sources[0].signing_key");
    assert!(why.contains("no PEM private key"), "{why}");
    let Ok(Scheme::PayPal(shipped)) = configured(
        "webhook_id = \"WH1\"\ncertificates = [\"fixtures/paypal/dev-certificate.pem\"]\n\
         signing_key = \"fixtures/paypal/dev-signing-key.pem\"",
    ) else {
        panic!("valid");
    };
    assert_eq!(
        shipped.development_credential().as_deref(),
        Some("signing_key")
    );
    let pinned_only = PayPal {
        signing_key: None,
        ..shipped
    };
    assert_eq!(
        pinned_only.development_credential().as_deref(),
        Some("certificates[0]")
    );
}

fn capture(event_type: &str) -> Value {
    json!({"id": "WH-1", "event_type": event_type, "resource_type": "capture",
           "resource": {"id": "2GG279541U471931P", "status": "COMPLETED",
                        "amount": {"currency_code": "JPY", "value": "1500"}}})
}

#[test]
fn payment_facts_follow_the_resource() {
    let facts = ANY
        .payment_facts(&capture("PAYMENT.CAPTURE.COMPLETED"))
        .expect("capture");
    assert_eq!(
        (
            facts.payment_id.as_str(),
            facts.amount,
            facts.currency.as_deref()
        ),
        ("2GG279541U471931P", Some(1500), Some("JPY"))
    );
    let refund = json!({"id": "WH-2", "event_type": "PAYMENT.CAPTURE.REFUNDED",
        "resource": {"id": "1Y107995YT783435V", "amount": {"currency_code": "USD", "value": "10.05"},
          "links": [{"rel": "self", "href": "https://api.paypal.com/v2/payments/refunds/1Y107995YT783435V"},
                    {"rel": "up", "href": "https://api.paypal.com/v2/payments/captures/2GG279541U471931P"}]}});
    let facts = ANY.payment_facts(&refund).expect("refund");
    assert_eq!(
        (facts.payment_id.as_str(), facts.amount, facts.refund),
        (
            "2GG279541U471931P",
            None,
            Some(Refund {
                id: "1Y107995YT783435V".into(),
                amount: 1005
            })
        )
    );
    let dispute = json!({"id": "WH-3", "event_type": "CUSTOMER.DISPUTE.CREATED",
        "resource": {"dispute_id": "PP-D-1", "disputed_transactions": [{"seller_transaction_id": "2GG279541U471931P"}]}});
    assert_eq!(
        ANY.payment_facts(&dispute).expect("dispute").payment_id,
        "2GG279541U471931P"
    );
    let mut no_up = refund.clone();
    no_up["resource"]["links"] =
        json!([{"rel": "up", "href": "https://api.paypal.com/v2/checkout/orders/5O1"}]);
    let why = ANY
        .payment_facts(&no_up)
        .expect_err("no capture")
        .to_string();
    assert!(why.contains("\"up\" link"), "{why}");
    let mut bad = capture("PAYMENT.CAPTURE.COMPLETED");
    bad["resource"]["amount"]["value"] = json!("15.00");
    let why = ANY
        .payment_facts(&bad)
        .expect_err("JPY has no decimals")
        .to_string();
    assert!(why.contains("resource.amount"), "{why}");
    assert_eq!(
        ANY.index_fields(&dispute).payment_id.as_deref(),
        Some("2GG279541U471931P")
    );
}
