//! What a team relies on when hookd faces the open internet: no live development
//! credentials, bounded inputs that never panic the server, slow clients cut off,
//! and a signed event never answered with a 5xx.

use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{
    Spawn, run_hookd_with, shipped_settings, spawn, spawn_app, spawn_with_admin_listener,
    spawn_with_settings, stripe_event,
};

#[tokio::test]
async fn slow_serve_refuses_the_shipped_credentials_beyond_loopback_with_one_line() {
    let output = run_hookd_with(&["serve"], &[("HOOKD_LISTEN", "0.0.0.0:0".into())]).await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.trim().lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("sources[0].secrets[0]") && lines[0].contains("development"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("whsec_dev"),
        "the secret itself is not printed"
    );
}

#[tokio::test]
async fn slow_the_shipped_credentials_need_development_true_even_on_loopback() {
    let shipped = hookd_kit::settings::shipped_toml_anywhere();
    let shipped = shipped.as_str();
    let development = "development = true";
    assert!(
        shipped.lines().any(|l| l.starts_with(development)),
        "hookd.toml says {development}"
    );
    // The shipped file without that line: a server's config that kept the public values.
    let config = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("no-development-{}.toml", std::process::id()));
    let text: String = shipped
        .lines()
        .filter(|l| !l.starts_with(development))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&config, text).expect("config");
    for command in ["serve", "check-config"] {
        // Loopback, as a TCP-mode proxy or an ssh tunnel would reach it. A serve
        // that started instead is killed at the deadline.
        let child = tokio::process::Command::from(crate::support::hookd_binary())
            .args([command, "--config"])
            .arg(&config)
            .env_remove("DATABASE_URL")
            .env_remove("HOOKD_LISTEN")
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("run hookd");
        let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("{command} did not stop: it served"))
            .expect("hookd's output");
        assert_eq!(output.status.code(), Some(78), "{command}: {output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let lines: Vec<&str> = stderr.trim().lines().collect();
        assert_eq!(lines.len(), 1, "{command}: {stderr}");
        assert!(
            lines[0].contains("sources[0].secrets[0]")
                && lines[0].contains("development = true")
                && !lines[0].contains("whsec_dev"),
            "{command}: {stderr}"
        );
    }
    // With it, the same values pass on loopback (process.rs serves the shipped file).
    let output = run_hookd_with(&["check-config"], &[]).await;
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let _ = std::fs::remove_file(&config);
}

#[test]
fn slow_hookd_secret_prints_a_fresh_secret_in_the_scheme_format_without_a_config() {
    let run = |scheme: &str| {
        let output = crate::support::hookd_binary()
            .args([
                "secret",
                "--scheme",
                scheme,
                "--config",
                "/nonexistent.toml",
            ])
            .output()
            .expect("run");
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout)
            .expect("utf-8")
            .trim()
            .to_string()
    };
    let first = run("standard");
    let second = run("standard");
    assert_ne!(first, second);
    let key = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        first.strip_prefix("whsec_").expect("whsec_ prefix"),
    )
    .expect("base64");
    assert_eq!(key.len(), 32);
    assert_eq!(run("github").len(), 64);
    let unknown = crate::support::hookd_binary()
        .args(["secret", "--scheme", "nosuchprovider"])
        .output()
        .expect("run");
    assert!(!unknown.status.success());
}

#[tokio::test]
async fn ages_beyond_a_hundred_years_are_400_not_a_dropped_connection() {
    let app = spawn_app().await;
    let token = "dev-viewer-token-0123456789";
    for path in [
        "/admin/api/events?since=999999999d",
        "/admin/api/events?until=999999999d",
        "/admin/api/events?since=36501d",
        "/admin/api/stats?window=999999999d",
        "/admin/api/stats?window=18446744073709551615ms",
        "/admin/api/events?cursor=OTIyMzM3MjAzNjg1NDc3NTgwNzox",
    ] {
        let response = app
            .http
            .get(format!("{}{path}", app.base))
            .bearer_auth(token)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{path}: no answer: {e}"));
        assert_eq!(response.status().as_u16(), 400, "{path}");
    }
    // The longest age accepted still answers.
    let response = app
        .http
        .get(format!("{}/admin/api/events?since=36500d", app.base))
        .bearer_auth(token)
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(
        app.deliver(
            "stripe",
            &stripe_event(
                "evt_alive",
                "customer.created",
                serde_json::json!({"id": "cus_1", "object": "customer"})
            )
        )
        .await
        .status,
        200
    );
}

/// Opens a connection, sends `head`, then one byte of body every `every`, until
/// hookd answers or closes; returns what it answered and how long that took.
async fn trickle(addr: std::net::SocketAddr, head: String, every: Duration) -> (String, Duration) {
    let started = Instant::now();
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (mut reader, mut writer) = stream.into_split();
    writer.write_all(head.as_bytes()).await.expect("head");
    let sender = tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            if writer.write_all(b"x").await.is_err() {
                return;
            }
        }
    });
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(40), reader.read_to_end(&mut answer)).await;
    sender.abort();
    (
        String::from_utf8_lossy(&answer).into_owned(),
        started.elapsed(),
    )
}

fn post_head(path: &str, length: usize) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {length}\r\n\r\n{{"
    )
}

#[tokio::test]
async fn a_trickling_body_is_cut_at_the_body_timeout() {
    let mut settings = shipped_settings();
    settings.body_timeout = Duration::from_secs(2);
    let app = spawn_with_settings(settings).await;
    let addr = app.addr();
    let every = Duration::from_millis(300);
    let (webhook, admin, oversized) = tokio::join!(
        trickle(addr, post_head("/webhooks/stripe", 1000), every),
        trickle(addr, post_head("/admin/login", 1000), every),
        trickle(addr, post_head("/webhooks/stripe", 10 * 1024 * 1024), every),
    );
    for ((answer, took), status) in [(webhook, "408"), (admin, "408"), (oversized, "413")] {
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{answer:?}"
        );
        assert!(
            took >= Duration::from_millis(1900) && took < Duration::from_secs(6),
            "cut after {took:?}"
        );
    }
    assert_eq!(
        app.count("SELECT count(*) FROM webhook_events", &[]).await,
        0
    );
}

#[tokio::test]
async fn slow_with_the_default_timeout_a_trickling_body_is_cut_within_30_seconds() {
    let app = spawn_app().await;
    let (answer, took) = trickle(
        app.addr(),
        post_head("/webhooks/stripe", 100_000),
        Duration::from_secs(1),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(took < Duration::from_secs(30), "cut after {took:?}");
}

#[tokio::test]
async fn a_trickling_head_is_cut_too() {
    let app = spawn_app().await;
    let started = Instant::now();
    let mut stream = TcpStream::connect(app.addr()).await.expect("connect");
    stream
        .write_all(b"POST /webhooks/stripe HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .expect("partial head");
    let mut closed = false;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if stream.write_all(b"X-Slow: 1\r\n").await.is_err() {
            closed = true;
            break;
        }
        let mut probe = [0u8; 512];
        if let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_millis(1), stream.read(&mut probe)).await
        {
            closed = true;
            assert!(
                n == 0 || probe.starts_with(b"HTTP/1.1 408"),
                "{:?}",
                &probe[..n]
            );
            break;
        }
    }
    assert!(closed, "still open after {:?}", started.elapsed());
    assert!(started.elapsed() < Duration::from_secs(15));
}

#[tokio::test]
async fn with_400_trickling_connections_open_deliveries_still_get_200_promptly() {
    let app = spawn_app().await;
    let addr = app.addr();
    let mut tricklers = Vec::new();
    for _ in 0..400 {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream
            .write_all(post_head("/webhooks/stripe", 100_000).as_bytes())
            .await
            .expect("head");
        tricklers.push(stream);
    }
    let keep_trickling = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            for stream in &mut tricklers {
                let _ = stream.write_all(b"x").await;
            }
        }
    });
    for i in 0..20 {
        let started = Instant::now();
        let event = stripe_event(
            &format!("evt_busy_{i}"),
            "payment_intent.succeeded",
            json!({"id": format!("pi_busy_{i}"), "amount": 100, "currency": "usd"}),
        );
        let answer = app.deliver("stripe", &event).await;
        assert_eq!(answer.status, 200);
        // A delivery queued behind the tricklers would wait for their 10 s
        // body timeout; the bound leaves a loaded machine its slack.
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
    keep_trickling.abort();
}

#[tokio::test]
async fn an_admin_listener_keeps_the_admin_pages_and_metrics_off_the_public_one() {
    let app = spawn_with_admin_listener().await;
    let admin_base = app.admin_base.clone().expect("an admin listener");
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let status = |base: &str, path: &str| {
        let request = http
            .get(format!("{base}{path}"))
            .bearer_auth("dev-viewer-token-0123456789");
        async move { request.send().await.expect("answer").status().as_u16() }
    };
    for path in ["/admin", "/admin/login", "/admin/api/events", "/metrics"] {
        assert_eq!(status(&app.base, path).await, 404, "public {path}");
    }
    assert_eq!(status(&admin_base, "/admin/api/events").await, 200);
    assert_eq!(status(&admin_base, "/metrics").await, 200);
    assert_eq!(status(&admin_base, "/admin").await, 200);
    assert_eq!(status(&admin_base, "/readyz").await, 200);
    assert_eq!(status(&app.base, "/readyz").await, 200);
    let webhook = http
        .post(format!("{admin_base}/webhooks/stripe"))
        .send()
        .await
        .expect("answer");
    assert_eq!(
        webhook.status().as_u16(),
        404,
        "webhooks stay on the public listener"
    );
    let delivered = app
        .deliver(
            "stripe",
            &stripe_event("evt_public", "customer.created", json!({"id": "cus_p"})),
        )
        .await;
    assert_eq!(delivered.status, 200);
}

fn nul_event(id: &str, object: serde_json::Value) -> serde_json::Value {
    let mut event = stripe_event(id, "payment_intent.succeeded", object);
    event["description"] = json!("before\u{0}after");
    event["we\u{0}ird"] = json!(1);
    event
}

#[tokio::test]
async fn a_signed_event_with_nul_characters_is_stored_and_answered_200_every_time() {
    let app = spawn_app().await;
    let event = nul_event(
        "evt_nul",
        json!({"id": "pi_nul", "object": "payment_intent", "amount": 500, "currency": "usd",
               "customer": "cus_\u{0}x"}),
    );
    let bytes = serde_json::to_vec(&event).expect("json");
    assert!(String::from_utf8_lossy(&bytes).contains("\\u0000"));
    let first = app.deliver("stripe", &event).await;
    assert_eq!(
        first.status,
        200,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    let again = app.deliver("stripe", &event).await;
    assert_eq!((again.status, &again.body), (200, &first.body));
    assert_eq!(again.header("Idempotent-Replayed"), Some("true"));

    let row = &app
        .query(
            "SELECT payload->>'description', body, signature_headers ? 'Stripe-Signature',
                    customer_id, status, last_error, deliveries
             FROM webhook_events WHERE event_id = 'evt_nul'",
            &[],
        )
        .await[0];
    assert_eq!(row.get::<_, String>(0), "before\u{fffd}after");
    assert_eq!(row.get::<_, Vec<u8>>(1), bytes, "the exact body is kept");
    assert!(
        row.get::<_, bool>(2),
        "with the header its signature depends on"
    );
    assert_eq!(
        row.get::<_, Option<String>>(3),
        None,
        "an unstorable id is not indexed"
    );
    // The payment handler refuses a customer id PostgreSQL cannot store: dead, not 5xx.
    assert_eq!(row.get::<_, String>(4), "dead");
    assert!(row.get::<_, String>(5).contains("NUL"));
    assert_eq!(row.get::<_, i32>(6), 2);
}

#[tokio::test]
async fn retries_apply_the_exact_body_not_its_jsonb_copy() {
    let app = spawn_app().await;
    let event = nul_event(
        "evt_nul_currency",
        json!({"id": "pi_nc", "object": "payment_intent", "amount": 500, "currency": "us\u{0}d"}),
    );
    assert_eq!(app.deliver("stripe", &event).await.status, 200);
    let id = app
        .count(
            "SELECT id FROM webhook_events WHERE event_id = 'evt_nul_currency'",
            &[],
        )
        .await;
    let retried = app.operator().retry(id, None).await;
    assert_eq!(retried.status, 200);
    // The jsonb copy says "us\u{fffd}d", which a handler could store; the event as
    // sent cannot be applied, and the retry says so again.
    assert_eq!(retried.json()["status"], "dead");
    assert_eq!(app.count("SELECT count(*) FROM payments", &[]).await, 0);
}

#[tokio::test]
async fn over_long_payment_ids_are_stored_unindexed_and_dead_not_5xx() {
    let app = spawn_app().await;
    let long = format!("pi_{}", "x".repeat(3000));
    let event = stripe_event(
        "evt_long_pi",
        "payment_intent.succeeded",
        json!({"id": long, "object": "payment_intent", "amount": 500, "currency": "usd",
               "customer": format!("cus_{}", "y".repeat(3000))}),
    );
    assert_eq!(app.deliver("stripe", &event).await.status, 200);
    let row = &app
        .query(
            "SELECT payment_id, customer_id, status FROM webhook_events
             WHERE event_id = 'evt_long_pi'",
            &[],
        )
        .await[0];
    assert_eq!(row.get::<_, Option<String>>(0), None);
    assert_eq!(row.get::<_, Option<String>>(1), None);
    assert_eq!(row.get::<_, String>(2), "dead");
}

#[tokio::test]
async fn ids_postgresql_cannot_store_are_400_with_the_same_reason_every_time() {
    let app = spawn_app().await;
    for event in [
        stripe_event("evt_\u{0}", "payment_intent.succeeded", json!({})),
        stripe_event("evt_ok", "payment_intent.\u{0}", json!({})),
    ] {
        let first = app.deliver("stripe", &event).await;
        let again = app.deliver("stripe", &event).await;
        assert_eq!(first.status, 400);
        assert!(
            first.json()["reason"]
                .as_str()
                .is_some_and(|r| r.contains("NUL")),
            "{:?}",
            first.json()
        );
        assert_eq!((again.status, again.body), (first.status, first.body));
    }
    assert_eq!(
        app.count("SELECT count(*) FROM webhook_events", &[]).await,
        0
    );
}

/// Reads until hookd closes the connection (or `within` passes); returns whether it
/// closed and what it sent.
async fn closes_within(stream: &mut TcpStream, within: Duration, trickle: &[u8]) -> (bool, String) {
    let started = Instant::now();
    let mut seen = Vec::new();
    while started.elapsed() < within {
        let mut buf = [0u8; 4096];
        match tokio::time::timeout(Duration::from_millis(500), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (true, String::from_utf8_lossy(&seen).into_owned()),
            Ok(Ok(n)) => seen.extend_from_slice(&buf[..n]),
            Err(_) => {
                if stream.write_all(trickle).await.is_err() {
                    return (true, String::from_utf8_lossy(&seen).into_owned());
                }
            }
        }
    }
    (false, String::from_utf8_lossy(&seen).into_owned())
}

/// body_timeout 2 s and handler_timeout 1 s: a connection must answer within
/// 5 + 2 + 2 × 1 + 20 = 29 s of its previous answer.
fn quick_limits() -> crate::support::Spawn {
    let mut settings = shipped_settings();
    settings.body_timeout = Duration::from_secs(2);
    settings.handler_timeout = Duration::from_secs(1);
    Spawn {
        settings,
        ..Spawn::default()
    }
}

#[tokio::test]
async fn a_slow_second_request_on_a_kept_alive_connection_is_cut() {
    let app = spawn(quick_limits()).await;
    let mut stream = TcpStream::connect(app.addr()).await.expect("connect");
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .expect("first request");
    let mut first = [0u8; 1024];
    let n = stream.read(&mut first).await.expect("first answer");
    assert!(first[..n].starts_with(b"HTTP/1.1 200"));
    let started = Instant::now();
    stream.write_all(b"G").await.expect("second request begins");
    let (closed, _) = closes_within(&mut stream, Duration::from_secs(45), b"E").await;
    assert!(closed, "still open after {:?}", started.elapsed());
    assert!(
        started.elapsed() < Duration::from_secs(35),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn an_endless_chunked_body_after_an_early_answer_is_cut() {
    let app = spawn(quick_limits()).await;
    let mut stream = TcpStream::connect(app.addr()).await.expect("connect");
    stream
        .write_all(
            b"POST /webhooks/nosuch HTTP/1.1\r\nHost: 127.0.0.1\r\n\
              Transfer-Encoding: chunked\r\n\r\n1\r\nx\r\n",
        )
        .await
        .expect("head");
    let started = Instant::now();
    let (closed, seen) = closes_within(&mut stream, Duration::from_secs(45), b"1\r\nx\r\n").await;
    assert!(seen.starts_with("HTTP/1.1 404"), "{seen:?}");
    assert!(closed, "still open after {:?}", started.elapsed());
    assert!(
        started.elapsed() < Duration::from_secs(35),
        "{:?}",
        started.elapsed()
    );
}

/// Reads an answer's status line, if one comes within `within`.
async fn status_within(stream: &mut TcpStream, within: Duration) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    match tokio::time::timeout(within, stream.read(&mut buf)).await {
        Ok(Ok(n)) if n > 0 => String::from_utf8_lossy(&buf[..n])
            .lines()
            .next()
            .map(str::to_string),
        _ => None,
    }
}

#[tokio::test]
async fn large_bodies_that_stall_share_a_memory_budget_and_small_deliveries_never_wait_for_it() {
    let mut settings = shipped_settings();
    settings.max_body_memory = 2 * 1024 * 1024;
    let app = spawn_with_settings(settings).await;
    let addr = app.addr();
    // Each sends 900 KiB of a 1 MiB body, then stalls: the first two fit the
    // 2 MiB budget (836 KiB each counts, past the first 64 KiB), the rest do not.
    let mut stalled = Vec::new();
    for _ in 0..6 {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream
            .write_all(post_head("/webhooks/stripe", 1024 * 1024).as_bytes())
            .await
            .expect("head");
        stream
            .write_all(&vec![b' '; 900 * 1024])
            .await
            .expect("body");
        stalled.push(stream);
    }
    // Read side by side: a refusal comes at once, long before the 10 s body
    // timeout; the bound is a loaded machine's slack.
    let answers = futures_util::future::join_all(
        stalled
            .iter_mut()
            .map(|stream| status_within(stream, Duration::from_secs(5))),
    )
    .await;
    let mut refused = 0;
    for status in answers.into_iter().flatten() {
        assert!(status.contains(" 503 "), "{status}");
        refused += 1;
    }
    assert_eq!(
        refused, 4,
        "all but two were refused at once, long before the body timeout"
    );

    // Small deliveries never count against it, spent or not.
    let event = stripe_event("evt_small", "customer.created", json!({"id": "cus_1"}));
    assert_eq!(app.deliver("stripe", &event).await.status, 200);

    // Once the stalled bodies are gone, a large delivery fits again.
    drop(stalled);
    let padding = "x".repeat(900 * 1024);
    let large = stripe_event(
        "evt_large",
        "customer.created",
        json!({"id": "cus_2", "padding": padding}),
    );
    crate::support::wait_for(
        "a large delivery to be accepted",
        Duration::from_secs(20),
        || async { (app.deliver("stripe", &large).await.status == 200).then_some(()) },
    )
    .await;
}
