//! The real `hookd serve` binary: SIGTERM finishes in-flight work and exits 0, and
//! a kill -9 under load loses nothing that was acknowledged and applies nothing twice.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::support::{TestDb, cluster, stripe_event};

struct Hookd {
    child: Child,
    base: String,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// The shipped configuration, listening on `port`, written where the child can read it.
fn write_config(port: u16, name: &str) -> PathBuf {
    let text = include_str!("../../hookd.toml").replace(
        "listen = \"127.0.0.1:8080\"",
        &format!("listen = \"127.0.0.1:{port}\""),
    );
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{name}-{}.toml", std::process::id()));
    std::fs::write(&path, text).expect("config");
    path
}

impl Hookd {
    async fn start(config: &PathBuf, port: u16, db: &TestDb) -> Hookd {
        let log = std::fs::File::create(config.with_extension("log")).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_hookd"))
            .args(["serve", "--config"])
            .arg(config)
            .env("DATABASE_URL", cluster().connection_string(&db.name))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn hookd");
        let hookd = Hookd {
            child,
            base: format!("http://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        let http = reqwest::Client::new();
        loop {
            if let Ok(r) = http.get(format!("{}/readyz", hookd.base)).send().await
                && r.status() == 200
            {
                return hookd;
            }
            assert!(Instant::now() < deadline, "hookd did not become ready");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn signal(&self, signal: Signal) {
        let pid = Pid::from_raw(i32::try_from(self.child.id()).expect("pid"));
        kill(pid, signal).expect("signal");
    }

    async fn wait(mut self) -> std::process::ExitStatus {
        tokio::task::spawn_blocking(move || self.child.wait().expect("wait"))
            .await
            .expect("join")
    }
}

fn payment_event(i: usize) -> Value {
    stripe_event(
        &format!("evt_load_{i}"),
        "payment_intent.succeeded",
        json!({"id": format!("pi_load_{i}"), "object": "payment_intent", "amount": 100 + i,
               "currency": "usd"}),
    )
}

/// Sends events `0..count` with `concurrency` senders; returns the ids that got a 200.
async fn send_load(
    base: String,
    headers_for: impl Fn(&[u8]) -> Vec<(String, String)> + Send + Sync + 'static,
    count: usize,
    concurrency: usize,
    acked: Arc<Mutex<Vec<usize>>>,
) {
    let headers_for = Arc::new(headers_for);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let http = reqwest::Client::new();
    let senders = (0..concurrency).map(|_| {
        let (next, acked, http, headers_for) = (
            next.clone(),
            acked.clone(),
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
                if let Ok(response) = request.send().await
                    && response.status() == 200
                {
                    acked.lock().expect("lock").push(i);
                }
            }
        })
    });
    for sender in futures_util::future::join_all(senders).await {
        sender.expect("sender");
    }
}

fn stripe_signer() -> impl Fn(&[u8]) -> Vec<(String, String)> + Send + Sync + 'static {
    let settings = crate::support::shipped_settings();
    let source = settings.source("stripe").expect("stripe").clone();
    move |body: &[u8]| {
        hookd::provider::sign_delivery(
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
async fn kill_9_under_load_loses_no_acknowledged_event_and_applies_none_twice() {
    let db = TestDb::create().await;
    let port = free_port();
    let config = write_config(port, "kill9");
    let hookd = Hookd::start(&config, port, &db).await;
    let acked = Arc::new(Mutex::new(Vec::new()));
    const EVENTS: usize = 600;
    let load = tokio::spawn(send_load(
        hookd.base.clone(),
        stripe_signer(),
        EVENTS,
        16,
        acked.clone(),
    ));
    while acked.lock().expect("lock").len() < 150 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    hookd.signal(Signal::SIGKILL);
    let _ = hookd.wait().await;
    load.await.expect("load");
    let acked: Vec<usize> = acked.lock().expect("lock").clone();
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
    let again = Arc::new(Mutex::new(Vec::new()));
    send_load(
        hookd.base.clone(),
        stripe_signer(),
        EVENTS,
        16,
        again.clone(),
    )
    .await;
    assert_eq!(again.lock().expect("lock").len(), EVENTS);
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

#[tokio::test]
async fn sigterm_finishes_in_flight_deliveries_and_exits_zero() {
    let db = TestDb::create().await;
    let port = free_port();
    let config = write_config(port, "sigterm");
    let hookd = Hookd::start(&config, port, &db).await;
    let acked = Arc::new(Mutex::new(Vec::new()));
    let load = tokio::spawn(send_load(
        hookd.base.clone(),
        stripe_signer(),
        400,
        16,
        acked.clone(),
    ));
    while acked.lock().expect("lock").len() < 50 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    hookd.signal(Signal::SIGTERM);
    let status = tokio::time::timeout(Duration::from_secs(40), hookd.wait())
        .await
        .expect("hookd stops within its grace period");
    assert!(status.success(), "exit status {status:?}");
    load.await.expect("load");
    let acked = acked.lock().expect("lock").clone();
    let stored = query(
        &db,
        "SELECT count(*) FROM webhook_events WHERE status = 'processed'",
    )
    .await[0]
        .get::<_, i64>(0);
    assert!(
        stored as usize >= acked.len(),
        "every acknowledged event was committed"
    );
    assert!(acked.len() < 400, "it stopped accepting");
}

/// Where hookd put the cluster of the project in `dir`: `./.hookd/pg`, or the
/// private folder it recorded when the `postgres` user cannot reach the project.
fn cluster_dir(dir: &std::path::Path) -> PathBuf {
    match std::fs::read_to_string(dir.join(".hookd/pg.location")) {
        Ok(recorded) => PathBuf::from(recorded),
        Err(_) => dir.join(".hookd/pg"),
    }
}

/// The cluster's postmaster is alive (`pg_ctl status`, which needs no access to
/// a folder that belongs to the `postgres` user).
fn postmaster_running(dir: &std::path::Path) -> bool {
    let data = cluster_dir(dir).join("data");
    let pg_ctl = hookd::embedded_pg::binaries::program("pg_ctl").expect("pg_ctl");
    let mut status = Command::new("sh");
    status
        .arg("-c")
        .arg("\"$0\" status -D \"$1\" >/dev/null 2>&1")
        .arg(&pg_ctl)
        .arg(&data);
    if nix::unistd::Uid::effective().is_root() {
        use std::os::unix::process::CommandExt;
        let postgres = nix::unistd::User::from_name("postgres")
            .expect("lookup")
            .expect("postgres user");
        status.uid(postgres.uid.as_raw()).gid(postgres.gid.as_raw());
    }
    status.status().is_ok_and(|s| s.success())
}

#[tokio::test]
async fn serve_runs_its_own_cluster_and_adopts_one_a_killed_serve_left_behind() {
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("embedded-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    // A project folder closed to others (as root, the postgres user cannot enter
    // it, so the cluster must live in a private folder of its own).
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .expect("chmod");
    let port = free_port();
    let config = dir.join("hookd.toml");
    std::fs::write(
        &config,
        include_str!("../../hookd.toml").replace(
            "listen = \"127.0.0.1:8080\"",
            &format!("listen = \"127.0.0.1:{port}\""),
        ),
    )
    .expect("config");
    let start = || async {
        let log = std::fs::File::create(dir.join("serve.log")).expect("log");
        let child = Command::new(env!("CARGO_BIN_EXE_hookd"))
            .args(["serve"])
            .current_dir(&dir)
            .env_remove("DATABASE_URL")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn");
        let hookd = Hookd {
            child,
            base: format!("http://127.0.0.1:{port}"),
        };
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !matches!(http.get(format!("{}/readyz", hookd.base)).send().await, Ok(r) if r.status() == 200)
        {
            assert!(Instant::now() < deadline, "ready");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        hookd
    };

    let first = start().await;
    assert!(postmaster_running(&dir), "the cluster runs");
    let log = std::fs::read_to_string(dir.join("serve.log")).expect("log");
    let cluster = cluster_dir(&dir);
    assert!(
        log.contains(&format!(
            "started embedded PostgreSQL in {}",
            cluster.display()
        )),
        "{log}"
    );
    if nix::unistd::Uid::effective().is_root() {
        assert!(
            cluster.starts_with(std::env::temp_dir()),
            "{}",
            cluster.display()
        );
    } else {
        assert_eq!(cluster, dir.join(".hookd/pg"));
    }
    first.signal(Signal::SIGKILL);
    first.wait().await;
    assert!(
        postmaster_running(&dir),
        "a killed hookd cannot stop its cluster"
    );

    let second = start().await;
    let log = std::fs::read_to_string(dir.join("serve.log")).expect("log");
    assert!(log.contains("adopting it"), "{log}");
    assert_eq!(cluster_dir(&dir), cluster, "the same cluster, found again");
    second.signal(Signal::SIGTERM);
    assert!(second.wait().await.success());
    assert!(
        !postmaster_running(&dir),
        "the adopted cluster was stopped at exit"
    );
    let _ = std::fs::remove_dir_all(&cluster);
    let _ = std::fs::remove_dir_all(&dir);
}
