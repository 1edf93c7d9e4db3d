//! Scheme `paypal` through real HTTP: RSA signatures checked with a pinned
//! certificate (rotation reports which), every kind and an ignored type,
//! payment rows in minor units, refunds named by their `up` link in any order,
//! duplicates, tampering refused with nothing stored; and, through `hookd
//! verify` with a CA trusted by SSL_CERT_FILE, a certificate fetched over https
//! from an allowed host only, no redirect followed, none fetched when a pinned
//! one verifies.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use hookd::config::Settings;
use hookd::provider::{Hints, sign_delivery};
use rcgen::{CertificateParams, KeyPair};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::provider;
use crate::support::{Spawn, TestApp, spawn, spawn_app};

const SOURCE: &str = "paypal";
const SHIPPED: &str = include_str!("../../hookd.toml");
const SHIPPED_CERTIFICATES: &str = r#"certificates = ["fixtures/paypal/dev-certificate.pem"]"#;

fn event(id: &str, event_type: &str, resource: Value) -> Value {
    json!({"id": id, "event_version": "1.0", "create_time": "2024-07-02T14:05:14.171Z",
           "resource_type": "capture", "resource_version": "2.0", "event_type": event_type,
           "summary": "test", "resource": resource})
}

fn capture(id: &str, event_type: &str, capture: &str, value: &str) -> Value {
    event(
        id,
        event_type,
        json!({"id": capture, "status": "COMPLETED", "amount": {"currency_code": "USD", "value": value},
               "links": [{"rel": "up", "href": "https://api.paypal.com/v2/checkout/orders/5O190127TN364715T"}]}),
    )
}

fn refund(id: &str, capture: &str, refund: &str, value: &str) -> Value {
    event(
        id,
        "PAYMENT.CAPTURE.REFUNDED",
        json!({"id": refund, "status": "COMPLETED", "amount": {"currency_code": "USD", "value": value},
               "links": [{"rel": "self", "href": format!("https://api.paypal.com/v2/payments/refunds/{refund}")},
                         {"rel": "up", "href": format!("https://api.paypal.com/v2/payments/captures/{capture}")}]}),
    )
}

fn dispute(id: &str, capture: &str) -> Value {
    event(
        id,
        "CUSTOMER.DISPUTE.CREATED",
        json!({"dispute_id": format!("PP-D-{capture}"), "status": "OPEN",
               "disputed_transactions": [{"seller_transaction_id": capture}],
               "dispute_amount": {"currency_code": "USD", "value": "25.00"}}),
    )
}

async fn stored(app: &TestApp, event_id: &str) -> (Option<String>, String, i32) {
    let row = &app
        .query(
            "SELECT kind, status, signed_with FROM webhook_events WHERE source = $1 AND event_id = $2",
            &[&SOURCE, &event_id],
        )
        .await[0];
    (row.get(0), row.get(1), row.get(2))
}

async fn count(app: &TestApp, sql: &str) -> i64 {
    app.count(sql, &[]).await
}

#[tokio::test]
async fn paypal_kinds_payment_rows_and_refunds_in_any_order() {
    let app = spawn_app().await;
    let cases = [
        (
            capture("WH-1", "PAYMENT.CAPTURE.COMPLETED", "CAP-A", "25.00"),
            Some("payment_succeeded"),
        ),
        (
            refund("WH-2", "CAP-A", "RF-A1", "10.00"),
            Some("payment_refunded"),
        ),
        // A refund before its capture, and a second one: the refunds add up.
        (
            refund("WH-3", "CAP-B", "RF-B1", "5.50"),
            Some("payment_refunded"),
        ),
        (
            refund("WH-4", "CAP-B", "RF-B2", "4.50"),
            Some("payment_refunded"),
        ),
        (
            capture("WH-5", "PAYMENT.CAPTURE.COMPLETED", "CAP-B", "10.00"),
            Some("payment_succeeded"),
        ),
        (
            capture("WH-6", "PAYMENT.CAPTURE.DENIED", "CAP-C", "42.00"),
            Some("payment_failed"),
        ),
        (
            capture("WH-7", "PAYMENT.CAPTURE.DECLINED", "CAP-D", "1.00"),
            Some("payment_failed"),
        ),
        (dispute("WH-8", "CAP-E"), Some("dispute_opened")),
        (
            capture("WH-9", "PAYMENT.CAPTURE.PENDING", "CAP-F", "3.00"),
            None,
        ),
        (
            event("WH-10", "CHECKOUT.ORDER.APPROVED", json!({"id": "ORDER-1"})),
            None,
        ),
    ];
    for (body, _) in &cases {
        let answer = app.deliver(SOURCE, body).await;
        assert_eq!(answer.status, 200, "{body}: {}", answer.text());
        let id = body["id"].as_str().expect("id");
        assert_eq!(answer.json(), json!({"status": "accepted", "event_id": id}));
    }
    for (body, kind) in &cases {
        let id = body["id"].as_str().expect("id");
        let (stored_kind, status, signed_with) = stored(&app, id).await;
        assert_eq!(stored_kind.as_deref(), *kind, "{id}");
        let expected = if kind.is_some() {
            "processed"
        } else {
            "ignored"
        };
        assert_eq!((status.as_str(), signed_with), (expected, 1), "{id}");
    }
    let usd = Some("USD".to_string());
    assert_eq!(
        provider::payment_row(&app, SOURCE, "CAP-A").await,
        ("partially_refunded".into(), 2500, 1000, usd.clone(), None)
    );
    assert_eq!(
        provider::payment_row(&app, SOURCE, "CAP-B").await,
        ("refunded".into(), 1000, 1000, usd.clone(), None)
    );
    assert_eq!(
        provider::payment_row(&app, SOURCE, "CAP-C").await.0,
        "failed"
    );
    assert_eq!(
        provider::payment_row(&app, SOURCE, "CAP-E").await.0,
        "disputed"
    );
    assert_eq!(
        count(
            &app,
            "SELECT count(*) FROM payments WHERE source = 'paypal' AND payment_id = 'CAP-F'"
        )
        .await,
        0
    );
}

#[tokio::test]
async fn a_paypal_resend_is_a_duplicate_with_the_first_answer() {
    let app = spawn_app().await;
    let body = capture("WH-DUP", "PAYMENT.CAPTURE.COMPLETED", "CAP-DUP", "7.00");
    let first = app.deliver(SOURCE, &body).await;
    // PayPal signs each attempt anew: another transmission id and time.
    let second = app.deliver(SOURCE, &body).await;
    assert_eq!(first.status, 200);
    assert_eq!((second.status, &second.body), (200, &first.body));
    assert_eq!(second.header("Idempotent-Replayed"), Some("true"));
    let rows = app
        .query(
            "SELECT deliveries, attempts FROM webhook_events WHERE event_id = 'WH-DUP'",
            &[],
        )
        .await;
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].get::<_, i32>(0), rows[0].get::<_, i32>(1)), (2, 1));
}

/// The shipped settings with the PayPal source's lines changed.
fn settings_with(replacements: &[(&str, &str)]) -> Settings {
    let mut text = SHIPPED.to_string();
    for (old, new) in replacements {
        assert!(text.contains(old), "{old}");
        text = text.replace(old, new);
    }
    let mut settings =
        Settings::from_toml("test.toml", &text, &HashMap::new()).expect("valid settings");
    settings.listen = "127.0.0.1:0".parse().expect("address");
    settings
}

#[tokio::test]
async fn a_paypal_delivery_signed_with_the_second_pinned_certificate_says_so() {
    let settings = settings_with(&[(
        SHIPPED_CERTIFICATES,
        r#"certificates = ["tests/paypal/cert-2.pem", "fixtures/paypal/dev-certificate.pem"]"#,
    )]);
    let app = spawn(Spawn {
        settings,
        ..Spawn::default()
    })
    .await;
    let body = capture("WH-ROT", "PAYMENT.CAPTURE.COMPLETED", "CAP-ROT", "1.00");
    let answer = app.deliver(SOURCE, &body).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(stored(&app, "WH-ROT").await.2, 2);
}

fn with(headers: &[(String, String)], name: &str, value: &str) -> Vec<(String, String)> {
    let mut headers = headers.to_vec();
    for header in &mut headers {
        if header.0 == name {
            header.1 = value.to_string();
        }
    }
    headers
}

#[tokio::test]
async fn tampered_or_foreign_paypal_deliveries_are_401_and_nothing_is_stored() {
    let app = spawn_app().await;
    let body = serde_json::to_vec(&capture(
        "WH-BAD",
        "PAYMENT.CAPTURE.COMPLETED",
        "CAP-BAD",
        "25.00",
    ))
    .expect("json");
    let good = app.sign(SOURCE, &body, Hints::default());
    let tampered = String::from_utf8(body.clone())
        .expect("utf-8")
        .replace("25.00", "2500.00")
        .into_bytes();
    // Signed with another key, or for another webhook.
    let other_key = settings_with(&[(
        "fixtures/paypal/dev-signing-key.pem",
        "tests/paypal/key-2.pem",
    )]);
    let other_webhook = settings_with(&[("8PT597110X687430LDEVHOOKD", "8PT597110X687430LOTHER")]);
    let signed_by = |settings: &Settings| {
        let source = settings.source(SOURCE).expect("paypal");
        sign_delivery(
            source,
            &body,
            Hints::default(),
            chrono::Utc::now().timestamp(),
        )
        .expect("sign")
        .headers
    };
    let old = sign_delivery(
        app.settings().source(SOURCE).expect("paypal"),
        &body,
        Hints::default(),
        chrono::Utc::now().timestamp() - 301,
    )
    .expect("sign")
    .headers;
    let cases = [
        (good.clone(), tampered, "signature mismatch"),
        (signed_by(&other_key), body.clone(), "signature mismatch"),
        (
            signed_by(&other_webhook),
            body.clone(),
            "signature mismatch",
        ),
        (
            with(&good, "PAYPAL-TRANSMISSION-ID", "another-transmission"),
            body.clone(),
            "signature mismatch",
        ),
        (old, body.clone(), "timestamp too old"),
        (
            with(&good, "PAYPAL-AUTH-ALGO", "SHA1withRSA"),
            body.clone(),
            "not SHA256withRSA",
        ),
        (
            good.iter()
                .filter(|(n, _)| n != "PAYPAL-TRANSMISSION-SIG")
                .cloned()
                .collect(),
            body.clone(),
            "missing PAYPAL-TRANSMISSION-SIG header",
        ),
    ];
    for (headers, bytes, reason) in cases {
        let (status, error, why) = provider::refusal(&app.post(SOURCE, &headers, bytes).await);
        assert_eq!(
            (status, error.as_str()),
            (401, "invalid_signature"),
            "{reason}"
        );
        assert!(why.contains(reason), "{reason}: {why}");
    }
    assert_eq!(count(&app, "SELECT count(*) FROM webhook_events").await, 0);
    // A proxy-forwarded delivery to a source with the shipped (public) key is refused.
    let mut forwarded = good.clone();
    forwarded.push(("X-Forwarded-For".into(), "203.0.113.9".into()));
    assert_eq!(app.post(SOURCE, &forwarded, body.clone()).await.status, 401);
    assert_eq!(count(&app, "SELECT count(*) FROM webhook_events").await, 0);
    // The control: the genuine delivery is taken.
    assert_eq!(app.post(SOURCE, &good, body).await.status, 200);
    assert_eq!(count(&app, "SELECT count(*) FROM webhook_events").await, 1);
}

#[tokio::test]
async fn on_receipt_an_unpinned_certificate_is_fetched_and_one_not_trusted_is_401() {
    // The server's TLS certificate is from a CA this machine does not trust.
    let pki = crate::tls::pki();
    let server = certificate_server(&pki, String::new(), String::new()).await;
    let settings = settings_with(&[
        (
            "fetch_certificates = false",
            r#"certificate_hosts = ["127.0.0.1"]"#,
        ),
        (
            "fixtures/paypal/dev-signing-key.pem",
            "tests/paypal/key-2.pem",
        ),
    ]);
    let app = spawn(Spawn {
        settings,
        ..Spawn::default()
    })
    .await;
    let body = serde_json::to_vec(&capture(
        "WH-UF",
        "PAYMENT.CAPTURE.COMPLETED",
        "CAP-UF",
        "1.00",
    ))
    .expect("json");
    let signed = app.sign(SOURCE, &body, Hints::default());
    let url = format!("https://127.0.0.1:{}/cert", server.port);
    let answer = app
        .post(SOURCE, &with(&signed, "PAYPAL-CERT-URL", &url), body)
        .await;
    let (status, error, why) = provider::refusal(&answer);
    assert_eq!((status, error.as_str()), (401, "invalid_signature"));
    assert!(why.contains("signing certificate unavailable"), "{why}");
    assert_eq!(count(&app, "SELECT count(*) FROM webhook_events").await, 0);
}

/// What the test certificate server answers, and how many requests it got.
struct CertificateServer {
    port: u16,
    requests: Arc<AtomicUsize>,
}

/// An https server on 127.0.0.1 (certificate for localhost and 127.0.0.1 from
/// `pki`'s CA): `/cert` answers `chain`, `/untrusted` `untrusted`, `/redirect`
/// a 302 to `/cert`, anything else 404.
async fn certificate_server(
    pki: &crate::tls::Pki,
    chain: String,
    untrusted: String,
) -> CertificateServer {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    hookd::outbound::install_crypto();
    let certs = vec![CertificateDer::from_pem_slice(pki.server_cert.as_bytes()).expect("cert")];
    let key = PrivateKeyDer::from_pem_slice(pki.server_key.as_bytes()).expect("key");
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = requests.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, chain, untrusted) = (acceptor.clone(), chain.clone(), untrusted.clone());
            let counted = counted.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut request = vec![0; 4096];
                let Ok(n) = tls.read(&mut request).await else {
                    return;
                };
                counted.fetch_add(1, Ordering::SeqCst);
                let line = String::from_utf8_lossy(&request[..n]).to_string();
                let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
                let answer = match path.as_str() {
                    "/cert" => ok(&chain),
                    "/untrusted" => ok(&untrusted),
                    "/redirect" => format!(
                        "HTTP/1.1 302 Found\r\nLocation: https://127.0.0.1:{port}/cert\r\n\
                         Content-Length: 0\r\nConnection: close\r\n\r\n"
                    ),
                    _ => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        .to_string(),
                };
                let _ = tls.write_all(answer.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    CertificateServer { port, requests }
}

fn ok(body: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/x-pem-file\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
}

/// PayPal's signing certificate for `key`, issued by `issuer`, with the issuer
/// after it (the chain PayPal serves).
fn chain_for(key: &str, issuer: &rcgen::CertifiedIssuer<'static, KeyPair>) -> String {
    let pair = KeyPair::from_pem(key).expect("RSA key");
    let leaf = CertificateParams::new(Vec::<String>::new())
        .expect("params")
        .signed_by(&pair, issuer)
        .expect("leaf");
    format!("{}{}", leaf.pem(), issuer.pem())
}

/// `hookd verify` of a delivery with these headers, under `config`, trusting
/// only `ca`.
async fn verify(config: &Path, ca: &Path, headers: &[(String, String)], body: &[u8]) -> String {
    let dir = config.parent().expect("dir");
    let nonce = hex::encode(rand::random::<[u8; 6]>());
    let headers_file = dir.join(format!("headers-{nonce}.txt"));
    let body_file = dir.join(format!("body-{nonce}.json"));
    let lines: String = headers.iter().map(|(n, v)| format!("{n}: {v}\n")).collect();
    std::fs::write(&headers_file, lines).expect("headers");
    std::fs::write(&body_file, body).expect("body");
    let args: Vec<String> = [
        "verify",
        "--config",
        &config.display().to_string(),
        "--source",
        SOURCE,
        "--headers",
        &headers_file.display().to_string(),
        &body_file.display().to_string(),
    ]
    .map(String::from)
    .to_vec();
    let (ca, none) = (
        ca.display().to_string(),
        dir.join("no-such-dir").display().to_string(),
    );
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_hookd"))
            .args(&args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env_remove("DATABASE_URL")
            .env("RUST_LOG", "error")
            .env("SSL_CERT_FILE", ca)
            .env("SSL_CERT_DIR", none)
            .output()
            .expect("run hookd")
    })
    .await
    .expect("join");
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A PayPal source fetching from 127.0.0.1, pinning `pinned`.
fn write_config(dir: &Path, name: &str, pinned: &str) -> PathBuf {
    let path = dir.join(format!("{name}-{}.toml", std::process::id()));
    let text = format!(
        "[[sources]]\nname = \"paypal\"\nscheme = \"paypal\"\nwebhook_id = \"WH-FETCH\"\n\
         certificates = [{pinned}]\ncertificate_hosts = [\"127.0.0.1\"]\n\
         signing_key = \"{}/tests/paypal/key-1.pem\"\n",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::write(&path, &text).expect("config");
    path
}

#[tokio::test]
async fn slow_a_paypal_certificate_is_fetched_from_an_allowed_host_only_and_never_redirected() {
    // The trust store: the CA of the server's TLS certificate and the one that
    // issued PayPal's signing certificate; another CA issues an untrusted one.
    let pki = crate::tls::pki();
    let paypal_ca = crate::tls::authority("PayPal test CA");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let ca = dir.join(format!("paypal-ca-{}.pem", std::process::id()));
    std::fs::write(&ca, format!("{}{}", pki.ca, paypal_ca.pem())).expect("CA file");
    let key_1 = std::fs::read_to_string("tests/paypal/key-1.pem").expect("key");
    let chain = chain_for(&key_1, &paypal_ca);
    let untrusted = chain_for(&key_1, &crate::tls::authority("some other CA"));
    let server = certificate_server(&pki, chain, untrusted).await;
    let config = write_config(&dir, "paypal-fetch", "");
    let settings = Settings::load(&config).expect("config");
    let body = serde_json::to_vec(&capture(
        "WH-F",
        "PAYMENT.CAPTURE.COMPLETED",
        "CAP-F",
        "1.00",
    ))
    .expect("json");
    let source = settings.source(SOURCE).expect("paypal");
    let signed = sign_delivery(
        source,
        &body,
        Hints::default(),
        chrono::Utc::now().timestamp(),
    )
    .expect("sign")
    .headers;
    let at = |host: &str, path: &str| {
        with(
            &signed,
            "PAYPAL-CERT-URL",
            &format!("https://{host}:{}{path}", server.port),
        )
    };

    let fetched = verify(&config, &ca, &at("127.0.0.1", "/cert"), &body).await;
    assert!(
        fetched.contains("ok: signed with the certificate"),
        "{fetched}"
    );
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);

    let redirected = verify(&config, &ca, &at("127.0.0.1", "/redirect"), &body).await;
    assert!(
        redirected.contains("not verified") && redirected.contains("302"),
        "{redirected}"
    );
    assert_eq!(
        server.requests.load(Ordering::SeqCst),
        2,
        "the redirect is not followed"
    );

    let untrusted = verify(&config, &ca, &at("127.0.0.1", "/untrusted"), &body).await;
    assert!(
        untrusted.contains("not verified") && untrusted.contains("not trusted"),
        "{untrusted}"
    );

    // localhost is the same server, but not on certificate_hosts: never asked.
    let before = server.requests.load(Ordering::SeqCst);
    let elsewhere = verify(&config, &ca, &at("localhost", "/cert"), &body).await;
    assert!(
        elsewhere.contains("not an https URL on the source's certificate_hosts"),
        "{elsewhere}"
    );
    let plain = with(
        &signed,
        "PAYPAL-CERT-URL",
        &format!("http://127.0.0.1:{}/cert", server.port),
    );
    let refused = verify(&config, &ca, &plain, &body).await;
    assert!(refused.contains("certificate_hosts"), "{refused}");
    assert_eq!(server.requests.load(Ordering::SeqCst), before);

    // A pinned certificate that verifies needs no fetch.
    let pinned = write_config(
        &dir,
        "paypal-pinned",
        concat!(
            "\"",
            env!("CARGO_MANIFEST_DIR"),
            "/tests/paypal/cert-1.pem\""
        ),
    );
    let verdict = verify(&pinned, &ca, &at("127.0.0.1", "/cert"), &body).await;
    assert!(
        verdict.contains("ok: signed with pinned certificate 1"),
        "{verdict}"
    );
    assert_eq!(server.requests.load(Ordering::SeqCst), before);
}
