//! Forwards through `serve`'s own loops: a forward that fails is retried until
//! its receiver takes it, whichever instance runs the retries — an instance
//! without that forward in its configuration leaves it alone (never dead, never
//! dropped) — and each forward is sent from a lane of its own, so a receiver that
//! never answers delays neither another forward's events nor handlers' retries.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hookd::app::Parts;
use hookd::handlers::{Event, Handler, HandlerError, Registry};
use nix::sys::signal::Signal;
use serde_json::{Value, json};

use crate::process::{Hookd, free_port, stripe_signer, write_config_setting};
use crate::support::{
    FORWARD_SECRET, Receiver, Spawn, TestDb, cluster, shipped_settings, spawn, stripe_event,
    wait_for,
};

/// The shipped configuration on `port`, retries from `retry_base`, with the
/// forward `erp` to `receiver` taking invoices by type and payments by kind
/// when `forward` says so.
fn config(
    port: u16,
    name: &str,
    retry_base: &str,
    receiver: Option<&Receiver>,
) -> std::path::PathBuf {
    let path = write_config_setting(port, name, &[("retry_base", retry_base)]);
    if let Some(receiver) = receiver {
        let table = format!(
            "\n[[forwards]]\nname = \"erp\"\nurl = \"{}\"\nsecret = \"{FORWARD_SECRET}\"\n\
             types = [\"invoice.paid\"]\nkinds = [\"payment_succeeded\"]\nsources = [\"stripe\"]\n",
            receiver.url
        );
        let text = std::fs::read_to_string(&path).expect("config") + &table;
        std::fs::write(&path, text).expect("config");
    }
    path
}

fn invoice(id: &str) -> Value {
    stripe_event(
        id,
        "invoice.paid",
        json!({"id": "in_1", "object": "invoice"}),
    )
}

fn payment(id: &str) -> Value {
    stripe_event(
        id,
        "payment_intent.succeeded",
        json!({"id": format!("pi_{id}"), "object": "payment_intent", "amount": 900,
               "currency": "eur"}),
    )
}

/// Posts `event` to a running `hookd serve`, signed as Stripe signs it.
async fn deliver(hookd: &Hookd, event: &Value) {
    let body = serde_json::to_vec(event).expect("json");
    let mut request = reqwest::Client::new()
        .post(format!("{}/webhooks/stripe", hookd.base))
        .body(body.clone());
    for (name, value) in stripe_signer()(&body) {
        request = request.header(name, value);
    }
    let answer = request.send().await.expect("post");
    assert_eq!(answer.status(), 200);
}

async fn status(db: &TestDb, event_id: &str) -> String {
    crate::support::connect(db.config())
        .await
        .query_one(
            "SELECT status FROM webhook_events WHERE event_id = $1",
            &[&event_id],
        )
        .await
        .expect("status")
        .get(0)
}

/// (handler, outcome, http_status) of every attempt of an event, in order.
async fn attempts(db: &TestDb, event_id: &str) -> Vec<(String, String, Option<i32>)> {
    crate::support::connect(db.config())
        .await
        .query(
            "SELECT a.handler, a.outcome, a.http_status FROM webhook_event_attempts a
             JOIN webhook_events e ON e.id = a.webhook_event_id
             WHERE e.event_id = $1 ORDER BY a.attempt",
            &[&event_id],
        )
        .await
        .expect("attempts")
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

async fn until_processed(db: &TestDb, event_id: &str) {
    wait_for(
        &format!("{event_id} to be processed"),
        Duration::from_secs(20),
        || async { (status(db, event_id).await == "processed").then_some(()) },
    )
    .await;
}

fn forward(outcome: &str, status: i32) -> (String, String, Option<i32>) {
    ("forward:erp".into(), outcome.into(), Some(status))
}

#[tokio::test]
async fn slow_serve_retries_a_failing_forward_until_its_receiver_takes_it() {
    let db = TestDb::create().await;
    let receiver = Receiver::start(&[500, 500]).await;
    let port = free_port();
    let hookd = Hookd::start_against(
        &config(port, "lanes-retry", "1s", Some(&receiver)),
        port,
        &cluster().connection_string(&db.name),
        "warn",
    )
    .await;
    // By type, with no kind: tried three times by serve's own lane, the third taken.
    deliver(&hookd, &invoice("evt_inv_retry")).await;
    until_processed(&db, "evt_inv_retry").await;
    assert_eq!(
        attempts(&db, "evt_inv_retry").await,
        [
            forward("failed", 500),
            forward("failed", 500),
            forward("processed", 200)
        ]
    );
    let got = receiver.received();
    assert_eq!(got.len(), 3);
    assert!(got.iter().all(|r| r.webhook_id == got[0].webhook_id));

    // By kind: applied once at receipt, forwarded once.
    deliver(&hookd, &payment("evt_pi_retry")).await;
    until_processed(&db, "evt_pi_retry").await;
    assert_eq!(
        attempts(&db, "evt_pi_retry").await,
        [
            ("payment_succeeded".into(), "processed".into(), None),
            forward("processed", 200)
        ]
    );
    hookd.signal(Signal::SIGTERM);
    assert!(hookd.wait().await.success());
}

#[tokio::test]
async fn slow_an_instance_without_the_forward_leaves_its_retries_to_one_that_has_it() {
    let db = TestDb::create().await;
    let url = cluster().connection_string(&db.name);
    let receiver = Receiver::start(&[500, 500]).await;
    // Retries far enough apart that the instance stops before its own second try.
    let (port_a, port_b) = (free_port(), free_port());
    let with_forward = config(port_a, "lanes-with", "5s", Some(&receiver));
    let a = Hookd::start_against(&with_forward, port_a, &url, "warn").await;
    deliver(&a, &invoice("evt_inv_moved")).await;
    deliver(&a, &payment("evt_pi_moved")).await;
    receiver.wait_for(2).await;
    a.signal(Signal::SIGTERM);
    assert!(a.wait().await.success());

    // Another instance, whose configuration has no such forward (a rolling
    // deploy, a second file), runs its retry loops over the same database.
    let b = Hookd::start_against(
        &config(port_b, "lanes-without", "1s", None),
        port_b,
        &url,
        "warn",
    )
    .await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    for event_id in ["evt_inv_moved", "evt_pi_moved"] {
        assert_eq!(
            status(&db, event_id).await,
            "failed",
            "{event_id} still to go"
        );
    }
    assert_eq!(
        receiver.received().len(),
        2,
        "nothing sent by the other instance"
    );
    b.signal(Signal::SIGTERM);
    assert!(b.wait().await.success());

    // Back with the forward: each is delivered, the payment applied once.
    let a = Hookd::start_against(&with_forward, port_a, &url, "warn").await;
    until_processed(&db, "evt_inv_moved").await;
    until_processed(&db, "evt_pi_moved").await;
    assert_eq!(
        attempts(&db, "evt_inv_moved").await,
        [forward("failed", 500), forward("processed", 200)]
    );
    assert_eq!(
        attempts(&db, "evt_pi_moved").await,
        [
            ("payment_succeeded".into(), "processed".into(), None),
            forward("failed", 500),
            forward("processed", 200)
        ]
    );
    assert_eq!(receiver.received().len(), 4);
    a.signal(Signal::SIGTERM);
    assert!(a.wait().await.success());
}

/// Fails each event's first run, then succeeds.
#[derive(Default)]
struct FailsFirst(std::sync::Mutex<std::collections::HashSet<i64>>);

#[async_trait::async_trait]
impl Handler for FailsFirst {
    async fn apply(
        &self,
        _tx: &deadpool_postgres::Transaction<'_>,
        event: &Event<'_>,
    ) -> Result<(), HandlerError> {
        if self.0.lock().expect("lock").insert(event.id) {
            return Err(HandlerError::Retry("not yet".into()));
        }
        Ok(())
    }
}

#[tokio::test]
async fn slow_a_receiver_that_never_answers_delays_no_other_forward_nor_retries() {
    const EVENTS: usize = 150;
    const EVERY: Duration = Duration::from_millis(600);
    // Accepts each request and never answers within the forward's timeout.
    let blackhole = Receiver::slow(Duration::from_secs(3600), &[]).await;
    let healthy = Receiver::start(&[]).await;
    let mut settings = shipped_settings();
    settings.forwards = vec![
        blackhole.forward("blackhole", &[], &["*"]),
        healthy.forward("healthy", &["payment_succeeded"], &[]),
    ];
    settings.retry_base = Duration::from_secs(1);
    let mut registry = Registry::builtin();
    registry.register("payment_failed", Arc::new(FailsFirst::default()));
    let app = spawn(Spawn {
        settings,
        registry,
        parts: Parts {
            dispatcher: true,
            purge: false,
            http_workers: Some(2),
        },
        ..Spawn::default()
    })
    .await;

    // 100 events a minute: payments for the healthy receiver, and every fifth a
    // failed payment whose handler fails once and is retried by the loop.
    let mut acknowledged = Vec::new();
    let mut retried: i64 = 0;
    let started = Instant::now();
    for i in 0..EVENTS {
        let at = started + EVERY * u32::try_from(i).expect("small");
        tokio::time::sleep_until(at.into()).await;
        if i % 5 == 4 {
            let id = format!("evt_lane_failed_{i}");
            let failed = stripe_event(
                &id,
                "payment_intent.payment_failed",
                json!({"id": format!("pi_lane_failed_{i}"), "object": "payment_intent",
                       "amount": 100, "currency": "usd"}),
            );
            app.deliver_ok("stripe", &failed).await;
            retried += 1;
        } else {
            app.deliver_ok("stripe", &payment(&format!("evt_lane_{i}")))
                .await;
            acknowledged.push((format!("evt_lane_{i}"), Instant::now()));
        }
    }
    // The healthy receiver got each payment within a few seconds of its 200.
    let got = healthy.wait_for(acknowledged.len()).await;
    let mut worst = Duration::ZERO;
    for (id, at) in &acknowledged {
        let arrived = got
            .iter()
            .find(|r| serde_json::from_slice::<Value>(&r.body).expect("json")["id"] == id.as_str())
            .unwrap_or_else(|| panic!("{id} never reached the healthy receiver"));
        worst = worst.max(arrived.at.saturating_duration_since(*at));
    }
    assert!(
        worst < Duration::from_secs(3),
        "the healthy receiver lagged up to {worst:?} behind the blackhole"
    );
    // Handlers' retries ran on time: each failed payment's second run came
    // within a few seconds of its receipt (the first run failed at receipt).
    let query = "SELECT count(*) FROM webhook_event_attempts a
                 JOIN webhook_events e ON e.id = a.webhook_event_id
                 WHERE a.handler = 'payment_failed' AND a.outcome = 'processed'
                   AND a.finished_at < e.received_at + interval '5 seconds'";
    app.wait_for_count(query, retried, Duration::from_secs(10))
        .await;
    assert!(!blackhole.received().is_empty(), "the blackhole was tried");
}
