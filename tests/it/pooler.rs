//! Behind Debian's PgBouncer in transaction mode (four server connections for
//! every client): with `pgbouncer=true` hookd keeps nothing on a server session,
//! so two `migrate`s at once, two instances sharing every delivery, the
//! dispatcher and two purge passes all work; without it, the first statement
//! the pooler loses says in one log line what to add.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::process::{Hookd, free_port, payment_event, stripe_signer, write_config};
use crate::support::{TestDb, cluster, connect, run_hookd, wait_for};
use hookd_kit::pooler::PgBouncer;

const EVENTS: usize = 300;

/// Every statement error a session-bound feature gives behind the pooler.
fn session_errors(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| {
            // The codes as words: a request id's hex may hold "26000".
            let code = |c: &str| {
                l.split(|ch: char| !ch.is_ascii_alphanumeric())
                    .any(|w| w == c)
            };
            l.contains("prepared statement")
                || code("26000")
                || code("42P05")
                || l.contains("advisory")
        })
        .collect()
}

async fn hookd_command(args: &[&str], url: &str) -> std::process::Output {
    run_hookd(args, Some(url.to_string())).await
}

#[tokio::test]
async fn slow_two_instances_behind_pgbouncer_share_every_delivery_and_purge_twice() {
    let db = TestDb::empty().await;
    let bouncer = PgBouncer::start(cluster().postgres(), "share");
    let url = bouncer.url(&db.name, true);

    // Two migrations at once: the lock lasts a transaction, not a session.
    let (first, second) = tokio::join!(
        hookd_command(&["migrate"], &url),
        hookd_command(&["migrate"], &url)
    );
    for run in [&first, &second] {
        assert!(
            run.status.success(),
            "migrate through the pooler: {}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
    let check = connect(db.config()).await;
    let versions: i64 = check
        .query_one(
            "SELECT count(DISTINCT version) FROM hookd_schema_migrations",
            &[],
        )
        .await
        .expect("ledger")
        .get(0);
    assert_eq!(versions as usize, hookd::store::MIGRATIONS.len());

    let ports = [free_port(), free_port()];
    let configs = [
        write_config(ports[0], "pooler-a"),
        write_config(ports[1], "pooler-b"),
    ];
    let a = Hookd::start_against(&configs[0], ports[0], &url, "info").await;
    let b = Hookd::start_against(&configs[1], ports[1], &url, "info").await;

    // Each event once through each instance, both copies in flight together.
    let sign = Arc::new(stripe_signer());
    let http = reqwest::Client::new();
    let statuses = Arc::new(std::sync::Mutex::new(Vec::new()));
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let senders = (0..16).map(|_| {
        let (sign, http, statuses, next) =
            (sign.clone(), http.clone(), statuses.clone(), next.clone());
        let bases = [a.base.clone(), b.base.clone()];
        tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if i >= EVENTS {
                    return;
                }
                let body = serde_json::to_vec(&payment_event(i)).expect("json");
                let headers = sign(&body);
                let send = |base: &str| {
                    let mut request = http
                        .post(format!("{base}/webhooks/stripe"))
                        .body(body.clone());
                    for (name, value) in &headers {
                        request = request.header(name, value);
                    }
                    async move { request.send().await.map(|r| r.status().as_u16()) }
                };
                let (one, other) = tokio::join!(send(&bases[0]), send(&bases[1]));
                statuses
                    .lock()
                    .expect("lock")
                    .extend([one.ok(), other.ok()]);
            }
        })
    });
    for sender in futures_util::future::join_all(senders).await {
        sender.expect("sender");
    }
    let statuses = std::mem::take(&mut *statuses.lock().expect("lock"));
    let not_ok: Vec<_> = statuses.iter().filter(|s| **s != Some(200)).collect();
    assert_eq!(statuses.len(), 2 * EVENTS);
    assert!(not_ok.is_empty(), "every answer 200: {not_ok:?}");

    let totals = check
        .query_one(
            "SELECT count(*),
                    count(*) FILTER (WHERE deliveries = 2 AND attempts = 1 AND status = 'processed'),
                    (SELECT count(*) FROM payments WHERE succeeded),
                    (SELECT count(*) FROM webhook_event_attempts)
             FROM webhook_events",
            &[],
        )
        .await
        .expect("totals");
    let counts: (i64, i64, i64, i64) = (totals.get(0), totals.get(1), totals.get(2), totals.get(3));
    let events = EVENTS as i64;
    assert_eq!(
        counts,
        (events, events, events, events),
        "(rows, rows delivered twice and applied once, payments, attempts)"
    );

    // Two passes in a row: the first lease is released, the second takes it.
    for pass in 1..=2 {
        let purge = hookd_command(&["purge"], &url).await;
        assert!(
            purge.status.success(),
            "purge pass {pass}: {}",
            String::from_utf8_lossy(&purge.stderr)
        );
        let errors = session_errors(std::str::from_utf8(&purge.stderr).unwrap_or_default())
            .into_iter()
            .map(str::to_string)
            .collect::<Vec<_>>();
        assert!(errors.is_empty(), "purge pass {pass}: {errors:?}");
    }

    // The desk reads through the pooler too.
    let history = reqwest::Client::new()
        .get(format!("{}/admin/api/events?limit=5", a.base))
        .bearer_auth(hookd_kit::admin::VIEWER_TOKEN)
        .send()
        .await
        .expect("history");
    assert_eq!(history.status(), 200);

    for (hookd, config) in [(a, &configs[0]), (b, &configs[1])] {
        hookd.signal(Signal::SIGTERM);
        assert!(hookd.wait().await.success());
        let log = std::fs::read_to_string(config.with_extension("log")).expect("log");
        assert!(
            log.contains("pgbouncer=true"),
            "says it runs behind a pooler"
        );
        assert!(
            session_errors(&log).is_empty(),
            "{}: {:?}",
            config.display(),
            session_errors(&log)
        );
    }
}

#[tokio::test]
async fn slow_behind_pgbouncer_without_the_flag_one_log_line_says_to_add_it() {
    let db = TestDb::create().await;
    let bouncer = PgBouncer::start(cluster().postgres(), "unflagged");
    let url = bouncer.url(&db.name, false);
    let port = free_port();
    let config = write_config(port, "pooler-unflagged");
    let hookd = Hookd::start_against(&config, port, &url, "warn").await;
    let log_path = config.with_extension("log");
    let sign = stripe_signer();
    let http = reqwest::Client::new();
    let (base, log_path, sign, http) = (&hookd.base, &log_path, &sign, &http);
    let statuses = std::sync::Mutex::new(Vec::new());
    let statuses = &statuses;
    // Concurrent deliveries spread statements over the server sessions.
    let send_some = || async move {
        let sends = (0..8).map(|i| async move {
            let body = serde_json::to_vec(&payment_event(i)).expect("json");
            let mut request = http
                .post(format!("{base}/webhooks/stripe"))
                .body(body.clone());
            for (name, value) in sign(&body) {
                request = request.header(name, value);
            }
            let status = request.send().await.map(|r| r.status().as_u16()).ok();
            statuses.lock().expect("lock").push(status);
        });
        futures_util::future::join_all(sends).await;
    };
    wait_for(
        "the hint to add pgbouncer=true",
        Duration::from_secs(60),
        || async move {
            send_some().await;
            hint_lines(log_path)
        },
    )
    .await;
    // More of the same within the minute: still one line.
    send_some().await;
    let hint = hint_lines(log_path).unwrap_or_default();
    assert_eq!(hint.len(), 1, "one line at most once a minute: {hint:?}");
    // What the pooler broke is unavailable (the provider retries), never a 500.
    let statuses = std::mem::take(&mut *statuses.lock().expect("lock"));
    assert!(
        statuses.iter().all(|s| matches!(s, Some(200) | Some(503))),
        "only 200 or 503: {statuses:?}"
    );
    hookd.signal(Signal::SIGTERM);
    assert!(hookd.wait().await.success());
}

/// Behind the pooler no session setting holds: a statement outside a
/// transaction (a lone delivery of an event nothing handles is one
/// autocommitted statement) is still cut at hookd's 30 s statement timeout,
/// answered 503, instead of waiting on a row lock for as long as it is held.
#[tokio::test]
async fn slow_behind_pgbouncer_a_statement_outside_a_transaction_is_cut_at_the_statement_timeout() {
    let db = TestDb::create().await;
    let bouncer = PgBouncer::start(cluster().postgres(), "bounded");
    let url = bouncer.url(&db.name, true);
    let port = free_port();
    let config = write_config(port, "pooler-bounded");
    let hookd = Hookd::start_against(&config, port, &url, "warn").await;
    let sign = stripe_signer();
    let http = reqwest::Client::new();
    let body = serde_json::to_vec(&crate::support::stripe_event(
        "evt_outside",
        "customer.created",
        serde_json::json!({"id": "cus_outside"}),
    ))
    .expect("json");
    let deliver = || {
        let mut request = http
            .post(format!("{}/webhooks/stripe", hookd.base))
            .body(body.clone());
        for (name, value) in sign(&body) {
            request = request.header(name, value);
        }
        request.send()
    };
    assert_eq!(deliver().await.expect("first").status(), 200);
    // A resend counts itself on the stored row, which another transaction holds.
    let holder = connect(db.config()).await;
    holder
        .batch_execute(
            "BEGIN;
             SELECT 1 FROM webhook_events WHERE event_id = 'evt_outside' FOR UPDATE;",
        )
        .await
        .expect("hold the row");
    // Uncut, it would wait until hookd closes the connection unanswered (45 s).
    let cut = tokio::time::timeout(Duration::from_secs(60), deliver())
        .await
        .ok()
        .and_then(Result::ok)
        .map(|answer| answer.status().as_u16());
    assert_eq!(cut, Some(503), "the resend cut at the statement timeout");
    holder.batch_execute("ROLLBACK").await.expect("release");
    let again = deliver().await.expect("again");
    assert_eq!(again.status(), 200);
    let deliveries: i32 = connect(db.config())
        .await
        .query_one(
            "SELECT deliveries FROM webhook_events WHERE event_id = 'evt_outside'",
            &[],
        )
        .await
        .expect("row")
        .get(0);
    assert_eq!(deliveries, 2, "the cut resend counted nothing");
    hookd.signal(Signal::SIGTERM);
    assert!(hookd.wait().await.success());
}

fn hint_lines(log: &Path) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(log).ok()?;
    let lines: Vec<String> = text
        .lines()
        .filter(|l| l.contains("add pgbouncer=true to DATABASE_URL"))
        .map(str::to_string)
        .collect();
    (!lines.is_empty()).then_some(lines)
}

#[tokio::test]
async fn slow_the_gateway_behind_pgbouncer_sends_each_key_upstream_once_and_stores_every_answer() {
    // Concurrent requests' claims and stored answers, in batches sent whole
    // (BEGIN with the limits, the writes, COMMIT) or alone: behind the pooler
    // nothing of either may lean on the server session.
    let db = TestDb::empty().await;
    let bouncer = PgBouncer::start(cluster().postgres(), "gateway");
    let url = bouncer.url(&db.name, true);
    assert!(hookd_command(&["migrate"], &url).await.status.success());
    let upstream = crate::support::upstream::Upstream::created().await;
    let (port, gateway_port) = (free_port(), free_port());
    let config = write_config(port, "pooler-gateway");
    let text = std::fs::read_to_string(&config).expect("config");
    let route = crate::gateway::route("payments", "/payments", &upstream.url, "");
    std::fs::write(
        &config,
        format!("{text}\n[gateway]\nlisten = \"127.0.0.1:{gateway_port}\"\n{route}"),
    )
    .expect("config");
    let _hookd = Hookd::start_against(&config, port, &url, "info").await;

    let http = reqwest::Client::new();
    let calls: Vec<_> = (0..90)
        .map(|i| {
            let http = http.clone();
            tokio::spawn(async move {
                http.post(format!("http://127.0.0.1:{gateway_port}/payments"))
                    .header("Idempotency-Key", format!("pooled-{}", i % 30))
                    .header("Authorization", "Bearer sk_test_pooled")
                    .header("Content-Type", "application/json")
                    .body(r#"{"amount": 1000, "currency": "EUR"}"#)
                    .send()
                    .await
                    .expect("request")
                    .status()
                    .as_u16()
            })
        })
        .collect();
    for call in calls {
        let status = call.await.expect("call");
        assert!(matches!(status, 201 | 409), "answered {status}");
    }
    assert_eq!(upstream.calls(), 30, "each key once");
    let log = std::fs::read_to_string(config.with_extension("log")).expect("log");
    assert!(session_errors(&log).is_empty(), "{log}");
    // Every key stored its answer.
    let check = connect(db.config()).await;
    let completed: i64 = check
        .query_one(
            "SELECT count(*) FROM api_idempotency_keys WHERE state = 'completed'",
            &[],
        )
        .await
        .expect("keys")
        .get(0);
    assert_eq!(completed, 30);
}
