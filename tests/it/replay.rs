//! Developers' tools: `hookd replay` and `hookd sign`, run as the real binary
//! against a test instance, with the shipped fixtures and configuration.

use std::process::Output;

use crate::support::{TestApp, run_hookd, spawn_app};

const MANIFEST: &str = env!("CARGO_MANIFEST_DIR");

async fn hookd(args: &[&str]) -> Output {
    run_hookd(args, None).await
}

async fn replay(app: &TestApp, source: &str, extra: &[&str]) -> (bool, Vec<String>) {
    let folder = format!("fixtures/{source}");
    let mut args = vec![
        "replay",
        folder.as_str(),
        "--source",
        source,
        "--url",
        &app.base,
    ];
    args.extend_from_slice(extra);
    let output = hookd(&args).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    (
        output.status.success(),
        stdout.lines().map(String::from).collect(),
    )
}

fn delivery_lines(lines: &[String]) -> Vec<&String> {
    lines
        .iter()
        .filter(|l| l.ends_with(" ms") && !l.contains("deliveries:"))
        .collect()
}

async fn payments(app: &TestApp, source: &str) -> Vec<(String, String, i64, i64)> {
    app.query(
        "SELECT payment_id, status, amount, amount_refunded FROM payments
         WHERE source = $1 ORDER BY payment_id",
        &[&source],
    )
    .await
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect()
}

fn rows(expected: &[(&str, &str, i64, i64)]) -> Vec<(String, String, i64, i64)> {
    expected
        .iter()
        .map(|(p, s, a, r)| (p.to_string(), s.to_string(), *a, *r))
        .collect()
}

#[tokio::test]
async fn slow_replaying_the_stripe_fixtures_once_twice_at_once_and_anew() {
    let app = spawn_app().await;
    let expected = rows(&[
        ("pi_3PqA1cHkD4oWb9Rq0aNz4xLm", "refunded", 2000, 2000),
        ("pi_3PqB7eHkD4oWb9Rq1bKm8PwQ", "failed", 4500, 0),
        ("pi_3PqC9gHkD4oWb9Rq2cW3sF6h", "disputed", 9900, 0),
    ]);

    let (ok, lines) = replay(&app, "stripe", &[]).await;
    assert!(ok, "{lines:#?}");
    let sent = delivery_lines(&lines);
    assert_eq!(sent.len(), 8);
    assert!(
        sent.iter().all(|l| l.contains(" 200 accepted  new ")),
        "{sent:#?}"
    );
    assert!(
        sent[0].starts_with("01_payment_intent.succeeded.json  evt_"),
        "{}",
        sent[0]
    );
    assert!(
        lines
            .last()
            .expect("summary")
            .starts_with("8 deliveries: 8 new, 0 replayed")
    );
    assert_eq!(payments(&app, "stripe").await, expected);
    let statuses = app
        .query(
            "SELECT status, count(*) FROM webhook_events GROUP BY status ORDER BY status",
            &[],
        )
        .await
        .iter()
        .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1)))
        .collect::<Vec<_>>();
    assert_eq!(
        statuses,
        [("ignored".to_string(), 2), ("processed".to_string(), 6)]
    );

    let (ok, lines) = replay(&app, "stripe", &["--times", "3"]).await;
    assert!(ok);
    let sent = delivery_lines(&lines);
    assert_eq!(sent.len(), 24);
    assert!(sent.iter().all(|l| l.contains(" 200 accepted  replayed ")));

    let (ok, lines) = replay(&app, "stripe", &["--parallel", "10"]).await;
    assert!(ok);
    assert_eq!(delivery_lines(&lines).len(), 80);
    let per_event = app
        .query(
            "SELECT count(*), min(deliveries), max(deliveries), max(attempts) FROM webhook_events",
            &[],
        )
        .await;
    let row = &per_event[0];
    assert_eq!(
        (
            row.get::<_, i64>(0),
            row.get::<_, i32>(1),
            row.get::<_, i32>(2),
            row.get::<_, i32>(3)
        ),
        (8, 14, 14, 1),
        "one row per event; 1 + 3 + 10 deliveries each; applied once"
    );

    let (ok, lines) = replay(&app, "stripe", &["--new-ids"]).await;
    assert!(ok);
    assert!(delivery_lines(&lines).iter().all(|l| l.contains(" new ")));
    assert_eq!(
        app.count("SELECT count(*) FROM webhook_events", &[]).await,
        16
    );
    assert_eq!(
        app.count(
            "SELECT count(*) FROM webhook_events WHERE status = 'processed'",
            &[]
        )
        .await,
        12,
        "the new copies were applied"
    );
    assert_eq!(
        payments(&app, "stripe").await,
        expected,
        "and changed nothing: handlers merge"
    );
}

#[tokio::test]
async fn slow_every_shipped_fixture_folder_replays() {
    let app = spawn_app().await;
    for (source, events, ignored) in [("standard", 6, 1), ("shop", 6, 1), ("github", 4, 4)] {
        let (ok, lines) = replay(&app, source, &[]).await;
        assert!(ok, "{source}: {lines:#?}");
        assert_eq!(delivery_lines(&lines).len(), events);
        let stored = app
            .count(
                "SELECT count(*) FROM webhook_events WHERE source = $1",
                &[&source],
            )
            .await;
        assert_eq!(stored, events as i64);
        let skipped = app
            .count(
                "SELECT count(*) FROM webhook_events WHERE source = $1 AND status = 'ignored'",
                &[&source],
            )
            .await;
        assert_eq!(skipped, ignored, "{source}");
    }
    assert_eq!(
        payments(&app, "standard").await,
        rows(&[
            ("pay_2mK8qR4vX7nT1bWc", "partially_refunded", 1500, 300),
            ("pay_2mL3sF9hZ5pD6yJe", "failed", 2500, 0),
            ("pay_2mN7tB2kC8wQ4xGa", "disputed", 7200, 0),
        ])
    );
    assert_eq!(
        payments(&app, "shop").await,
        rows(&[
            ("shop_pay_7Kq2mV9xR4", "refunded", 5400, 5400),
            ("shop_pay_7Lr5nW3yT8", "failed", 1899, 0),
            ("shop_pay_7Ms8pX6zU2", "disputed", 12500, 0),
        ])
    );
    let github_types = app
        .strings(
            "SELECT event_type FROM webhook_events WHERE source = 'github' ORDER BY 1",
            &[],
        )
        .await;
    assert_eq!(
        github_types,
        ["issues.opened", "ping", "pull_request.closed", "push"]
    );
    // Adyen: seven requests, one of them a batch of two items; every answer
    // `[accepted]`. The source is the folder's name when --source is left out.
    let output = hookd(&["replay", "fixtures/adyen", "--url", &app.base]).await;
    let lines: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(String::from)
        .collect();
    assert!(output.status.success(), "adyen: {lines:#?}");
    let sent = delivery_lines(&lines);
    assert_eq!(sent.len(), 7, "{lines:#?}");
    assert!(sent.iter().all(|l| l.contains("[accepted]")), "{lines:#?}");
    let adyen = statuses(&app, "adyen").await;
    assert_eq!(
        adyen,
        [("ignored".to_string(), 1), ("processed".to_string(), 7)]
    );
    assert_eq!(
        payments(&app, "adyen").await,
        rows(&[
            ("8535296650153317", "partially_refunded", 1500, 800),
            ("8535296650153400", "failed", 2500, 0),
            ("8535296650153500", "disputed", 4200, 0),
        ])
    );
}

#[tokio::test]
async fn slow_replay_failures_are_one_line_each_and_a_non_zero_exit() {
    let unnamed = hookd(&["replay", "fixtures/README.md"]).await;
    assert!(!unnamed.status.success());
    let stderr = String::from_utf8_lossy(&unnamed.stderr);
    assert!(
        stderr.contains("name the source with --source") && stderr.lines().count() == 1,
        "{stderr}"
    );
    let unknown = hookd(&["replay", "fixtures/stripe", "--source", "nosuchprovider"]).await;
    assert!(!unknown.status.success());
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("no source named \"nosuchprovider\""));

    let refused = hookd(&[
        "replay",
        "fixtures/stripe/01_payment_intent.succeeded.json",
        "--source",
        "stripe",
        "--url",
        "http://127.0.0.1:9",
    ])
    .await;
    assert!(!refused.status.success());
    let stdout = String::from_utf8_lossy(&refused.stdout);
    assert!(stdout.contains("error: cannot connect"), "{stdout}");
    assert!(!String::from_utf8_lossy(&refused.stderr).contains("panicked"));

    let missing = hookd(&[
        "replay",
        "no/such/file.json",
        "--source",
        "stripe",
        "--url",
        "http://127.0.0.1:9",
    ])
    .await;
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stdout).contains("file.json  error:"));
}

#[tokio::test]
async fn slow_replay_refusals_count_as_failures() {
    let app = spawn_app().await;
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("conflict-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("evt.json");
    std::fs::write(
        &file,
        br#"{"id":"evt_edit","type":"customer.created","data":{"object":{"id":"cus_1"}}}"#,
    )
    .expect("write");
    let file = file.display().to_string();
    let args = ["replay", &file, "--source", "stripe", "--url", &app.base];
    assert!(hookd(&args).await.status.success());
    std::fs::write(
        &file,
        br#"{"id":"evt_edit","type":"customer.created","data":{"object":{"id":"cus_2"}}}"#,
    )
    .expect("write");
    let edited = hookd(&args).await;
    assert!(!edited.status.success());
    assert!(String::from_utf8_lossy(&edited.stdout).contains(" 422 event_id_conflict "));
}

#[tokio::test]
async fn slow_the_headers_hookd_sign_prints_are_accepted_by_the_receiver() {
    let app = spawn_app().await;
    for (source, file) in [
        ("stripe", "fixtures/stripe/01_payment_intent.succeeded.json"),
        ("standard", "fixtures/standard/01_payment.succeeded.json"),
        ("shop", "fixtures/shop/01_payments-succeeded.json"),
        ("github", "fixtures/github/push.json"),
        ("adyen", "fixtures/adyen/01_AUTHORISATION.json"),
    ] {
        let output = hookd(&["sign", "--source", source, file]).await;
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        if source == "adyen" {
            // Adyen signs inside the body: the output is the signed body.
            let answer = app.post(source, &[], output.stdout).await;
            assert_eq!(answer.body, b"[accepted]", "{}", answer.text());
            continue;
        }
        let headers: Vec<(String, String)> = String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|line| {
                let (name, value) = line.split_once(": ").expect("Name: value");
                (name.to_string(), value.to_string())
            })
            .collect();
        assert!(headers.iter().any(|(k, _)| k == "Content-Type"));
        let body = std::fs::read(format!("{MANIFEST}/{file}")).expect("fixture");
        let answer = app.post(source, &headers, body).await;
        assert_eq!(
            answer.status,
            200,
            "{source}: {}",
            String::from_utf8_lossy(&answer.body)
        );
    }
}

/// A TLS terminator in front of `app`: https on 127.0.0.1 with a certificate for
/// `localhost` from a CA made here, each connection piped to the app's plain HTTP.
async fn https_in_front_of(app: &TestApp, pki: &crate::tls::Pki) -> String {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    hookd::outbound::install_crypto();
    let certs = vec![CertificateDer::from_pem_slice(pki.server_cert.as_bytes()).expect("cert")];
    let key = PrivateKeyDer::from_pem_slice(pki.server_key.as_bytes()).expect("key");
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let backend = app.base.trim_start_matches("http://").to_string();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, backend) = (acceptor.clone(), backend.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                if let Ok(mut plain) = tokio::net::TcpStream::connect(&backend).await {
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                }
            });
        }
    });
    format!("https://localhost:{port}")
}

#[tokio::test]
async fn slow_replay_sends_over_https_verifying_the_certificate() {
    let app = spawn_app().await;
    let pki = crate::tls::pki();
    let url = https_in_front_of(&app, &pki).await;
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let ca = dir.join(format!("replay-ca-{}.pem", std::process::id()));
    let other = dir.join(format!("replay-other-ca-{}.pem", std::process::id()));
    std::fs::write(&ca, &pki.ca).expect("CA file");
    std::fs::write(&other, &pki.other_ca).expect("CA file");
    let args = [
        "replay",
        "fixtures/stripe/01_payment_intent.succeeded.json",
        "--source",
        "stripe",
        "--url",
        &url,
    ];
    // The system's trust store, as rustls-native-certs reads it: only these files.
    let trusting = |file: &std::path::Path| {
        vec![
            ("SSL_CERT_FILE", file.display().to_string()),
            (
                "SSL_CERT_DIR",
                dir.join("no-such-dir").display().to_string(),
            ),
        ]
    };
    let sent = crate::support::run_hookd_with(&args, &trusting(&ca)).await;
    let stdout = String::from_utf8_lossy(&sent.stdout);
    assert!(sent.status.success(), "{sent:?}");
    assert!(stdout.contains("200 accepted  new"), "{stdout}");
    assert_eq!(
        app.count("SELECT count(*) FROM webhook_events", &[]).await,
        1
    );

    // A certificate from a CA the machine does not trust is refused.
    let refused = crate::support::run_hookd_with(&args, &trusting(&other)).await;
    assert!(!refused.status.success());
    let stdout = String::from_utf8_lossy(&refused.stdout);
    assert!(
        stdout.contains("error: cannot connect") && stdout.contains("UnknownIssuer"),
        "{stdout}"
    );
    assert_eq!(
        app.count("SELECT count(*) FROM webhook_events", &[]).await,
        1
    );
}

#[tokio::test]
async fn slow_replaying_the_square_fixtures_gives_the_documented_rows() {
    let app = spawn_app().await;
    for round in 1..=2 {
        let (ok, lines) = replay(&app, "square", &[]).await;
        assert!(ok, "round {round}: {lines:#?}");
        let sent = delivery_lines(&lines);
        assert_eq!(sent.len(), 8);
        let answer = if round == 1 {
            " 200 accepted  new "
        } else {
            "replayed"
        };
        assert!(sent.iter().all(|l| l.contains(answer)), "{sent:#?}");
    }
    assert_eq!(
        statuses(&app, "square").await,
        [("ignored".to_string(), 3), ("processed".to_string(), 5)]
    );
    assert_eq!(
        payments(&app, "square").await,
        rows(&[
            (
                "bP9mZ3kQ7wL2xV5nR8tY1cF4hJ6D",
                "partially_refunded",
                2500,
                1000
            ),
            ("cQ1nA4lR8xM3yW6oS9uZ2dG5iK7E", "failed", 4200, 0),
            ("dR2oB5mS9yN4zX7pT0vA3eH6jL8F", "disputed", 9900, 0),
        ])
    );
    let (currency, customer): (String, String) = {
        let row = &app
            .query(
                "SELECT currency, customer_id FROM payments WHERE payment_id = 'bP9mZ3kQ7wL2xV5nR8tY1cF4hJ6D'",
                &[],
            )
            .await[0];
        (row.get(0), row.get(1))
    };
    assert_eq!(
        (currency.as_str(), customer.as_str()),
        ("USD", "JDKYHBWT1D4F8MFH63DBMEN8Y4")
    );
}

#[tokio::test]
async fn slow_replaying_the_paypal_fixtures_gives_the_documented_rows() {
    let app = spawn_app().await;
    for round in 1..=2 {
        let (ok, lines) = replay(&app, "paypal", &[]).await;
        assert!(ok, "round {round}: {lines:#?}");
        let sent = delivery_lines(&lines);
        assert_eq!(sent.len(), 6);
        let answer = if round == 1 {
            " 200 accepted  new "
        } else {
            "replayed"
        };
        assert!(sent.iter().all(|l| l.contains(answer)), "{sent:#?}");
    }
    assert_eq!(
        statuses(&app, "paypal").await,
        [("ignored".to_string(), 1), ("processed".to_string(), 5)]
    );
    assert_eq!(
        payments(&app, "paypal").await,
        rows(&[
            ("0VF52814937998046", "disputed", 9900, 0),
            ("2GG279541U471931P", "partially_refunded", 2500, 1000),
            ("7TK53561YB803214S", "failed", 4200, 0),
        ])
    );
    // --new-ids: a fresh `WH-…` id in each body, so every file is stored anew.
    let (ok, lines) = replay(&app, "paypal", &["--new-ids"]).await;
    assert!(ok, "{lines:#?}");
    assert!(
        delivery_lines(&lines)
            .iter()
            .all(|l| l.contains(" 200 accepted  new ")),
        "{lines:#?}"
    );
    let ids = app
        .strings(
            "SELECT event_id FROM webhook_events WHERE source = 'paypal'",
            &[],
        )
        .await;
    assert_eq!(ids.len(), 12);
    assert_eq!(ids.iter().filter(|id| id.starts_with("WH-")).count(), 12);
}

async fn statuses(app: &TestApp, source: &str) -> Vec<(String, i64)> {
    app.query(
        "SELECT status, count(*) FROM webhook_events WHERE source = $1 GROUP BY 1 ORDER BY 1",
        &[&source],
    )
    .await
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

#[tokio::test]
async fn slow_new_ids_store_every_fixture_anew_for_every_scheme() {
    let app = spawn_app().await;
    // Stripe (the body's id), Standard Webhooks (webhook-id), GitHub (the
    // delivery id), the generic HMAC shop (its id header) Square (its
    // event_id) and Adyen (every
    // item's pspReference; one file is a batch of two).
    for (source, files, events) in [
        ("stripe", 8, 8),
        ("standard", 6, 6),
        ("github", 4, 4),
        ("shop", 6, 6),
        ("adyen", 7, 8),
        ("square", 8, 8),
    ] {
        let (ok, lines) = replay(&app, source, &[]).await;
        assert!(ok, "{source}: {lines:#?}");
        let once = statuses(&app, source).await;
        let ids_before = app
            .strings(
                "SELECT event_id FROM webhook_events WHERE source = $1",
                &[&source],
            )
            .await;
        assert_eq!(ids_before.len(), events, "{source}");
        for round in 1..=2 {
            let (ok, lines) = replay(&app, source, &["--new-ids"]).await;
            assert!(ok, "{source} round {round}: {lines:#?}");
            let sent = delivery_lines(&lines);
            assert_eq!(sent.len(), files, "{source}");
            let answer = if source == "adyen" {
                " 200 [accepted]  new "
            } else {
                " 200 accepted  new "
            };
            assert!(
                sent.iter().all(|l| l.contains(answer)),
                "{source}: {sent:#?}"
            );
        }
        let ids: Vec<String> = app
            .strings(
                "SELECT DISTINCT event_id FROM webhook_events WHERE source = $1",
                &[&source],
            )
            .await;
        assert_eq!(ids.len(), 3 * events, "{source}: fresh ids each run");
        // Each copy was stored and applied as the originals were.
        let thrice: Vec<(String, i64)> = once.iter().map(|(s, n)| (s.clone(), 3 * n)).collect();
        assert_eq!(statuses(&app, source).await, thrice, "{source}");
    }
}

#[tokio::test]
async fn slow_the_paddle_fixtures_replay_into_their_payment_rows() {
    let app = spawn_app().await;
    let (ok, lines) = replay(&app, "paddle", &[]).await;
    assert!(ok, "{lines:#?}");
    assert_eq!(delivery_lines(&lines).len(), 7);
    let statuses = app
        .strings(
            "SELECT status FROM webhook_events WHERE source = 'paddle' ORDER BY id",
            &[],
        )
        .await;
    assert_eq!(
        statuses,
        [
            "processed",
            "ignored",
            "processed",
            "processed",
            "processed",
            "processed",
            "ignored"
        ]
    );
    assert_eq!(
        payments(&app, "paddle").await,
        rows(&[
            (
                "txn_01j8za1b2c3d4e5f6g7h8j9k0m",
                "partially_refunded",
                34800,
                17400
            ),
            ("txn_01j8zb2c3d4e5f6g7h8j9k0m1n", "failed", 2599, 0),
            ("txn_01j8zc3d4e5f6g7h8j9k0m1n2p", "disputed", 12000, 0),
        ])
    );
}

/// The payment rows of a source with their currency and customer.
async fn payment_rows(
    app: &TestApp,
    source: &str,
) -> Vec<(String, String, i64, i64, String, String)> {
    app.query(
        "SELECT payment_id, status, amount, amount_refunded, currency, customer_id
         FROM payments WHERE source = $1 ORDER BY payment_id",
        &[&source],
    )
    .await
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
    .collect()
}

/// Replays a folder twice (the second time every file is a duplicate), then
/// once with `--new-ids` (every file a new event, applied again).
async fn replay_twice_and_anew(app: &TestApp, source: &str, files: usize) {
    for round in 1..=2 {
        let (ok, lines) = replay(app, source, &[]).await;
        assert!(ok, "{source} round {round}: {lines:#?}");
        let sent = delivery_lines(&lines);
        assert_eq!(sent.len(), files, "{source}");
        let answer = if round == 1 {
            " 200 accepted  new "
        } else {
            "replayed"
        };
        assert!(sent.iter().all(|l| l.contains(answer)), "{sent:#?}");
    }
    let once = statuses(app, source).await;
    let (ok, lines) = replay(app, source, &["--new-ids"]).await;
    assert!(ok, "{source} --new-ids: {lines:#?}");
    let sent = delivery_lines(&lines);
    assert!(
        sent.iter().all(|l| l.contains(" 200 accepted  new ")),
        "{sent:#?}"
    );
    let twice: Vec<(String, i64)> = once.iter().map(|(s, n)| (s.clone(), 2 * n)).collect();
    assert_eq!(statuses(app, source).await, twice, "{source}");
}

#[tokio::test]
async fn slow_replaying_the_razorpay_fixtures_gives_the_documented_rows() {
    let app = spawn_app().await;
    replay_twice_and_anew(&app, "razorpay", 8).await;
    assert_eq!(
        statuses(&app, "razorpay").await,
        [("ignored".to_string(), 6), ("processed".to_string(), 10)]
    );
    let row = |p: &str, s: &str, a, r, cus: &str| {
        (p.into(), s.into(), a, r, "INR".to_string(), cus.to_string())
    };
    assert_eq!(
        payment_rows(&app, "razorpay").await,
        [
            row(
                "pay_OfT3kB9xQmZ2aL",
                "partially_refunded",
                50000,
                20000,
                "cust_Oc8yJ2kLmN4pQr"
            ),
            row(
                "pay_OfU8nC4yRpA7bM",
                "failed",
                129900,
                0,
                "cust_Oc9zK3lMnO5qRs"
            ),
            row(
                "pay_OfW1pD6zSqB3cN",
                "disputed",
                75000,
                0,
                "cust_OdA1L4mNoP6rSt"
            ),
        ]
    );
}

#[tokio::test]
async fn slow_replaying_the_checkout_fixtures_gives_the_documented_rows() {
    let app = spawn_app().await;
    replay_twice_and_anew(&app, "checkout", 7).await;
    assert_eq!(
        statuses(&app, "checkout").await,
        [("ignored".to_string(), 4), ("processed".to_string(), 10)]
    );
    let row = |p: &str, s: &str, a, r, cur: &str, cus: &str| {
        (p.into(), s.into(), a, r, cur.to_string(), cus.to_string())
    };
    assert_eq!(
        payment_rows(&app, "checkout").await,
        [
            row(
                "pay_mbabizu24mvu3mela5njyhpit4",
                "partially_refunded",
                6540,
                1500,
                "EUR",
                "cus_udst2tfldj6upmye2reztkmm4i"
            ),
            row(
                "pay_o4hfyvcbhq3ubmq5qxy2jzcjce",
                "failed",
                12999,
                0,
                "GBP",
                "cus_7qb3h4gcpmoevb3dplyxj66rdq"
            ),
            row(
                "pay_t6kpx2m4ezrudnr7a5ybtlqn3y",
                "disputed",
                25000,
                0,
                "USD",
                "cus_e5ffcmfsbncuvjk6yhxrwvbtpm"
            ),
        ]
    );
}

#[tokio::test]
async fn slow_replaying_the_gocardless_fixtures_gives_the_documented_rows() {
    let app = spawn_app().await;
    for round in 1..=2 {
        let (ok, lines) = replay(&app, "gocardless", &[]).await;
        assert!(ok, "round {round}: {lines:#?}");
        let sent = delivery_lines(&lines);
        // Eight requests, one of them a batch of two events.
        assert_eq!(sent.len(), 8);
        let answer = if round == 1 {
            " 200 accepted  new "
        } else {
            "replayed"
        };
        assert!(sent.iter().all(|l| l.contains(answer)), "{sent:#?}");
    }
    let once = [("ignored".to_string(), 3), ("processed".to_string(), 6)];
    assert_eq!(statuses(&app, "gocardless").await, once);
    // GoCardless sends no amounts: refunded PM01AB… stays `succeeded`.
    assert_eq!(
        payments(&app, "gocardless").await,
        rows(&[
            ("PM01AB2C3D4E5F", "succeeded", 0, 0),
            ("PM01GH6J7K8L9M", "failed", 0, 0),
            ("PM01NP0Q1R2S3T", "disputed", 0, 0),
        ])
    );
    let customer = app
        .strings(
            "SELECT customer_id FROM payments WHERE customer_id IS NOT NULL",
            &[],
        )
        .await;
    assert_eq!(customer, ["CU01NP0Q1R2S3T"]);
    // --new-ids gives every event of every file, the batch's two too, a fresh id.
    let (ok, lines) = replay(&app, "gocardless", &["--new-ids"]).await;
    assert!(ok, "{lines:#?}");
    let twice: Vec<(String, i64)> = once.iter().map(|(s, n)| (s.clone(), 2 * n)).collect();
    assert_eq!(statuses(&app, "gocardless").await, twice);
    // What `hookd sign` prints is taken.
    let file = "fixtures/gocardless/03_batch.json";
    let output = hookd(&["sign", "--source", "gocardless", file]).await;
    assert!(output.status.success(), "{output:?}");
    let headers: Vec<(String, String)> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_once(": "))
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
    let body = std::fs::read(format!("{MANIFEST}/{file}")).expect("fixture");
    let answer = app.post("gocardless", &headers, body).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.header("Idempotent-Replayed"), Some("true"));
}

#[tokio::test]
async fn slow_replaying_the_braintree_fixtures_gives_the_documented_rows_and_anew_new_ones() {
    let app = spawn_app().await;
    for round in 1..=2 {
        let (ok, lines) = replay(&app, "braintree", &[]).await;
        assert!(ok, "round {round}: {lines:#?}");
        let sent = delivery_lines(&lines);
        assert_eq!(sent.len(), 7);
        let answer = if round == 1 {
            " 200 accepted  new "
        } else {
            "replayed"
        };
        assert!(sent.iter().all(|l| l.contains(answer)), "{sent:#?}");
    }
    assert!(
        app.strings("SELECT event_id FROM webhook_events", &[])
            .await
            .contains(&"transaction_settled:b1sale01:2024-06-12T10:32:47Z".to_string())
    );
    assert_eq!(
        statuses(&app, "braintree").await,
        [("ignored".to_string(), 2), ("processed".to_string(), 5)]
    );
    let expected = rows(&[
        ("b1sale01", "partially_refunded", 2500, 1000),
        ("b2sale02", "failed", 4200, 0),
        ("b3sale03", "disputed", 9900, 0),
    ]);
    assert_eq!(payments(&app, "braintree").await, expected);
    let row = &app
        .query(
            "SELECT currency, customer_id FROM payments WHERE payment_id = 'b1sale01'",
            &[],
        )
        .await[0];
    assert_eq!(
        (row.get::<_, String>(0), row.get::<_, String>(1)),
        ("USD".to_string(), "cust_b1".to_string())
    );
    // Fresh subject ids: every file is a new event (the check's id included),
    // sales are new payments and the refund and dispute keep naming theirs.
    let (ok, lines) = replay(&app, "braintree", &["--new-ids"]).await;
    assert!(ok, "{lines:#?}");
    let sent = delivery_lines(&lines);
    assert!(
        sent.iter().all(|l| l.contains(" 200 accepted  new ")),
        "{sent:#?}"
    );
    assert_eq!(
        app.count(
            "SELECT count(DISTINCT event_id) FROM webhook_events WHERE source = 'braintree'",
            &[]
        )
        .await,
        14
    );
    assert_eq!(
        app.count(
            "SELECT count(*) FROM payments WHERE source = 'braintree'",
            &[]
        )
        .await,
        6
    );
}
