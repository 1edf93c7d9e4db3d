//! A failover under load: a primary with a synchronous streaming standby (made
//! with `pg_basebackup -R`), `hookd serve` on a multi-host `DATABASE_URL` with
//! `target_session_attrs=read-write`; the primary crashes mid-load and the
//! standby is promoted. Meanwhile every answer is 200 or 503, hookd is ready
//! again by itself, every 200 is on the new primary, and after the providers
//! resend everything each event is stored once and its payment applied once.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hookd::embedded_pg::{ClusterOptions, EmbeddedPostgres, USER};
use hookd::store;
use nix::sys::signal::Signal;

use crate::process::{Hookd, free_port, payment_event, stripe_signer, write_config_setting};
use crate::support::{ClusterGuard, connect, pg_ctl_as_cluster_user, wait_for};

/// The events the load may send at most (it stops earlier, once hookd has taken
/// deliveries again after the failover).
const MAX_EVENTS: usize = 4000;
const SENDERS: usize = 8;

/// A connection over TCP to `127.0.0.1:port`.
fn tcp(port: u16, dbname: &str) -> tokio_postgres::Config {
    let mut config = tokio_postgres::Config::new();
    config
        .host("127.0.0.1")
        .port(port)
        .user(USER)
        .dbname(dbname);
    config
}

/// The primary: a throwaway cluster that listens on `127.0.0.1:port`, commits
/// only once a synchronous standby has the commit (once it has one), and holds
/// database `hookd`, migrated.
async fn primary(dir: PathBuf, port: u16) -> EmbeddedPostgres {
    let cluster = tokio::task::spawn_blocking(move || {
        hookd_kit::cluster::throwaway(&dir, ClusterOptions { durable: false })
    })
    .await
    .expect("join");
    let server = connect(cluster.pg_config("postgres")).await;
    // ALTER SYSTEM wins over the settings the embedded code writes (which turn
    // synchronous_commit off for throwaway clusters).
    for setting in [
        "listen_addresses = '127.0.0.1'".to_string(),
        format!("port = {port}"),
        "synchronous_commit = on".into(),
    ] {
        server
            .batch_execute(&format!("ALTER SYSTEM SET {setting}"))
            .await
            .expect(&setting);
    }
    drop(server);
    let dir = cluster.dir().to_path_buf();
    let restarted =
        tokio::task::spawn_blocking(move || pg_ctl_as_cluster_user(&dir, &["restart", "-w"]))
            .await
            .expect("join");
    assert!(restarted, "pg_ctl restart");
    store::create_database_if_missing(&tcp(port, "postgres"), "hookd")
        .await
        .expect("db");
    let pool = store::pool(tcp(port, "hookd"), store::DbConnector::Plain, 1);
    store::migrate(&pool).await.expect("migrate");
    pool.close();
    cluster
}

/// What the senders saw, by event.
#[derive(Default)]
struct Seen {
    /// Each event's first answer: its status, or 0 for none.
    first: BTreeMap<usize, u16>,
}

/// Sends new events `0..MAX_EVENTS` with `SENDERS` senders until `stop` is set;
/// a sender answered 503 waits a little before its next event, as a provider
/// backs off.
async fn send_until(base: String, stop: Arc<AtomicBool>, seen: Arc<Mutex<Seen>>) {
    let next = Arc::new(AtomicUsize::new(0));
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    let sign = Arc::new(stripe_signer());
    let senders = (0..SENDERS).map(|_| {
        let (next, stop, seen, http, sign) = (
            next.clone(),
            stop.clone(),
            seen.clone(),
            http.clone(),
            sign.clone(),
        );
        let url = format!("{base}/webhooks/stripe");
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= MAX_EVENTS {
                    return;
                }
                let status = deliver(&http, &url, sign.as_ref(), i).await;
                seen.lock().expect("lock").first.insert(i, status);
                if status == 503 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        })
    });
    for sender in futures_util::future::join_all(senders).await {
        sender.expect("sender");
    }
}

/// Event `i`, signed now; its answer's status, or 0 when there was none.
async fn deliver(
    http: &reqwest::Client,
    url: &str,
    sign: &(impl Fn(&[u8]) -> Vec<(String, String)> + ?Sized),
    i: usize,
) -> u16 {
    let body = serde_json::to_vec(&payment_event(i)).expect("json");
    let mut request = http.post(url).body(body.clone());
    for (name, value) in sign(&body) {
        request = request.header(name, value);
    }
    match request.send().await {
        Ok(answer) => answer.status().as_u16(),
        Err(_) => 0,
    }
}

#[tokio::test]
async fn slow_a_failover_under_load_answers_only_200_or_503_and_loses_or_repeats_nothing() {
    hookd::outbound::install_crypto();
    let (p1, p2) = (free_port(), free_port());
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let primary = primary(root.join(format!("failover-{}", std::process::id())), p1).await;
    let _stop_primary = ClusterGuard::new(primary.dir());
    // Reachable by the cluster's user whoever runs the tests (see SharedFolder).
    let shared = hookd_kit::cluster::SharedFolder::new("hookd-failover");
    let standby_dir = shared.cluster_dir();
    let _stop_standby = ClusterGuard::new(&standby_dir);
    let source = format!("host=127.0.0.1 port={p1} user={USER} dbname=postgres");
    let standby_path = standby_dir.clone();
    let primary_dir = primary.dir().to_path_buf();
    let standby = tokio::task::spawn_blocking(move || {
        hookd_kit::cluster::standby_with(&primary, &standby_path, &source, &format!("port = {p2}"))
    })
    .await
    .expect("join");
    // Synchronous from now on: a commit returns once the standby has it.
    let server = connect(tcp(p1, "postgres")).await;
    server
        .batch_execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
        .await
        .expect("synchronous_standby_names");
    server
        .batch_execute("SELECT pg_reload_conf()")
        .await
        .expect("reload");
    let server = &server;
    wait_for(
        "the standby to stream synchronously",
        Duration::from_secs(30),
        || async move {
            let rows = server
                .query(
                    "SELECT 1 FROM pg_stat_replication WHERE sync_state = 'sync'",
                    &[],
                )
                .await
                .ok()?;
            (!rows.is_empty()).then_some(())
        },
    )
    .await;

    let port = free_port();
    let config = write_config_setting(port, "failover", &[]);
    let url = format!(
        "postgresql://{USER}@127.0.0.1:{p1},127.0.0.1:{p2}/hookd?target_session_attrs=read-write"
    );
    let hookd = Hookd::start_against(&config, port, &url, "info").await;

    let (stop, seen) = (Arc::new(AtomicBool::new(false)), Arc::default());
    let seen: Arc<Mutex<Seen>> = seen;
    let load = tokio::spawn(send_until(hookd.base.clone(), stop.clone(), seen.clone()));
    let acked = |seen: &Mutex<Seen>| {
        let seen = seen.lock().expect("lock");
        seen.first.values().filter(|s| **s == 200).count()
    };
    let seen_ref = &seen;
    wait_for(
        "100 acknowledged deliveries",
        Duration::from_secs(60),
        || std::future::ready((acked(seen_ref) >= 100).then_some(())),
    )
    .await;

    // The primary crashes; the standby is promoted.
    let crashed = tokio::task::spawn_blocking(move || {
        pg_ctl_as_cluster_user(&primary_dir, &["stop", "-m", "immediate", "-w"])
    })
    .await
    .expect("join");
    assert!(crashed, "pg_ctl stop -m immediate");
    let before_promotion = acked(&seen);
    let standby_dir_ = standby.dir().to_path_buf();
    let promoted = tokio::task::spawn_blocking(move || {
        pg_ctl_as_cluster_user(&standby_dir_, &["promote", "-w"])
    })
    .await
    .expect("join");
    assert!(promoted, "pg_ctl promote");
    // Ready again by itself, within 15 s of the promotion.
    hookd.ready(Duration::from_secs(15)).await;
    wait_for(
        "deliveries acknowledged after the promotion",
        Duration::from_secs(30),
        || std::future::ready((acked(seen_ref) >= before_promotion + 100).then_some(())),
    )
    .await;
    stop.store(true, Ordering::SeqCst);
    load.await.expect("load");

    let first = std::mem::take(&mut seen.lock().expect("lock").first);
    let sent = first.len();
    let mut by_status: BTreeMap<u16, usize> = BTreeMap::new();
    for status in first.values() {
        *by_status.entry(*status).or_default() += 1;
    }
    assert!(
        by_status.keys().all(|s| *s == 200 || *s == 503),
        "only 200 or 503 during the failover: {by_status:?} (0: no answer)"
    );
    assert!(
        by_status.get(&503).is_some_and(|n| *n > 0),
        "the failover was seen: {by_status:?}"
    );

    // Every acknowledged delivery is on the new primary.
    let new_primary = connect(tcp(p2, "hookd")).await;
    let stored: std::collections::BTreeSet<String> = new_primary
        .query("SELECT event_id FROM webhook_events", &[])
        .await
        .expect("events")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let lost: Vec<usize> = first
        .iter()
        .filter(|(i, s)| **s == 200 && !stored.contains(&format!("evt_load_{i}")))
        .map(|(i, _)| *i)
        .collect();
    assert!(
        lost.is_empty(),
        "acknowledged, missing after the failover: {lost:?}"
    );

    // The providers resend every event, until each is answered 200.
    let http = reqwest::Client::new();
    let sign = stripe_signer();
    let webhooks = format!("{}/webhooks/stripe", hookd.base);
    for i in 0..sent {
        let (http, webhooks, sign) = (&http, webhooks.as_str(), &sign);
        wait_for(
            &format!("evt_load_{i} to be answered 200"),
            Duration::from_secs(20),
            || async move { (deliver(http, webhooks, sign, i).await == 200).then_some(()) },
        )
        .await;
    }
    let totals = new_primary
        .query_one(
            "SELECT (SELECT count(*) FROM webhook_events),
                    (SELECT count(DISTINCT event_id) FROM webhook_events),
                    (SELECT count(*) FROM payments),
                    (SELECT count(*) FROM webhook_event_attempts)",
            &[],
        )
        .await
        .expect("totals");
    let sent = sent as i64;
    let counts: (i64, i64, i64, i64) = (totals.get(0), totals.get(1), totals.get(2), totals.get(3));
    assert_eq!(
        counts,
        (sent, sent, sent, sent),
        "events, distinct events, payments, attempts"
    );
    let mismatched = new_primary
        .query(
            "SELECT e.event_id FROM webhook_events e
             LEFT JOIN payments p ON p.source = e.source AND p.payment_id = e.payment_id
             WHERE e.status <> 'processed' OR e.attempts <> 1 OR p.succeeded IS NOT TRUE
                OR p.amount <> 100 + substr(e.event_id, 10)::bigint",
            &[],
        )
        .await
        .expect("mismatched");
    assert!(
        mismatched.is_empty(),
        "{} events without exactly their one payment",
        mismatched.len()
    );

    hookd.signal(Signal::SIGTERM);
    assert!(hookd.wait().await.success());
}
