//! Scheme `paypal` through real HTTP: RSA signatures checked with a pinned
//! certificate (rotation reports which), every kind and an ignored type,
//! payment rows in minor units, refunds named by their `up` link in any order,
//! tampering refused with nothing stored, a signature reused with
//! (Resends, rotation, tampering and replay of its fixtures: the conformance suite.)
//! another body of the same CRC32 refused; and the certificates a delivery
//! names, fetched over https from a stand-in for PayPal's hosts (its requests
//! counted): only PayPal's URL shape ever requested, one fetch per URL at a
//! time, a failure remembered, ten fetches a minute per source, the body's
//! memory held while it waits, PayPal's subject required, and a 401 that says
//! `signing certificate unavailable` and no more; `hookd verify` refusing
//! another shape unrequested.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hookd::config::Settings;
use hookd::outbound::Certificates;
use hookd::simulate::{Hints, sign_delivery};
use rcgen::{CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, KeyPair};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::provider;
use crate::support::{Spawn, TestApp, spawn, spawn_app, spawn_with_settings, wait_for};

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
    let cases = cases.map(|(body, kind)| {
        let id = body["id"].as_str().expect("id").to_string();
        (
            id,
            body,
            kind.map_or_else(provider::ignored, provider::processed),
        )
    });
    provider::assert_stored_as(&app, SOURCE, &cases).await;
    for (id, ..) in &cases {
        assert_eq!(
            stored(&app, id).await.2,
            1,
            "{id}: signed with the pinned certificate"
        );
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
    let app = spawn_with_settings(settings).await;
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
            provider::without_header(&good, "PAYPAL-TRANSMISSION-SIG"),
            body.clone(),
            "missing PAYPAL-TRANSMISSION-SIG header",
        ),
    ];
    provider::assert_refused(&app, SOURCE, cases).await;
    // A proxy-forwarded delivery to a source with the shipped (public) key is refused.
    let mut forwarded = good.clone();
    forwarded.push(("X-Forwarded-For".into(), "203.0.113.9".into()));
    assert_eq!(app.post(SOURCE, &forwarded, body.clone()).await.status, 401);
    assert_eq!(count(&app, "SELECT count(*) FROM webhook_events").await, 0);
    // The control: the genuine delivery is taken.
    assert_eq!(app.post(SOURCE, &good, body).await.status, 200);
    assert_eq!(count(&app, "SELECT count(*) FROM webhook_events").await, 1);
}

/// The subject PayPal's webhook signing certificates have.
const PAYPAL_SUBJECT: &str = "messageverificationcerts.paypal.com";
const SANDBOX_SUBJECT: &str = "messageverificationcerts.sandbox.paypal.com";

/// PayPal's API hosts, all answered by the stand-in.
const PAYPAL_HOSTS: [&str; 4] = [
    "api.paypal.com",
    "api-m.paypal.com",
    "api.sandbox.paypal.com",
    "api-m.sandbox.paypal.com",
];

const CERTS: &str = "/v1/notifications/certs/";

/// The refusal of a delivery whose certificate could not be had, whole.
fn unavailable() -> Value {
    json!({"error": "invalid_signature", "reason": "signing certificate unavailable"})
}

/// How the stand-in answers a certificate's path.
#[derive(Clone)]
enum Reply {
    Chain(String),
    /// The chain, once `release` is called.
    Held(String),
    /// A 302 to another certificate's path.
    Redirect(String),
}

/// A stand-in for PayPal's API hosts: https on 127.0.0.1, with a certificate
/// for the four host names from a CA of its own; a path it was given a reply
/// for gets it, any other a 404; every request's path is recorded.
struct FakePayPal {
    addr: SocketAddr,
    /// PEM: the CA of its TLS certificate, and the one issuing PayPal's
    /// signing certificates.
    roots: String,
    issuer: CertifiedIssuer<'static, KeyPair>,
    replies: Arc<Mutex<HashMap<String, Reply>>>,
    requests: Arc<Mutex<Vec<String>>>,
    gate: Arc<tokio::sync::Semaphore>,
}

impl FakePayPal {
    async fn start() -> FakePayPal {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        hookd::outbound::install_crypto();
        let tls_ca = crate::tls::authority("stand-in PayPal TLS CA");
        let issuer = crate::tls::authority("stand-in PayPal signing CA");
        let key = KeyPair::generate().expect("server key");
        let mut params =
            CertificateParams::new(PAYPAL_HOSTS.map(String::from).to_vec()).expect("params");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server = params.signed_by(&key, &tls_ca).expect("server certificate");
        let config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from_pem_slice(server.pem().as_bytes()).expect("cert")],
                PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).expect("key"),
            )
            .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let fake = FakePayPal {
            addr,
            roots: format!("{}{}", tls_ca.pem(), issuer.pem()),
            issuer,
            replies: Arc::default(),
            requests: Arc::default(),
            gate: Arc::new(tokio::sync::Semaphore::new(0)),
        };
        let (replies, requests, gate) = (
            fake.replies.clone(),
            fake.requests.clone(),
            fake.gate.clone(),
        );
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, replies, requests, gate) = (
                    acceptor.clone(),
                    replies.clone(),
                    requests.clone(),
                    gate.clone(),
                );
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut request = vec![0; 4096];
                    let Ok(n) = tls.read(&mut request).await else {
                        return;
                    };
                    let head = String::from_utf8_lossy(&request[..n]).to_string();
                    let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
                    requests.lock().expect("requests").push(path.clone());
                    let reply = replies.lock().expect("replies").get(&path).cloned();
                    let answer = match reply {
                        Some(Reply::Chain(chain)) => ok(&chain),
                        Some(Reply::Held(chain)) => {
                            let _ = gate.acquire().await.expect("gate");
                            ok(&chain)
                        }
                        Some(Reply::Redirect(to)) => format!(
                            "HTTP/1.1 302 Found\r\nLocation: https://api.paypal.com{to}\r\n\
                             Content-Length: 0\r\nConnection: close\r\n\r\n"
                        ),
                        None => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\
                                 Connection: close\r\n\r\n"
                            .to_string(),
                    };
                    let _ = tls.write_all(answer.as_bytes()).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        fake
    }

    /// Fetching from this stand-in, trusting its CAs only.
    fn certificates(&self) -> Certificates {
        Certificates::stand_in(&PAYPAL_HOSTS, self.addr, self.roots.as_bytes()).expect("stand-in")
    }

    /// A certificate's path, of a name no other test uses (fetched
    /// certificates are cached for the process).
    fn path(label: &str) -> String {
        format!(
            "{CERTS}CERT-{label}-{}",
            hex::encode(rand::random::<[u8; 6]>())
        )
    }

    /// Answers `path` with `reply`; the URL naming it on `host`.
    fn serve(&self, host: &str, path: &str, reply: Reply) -> String {
        self.replies
            .lock()
            .expect("replies")
            .insert(path.to_string(), reply);
        format!("https://{host}{path}")
    }

    /// A signing certificate for `key` with the common name `subject`, issued
    /// by this stand-in's CA, followed by that CA (the chain PayPal serves).
    fn chain(&self, key: &str, subject: &str) -> String {
        chain_for(key, subject, &self.issuer)
    }

    fn requested(&self, path: &str) -> usize {
        let requests = self.requests.lock().expect("requests");
        requests.iter().filter(|p| p.as_str() == path).count()
    }

    async fn wait_until_requested(&self, path: &str) {
        wait_for("the fetch to start", Duration::from_secs(10), || async {
            (self.requested(path) > 0).then_some(())
        })
        .await;
    }

    fn request_count(&self) -> usize {
        self.requests.lock().expect("requests").len()
    }

    /// Lets every held answer go.
    fn release(&self) {
        self.gate.add_permits(1_000);
    }
}

fn ok(body: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/x-pem-file\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
}

/// A certificate for `key` with the common name `subject`, issued by `issuer`,
/// with the issuer after it.
fn chain_for(key: &str, subject: &str, issuer: &CertifiedIssuer<'static, KeyPair>) -> String {
    let pair = KeyPair::from_pem(key).expect("RSA key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.distinguished_name.push(DnType::CommonName, subject);
    params
        .distinguished_name
        .push(DnType::OrganizationName, "PayPal, Inc.");
    let leaf = params.signed_by(&pair, issuer).expect("leaf");
    format!("{}{}", leaf.pem(), issuer.pem())
}

const KEY_2: &str = "tests/paypal/key-2.pem";

/// The shipped `paypal` source signing with a key its pinned certificate is
/// not for, so that each delivery's certificate is fetched, from `fake`;
/// `more` replaces further lines.
async fn fetching_app(fake: &FakePayPal, more: &[(&str, &str)]) -> TestApp {
    let mut lines = vec![
        ("fetch_certificates = false", "fetch_certificates = true"),
        ("fixtures/paypal/dev-signing-key.pem", KEY_2),
    ];
    lines.extend_from_slice(more);
    spawn(Spawn {
        settings: settings_with(&lines),
        certificates: Some(fake.certificates()),
        ..Spawn::default()
    })
    .await
}

/// A capture event of its own, signed by `source`, naming `cert_url`.
fn delivery(
    app: &TestApp,
    source: &str,
    id: &str,
    cert_url: &str,
) -> (Vec<(String, String)>, Vec<u8>) {
    let body =
        serde_json::to_vec(&capture(id, "PAYMENT.CAPTURE.COMPLETED", id, "1.00")).expect("json");
    let headers = app.sign(source, &body, Hints::default());
    (with(&headers, "PAYPAL-CERT-URL", cert_url), body)
}

async fn deliver_naming(
    app: &TestApp,
    source: &str,
    id: &str,
    cert_url: &str,
) -> crate::support::Answer {
    let (headers, body) = delivery(app, source, id, cert_url);
    app.post(source, &headers, body).await
}

/// Posts a delivery to the paypal source in a task of its own; its status.
fn post_in_background(
    app: &TestApp,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
) -> tokio::task::JoinHandle<u16> {
    let (http, target) = (app.http.clone(), format!("{}/webhooks/{SOURCE}", app.base));
    tokio::spawn(async move {
        let mut request = http.post(target);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let answer = request.body(body).send().await.expect("request");
        answer.status().as_u16()
    })
}

#[tokio::test]
async fn only_paypals_certificate_url_shape_is_ever_requested() {
    let fake = FakePayPal::start().await;
    let app = fetching_app(&fake, &[]).await;
    let path = FakePayPal::path("shape");
    let good = fake.serve(
        "api.paypal.com",
        &path,
        Reply::Chain(fake.chain(&read(KEY_2), PAYPAL_SUBJECT)),
    );
    // Each of these reaches the stand-in's port 443 for hookd, or names a
    // path it serves: none is PayPal's URL shape, so none is asked.
    for (n, url) in [
        "https://api.paypal.com:9/x?n=1".to_string(),
        format!("https://api.paypal.com:{}{path}", fake.addr.port()),
        format!("{good}?n=1"),
        format!("{good}?"),
        format!("https://api.paypal.com{CERTS}other"),
        "https://api.paypal.com/x".to_string(),
        format!("http://api.paypal.com{path}"),
        format!("https://user@api.paypal.com{path}"),
        // A live source does not trust the sandbox.
        format!("https://api.sandbox.paypal.com{path}"),
    ]
    .iter()
    .enumerate()
    {
        let answer = deliver_naming(&app, SOURCE, &format!("WH-SHAPE-{n}"), url).await;
        let (status, error, why) = provider::refusal(&answer);
        assert_eq!(
            (status, error.as_str()),
            (401, "invalid_signature"),
            "{url}"
        );
        assert!(
            why.starts_with("malformed PAYPAL-CERT-URL header: not PayPal's certificate URL"),
            "{url}: {why}"
        );
    }
    assert_eq!(fake.request_count(), 0, "never requested");
    assert_eq!(count(&app, "SELECT count(*) FROM webhook_events").await, 0);
    // The control: the same certificate at PayPal's URL is fetched, once.
    let answer = deliver_naming(&app, SOURCE, "WH-SHAPE-OK", &good).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(
        stored(&app, "WH-SHAPE-OK").await.2,
        0,
        "signed_with: fetched"
    );
    assert_eq!(fake.requested(&path), 1);
    let again = deliver_naming(&app, SOURCE, "WH-SHAPE-OK2", &good).await;
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(fake.request_count(), 1, "cached");
}

#[tokio::test]
async fn a_certificate_that_cannot_be_had_is_401_saying_no_more_and_remembered() {
    let fake = FakePayPal::start().await;
    let app = fetching_app(&fake, &[]).await;
    let key = read(KEY_2);
    let missing = FakePayPal::path("missing");
    let target = FakePayPal::path("target");
    fake.serve(
        "api.paypal.com",
        &target,
        Reply::Chain(fake.chain(&key, PAYPAL_SUBJECT)),
    );
    let redirect = FakePayPal::path("redirect");
    let untrusted = FakePayPal::path("untrusted");
    let stranger = crate::tls::authority("some other CA");
    let not_paypal = FakePayPal::path("not-paypal");
    let sandbox_subject = FakePayPal::path("sandbox-subject");
    let urls = [
        format!("https://api.paypal.com{missing}"),
        fake.serve("api.paypal.com", &redirect, Reply::Redirect(target.clone())),
        fake.serve(
            "api.paypal.com",
            &untrusted,
            Reply::Chain(chain_for(&key, PAYPAL_SUBJECT, &stranger)),
        ),
        // Chained to a trusted CA, but not PayPal's signing certificate.
        fake.serve(
            "api.paypal.com",
            &not_paypal,
            Reply::Chain(fake.chain(&key, "api.paypal.com")),
        ),
        fake.serve(
            "api-m.paypal.com",
            &sandbox_subject,
            Reply::Chain(fake.chain(&key, SANDBOX_SUBJECT)),
        ),
    ];
    for (n, url) in urls.iter().enumerate() {
        for attempt in 0..2 {
            let answer = deliver_naming(&app, SOURCE, &format!("WH-GONE-{n}-{attempt}"), url).await;
            assert_eq!(answer.status, 401, "{url}");
            assert_eq!(answer.json(), unavailable(), "{url}: nothing about why");
        }
    }
    // Each was asked once: the second delivery found the failure remembered.
    for path in [
        &missing,
        &redirect,
        &untrusted,
        &not_paypal,
        &sandbox_subject,
    ] {
        assert_eq!(fake.requested(path), 1, "{path}");
    }
    assert_eq!(fake.requested(&target), 0, "the redirect is not followed");
    assert_eq!(count(&app, "SELECT count(*) FROM webhook_events").await, 0);
}

#[tokio::test]
async fn deliveries_naming_one_certificate_wait_for_one_fetch() {
    let fake = FakePayPal::start().await;
    let app = fetching_app(&fake, &[]).await;
    let path = FakePayPal::path("held");
    let url = fake.serve(
        "api.paypal.com",
        &path,
        Reply::Held(fake.chain(&read(KEY_2), PAYPAL_SUBJECT)),
    );
    let mut waiting = Vec::new();
    for n in 0..5 {
        let (headers, body) = delivery(&app, SOURCE, &format!("WH-HELD-{n}"), &url);
        waiting.push(post_in_background(&app, headers, body));
    }
    fake.wait_until_requested(&path).await;
    // Time for the other four to ask too, were each to fetch on its own.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(fake.requested(&path), 1, "one fetch in flight for the URL");
    fake.release();
    for answer in waiting {
        assert_eq!(
            answer.await.expect("join"),
            200,
            "each verified once it came"
        );
    }
    assert_eq!(fake.requested(&path), 1);
    assert_eq!(count(&app, "SELECT count(*) FROM webhook_events").await, 5);
}

#[tokio::test]
async fn a_source_starts_at_most_ten_certificate_fetches_a_minute() {
    let fake = FakePayPal::start().await;
    // A second PayPal source, with a budget of its own.
    let second = "signing_key = \"tests/paypal/key-2.pem\"\n\n\
                  [[sources]]\nname = \"paypal-b\"\nscheme = \"paypal\"\n\
                  webhook_id = \"8PT597110X687430LSECOND\"\n\
                  signing_key = \"tests/paypal/key-2.pem\"\n";
    let app = fetching_app(
        &fake,
        &[("signing_key = \"tests/paypal/key-2.pem\"\n", second)],
    )
    .await;
    let mut paths = Vec::new();
    for n in 0..11 {
        let path = FakePayPal::path("limited");
        let url = format!("https://api.paypal.com{path}");
        let answer = deliver_naming(&app, SOURCE, &format!("WH-LIMIT-{n}"), &url).await;
        assert_eq!(answer.json(), unavailable(), "{n}");
        paths.push(path);
    }
    let asked: Vec<usize> = paths.iter().map(|p| fake.requested(p)).collect();
    assert_eq!(
        asked,
        [vec![1; 10], vec![0]].concat(),
        "the eleventh is not asked"
    );
    let path = FakePayPal::path("other-source");
    let url = format!("https://api.paypal.com{path}");
    let answer = deliver_naming(&app, "paypal-b", "WH-LIMIT-B", &url).await;
    assert_eq!(answer.json(), unavailable());
    assert_eq!(fake.requested(&path), 1, "another source fetches still");
}

#[tokio::test]
async fn a_delivery_waiting_for_its_certificate_keeps_its_body_in_the_memory_budget() {
    let fake = FakePayPal::start().await;
    let path = FakePayPal::path("budget");
    let url = fake.serve(
        "api.paypal.com",
        &path,
        Reply::Held(fake.chain(&read(KEY_2), PAYPAL_SUBJECT)),
    );
    let mut settings = settings_with(&[
        ("fetch_certificates = false", "fetch_certificates = true"),
        ("fixtures/paypal/dev-signing-key.pem", KEY_2),
    ]);
    // 700 KiB bodies count 636 KiB each (past their first 64 KiB): one fits.
    settings.max_body_memory = 1024 * 1024;
    let app = spawn(Spawn {
        settings,
        certificates: Some(fake.certificates()),
        ..Spawn::default()
    })
    .await;
    let padding = "x".repeat(700 * 1024);
    let mut large = capture("WH-LARGE", "PAYMENT.CAPTURE.COMPLETED", "CAP-LARGE", "1.00");
    large["padding"] = json!(padding);
    let body = serde_json::to_vec(&large).expect("json");
    let headers = with(
        &app.sign(SOURCE, &body, Hints::default()),
        "PAYPAL-CERT-URL",
        &url,
    );
    let waiting = post_in_background(&app, headers, body);
    fake.wait_until_requested(&path).await;
    // Meanwhile another large body does not fit: 503 at once.
    let mut other = tokio::net::TcpStream::connect(app.addr())
        .await
        .expect("connect");
    let size = 700 * 1024;
    other
        .write_all(
            format!(
                "POST /webhooks/stripe HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                 Content-Type: application/json\r\nContent-Length: {size}\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .expect("head");
    let _ = other.write_all(&vec![b' '; size]).await;
    let mut answer = vec![0; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), other.read(&mut answer))
        .await
        .expect("an answer at once")
        .expect("read");
    let status = String::from_utf8_lossy(&answer[..n])
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    assert!(status.contains(" 503 "), "{status}");
    fake.release();
    assert_eq!(waiting.await.expect("join"), 200);
}

#[tokio::test]
async fn a_sandbox_source_fetches_from_the_sandbox_hosts_and_takes_its_subject() {
    let fake = FakePayPal::start().await;
    let app = fetching_app(
        &fake,
        &[(
            "fetch_certificates = true",
            "fetch_certificates = true\nsandbox = true",
        )],
    )
    .await;
    let path = FakePayPal::path("sandbox");
    let url = fake.serve(
        "api.sandbox.paypal.com",
        &path,
        Reply::Chain(fake.chain(&read(KEY_2), SANDBOX_SUBJECT)),
    );
    let answer = deliver_naming(&app, SOURCE, "WH-SANDBOX", &url).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(fake.requested(&path), 1);
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Flips bits of `body` at `positions` (each a 'p' that may become a 'q') so
/// that its CRC32 is `wanted`: the CRC is linear over GF(2), so the flips
/// needed solve a 32-bit linear system.
fn with_crc32(mut body: Vec<u8>, positions: &[usize], wanted: u32) -> Vec<u8> {
    let base = crc32fast::hash(&body);
    // A basis of what single flips do, each with the flips making it.
    let mut basis: Vec<(u32, u64)> = Vec::new();
    for (i, &at) in positions.iter().enumerate() {
        let mut flipped = body.clone();
        flipped[at] ^= 1;
        let (mut effect, mut flips) = (crc32fast::hash(&flipped) ^ base, 1u64 << i);
        for &(b, f) in &basis {
            if effect ^ b < effect {
                effect ^= b;
                flips ^= f;
            }
        }
        if effect != 0 {
            basis.push((effect, flips));
            basis.sort_by_key(|b| std::cmp::Reverse(b.0));
        }
    }
    let (mut need, mut flips) = (wanted ^ base, 0u64);
    for &(b, f) in &basis {
        if need ^ b < need {
            need ^= b;
            flips ^= f;
        }
    }
    assert_eq!(need, 0, "the positions reach every CRC");
    for (i, &at) in positions.iter().enumerate() {
        if flips & (1 << i) != 0 {
            body[at] ^= 1;
        }
    }
    assert_eq!(crc32fast::hash(&body), wanted);
    body
}

#[tokio::test]
async fn a_signature_reused_with_another_body_of_the_same_crc32_is_refused() {
    let app = spawn_app().await;
    let genuine = serde_json::to_vec(&capture(
        "WH-GENUINE",
        "PAYMENT.CAPTURE.COMPLETED",
        "CAP-GENUINE",
        "10.00",
    ))
    .expect("json");
    let headers = app.sign(SOURCE, &genuine, Hints::default());
    assert_eq!(
        app.post(SOURCE, &headers, genuine.clone()).await.status,
        200
    );
    // Another event, another amount, the same CRC32: PayPal's signature holds.
    let id = format!("WH-FORGED-{}", "p".repeat(48));
    let forged = serde_json::to_vec(&capture(
        &id,
        "PAYMENT.CAPTURE.COMPLETED",
        "CAP-GENUINE",
        "9999.00",
    ))
    .expect("json");
    let start = forged
        .windows(48)
        .position(|w| w.iter().all(|&b| b == b'p'))
        .expect("the id's letters");
    let positions: Vec<usize> = (start..start + 48).collect();
    let forged = with_crc32(forged, &positions, crc32fast::hash(&genuine));
    let answer = app.post(SOURCE, &headers, forged).await;
    let (status, error, why) = provider::refusal(&answer);
    assert_eq!((status, error.as_str()), (401, "invalid_signature"));
    assert_eq!(why, "signature already accepted with another body");
    assert_eq!(count(&app, "SELECT count(*) FROM webhook_events").await, 1);
    assert_eq!(
        provider::payment_row(&app, SOURCE, "CAP-GENUINE").await.1,
        1000
    );
    // The genuine body again is a duplicate, as ever.
    let again = app.post(SOURCE, &headers, genuine).await;
    assert_eq!(
        (again.status, again.header("Idempotent-Replayed")),
        (200, Some("true"))
    );
}

/// `hookd verify` of a delivery with these headers, under `config`.
async fn verify(config: &Path, headers: &[(String, String)], body: &[u8]) -> String {
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
    let output = tokio::task::spawn_blocking(move || {
        crate::support::hookd_binary()
            .args(&args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env_remove("DATABASE_URL")
            .env("RUST_LOG", "error")
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

/// A PayPal source fetching from 127.0.0.1 (any port is refused), pinning `pinned`.
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
async fn hookd_verify_never_requests_another_url_shape_and_needs_no_fetch_when_pinned() {
    let fake = FakePayPal::start().await;
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let config = write_config(&dir, "paypal-verify", "");
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
    // A listed host, on the stand-in's port: not port 443, so never asked.
    let path = FakePayPal::path("cli");
    let url = fake.serve(
        &format!("127.0.0.1:{}", fake.addr.port()),
        &path,
        Reply::Chain(fake.chain(&read("tests/paypal/key-1.pem"), PAYPAL_SUBJECT)),
    );
    let headers = with(&signed, "PAYPAL-CERT-URL", &url);
    let refused = verify(&config, &headers, &body).await;
    assert!(
        refused.contains("not verified: malformed PAYPAL-CERT-URL header: not PayPal's"),
        "{refused}"
    );
    // A pinned certificate that verifies needs no fetch.
    let pinned = write_config(
        &dir,
        "paypal-verify-pinned",
        concat!(
            "\"",
            env!("CARGO_MANIFEST_DIR"),
            "/tests/paypal/cert-1.pem\""
        ),
    );
    let verdict = verify(&pinned, &headers, &body).await;
    assert!(
        verdict.contains("ok: signed with pinned certificate 1"),
        "{verdict}"
    );
    assert_eq!(fake.request_count(), 0);
}
