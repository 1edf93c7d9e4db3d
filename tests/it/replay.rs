//! Developers' tools: `hookd replay` and `hookd sign`, run as the real binary
//! against a test instance, with the shipped fixtures and configuration.
//! (Every source's fixtures replayed twice and anew into their documented
//! rows: the conformance suite.)

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
    // A folder stops at the first refused connection, in one line.
    let folder = hookd(&["replay", "fixtures/stripe", "--url", "http://127.0.0.1:9"]).await;
    assert!(!folder.status.success());
    let stdout = String::from_utf8_lossy(&folder.stdout);
    assert_eq!(
        stdout.matches("error: cannot connect").count(),
        1,
        "{stdout}"
    );
    let stderr = String::from_utf8_lossy(&folder.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("cannot connect to http://127.0.0.1:9")
            && stderr.contains("the 7 other file(s) were not sent"),
        "{stderr}"
    );

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
    hookd::outbound::install_crypto();
    let acceptor = crate::tls::acceptor(pki);
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
async fn slow_paypal_new_ids_are_fresh_wh_ids_in_each_body() {
    let app = spawn_app().await;
    let (ok, lines) = replay(&app, "paypal", &[]).await;
    assert!(ok, "{lines:#?}");
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

#[tokio::test]
async fn slow_what_hookd_sign_prints_for_a_gocardless_batch_is_taken() {
    let app = spawn_app().await;
    let (ok, lines) = replay(&app, "gocardless", &[]).await;
    assert!(ok, "{lines:#?}");
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
async fn slow_braintree_replays_under_its_event_ids_and_anew_with_new_subjects() {
    let app = spawn_app().await;
    let (ok, lines) = replay(&app, "braintree", &[]).await;
    assert!(ok, "{lines:#?}");
    assert!(
        app.strings("SELECT event_id FROM webhook_events", &[])
            .await
            .contains(&"transaction_settled:b1sale01:2024-06-12T10:32:47Z".to_string())
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

#[tokio::test]
async fn a_replay_whose_reader_went_away_still_sends_every_file() {
    let app = spawn_app().await;
    let files = std::fs::read_dir(format!("{MANIFEST}/fixtures/stripe"))
        .expect("fixtures")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "json"))
        })
        .count();
    // `hookd replay fixtures/stripe … | head -0`: the reader is gone before
    // the first line.
    let args = [
        "replay",
        "fixtures/stripe",
        "--source",
        "stripe",
        "--url",
        &app.base,
    ];
    let replayed = crate::support::run_hookd_unread(&args, &[]).await;
    assert!(
        replayed.status.success(),
        "{:?}: {}",
        replayed.status,
        String::from_utf8_lossy(&replayed.stderr)
    );
    let stored = app
        .count(
            "SELECT count(*) FROM webhook_events WHERE source = 'stripe'",
            &[],
        )
        .await;
    assert_eq!(
        stored,
        i64::try_from(files).expect("small"),
        "every file sent"
    );
}

#[tokio::test]
async fn slow_new_ids_are_shown_as_the_event_ids_stored() {
    let app = spawn_app().await;
    // Adyen's event id is made of the item's fresh pspReference, its code and
    // its success: the line names that, not the bare reference.
    let (ok, lines) = replay(&app, "adyen", &["--new-ids"]).await;
    assert!(ok, "{lines:#?}");
    let stored = app
        .strings(
            "SELECT event_id FROM webhook_events WHERE source = 'adyen'",
            &[],
        )
        .await;
    let sent = delivery_lines(&lines);
    assert!(!sent.is_empty());
    for line in sent {
        let shown = line.split("  ").nth(1).expect("the event id");
        assert!(stored.iter().any(|id| id == shown), "{shown} of {stored:?}");
    }
}
