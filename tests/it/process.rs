//! The real `hookd serve` binary: SIGTERM lets a delivery in flight finish, then
//! exits 0; through `shutdown_delay` it is unready yet serves on (a second
//! signal skips the rest), and `shutdown_grace` bounds the drain; a kill -9 under load loses nothing that was acknowledged and applies
//! nothing twice; the embedded cluster is found where hookd put it, shared with a
//! command run beside `serve`, and adopted after a `serve` was killed.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::support::{ClusterGuard, TestDb, cluster, stripe_event, wait_for};

pub struct Hookd {
    child: Option<Child>,
    pub base: String,
}

impl Drop for Hookd {
    fn drop(&mut self) {
        // A test that failed half-way leaves no server behind.
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub use hookd_kit::pooler::free_port;

/// The shipped configuration, listening on `port`, written where the child can read it.
pub(crate) fn write_config(port: u16, name: &str) -> PathBuf {
    write_config_with(port, name, "")
}

/// The same with `handler_timeout` replaced when `handler_timeout` is not empty.
fn write_config_with(port: u16, name: &str, handler_timeout: &str) -> PathBuf {
    let mut keys = Vec::new();
    if !handler_timeout.is_empty() {
        keys.push(("handler_timeout", handler_timeout));
    }
    write_config_setting(port, name, &keys)
}

/// The shipped configuration on `port` with each of these duration keys set to
/// its value (each must be in the shipped file).
pub fn write_config_setting(port: u16, name: &str, keys: &[(&str, &str)]) -> PathBuf {
    let mut text = hookd_kit::settings::shipped_toml_on_port(port);
    for (key, value) in keys {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{key} = ")))
            .unwrap_or_else(|| panic!("no {key} in hookd.toml"))
            .to_string();
        text = text.replace(&line, &format!("{key} = \"{value}\""));
    }
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{name}-{}.toml", std::process::id()));
    std::fs::write(&path, text).expect("config");
    path
}

impl Hookd {
    /// The child serving on `port`, once it answers `/readyz` (within `within`).
    async fn started(child: Child, port: u16, within: Duration) -> Hookd {
        // A test run alone may build no other client first.
        hookd::outbound::install_crypto();
        let hookd = Hookd {
            child: Some(child),
            base: format!("http://127.0.0.1:{port}"),
        };
        hookd.ready(within).await;
        hookd
    }

    async fn start(config: &Path, port: u16, db: &TestDb) -> Hookd {
        Self::start_logging(config, port, db, "warn").await
    }

    /// `hookd serve` against `db`, logging at `level` to the config's `.log` file.
    async fn start_logging(config: &Path, port: u16, db: &TestDb, level: &str) -> Hookd {
        Self::start_against(config, port, &cluster().connection_string(&db.name), level).await
    }

    /// `hookd serve` with this `DATABASE_URL`, logging at `level` to the config's
    /// `.log` file.
    pub async fn start_against(config: &Path, port: u16, database_url: &str, level: &str) -> Hookd {
        let env = [("DATABASE_URL", database_url.to_string())];
        Self::start_with_env(config, port, &env, level).await
    }

    /// `hookd serve` with these environment variables, logging at `level` to
    /// the config's `.log` file.
    pub async fn start_with_env(
        config: &Path,
        port: u16,
        env: &[(&str, String)],
        level: &str,
    ) -> Hookd {
        let log = std::fs::File::create(config.with_extension("log")).expect("log file");
        let child = crate::support::hookd_binary()
            .args(["serve", "--config"])
            .arg(config)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("RUST_LOG", level)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn hookd");
        Hookd::started(child, port, Duration::from_secs(30)).await
    }

    pub async fn ready(&self, within: Duration) {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .expect("client");
        let url = format!("{}/readyz", self.base);
        let (http, url) = (&http, url.as_str());
        wait_for("hookd to be ready", within, || async move {
            match http.get(url).send().await {
                Ok(r) if r.status() == 200 => Some(()),
                _ => None,
            }
        })
        .await;
    }

    pub fn signal(&self, signal: Signal) {
        let child = self.child.as_ref().expect("running");
        let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
        kill(pid, signal).expect("signal");
    }

    /// Its peak resident memory so far (VmHWM), in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        let child = self.child.as_ref().expect("running");
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", child.id())).expect("status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM")
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Its exit status; fails if it has not exited within 60 s.
    pub async fn wait(mut self) -> std::process::ExitStatus {
        let child = self.child.as_mut().expect("running");
        let status = wait_for("hookd to exit", Duration::from_secs(60), || {
            std::future::ready(child.try_wait().expect("try_wait"))
        })
        .await;
        self.child = None;
        status
    }
}

pub fn payment_event(i: usize) -> Value {
    stripe_event(
        &format!("evt_load_{i}"),
        "payment_intent.succeeded",
        json!({"id": format!("pi_load_{i}"), "object": "payment_intent", "amount": 100 + i,
               "currency": "usd"}),
    )
}

/// What the senders of a load saw.
#[derive(Default)]
struct Load {
    /// Events answered 200.
    acked: Vec<usize>,
    /// Requests answered otherwise, or not at all.
    refused: usize,
}

/// Sends events `0..count` with `concurrency` senders.
async fn send_load(
    base: String,
    headers_for: impl Fn(&[u8]) -> Vec<(String, String)> + Send + Sync + 'static,
    count: usize,
    concurrency: usize,
    load: Arc<Mutex<Load>>,
) {
    let headers_for = Arc::new(headers_for);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let http = reqwest::Client::new();
    let senders = (0..concurrency).map(|_| {
        let (next, load, http, headers_for) = (
            next.clone(),
            load.clone(),
            http.clone(),
            headers_for.clone(),
        );
        let url = format!("{base}/webhooks/stripe");
        tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if i >= count {
                    return;
                }
                let body = serde_json::to_vec(&payment_event(i)).expect("json");
                let mut request = http.post(&url).body(body.clone());
                for (name, value) in headers_for(&body) {
                    request = request.header(name, value);
                }
                let ok = matches!(request.send().await, Ok(r) if r.status() == 200);
                let mut load = load.lock().expect("lock");
                if ok {
                    load.acked.push(i);
                } else {
                    load.refused += 1;
                }
            }
        })
    });
    for sender in futures_util::future::join_all(senders).await {
        sender.expect("sender");
    }
}

pub fn stripe_signer() -> impl Fn(&[u8]) -> Vec<(String, String)> + Send + Sync + 'static {
    let settings = crate::support::shipped_settings();
    let source = settings.source("stripe").expect("stripe").clone();
    move |body: &[u8]| {
        hookd::simulate::sign_delivery(
            &source,
            body,
            Default::default(),
            chrono::Utc::now().timestamp(),
        )
        .expect("sign")
        .headers
    }
}

async fn query(db: &TestDb, sql: &str) -> Vec<tokio_postgres::Row> {
    crate::support::connect(db.config())
        .await
        .query(sql, &[])
        .await
        .expect("query")
}

#[tokio::test]
async fn slow_kill_9_under_load_loses_no_acknowledged_event_and_applies_none_twice() {
    let db = TestDb::create().await;
    let port = free_port();
    let config = write_config(port, "kill9");
    let hookd = Hookd::start(&config, port, &db).await;
    let load = Arc::new(Mutex::new(Load::default()));
    const EVENTS: usize = 600;
    let sending = tokio::spawn(send_load(
        hookd.base.clone(),
        stripe_signer(),
        EVENTS,
        16,
        load.clone(),
    ));
    wait_for(
        "150 acknowledged deliveries",
        Duration::from_secs(60),
        || std::future::ready((load.lock().expect("lock").acked.len() >= 150).then_some(())),
    )
    .await;
    hookd.signal(Signal::SIGKILL);
    let _ = hookd.wait().await;
    sending.await.expect("load");
    let acked: Vec<usize> = load.lock().expect("lock").acked.clone();
    assert!(
        acked.len() >= 150 && acked.len() < EVENTS,
        "killed mid-load: {}",
        acked.len()
    );

    let hookd = Hookd::start(&config, port, &db).await;
    let stored: Vec<String> = query(&db, "SELECT event_id FROM webhook_events")
        .await
        .iter()
        .map(|r| r.get(0))
        .collect();
    for i in &acked {
        assert!(
            stored.contains(&format!("evt_load_{i}")),
            "acknowledged evt_load_{i} is stored"
        );
    }
    // Effects and events committed together: one attempt and one payment per event.
    let mismatched = query(
        &db,
        "SELECT e.event_id FROM webhook_events e
         LEFT JOIN payments p ON p.source = e.source AND p.payment_id = e.payment_id
         WHERE e.status <> 'processed' OR e.attempts <> 1 OR p.succeeded IS NOT TRUE
            OR (SELECT count(*) FROM webhook_event_attempts a WHERE a.webhook_event_id = e.id) <> 1",
    )
    .await;
    assert!(
        mismatched.is_empty(),
        "{} events without exactly one effect",
        mismatched.len()
    );
    let orphans = query(
        &db,
        "SELECT payment_id FROM payments p WHERE NOT EXISTS
           (SELECT 1 FROM webhook_events e WHERE e.source = p.source AND e.payment_id = p.payment_id)",
    )
    .await;
    assert!(orphans.is_empty(), "no effect without its stored event");

    // The provider retries everything it did not see acknowledged (and more).
    let again = Arc::new(Mutex::new(Load::default()));
    send_load(
        hookd.base.clone(),
        stripe_signer(),
        EVENTS,
        16,
        again.clone(),
    )
    .await;
    let again = std::mem::take(&mut *again.lock().expect("lock"));
    assert_eq!((again.acked.len(), again.refused), (EVENTS, 0));
    let totals = &query(
        &db,
        "SELECT (SELECT count(*) FROM webhook_events), (SELECT count(*) FROM payments),
                (SELECT count(*) FROM webhook_event_attempts),
                (SELECT sum(deliveries) FROM webhook_events)::bigint",
    )
    .await[0];
    let counts: (i64, i64, i64) = (totals.get(0), totals.get(1), totals.get(2));
    assert_eq!(counts, (EVENTS as i64, EVENTS as i64, EVENTS as i64));
    assert!(totals.get::<_, i64>(3) >= (EVENTS + acked.len()) as i64);

    hookd.signal(Signal::SIGTERM);
    assert!(hookd.wait().await.success());
}

/// A signed Stripe delivery of payment `payment_id` succeeding (4200 USD),
/// event `event_id`: the same body each time.
fn signed_payment(hookd: &Hookd, event_id: &str, payment_id: &str) -> reqwest::RequestBuilder {
    let event = stripe_event(
        event_id,
        "payment_intent.succeeded",
        json!({"id": payment_id, "object": "payment_intent", "amount": 4200, "currency": "usd"}),
    );
    let body = serde_json::to_vec(&event).expect("json");
    let mut request = reqwest::Client::new()
        .post(format!("{}/webhooks/stripe", hookd.base))
        .body(body.clone());
    for (name, value) in stripe_signer()(&body) {
        request = request.header(name, value);
    }
    request
}

/// Sends a signed payment delivery `event_id` whose payment row `payment_id` the
/// test holds locked, so its handler waits until the returned session commits;
/// returns once it waits, with that session and the request's task.
async fn held_in_its_handler(
    hookd: &Hookd,
    db: &TestDb,
    event_id: &str,
    payment_id: &str,
) -> (
    tokio_postgres::Client,
    tokio::task::JoinHandle<reqwest::Result<reqwest::Response>>,
) {
    let holder =
        crate::support::hold_payment_row(crate::support::connect(db.config()).await, payment_id)
            .await;
    let sent = tokio::spawn(signed_payment(hookd, event_id, payment_id).send());
    let waiting = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = '{}' AND application_name = 'hookd' \
         AND wait_event_type = 'Lock'",
        db.name
    );
    let waiting = waiting.as_str();
    wait_for(
        "the handler to wait on the locked payment",
        Duration::from_secs(20),
        || async move { (query(db, waiting).await[0].get::<_, i64>(0) > 0).then_some(()) },
    )
    .await;
    (holder, sent)
}

#[tokio::test]
async fn slow_sigterm_lets_a_delivery_in_flight_finish_and_exits_zero() {
    let db = TestDb::create().await;
    let port = free_port();
    // A handler held by the test must not run into its time limit meanwhile.
    let config = write_config_with(port, "sigterm", "60s");
    let hookd = Hookd::start_logging(&config, port, &db, "info").await;

    // Before the signal: a load, each delivery answered before the next is sent.
    let load = Arc::new(Mutex::new(Load::default()));
    send_load(hookd.base.clone(), stripe_signer(), 100, 8, load.clone()).await;
    let before = std::mem::take(&mut *load.lock().expect("lock"));
    assert_eq!(
        (before.acked.len(), before.refused),
        (100, 0),
        "every delivery sent before the signal was answered 200"
    );

    // A delivery whose handler is in flight when the signal arrives: its payment
    // row is locked by the test, so the payments handler waits on it.
    let (holder, slow) = held_in_its_handler(&hookd, &db, "evt_slow", "pi_slow").await;

    hookd.signal(Signal::SIGTERM);
    // It stops accepting: a new connection is refused...
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    wait_for(
        "the listener to close",
        Duration::from_secs(20),
        || async move {
            match tokio::net::TcpStream::connect(addr).await {
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Some(()),
                _ => None,
            }
        },
    )
    .await;
    // ...while the delivery in flight still waits for its handler.
    assert!(!slow.is_finished(), "answered before its handler finished");
    holder.batch_execute("COMMIT").await.expect("release");

    let response = slow
        .await
        .expect("join")
        .expect("the delivery in flight is answered");
    let status = response.status().as_u16();
    let answer = response.bytes().await.expect("body").to_vec();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    assert_eq!(answer, br#"{"status":"accepted","event_id":"evt_slow"}"#);
    let exit = tokio::time::timeout(Duration::from_secs(40), hookd.wait())
        .await
        .expect("hookd stops within its grace period");
    assert!(exit.success(), "exit status {exit:?}");

    let slow_row = &query(
        &db,
        "SELECT e.status, e.attempts, p.succeeded, p.amount FROM webhook_events e
         JOIN payments p ON p.source = e.source AND p.payment_id = e.payment_id
         WHERE e.event_id = 'evt_slow'",
    )
    .await[0];
    assert_eq!(
        (
            slow_row.get::<_, String>(0),
            slow_row.get::<_, i32>(1),
            slow_row.get::<_, bool>(2),
            slow_row.get::<_, i64>(3)
        ),
        ("processed".to_string(), 1, true, 4200),
        "the delivery in flight was applied and committed"
    );
    let processed = query(
        &db,
        "SELECT count(*) FROM webhook_events WHERE status = 'processed' AND event_id LIKE 'evt_load_%'",
    )
    .await[0]
        .get::<_, i64>(0);
    assert_eq!(processed, 100, "every acknowledged event was committed");
    let log = std::fs::read_to_string(config.with_extension("log")).expect("log");
    assert!(
        log.contains("SIGTERM: no longer accepting; finishing in-flight work"),
        "{log}"
    );
    assert!(log.contains("hookd stopped"), "{log}");
}

/// `path`'s answer from `base`: its status, and its body as JSON (`Null` if none).
pub async fn get(base: &str, path: &str) -> (u16, Value) {
    let answer = reqwest::Client::new()
        .get(format!("{base}{path}"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap_or(Value::Null))
}

/// Waits (5 s at most: it is at once, and the rest is a loaded machine's
/// slack) until `/readyz` says hookd is stopping.
async fn readyz_says_stopping(base: &str) {
    wait_for(
        "/readyz to answer 503 shutting down",
        Duration::from_secs(5),
        || async {
            let (status, body) = get(base, "/readyz").await;
            (status == 503 && body["reason"] == "shutting down").then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn slow_sigterm_makes_readyz_503_and_serves_on_through_shutdown_delay_then_exits_zero() {
    // Long enough for the checks below to run within it on a loaded machine.
    const DELAY: Duration = Duration::from_secs(10);
    let db = TestDb::create().await;
    let port = free_port();
    let config = write_config_setting(port, "delay", &[("shutdown_delay", "10s")]);
    let hookd = Hookd::start_logging(&config, port, &db, "info").await;
    assert_eq!(get(&hookd.base, "/readyz").await.0, 200);

    let signalled = std::time::Instant::now();
    hookd.signal(Signal::SIGTERM);
    readyz_says_stopping(&hookd.base).await;
    assert_eq!(get(&hookd.base, "/healthz").await.0, 200, "alive");
    // The balancer has not noticed yet: what it still sends is served in full.
    let load = Arc::new(Mutex::new(Load::default()));
    send_load(hookd.base.clone(), stripe_signer(), 40, 8, load.clone()).await;
    let during = std::mem::take(&mut *load.lock().expect("lock"));
    assert_eq!(
        (during.acked.len(), during.refused),
        (40, 0),
        "every delivery sent during the delay was answered 200"
    );
    assert_eq!(get(&hookd.base, "/readyz").await.0, 503, "still unready");
    assert_eq!(get(&hookd.base, "/healthz").await.0, 200, "still alive");
    assert!(
        signalled.elapsed() < DELAY,
        "the checks above ran within the delay (a very slow machine?): {:?}",
        signalled.elapsed()
    );

    // Then it stops by itself, well within its grace.
    let exit = tokio::time::timeout(Duration::from_secs(30), hookd.wait())
        .await
        .expect("hookd exits after the delay by itself");
    assert!(exit.success(), "exit status {exit:?}");
    assert!(signalled.elapsed() >= DELAY, "it served through the delay");
    let processed = query(
        &db,
        "SELECT count(*) FROM webhook_events WHERE status = 'processed' AND event_id LIKE 'evt_load_%'",
    )
    .await[0]
        .get::<_, i64>(0);
    assert_eq!(processed, 40, "every delivery of the delay was stored");
    let log = std::fs::read_to_string(config.with_extension("log")).expect("log");
    for phase in [
        "SIGTERM: /readyz answers 503; serving on for 10s (shutdown_delay)",
        "SIGTERM: no longer accepting; finishing in-flight work (at most 30s, shutdown_grace)",
        "hookd stopped",
    ] {
        assert!(log.contains(phase), "{phase}:\n{log}");
    }
}

#[tokio::test]
async fn slow_a_second_signal_skips_the_rest_of_shutdown_delay() {
    let db = TestDb::create().await;
    let port = free_port();
    let config = write_config_setting(port, "hurry", &[("shutdown_delay", "10m")]);
    let hookd = Hookd::start_logging(&config, port, &db, "info").await;
    hookd.signal(Signal::SIGTERM);
    readyz_says_stopping(&hookd.base).await;
    // Ctrl-C at the terminal, twice.
    hookd.signal(Signal::SIGINT);
    let exit = tokio::time::timeout(Duration::from_secs(30), hookd.wait())
        .await
        .expect("the second signal ended the delay");
    assert!(exit.success(), "exit status {exit:?}");
    let log = std::fs::read_to_string(config.with_extension("log")).expect("log");
    assert!(
        log.contains("SIGINT again: skipping the rest of shutdown_delay"),
        "{log}"
    );
}

/// `hookd serve` on `database_url` (handler_timeout 60 s, shutdown_grace 2 s)
/// with payment `payment_id`'s delivery `event_id` held in its handler, then
/// SIGTERM: it exits 0 at the end of its grace, the delivery unacknowledged.
/// Returns the configuration (its port, its log beside it) and the session
/// holding the payment row.
async fn cut_off_at_shutdown(
    name: &str,
    database_url: &str,
    db: &TestDb,
    event_id: &str,
    payment_id: &str,
) -> (PathBuf, u16, tokio_postgres::Client) {
    let port = free_port();
    // The handler could wait a minute; the grace is two seconds.
    let config = write_config_setting(
        port,
        name,
        &[("handler_timeout", "60s"), ("shutdown_grace", "2s")],
    );
    let hookd = Hookd::start_against(&config, port, database_url, "info").await;
    let (holder, stuck) = held_in_its_handler(&hookd, db, event_id, payment_id).await;
    hookd.signal(Signal::SIGTERM);
    // Far sooner than the handler's minute (or the default grace's 30 s).
    let exit = tokio::time::timeout(Duration::from_secs(15), hookd.wait())
        .await
        .expect("hookd stops at the end of its grace");
    assert!(exit.success(), "exit status {exit:?}");
    let answer = stuck.await.expect("join").map(|r| r.status().as_u16());
    assert!(
        !matches!(answer, Ok(200)),
        "the cut-off delivery was not acknowledged: {answer:?}"
    );
    (config, port, holder)
}

#[tokio::test]
async fn slow_shutdown_grace_cuts_off_work_still_in_flight_and_nothing_of_it_is_kept() {
    let db = TestDb::create().await;
    let url = cluster().connection_string(&db.name);
    let (config, _, holder) =
        cut_off_at_shutdown("grace", &url, &db, "evt_stuck", "pi_stuck").await;
    let log = std::fs::read_to_string(config.with_extension("log")).expect("log");
    assert!(log.contains("shutdown_grace (2s) is over"), "{log}");

    // Released, the abandoned session finds no client and rolls back: over its
    // Unix socket, sending the statement's result fails, and PostgreSQL ends the
    // session before the `COMMIT` queued behind it: no event, no payment merge.
    holder.batch_execute("COMMIT").await.expect("release");
    let sessions = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = '{}' AND application_name = 'hookd'",
        db.name
    );
    let (db_ref, sessions) = (&db, sessions.as_str());
    wait_for(
        "hookd's sessions to end",
        Duration::from_secs(20),
        || async move { (query(db_ref, sessions).await[0].get::<_, i64>(0) == 0).then_some(()) },
    )
    .await;
    let row = &query(
        &db,
        "SELECT (SELECT count(*) FROM webhook_events WHERE event_id = 'evt_stuck'), \
                (SELECT amount FROM payments WHERE payment_id = 'pi_stuck')",
    )
    .await[0];
    assert_eq!(
        (row.get::<_, i64>(0), row.get::<_, i64>(1)),
        (0, 0),
        "nothing of the cut-off batch was kept: (events, payment amount)"
    );
}

#[tokio::test]
async fn slow_over_tcp_a_batch_cut_off_at_shutdown_may_be_kept_whole_and_its_resend_is_a_copy() {
    let db = TestDb::create().await;
    // hookd reaches the database over TCP (a relay to its socket that keeps
    // the database's side open after hookd's is gone, as a TCP peer would).
    let relay = crate::support::relay::StallRelay::to(db.config()).await;
    let url = relay.database_url();
    let (config, port, holder) =
        cut_off_at_shutdown("grace-tcp", &url, &db, "evt_kept", "pi_kept").await;

    // Released, the statement ends and the `COMMIT` sent with it commits:
    // the batch is kept whole, never acknowledged.
    holder.batch_execute("COMMIT").await.expect("release");
    let kept = "SELECT count(*) FROM webhook_events WHERE event_id = 'evt_kept'";
    wait_for(
        "the cut-off batch to commit",
        Duration::from_secs(20),
        || async { (query(&db, kept).await[0].get::<_, i64>(0) == 1).then_some(()) },
    )
    .await;

    // The provider's resend, to hookd started again: a copy, merged once.
    let again = Hookd::start_against(&config, port, &url, "info").await;
    let resent = signed_payment(&again, "evt_kept", "pi_kept")
        .send()
        .await
        .expect("resend");
    assert_eq!(resent.status(), 200);
    assert_eq!(
        resent
            .headers()
            .get("idempotent-replayed")
            .and_then(|v| v.to_str().ok()),
        Some("true")
    );
    let row = &query(
        &db,
        "SELECT e.status, e.deliveries, e.attempts, p.amount,
                (SELECT count(*) FROM webhook_event_attempts a WHERE a.webhook_event_id = e.id)
         FROM webhook_events e JOIN payments p ON p.payment_id = 'pi_kept'
         WHERE e.event_id = 'evt_kept'",
    )
    .await[0];
    assert_eq!(
        (
            row.get::<_, String>(0),
            row.get::<_, i32>(1),
            row.get::<_, i32>(2),
            row.get::<_, i64>(3),
            row.get::<_, i64>(4)
        ),
        ("processed".to_string(), 2, 1, 4200, 1),
        "(status, deliveries, attempts, amount, runs): kept once, merged once"
    );
    again.signal(Signal::SIGTERM);
    assert!(again.wait().await.success());
}

/// Where the project in `dir` records a fallback cluster folder, if it has one.
fn recorded_cluster(dir: &Path) -> Option<PathBuf> {
    std::fs::read_to_string(dir.join(".hookd/pg.location"))
        .ok()
        .map(PathBuf::from)
}

/// The folder hookd names in its log line `started embedded PostgreSQL in DIR (…`.
fn started_in(log: &str) -> PathBuf {
    let line = log
        .lines()
        .find(|l| l.contains("started embedded PostgreSQL in "))
        .unwrap_or_else(|| panic!("no start line: {log}"));
    let rest = line
        .split_once("started embedded PostgreSQL in ")
        .map(|(_, rest)| rest)
        .expect("path");
    PathBuf::from(rest.split_once(" (socket only").map_or(rest, |(p, _)| p))
}

/// Whether hookd must move the cluster of a project in `dir` out of
/// `./.hookd/pg`: its socket path would be too long (the socket lives in the
/// folder: 100 bytes at most), or, as root, the `postgres` user cannot enter a
/// project folder closed to others.
fn needs_fallback(dir: &Path, closed_to_others: bool) -> bool {
    let socket = dir.join(".hookd/pg/.s.PGSQL.5432");
    socket.as_os_str().len() > 100 || (closed_to_others && nix::unistd::Uid::effective().is_root())
}

/// Cleans up after a project folder of a test: when dropped (also when an
/// assertion failed), stops the cluster hookd made for it — in `./.hookd/pg` or
/// where the record says — and removes both folders.
struct Project {
    dir: PathBuf,
}

impl Drop for Project {
    fn drop(&mut self) {
        for cluster in [
            recorded_cluster(&self.dir),
            Some(self.dir.join(".hookd/pg")),
        ]
        .into_iter()
        .flatten()
        {
            drop(ClusterGuard::new(&cluster));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `hookd serve` in `dir` with the embedded cluster, logging to `dir/serve.log`.
async fn serve_in(dir: &Path, port: u16) -> Hookd {
    serve_in_on(dir, port, "serve.log", &[]).await
}

/// `serve_in` with these environment variables, logging to `dir/log`.
async fn serve_in_on(dir: &Path, port: u16, log: &str, env: &[(&str, String)]) -> Hookd {
    let log = std::fs::File::create(dir.join(log)).expect("log");
    let child = crate::support::hookd_binary()
        .args(["serve"])
        .current_dir(dir)
        .env_remove("DATABASE_URL")
        .env_remove("HOOKD_CONFIG")
        .env("RUST_LOG", "info")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn");
    Hookd::started(child, port, Duration::from_secs(60)).await
}

/// Another hookd command in `dir`, beside or after `serve`.
async fn command_in(dir: &Path, args: &[&str]) -> std::process::Output {
    let mut command = crate::support::hookd_binary();
    command
        .args(args)
        .current_dir(dir)
        .env_remove("DATABASE_URL")
        .env_remove("HOOKD_CONFIG")
        .env("RUST_LOG", "info");
    tokio::task::spawn_blocking(move || command.output().expect("run hookd"))
        .await
        .expect("join")
}

/// An empty project folder of its own (removed, with any cluster made for
/// it, when dropped).
fn project_folder(name: &str) -> (Project, PathBuf) {
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    (Project { dir: dir.clone() }, dir)
}

/// A project folder with the shipped configuration and no cluster yet.
fn fresh_project(name: &str) -> (Project, PathBuf) {
    let (project, dir) = project_folder(name);
    std::fs::write(
        dir.join("hookd.toml"),
        hookd_kit::settings::shipped_toml_on_port(free_port()),
    )
    .expect("config");
    (project, dir)
}

#[tokio::test]
async fn slow_a_command_where_no_cluster_is_makes_one_and_warns_that_it_is_new_and_empty() {
    let (project, dir) = fresh_project("embedded-cmd");
    // Without DATABASE_URL, a command whose work would be lost in a new
    // cluster (an erasure, a recovery) is refused in one line, exit 78,
    // and makes none.
    for args in [
        &["forget", "--customer", "cus_1"][..],
        &["reconcile", "--source", "stripe"],
    ] {
        let refused = command_in(&dir, args).await;
        let said = String::from_utf8_lossy(&refused.stderr).to_string();
        assert_eq!(refused.status.code(), Some(78), "{args:?}: {said}");
        assert!(
            said.trim().lines().count() == 1 && said.contains("DATABASE_URL is unset"),
            "{args:?}: {said}"
        );
        assert!(refused.stdout.is_empty(), "{args:?}");
    }
    assert!(!dir.join(".hookd").exists(), "no cluster made");
    // A look makes the embedded cluster as serve would, and says that it is
    // new and empty: an operator's shell without the service's environment
    // is not answered in silence.
    let listed = command_in(&dir, &["events", "list"]).await;
    let said = String::from_utf8_lossy(&listed.stderr).to_string();
    assert!(listed.status.success(), "{said}");
    assert!(
        String::from_utf8_lossy(&listed.stdout).ends_with("\n(no events match)\n"),
        "{}",
        String::from_utf8_lossy(&listed.stdout)
    );
    // (As root in a folder the postgres user cannot enter, the cluster's
    // move to a folder of its own is a warning of its own.)
    let new_and_empty = "DATABASE_URL is unset and no embedded cluster was in .hookd/pg here: \
                         made a new, empty one";
    assert_eq!(said.matches(new_and_empty).count(), 1, "{said}");
    assert!(said.contains("started embedded PostgreSQL in "), "{said}");
    let cluster = started_in(&said);
    let guard = ClusterGuard::new(&cluster);
    assert!(
        !guard.running(),
        "the command stopped the cluster it started"
    );
    // The next command finds it: no warning.
    let preview = command_in(&dir, &["purge", "--dry-run"]).await;
    let said = String::from_utf8_lossy(&preview.stderr).to_string();
    assert!(preview.status.success(), "{said}");
    assert!(!said.contains("made a new"), "{said}");
    assert!(
        said.contains(&format!(
            "started embedded PostgreSQL in {}",
            cluster.display()
        )),
        "{said}"
    );
    drop(guard);
    drop(project);
}

#[tokio::test]
async fn slow_two_commands_started_together_where_no_cluster_is_make_one_between_them() {
    let (project, dir) = fresh_project("embedded-two");
    // Neither runs initdb on a folder the other is making (a failed initdb
    // removes the folder it made, the other's cluster with it), nor creates
    // the database or its schema twice.
    let (one, two) = tokio::join!(
        command_in(&dir, &["events", "list"]),
        command_in(&dir, &["purge", "--dry-run"])
    );
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&one.stderr),
        String::from_utf8_lossy(&two.stderr)
    );
    // The one that made the cluster leaves it to the other, if that one
    // still uses it when it exits: neither loses its connection.
    assert!(one.status.success() && two.status.success(), "{said}");
    assert_eq!(said.matches("made a new, empty one").count(), 1, "{said}");
    // The cluster made is whole: the next command uses it as it is.
    let next = command_in(&dir, &["events", "list"]).await;
    let text = String::from_utf8_lossy(&next.stderr);
    assert!(next.status.success(), "{text}");
    assert!(!text.contains("made a new"), "{text}");
    drop(project);
}

#[tokio::test]
async fn slow_serve_runs_its_own_cluster_shares_it_and_adopts_one_a_killed_serve_left_behind() {
    let (project, dir) = project_folder("embedded");
    // A project folder closed to others (as root, the postgres user cannot enter
    // it, so the cluster must live in a private folder of its own).
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .expect("chmod");
    let port = free_port();
    let config = dir.join("hookd.toml");
    std::fs::write(&config, hookd_kit::settings::shipped_toml_on_port(port)).expect("config");

    let first = serve_in(&dir, port).await;
    let log = std::fs::read_to_string(dir.join("serve.log")).expect("log");
    // Where the cluster is: what hookd says, and what it recorded for later commands.
    let cluster = started_in(&log);
    let guard = ClusterGuard::new(&cluster);
    assert!(guard.running(), "the cluster runs in {}", cluster.display());
    let recorded = recorded_cluster(&dir);
    if needs_fallback(&dir, true) {
        assert_eq!(
            recorded.as_ref(),
            Some(&cluster),
            "recorded for later commands"
        );
        assert!(
            cluster.starts_with(std::env::temp_dir()),
            "{}",
            cluster.display()
        );
        assert!(log.contains("embedded PostgreSQL cannot live in"), "{log}");
    } else {
        assert_eq!(cluster, dir.join(".hookd/pg"));
        assert_eq!(recorded, None);
    }

    // A command beside the running serve uses its cluster and leaves it running.
    let listed = command_in(&dir, &["events", "list", "--json"]).await;
    let said = String::from_utf8_lossy(&listed.stderr).to_string();
    assert!(listed.status.success(), "{said}");
    assert!(
        said.contains(&format!(
            "embedded PostgreSQL already running in {}; reusing it",
            cluster.display()
        )) && !said.contains("adopting"),
        "{said}"
    );
    assert!(guard.running(), "the command left the cluster to serve");
    first.ready(Duration::from_secs(10)).await;

    first.signal(Signal::SIGKILL);
    first.wait().await;
    assert!(guard.running(), "a killed hookd cannot stop its cluster");

    let second = serve_in(&dir, port).await;
    let log = std::fs::read_to_string(dir.join("serve.log")).expect("log");
    assert!(
        log.contains(&format!(
            "embedded PostgreSQL already running in {}; reusing it (its owner is gone: adopting it)",
            cluster.display()
        )),
        "{log}"
    );
    assert_eq!(
        recorded_cluster(&dir),
        recorded,
        "the same cluster, found again"
    );
    second.signal(Signal::SIGTERM);
    assert!(second.wait().await.success());
    assert!(!guard.running(), "the adopted cluster was stopped at exit");
    drop(guard);
    drop(project);
}

#[tokio::test]
async fn slow_a_serve_that_exits_hands_its_cluster_to_another_serve_still_using_it() {
    let (project, dir) = project_folder("embedded-handover");
    let (port, other_port) = (free_port(), free_port());
    std::fs::write(
        dir.join("hookd.toml"),
        hookd_kit::settings::shipped_toml_on_port(port),
    )
    .expect("config");
    let first = serve_in(&dir, port).await;
    let cluster = started_in(&std::fs::read_to_string(dir.join("serve.log")).expect("log"));
    let guard = ClusterGuard::new(&cluster);
    // A second serve in the same folder (on another port) borrows it.
    let listen = [("HOOKD_LISTEN", format!("127.0.0.1:{other_port}"))];
    let second = serve_in_on(&dir, other_port, "other.log", &listen).await;
    let said = std::fs::read_to_string(dir.join("other.log")).expect("log");
    assert!(
        said.contains("embedded PostgreSQL already running in"),
        "{said}"
    );

    // The one that started it exits first: the cluster stays for the other.
    first.signal(Signal::SIGTERM);
    assert!(first.wait().await.success());
    let said = std::fs::read_to_string(dir.join("serve.log")).expect("log");
    assert!(
        said.contains(&format!(
            "left embedded PostgreSQL running in {} for hookd {}, which still uses it",
            cluster.display(),
            second.pid()
        )),
        "{said}"
    );
    assert!(guard.running(), "stopped under the other serve");
    let load = Arc::new(Mutex::new(Load::default()));
    send_load(second.base.clone(), stripe_signer(), 3, 1, load.clone()).await;
    assert_eq!(load.lock().expect("lock").acked, vec![0, 1, 2], "served on");

    // The last one stops it.
    second.signal(Signal::SIGTERM);
    assert!(second.wait().await.success());
    assert!(!guard.running(), "the last hookd stopped the cluster");

    // The one that started it killed (it can stop nothing), the other stops
    // it when it exits: nobody else would.
    let first = serve_in(&dir, port).await;
    let second = serve_in_on(&dir, other_port, "other.log", &listen).await;
    first.signal(Signal::SIGKILL);
    first.wait().await;
    assert!(guard.running());
    second.signal(Signal::SIGTERM);
    assert!(second.wait().await.success());
    assert!(!guard.running(), "left running after its owner was killed");
    drop(guard);
    drop(project);
}

#[tokio::test]
async fn slow_serve_beyond_loopback_wants_database_url_unless_embedded_database_is_true() {
    let (project, dir) = project_folder("exposed");
    // An address of no machine here (TEST-NET-1): past the checks, binding fails,
    // so nothing ever listens beyond loopback.
    let config = |extra: &str| {
        format!(
            "{extra}listen = \"192.0.2.1:8080\"\n[[sources]]\nname = \"gh\"\nscheme = \"github\"\n\
             secrets = [\"a-github-secret-of-ours\"]\n"
        )
    };
    std::fs::write(dir.join("hookd.toml"), config("")).expect("config");
    for command in ["serve", "check-config"] {
        let refused = command_in(&dir, &[command]).await;
        let said = String::from_utf8_lossy(&refused.stderr).trim().to_string();
        assert_eq!(refused.status.code(), Some(78), "{command}: {said}");
        assert_eq!(said.lines().count(), 1, "{command}: {said}");
        assert!(
            said.starts_with(
                "hookd: config hookd.toml: DATABASE_URL: is unset and listen = 192.0.2.1:8080 \
                 reaches beyond this machine"
            ) && said.contains("set DATABASE_URL")
                && said.contains("embedded_database = true"),
            "{command}: {said}"
        );
    }
    assert!(
        !dir.join(".hookd").exists(),
        "refused before any cluster started"
    );

    std::fs::write(dir.join("hookd.toml"), config("embedded_database = true\n")).expect("config");
    let checked = command_in(&dir, &["check-config"]).await;
    assert_eq!(checked.status.code(), Some(0), "{checked:?}");
    assert!(
        String::from_utf8_lossy(&checked.stdout).contains("database: the embedded cluster"),
        "{checked:?}"
    );
    let served = command_in(&dir, &["serve"]).await;
    let said = String::from_utf8_lossy(&served.stderr).to_string();
    assert!(
        said.contains("started embedded PostgreSQL in ")
            && said.contains("cannot listen on 192.0.2.1:8080"),
        "serve took the embedded cluster, then could not bind: {said}"
    );
    assert!(!said.contains("DATABASE_URL: is unset"), "{said}");
    drop(project);
}

#[tokio::test]
async fn slow_a_cluster_that_cannot_live_in_the_project_goes_under_tmpdir_and_is_found_again() {
    // A project whose ./.hookd/pg is too long for a socket, for any user.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "tmpdir-{}-{}",
        std::process::id(),
        "p".repeat(80)
    ));
    std::fs::create_dir_all(&dir).expect("project");
    let project = Project { dir: dir.clone() };
    // A TMPDIR of the test's own (the postgres user may enter it, as /tmp).
    let tmpdir = std::env::temp_dir().join(format!("hookd-tmpdir-{}", std::process::id()));
    std::fs::create_dir_all(&tmpdir).expect("tmpdir");
    std::fs::set_permissions(&tmpdir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    struct Remove(PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _tmpdir_goes = Remove(tmpdir.clone());
    let migrate = || {
        let mut command = crate::support::hookd_binary();
        command
            .args(["migrate", "--config"])
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/hookd.toml"))
            .current_dir(&dir)
            .env_remove("DATABASE_URL")
            .env_remove("HOOKD_CONFIG")
            .env("TMPDIR", &tmpdir)
            .env("RUST_LOG", "info");
        async move {
            tokio::task::spawn_blocking(move || command.output().expect("run hookd"))
                .await
                .expect("join")
        }
    };

    let first = migrate().await;
    let said = String::from_utf8_lossy(&first.stderr).to_string();
    assert!(first.status.success(), "{said}");
    let cluster = started_in(&said);
    let _cluster_goes = ClusterGuard::new(&cluster);
    assert_eq!(
        cluster.parent(),
        Some(tmpdir.as_path()),
        "{}",
        cluster.display()
    );
    let name = cluster.file_name().and_then(|n| n.to_str()).expect("name");
    assert!(
        name.len() == "hookd-".len() + 16
            && name.starts_with("hookd-")
            && name["hookd-".len()..]
                .bytes()
                .all(|b| b.is_ascii_hexdigit()),
        "{name}"
    );
    assert_eq!(recorded_cluster(&dir), Some(cluster.clone()));
    assert!(
        said.contains(&format!(
            "using {} instead (the system may empty its temporary folder at reboot",
            cluster.display()
        )),
        "{said}"
    );
    assert!(
        String::from_utf8_lossy(&first.stdout).contains("applied "),
        "{first:?}"
    );
    assert!(
        !crate::support::pg_ctl_as_cluster_user(&cluster, &["status"]),
        "stopped at exit"
    );

    // The next command finds it through the record: the schema is already there.
    let second = migrate().await;
    let said = String::from_utf8_lossy(&second.stderr).to_string();
    assert!(second.status.success(), "{said}");
    assert!(
        said.contains(&format!("using {} as recorded in", cluster.display())),
        "{said}"
    );
    assert!(
        String::from_utf8_lossy(&second.stdout).contains("applied 0 migration(s)"),
        "{second:?}"
    );
    drop(project);
}

#[tokio::test]
async fn slow_serve_warns_at_startup_about_what_may_be_a_mistake() {
    let db = TestDb::create().await;
    let port = free_port();
    let text = hookd_kit::settings::shipped_toml_on_port(port)
        .replace(
            "tolerance = \"5m\"\n# fingerprint_ignore",
            "tolerance = \"5m\"\nevent_types = { \"invoice.paid\" = \"invoice_paid\" }\n# fingerprint_ignore",
        )
        + "\n[[admin.tokens]]\nname = \"short\"\ntoken = \"tiny-token\"\nrole = \"viewer\"\n";
    assert!(text.contains("invoice_paid"), "the mapping was added");
    let config = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("warnings-{}.toml", std::process::id()));
    std::fs::write(&config, text).expect("config");
    let log_path = config.with_extension("log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let child = crate::support::hookd_binary()
        .args(["serve", "--config"])
        .arg(&config)
        .env("DATABASE_URL", cluster().connection_string(&db.name))
        .env("HOOKD_SOURCE_NOPE_SECRETS", "a-secret-for-no-source")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn hookd");
    let hookd = Hookd::started(child, port, Duration::from_secs(30)).await;
    hookd.signal(Signal::SIGTERM);
    assert!(hookd.wait().await.success());
    let log = std::fs::read_to_string(&log_path).expect("log");
    for warning in [
        "serving with the shipped development secrets or tokens; hookd accepts them on loopback \
         addresses only",
        "source stripe: no handler or forward takes kind \"invoice_paid\"",
        "admin.tokens[2].token: shorter than 16 characters; easy to guess",
        "HOOKD_SOURCE_NOPE_SECRETS: no configured source is named NOPE; ignored",
    ] {
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(warning) && l.contains("WARN"))
            .collect();
        assert_eq!(lines.len(), 1, "{warning}:\n{log}");
    }
    for secret in ["tiny-token", "a-secret-for-no-source"] {
        assert!(!log.contains(secret), "{secret} in:\n{log}");
    }
}

/// The webhook listener's worker threads, as the real process runs them.
fn http_worker_threads(hookd: &Hookd) -> usize {
    std::fs::read_dir(format!("/proc/{}/task", hookd.pid()))
        .expect("its threads")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        // The kernel keeps 15 bytes of "actix-server worker N".
        .filter(|name| name.starts_with("actix-server wo"))
        .count()
}

#[tokio::test]
async fn slow_serve_runs_as_many_http_workers_as_http_workers_says_and_half_the_cores_unset() {
    let db = TestDb::create().await;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let default = (cores / 2).max(1);
    // A count the default cannot be, on any machine.
    let set = default + 2;
    for (setting, gateway, expected) in [
        (Some(set), false, set),
        // The gateway's listener runs as many again.
        (Some(set), true, 2 * set),
        (None, false, default),
    ] {
        let port = free_port();
        let mut text = hookd_kit::settings::shipped_toml_on_port(port);
        if let Some(workers) = setting {
            // A top-level key, before the file's first table.
            text = format!("http_workers = {workers}\n{text}");
        }
        if gateway {
            text.push_str(&format!(
                "\n[gateway]\nlisten = \"127.0.0.1:{}\"\n\n[[gateway.routes]]\nname = \"pay\"\n\
                 path = \"/payments\"\nupstream = \"http://127.0.0.1:9\"\n",
                free_port()
            ));
        }
        let config = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("workers-{}-{expected}.toml", std::process::id()));
        std::fs::write(&config, text).expect("config");
        let hookd = Hookd::start(&config, port, &db).await;
        assert_eq!(
            http_worker_threads(&hookd),
            expected,
            "http_workers = {setting:?}, gateway: {gateway}"
        );
        hookd.signal(Signal::SIGTERM);
        assert!(hookd.wait().await.success());
    }
}
