//! Forwards through `serve`'s own loops: a forward that fails is retried until
//! its receiver takes it, whichever instance runs the retries — an instance
//! without that forward in its configuration leaves it alone (never dead, never
//! dropped) — and each forward is sent from a lane of its own, so a receiver that
//! never answers delays neither another forward's events nor handlers' retries.

use std::sync::Arc;
use std::time::Duration;

use hookd::handlers::{Event, Handler, HandlerError, Registry};
use nix::sys::signal::Signal;
use serde_json::{Value, json};

use crate::process::{Hookd, free_port, stripe_signer, write_config_setting};
use crate::support::{
    FORWARD_SECRET, Receiver, Spawn, TestDb, cluster, shipped_settings, spawn, spawn_looping,
    spawn_with_settings, stripe_event, wait_for,
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
async fn an_instance_without_the_forward_retries_the_handler_and_leaves_the_forward_to_one_that_has_it()
 {
    let receiver = Receiver::start(&[]).await;
    // Instance A has the forward `erp`; its payment handler fails each event's
    // first run. It runs no loops: nothing it planned is sent yet.
    let mut with_forward = shipped_settings();
    let mut erp = receiver.forward("erp", &["payment_succeeded"], &["invoice.paid"]);
    erp.sources = vec!["stripe".into()];
    with_forward.forwards = vec![erp];
    let mut registry = Registry::builtin();
    registry.register("payment_succeeded", Arc::new(FailsFirst::default()));
    let a = spawn(Spawn {
        settings: with_forward,
        registry,
        ..Spawn::default()
    })
    .await;
    a.deliver_ok("stripe", &invoice("evt_inv_moved")).await;
    a.deliver_ok("stripe", &payment("evt_pi_moved")).await;
    assert_eq!(
        a.strings(
            "SELECT a.outcome FROM webhook_event_attempts a
             JOIN webhook_events e ON e.id = a.webhook_event_id
             WHERE e.event_id = 'evt_pi_moved'",
            &[]
        )
        .await,
        ["failed"],
        "the handler's first run failed at receipt"
    );

    // Instance B, on the same database, has no such forward (a rolling deploy,
    // a second file) and runs serve's loops: its retry loop runs the payment's
    // handler again, and nothing of `erp` is sent, dropped or let go.
    let b = spawn(Spawn {
        parts: Spawn::LOOPS,
        db: a.db.clone(),
        ..Spawn::default()
    })
    .await;
    a.make_retries_due().await;
    let retried = "SELECT count(*) FROM webhook_event_attempts a
                   JOIN webhook_events e ON e.id = a.webhook_event_id
                   WHERE e.event_id = 'evt_pi_moved' AND a.handler = 'payment_succeeded'
                     AND a.outcome = 'processed'";
    b.wait_for_count(retried, 1, Duration::from_secs(20)).await;
    drop(b);
    let forwards = "SELECT e.event_id, e.status, f.state, f.attempts FROM event_forwards f
                    JOIN webhook_events e ON e.id = f.webhook_event_id
                    WHERE f.forward = 'erp' ORDER BY e.event_id";
    let rows: Vec<(String, String, String, i32)> = a
        .query(forwards, &[])
        .await
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    let waiting = |id: &str| (id.to_string(), "failed".into(), "pending".into(), 0);
    assert_eq!(rows, [waiting("evt_inv_moved"), waiting("evt_pi_moved")]);
    assert_eq!(
        a.count(
            "SELECT count(*) FROM webhook_event_attempts WHERE handler = 'forward:erp'",
            &[]
        )
        .await,
        0
    );
    assert!(receiver.received().is_empty(), "nothing sent by B");
    assert_eq!(
        a.count(
            "SELECT count(*) FROM payments WHERE payment_id = 'pi_evt_pi_moved'",
            &[]
        )
        .await,
        1,
        "B's handler applied the payment"
    );

    // A's loops send each forward once; the payment's handler does not run again.
    a.run_due_retries().await;
    let got = receiver.wait_for(2).await;
    assert_eq!(got.len(), 2);
    for event_id in ["evt_inv_moved", "evt_pi_moved"] {
        assert_eq!(
            a.strings(
                "SELECT status FROM webhook_events WHERE event_id = $1",
                &[&event_id]
            )
            .await,
            ["processed"]
        );
    }
    assert_eq!(
        a.strings(
            "SELECT a.handler || ' ' || a.outcome FROM webhook_event_attempts a
             JOIN webhook_events e ON e.id = a.webhook_event_id
             WHERE e.event_id = 'evt_pi_moved' ORDER BY a.attempt",
            &[]
        )
        .await,
        [
            "payment_succeeded failed",
            "payment_succeeded processed",
            "forward:erp processed"
        ]
    );
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
    // Accepts each request and never answers: every send it gets holds one of
    // its lane's slots until the forward's timeout (a minute).
    let blackhole = Receiver::slow(Duration::from_secs(3600), &[]).await;
    let healthy = Receiver::start(&[]).await;
    let mut settings = shipped_settings();
    let mut silent = blackhole.forward("blackhole", &[], &["*"]);
    silent.timeout = Duration::from_secs(60);
    silent.concurrency = 4;
    settings.forwards = vec![
        silent,
        healthy.forward("healthy", &["payment_succeeded"], &[]),
    ];
    settings.retry_base = Duration::from_secs(1);
    let mut registry = Registry::builtin();
    registry.register("payment_failed", Arc::new(FailsFirst::default()));
    let app = spawn_looping(settings, registry).await;

    // Payments for the healthy receiver, and failed payments whose handler
    // fails once and is retried by the loop; every one goes to the blackhole.
    let payments: Vec<String> = (0..8).map(|i| format!("evt_lane_{i}")).collect();
    for id in &payments {
        app.deliver_ok("stripe", &payment(id)).await;
    }
    for i in 0..2 {
        let failed = stripe_event(
            &format!("evt_lane_failed_{i}"),
            "payment_intent.payment_failed",
            json!({"id": format!("pi_lane_failed_{i}"), "object": "payment_intent",
                   "amount": 100, "currency": "usd"}),
        );
        app.deliver_ok("stripe", &failed).await;
    }
    // The blackhole's lane is full: four sends held, none answered.
    let held = "SELECT count(*) FROM event_forwards
                WHERE forward = 'blackhole' AND lease_until > now()";
    app.wait_for_count(held, 4, Duration::from_secs(20)).await;
    // While it stays full, the healthy receiver gets every payment and the
    // handlers' retries run.
    let mut ids = taken(&healthy.wait_for(payments.len()).await, 0);
    ids.sort();
    assert_eq!(ids, payments);
    let retried = "SELECT count(*) FROM webhook_event_attempts
                   WHERE handler = 'payment_failed' AND outcome = 'processed'";
    app.wait_for_count(retried, 2, Duration::from_secs(20))
        .await;
    assert_eq!(
        app.count(held, &[]).await,
        4,
        "the blackhole held its lane all along"
    );
    assert_eq!(blackhole.received().len(), 4, "four sends, none answered");
}

/// The state `GET /admin/api/forwards` gives `name`.
async fn forward_view(app: &crate::support::TestApp, name: &str) -> Value {
    let answer = app.viewer().get("/admin/api/forwards").await;
    assert_eq!(answer.status, 200);
    answer.json()["forwards"]
        .as_array()
        .expect("forwards")
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("no forward {name}"))
        .clone()
}

/// The ids of the events a receiver took (answered 2xx), in the order it took them.
fn taken(received: &[crate::support::Received], answers_before: usize) -> Vec<String> {
    received[answers_before..]
        .iter()
        .map(|r| {
            let body: Value = serde_json::from_slice(&r.body).expect("json");
            body["id"].as_str().expect("id").to_string()
        })
        .collect()
}

/// `billing` to `receiver` for payments, one send at a time, its breaker
/// opening after `open_after` failures in a row, retried for an hour.
fn one_at_a_time(receiver: &Receiver, open_after: i32) -> hookd::config::Forward {
    let mut forward = receiver.forward("billing", &["payment_succeeded"], &[]);
    forward.concurrency = 1;
    forward.open_after = open_after;
    forward.retry_for = Duration::from_secs(3600);
    forward
}

/// An app forwarding to a receiver answering `answers` (then 200) through
/// `one_at_a_time(open_after)`, whose failed sends are not due again unless
/// the test or the breaker says so, and events `{prefix}_1..=count`
/// delivered. Its lanes run as `serve` runs them when `looping`, else the
/// test steps them.
async fn breaker_app(
    answers: &[u16],
    open_after: i32,
    prefix: &str,
    count: usize,
    looping: bool,
) -> (Receiver, crate::support::TestApp) {
    let receiver = Receiver::start(answers).await;
    let mut settings = shipped_settings();
    settings.forwards = vec![one_at_a_time(&receiver, open_after)];
    settings.retry_base = Duration::from_secs(3600);
    let app = if looping {
        spawn_looping(settings, Registry::builtin()).await
    } else {
        spawn_with_settings(settings).await
    };
    for i in 1..=count {
        app.deliver_ok("stripe", &payment(&format!("{prefix}_{i}")))
            .await;
    }
    (receiver, app)
}

#[tokio::test]
async fn slow_a_receiver_down_longer_than_max_attempts_loses_nothing_and_gets_the_backlog_in_order()
{
    // Down for five sends; the breaker opens after five failures in a row.
    let receiver = Receiver::start(&[503; 5]).await;
    let mut settings = shipped_settings();
    settings.forwards = vec![one_at_a_time(&receiver, 5)];
    settings.max_attempts = 2;
    settings.retry_base = Duration::from_secs(1);
    let app = spawn_looping(settings, Registry::builtin()).await;
    let ids: Vec<String> = (1..=4).map(|i| format!("evt_down_{i}")).collect();
    for id in &ids {
        app.deliver_ok("stripe", &payment(id)).await;
    }
    app.wait_for_count(
        "SELECT count(*) FROM forward_states WHERE forward = 'billing' AND opened_at IS NOT NULL",
        1,
        Duration::from_secs(20),
    )
    .await;
    // Past max_attempts for one event at least, and none of them dead.
    assert!(
        app.count(
            "SELECT count(*) FROM event_forwards WHERE attempts >= 2",
            &[]
        )
        .await
            >= 1
    );
    let view = forward_view(&app, "billing").await;
    assert_eq!(view["state"], "open", "{view}");
    assert_eq!(view["backlog"], 4, "{view}");
    // The one waiting longest is the first received, waiting since it was.
    let first = app
        .db()
        .await
        .query_one(
            "SELECT f.webhook_event_id, to_json(f.created_at)::text
             FROM event_forwards f JOIN webhook_events e ON e.id = f.webhook_event_id
             WHERE e.event_id = 'evt_down_1' AND f.forward = 'billing'",
            &[],
        )
        .await
        .expect("the first event's forward");
    let (first_id, first_since): (i64, String) = (first.get(0), first.get(1));
    let since = chrono::DateTime::parse_from_rfc3339(
        view["oldest_waiting"]["since"].as_str().expect("since"),
    )
    .expect("an RFC 3339 time");
    let planned = chrono::DateTime::parse_from_rfc3339(first_since.trim_matches('"'))
        .expect("the plan's time");
    assert_eq!(view["oldest_waiting"]["id"], first_id, "{view}");
    assert_eq!(since, planned, "{view}");
    assert!(view["last_error"].as_str().expect("error").contains("503"));
    let metrics = app.metrics_showing("hookd_forward_state").await;
    assert_eq!(
        metrics.value("hookd_forward_state", &[("forward", "billing")]),
        1.0
    );
    // While it is open, a new event waits, unsent.
    app.deliver_ok("stripe", &payment("evt_down_5")).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(receiver.received().len(), 5, "no send but the failed five");
    assert_eq!(
        app.count(
            "SELECT count(*) FROM webhook_events WHERE status = 'dead'",
            &[]
        )
        .await,
        0
    );

    // The receiver is back; the next probe (due now) goes through, and the
    // backlog drains once, in the order it came.
    app.execute(
        "UPDATE forward_states SET probe_at = now() WHERE forward = 'billing'",
        &[],
    )
    .await;
    app.wait_for_count(
        "SELECT count(*) FROM webhook_events WHERE status = 'processed'",
        5,
        Duration::from_secs(20),
    )
    .await;
    let all: Vec<String> = (1..=5).map(|i| format!("evt_down_{i}")).collect();
    let got = taken(&receiver.received(), 5);
    assert_eq!(got.len(), 5, "each taken once: {got:?}");
    // The probe is the oldest due; the rest follow in the order they came.
    assert_eq!(got, all, "in order");
    let view = forward_view(&app, "billing").await;
    assert_eq!(view["state"], "closed", "{view}");
    assert_eq!(view["backlog"], 0, "{view}");
    assert!(view["oldest_waiting"].is_null(), "{view}");
}

#[tokio::test]
async fn a_refusal_resets_the_breaker_and_a_failed_probe_keeps_it_open_a_minute() {
    // Five events; the receiver fails, fails, refuses one (422), fails, fails.
    let (receiver, app) =
        breaker_app(&[503, 503, 422, 503, 503, 503, 503], 3, "evt_brk", 5, false).await;
    let breaker = || async {
        let row = &app
            .query(
                "SELECT consecutive_failures, opened_at IS NOT NULL,
                        extract(epoch FROM probe_at - now())::float8
                 FROM forward_states WHERE forward = 'billing'",
                &[],
            )
            .await[0];
        (
            row.get::<_, i32>(0),
            row.get::<_, bool>(1),
            row.get::<_, Option<f64>>(2),
        )
    };
    // The lane's steps, one send each, in the order the events came.
    for _ in 1..=5 {
        assert_eq!(app.send_due_forwards().await, 1);
    }
    // A refusal is the receiver answering: it breaks the run of failures, so
    // four failures in all never made three in a row.
    assert_eq!(breaker().await, (2, false, None));
    assert_eq!(
        app.event_status("evt_brk_3").await,
        "dead",
        "refused: not retried"
    );
    assert_eq!(app.event_status("evt_brk_1").await, "failed");

    // One more failure in a row opens it.
    app.execute(
        "UPDATE event_forwards SET next_attempt_at = now()
         WHERE webhook_event_id = (SELECT id FROM webhook_events WHERE event_id = 'evt_brk_1')",
        &[],
    )
    .await;
    assert_eq!(app.send_due_forwards().await, 1);
    let (failures, open, probe) = breaker().await;
    assert_eq!((failures, open), (3, true));
    assert!(
        probe.is_some_and(|s| (50.0..=60.0).contains(&s)),
        "{probe:?}"
    );
    assert_eq!(forward_view(&app, "billing").await["state"], "open");

    // Its probe is due: one send, though four events are due; it fails, and
    // the breaker stays open, the next probe a minute away.
    app.make_retries_due().await;
    app.execute(
        "UPDATE forward_states SET probe_at = now() WHERE forward = 'billing'",
        &[],
    )
    .await;
    assert_eq!(app.send_due_forwards().await, 1, "only the probe");
    assert_eq!(receiver.received().len(), 7);
    let (failures, open, probe) = breaker().await;
    assert_eq!((failures, open), (4, true));
    assert!(
        probe.is_some_and(|s| (50.0..=60.0).contains(&s)),
        "{probe:?}"
    );
    assert_eq!(
        app.send_due_forwards().await,
        0,
        "nothing until the next probe"
    );
}

#[tokio::test]
async fn a_refused_probe_keeps_the_breaker_open_and_only_an_event_taken_closes_it() {
    // Fails one, refuses the next (422), then takes everything.
    let (receiver, app) = breaker_app(&[503, 422], 1, "evt_ref", 3, false).await;
    let probe_now = || {
        app.execute(
            "UPDATE forward_states SET probe_at = now() WHERE forward = 'billing'",
            &[],
        )
    };
    // One failure opens it (open_after = 1).
    assert_eq!(app.send_due_forwards().await, 1);
    assert_eq!(forward_view(&app, "billing").await["state"], "open");
    // Its probe is refused: that event is dead, and the receiver has not
    // shown that it takes events again, so the rest keep waiting.
    probe_now().await;
    assert_eq!(app.send_due_forwards().await, 1, "only the probe");
    assert_eq!(app.event_status("evt_ref_2").await, "dead");
    let view = forward_view(&app, "billing").await;
    assert_eq!(view["state"], "open", "{view}");
    assert_eq!(view["backlog"], 2, "{view}");
    assert_eq!(
        app.send_due_forwards().await,
        0,
        "nothing until the next probe"
    );
    // The next probe is taken: it closes, and what waited goes (the failed
    // one too, due again at once).
    probe_now().await;
    assert_eq!(app.send_due_forwards().await, 1);
    assert_eq!(forward_view(&app, "billing").await["state"], "closed");
    assert_eq!(app.send_due_forwards().await, 1);
    assert_eq!(app.event_status("evt_ref_1").await, "processed");
    assert_eq!(app.event_status("evt_ref_3").await, "processed");
    assert_eq!(receiver.received().len(), 4, "each sent once more at most");
}

#[tokio::test]
async fn slow_serve_keeps_a_breaker_open_after_a_refused_probe_and_drains_after_a_taken_one() {
    // Through the lanes as `serve` runs them: fails one (opens at one),
    // refuses the probe, takes the next probe and then the rest.
    let (receiver, app) = breaker_app(&[503, 422], 1, "evt_srv", 3, true).await;
    let opened =
        "SELECT count(*) FROM forward_states WHERE forward = 'billing' AND opened_at IS NOT NULL";
    app.wait_for_count(opened, 1, Duration::from_secs(20)).await;
    let probe_now = "UPDATE forward_states SET probe_at = now() WHERE forward = 'billing'";
    app.execute(probe_now, &[]).await;
    receiver.wait_for(2).await;
    let dead = "SELECT count(*) FROM webhook_events WHERE status = 'dead'";
    app.wait_for_count(dead, 1, Duration::from_secs(20)).await;
    // The lane looks again (every POLL and at each wake) and sends nothing.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        receiver.received().len(),
        2,
        "a refused probe let the rest go"
    );
    assert_eq!(forward_view(&app, "billing").await["state"], "open");

    app.execute(probe_now, &[]).await;
    let processed = "SELECT count(*) FROM webhook_events WHERE status = 'processed'";
    app.wait_for_count(processed, 2, Duration::from_secs(20))
        .await;
    assert_eq!(receiver.received().len(), 4, "each sent once more at most");
    assert_eq!(forward_view(&app, "billing").await["state"], "closed");
}

#[tokio::test]
async fn an_answer_that_is_neither_taken_nor_refused_leaves_the_run_of_failures_alone() {
    // Fails, redirects (not followed: dead at once), fails: two failures in a
    // row as far as the breaker counts, which opens it at two.
    let (_receiver, app) = breaker_app(&[503, 302, 503], 2, "evt_moved", 3, false).await;
    for _ in 1..=3 {
        assert_eq!(app.send_due_forwards().await, 1);
    }
    assert_eq!(app.event_status("evt_moved_2").await, "dead");
    let view = forward_view(&app, "billing").await;
    assert_eq!(view["state"], "open", "{view}");
    assert_eq!(view["consecutive_failures"], 2, "{view}");
}

#[tokio::test]
async fn a_paused_forward_holds_its_events_until_an_operator_resumes_it() {
    let receiver = Receiver::start(&[]).await;
    let mut settings = shipped_settings();
    settings.forwards = vec![receiver.forward("billing", &["payment_succeeded"], &[])];
    let app = spawn_looping(settings, Registry::builtin()).await;
    let viewer = app
        .viewer()
        .post("/admin/api/forwards/billing/pause", &[])
        .await;
    assert_eq!(viewer.status, 403);
    let unknown = app
        .operator()
        .post("/admin/api/forwards/nope/pause", &[])
        .await;
    assert_eq!(unknown.status, 404);
    let paused = app
        .operator()
        .post("/admin/api/forwards/billing/pause", &[])
        .await;
    assert_eq!(paused.status, 200);
    assert_eq!(paused.json()["state"], "paused");
    assert_eq!(paused.json()["paused_by"], "operator");

    app.deliver_ok("stripe", &payment("evt_paused")).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(receiver.received().is_empty(), "held while paused");
    assert_eq!(app.event_status("evt_paused").await, "failed");
    let view = forward_view(&app, "billing").await;
    assert_eq!(view["backlog"], 1, "{view}");
    let metrics = app.metrics_showing("hookd_forward_state").await;
    assert_eq!(
        metrics.value("hookd_forward_state", &[("forward", "billing")]),
        2.0
    );

    let resumed = app
        .operator()
        .post("/admin/api/forwards/billing/resume", &[])
        .await;
    assert_eq!(resumed.status, 200);
    receiver.wait_for(1).await;
    app.wait_for_count(
        "SELECT count(*) FROM webhook_events WHERE status = 'processed'",
        1,
        Duration::from_secs(20),
    )
    .await;
    let audited = app
        .strings(
            "SELECT action FROM admin_audit WHERE action LIKE '%_forward' ORDER BY id",
            &[],
        )
        .await;
    assert_eq!(audited, ["paused_forward", "resumed_forward"]);
}

#[tokio::test]
async fn a_forward_paused_in_the_configuration_waits_and_cannot_be_resumed_from_the_desk() {
    let receiver = Receiver::start(&[]).await;
    let mut settings = shipped_settings();
    let mut forward = receiver.forward("billing", &["payment_succeeded"], &[]);
    forward.paused = true;
    settings.forwards = vec![forward];
    let app = spawn_with_settings(settings).await;
    app.deliver_ok("stripe", &payment("evt_held")).await;
    assert_eq!(app.send_due_forwards().await, 0, "paused: nothing goes");
    let resumed = app
        .operator()
        .post("/admin/api/forwards/billing/resume", &[])
        .await;
    assert_eq!(resumed.status, 409);
    assert_eq!(resumed.json()["error"], "paused_in_configuration");
    // Nor from the dashboard's form, whatever the page shows.
    let cookie = app.sign_in(hookd_kit::admin::OPERATOR_TOKEN).await;
    let operator = app.admin(hookd_kit::admin::Credential::Cookie(cookie));
    let csrf = hookd_kit::admin::csrf_of(&operator.get("/admin").await.text());
    let page = operator
        .post_form("/admin/forwards/billing/resume", &[], &[("csrf", &csrf)])
        .await;
    assert_eq!(page.status, 409, "{}", page.text());
    assert_eq!(forward_view(&app, "billing").await["state"], "paused");
}

#[tokio::test]
async fn a_forward_goes_dead_only_once_both_its_attempts_and_its_time_are_spent() {
    let receiver = Receiver::start(&[503; 10]).await;
    let mut settings = shipped_settings();
    let mut forward = receiver.forward("billing", &["payment_succeeded"], &[]);
    forward.retry_for = Duration::from_secs(3600);
    settings.forwards = vec![forward];
    settings.max_attempts = 2;
    let app = spawn_with_settings(settings).await;
    app.deliver_ok("stripe", &payment("evt_for_time")).await;
    for _ in 0..3 {
        app.make_retries_due().await;
        assert_eq!(app.send_due_forwards().await, 1);
    }
    assert_eq!(
        app.event_status("evt_for_time").await,
        "failed",
        "three sends, over max_attempts, but not yet retry_for"
    );
    // retry_for has passed since the forward was planned.
    app.execute(
        "UPDATE event_forwards SET created_at = now() - interval '2 hours'",
        &[],
    )
    .await;
    app.make_retries_due().await;
    assert_eq!(app.send_due_forwards().await, 1);
    assert_eq!(app.event_status("evt_for_time").await, "dead");
    let error = app
        .strings(
            "SELECT last_error FROM webhook_events WHERE event_id = 'evt_for_time'",
            &[],
        )
        .await;
    assert!(error[0].contains("gave up after 4 attempts"), "{error:?}");
}

#[tokio::test]
async fn slow_serve_holds_a_forward_paused_in_its_configuration_and_drains_it_once_a_reload_resumes_it()
 {
    let db = TestDb::create().await;
    let receiver = Receiver::start(&[]).await;
    let port = free_port();
    let path = config(port, "lanes-paused", "1s", Some(&receiver));
    let text = std::fs::read_to_string(&path).expect("config");
    let forward_table = "sources = [\"stripe\"]\n";
    std::fs::write(
        &path,
        text.replace(forward_table, &format!("{forward_table}paused = true\n")),
    )
    .expect("config");
    let hookd =
        Hookd::start_against(&path, port, &cluster().connection_string(&db.name), "warn").await;
    deliver(&hookd, &invoice("evt_inv_held")).await;
    deliver(&hookd, &payment("evt_pi_held")).await;
    // serve's own lane, retrying every second, sends nothing while paused.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(receiver.received().is_empty(), "held while paused");
    for event_id in ["evt_inv_held", "evt_pi_held"] {
        assert_eq!(status(&db, event_id).await, "failed", "{event_id} waits");
    }
    // (The gauge is read from the database: a scrape whose read missed its
    // limit leaves it out, so the first that shows it is read.)
    let metrics = wait_for(
        "a scrape showing the forward's state",
        Duration::from_secs(30),
        || async {
            let text = reqwest::get(format!("{}/metrics", hookd.base))
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            text.contains("hookd_forward_state{").then_some(text)
        },
    )
    .await;
    assert!(
        metrics.contains("hookd_forward_state{forward=\"erp\"} 2"),
        "{metrics}"
    );

    // The configuration resumes it; a reload drains the backlog, each once.
    std::fs::write(&path, text).expect("config");
    hookd.signal(Signal::SIGHUP);
    until_processed(&db, "evt_inv_held").await;
    until_processed(&db, "evt_pi_held").await;
    let mut got = taken(&receiver.received(), 0);
    got.sort();
    assert_eq!(got, ["evt_inv_held", "evt_pi_held"]);
    hookd.signal(Signal::SIGTERM);
    assert!(hookd.wait().await.success());
}

#[tokio::test]
async fn slow_serve_gives_a_failing_forward_up_only_once_both_its_attempts_and_its_time_are_spent()
{
    let db = TestDb::create().await;
    let receiver = Receiver::start(&[503; 20]).await;
    let port = free_port();
    let path = config(port, "lanes-retry-for", "1s", Some(&receiver));
    let text = std::fs::read_to_string(&path).expect("config");
    let forward_table = "sources = [\"stripe\"]\n";
    let text = text
        .replace("max_attempts = 10", "max_attempts = 2")
        .replace(
            forward_table,
            &format!("{forward_table}retry_for = \"1h\"\n"),
        );
    std::fs::write(&path, text).expect("config");
    let hookd =
        Hookd::start_against(&path, port, &cluster().connection_string(&db.name), "warn").await;
    deliver(&hookd, &invoice("evt_inv_for_time")).await;
    // Past max_attempts, but within retry_for: still to go.
    wait_for("a third failed send", Duration::from_secs(20), || async {
        (attempts(&db, "evt_inv_for_time").await.len() >= 3).then_some(())
    })
    .await;
    assert_eq!(status(&db, "evt_inv_for_time").await, "failed");
    // retry_for has passed since the forward was planned: serve's lane gives it
    // up at its next failed send.
    crate::support::connect(db.config())
        .await
        .execute(
            "UPDATE event_forwards SET created_at = now() - interval '2 hours'",
            &[],
        )
        .await
        .expect("backdate");
    wait_for("dead", Duration::from_secs(30), || async {
        (status(&db, "evt_inv_for_time").await == "dead").then_some(())
    })
    .await;
    assert!(attempts(&db, "evt_inv_for_time").await.len() > 3);
    hookd.signal(Signal::SIGTERM);
    assert!(hookd.wait().await.success());
}
