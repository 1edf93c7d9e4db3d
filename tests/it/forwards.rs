//! Forwarding to any stack: matching events are POSTed, byte for byte and signed
//! as Standard Webhooks, right after the provider's 200; failures are retried
//! without applying the payment again (and the other way round). A forward is
//! sent under a lease with no transaction open: a consumer slower than
//! PostgreSQL's idle-in-transaction limit, or one flooding its answer, is
//! recorded like any other; URLs with credentials are refused at load.

use std::sync::Arc;
use std::time::Duration;

use hookd::app::Parts;
use hookd::handlers::Registry;
use hookd::store::events::EventStatus;
use serde_json::{Value, json};

use crate::support::{
    FORWARD_SECRET, Receiver, Spawn, TestApp, TestDb, connect, shipped_settings, spawn,
    stripe_event, wait_for,
};

fn paid(id: &str, payment: &str) -> Value {
    stripe_event(
        id,
        "payment_intent.succeeded",
        json!({"id": payment, "object": "payment_intent", "amount": 700, "currency": "usd"}),
    )
}

async fn app_forwarding_to(
    receiver: &Receiver,
    kinds: &[&str],
    types: &[&str],
    dispatcher: bool,
) -> TestApp {
    let mut settings = shipped_settings();
    settings.forwards = vec![receiver.forward("billing", kinds, types)];
    spawn(Spawn {
        settings,
        parts: Parts {
            dispatcher,
            purge: false,
            activity: true,
        },
        ..Spawn::default()
    })
    .await
}

/// An app (no loops: the test steps them) whose `payment_succeeded` kind runs
/// `handler`, forwarding that kind to `receiver` as `billing`.
async fn app_with_payment_handler(
    receiver: &Receiver,
    handler: Arc<dyn hookd::handlers::Handler>,
) -> TestApp {
    let mut settings = shipped_settings();
    settings.forwards = vec![receiver.forward("billing", &["payment_succeeded"], &[])];
    let mut registry = Registry::builtin();
    registry.register("payment_succeeded", handler);
    spawn(Spawn {
        settings,
        registry,
        ..Spawn::default()
    })
    .await
}

/// (handler, outcome, http_status) of every attempt of an event, in order.
async fn attempts(app: &TestApp, event_id: &str) -> Vec<(String, String, Option<i32>)> {
    app.query(
        "SELECT a.handler, a.outcome, a.http_status FROM webhook_event_attempts a
         JOIN webhook_events e ON e.id = a.webhook_event_id
         WHERE e.event_id = $1 ORDER BY a.attempt",
        &[&event_id],
    )
    .await
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect()
}

#[tokio::test]
async fn a_matching_event_is_forwarded_byte_for_byte_and_signed_right_after_the_200() {
    let receiver = Receiver::start(&[]).await;
    let app = app_forwarding_to(&receiver, &["payment_succeeded"], &[], true).await;
    // Spaced, as a provider may send it: the receiver must get these exact bytes.
    let body = serde_json::to_vec_pretty(&paid("evt_fwd", "pi_fwd")).expect("json");
    let headers = app.sign("stripe", &body, Default::default());
    let answer = app.post("stripe", &headers, body.clone()).await;
    assert_eq!(answer.status, 200);
    // How soon is for benchmarks; here: it comes, as the provider sent it.
    let got = receiver.wait_for(1).await;
    assert!(got[0].verified, "the Standard Webhooks library accepts it");
    assert_eq!(got[0].body, body);
    assert_eq!(got[0].header("hookd-source"), Some("stripe"));
    assert_eq!(
        got[0].header("hookd-event-type"),
        Some("payment_intent.succeeded")
    );
    assert_eq!(got[0].header("hookd-kind"), Some("payment_succeeded"));
    assert!(got[0].webhook_id.starts_with("msg_"));

    // Done: the payment was applied once, the forward delivered once.
    processed(&app, "evt_fwd").await;
    assert_eq!(
        attempts(&app, "evt_fwd").await,
        [
            ("payment_succeeded".into(), "processed".into(), None),
            ("forward:billing".into(), "processed".into(), Some(200)),
        ]
    );
    let response = app
        .strings(
            "SELECT a.response FROM webhook_event_attempts a WHERE a.handler = 'forward:billing'",
            &[],
        )
        .await;
    assert_eq!(response, ["answer 200"]);
    // A resend from the provider forwards nothing again: once an event delivered
    // after it is forwarded and nothing is left to go, the receiver has that one
    // request more.
    assert_eq!(
        app.post(
            "stripe",
            &app.sign("stripe", &body, Default::default()),
            body
        )
        .await
        .status,
        200
    );
    app.deliver_ok("stripe", &paid("evt_fwd_next", "pi_fwd_next"))
        .await;
    processed(&app, "evt_fwd_next").await;
    app.wait_for_count(
        "SELECT count(*) FROM webhook_events WHERE status <> 'processed'",
        0,
        Duration::from_secs(20),
    )
    .await;
    let got = receiver.received();
    let ids: Vec<Value> = got
        .iter()
        .map(|r| serde_json::from_slice::<Value>(&r.body).expect("json")["id"].clone())
        .collect();
    assert_eq!(ids, ["evt_fwd", "evt_fwd_next"]);
    assert_eq!(attempts(&app, "evt_fwd").await.len(), 2);
}

#[tokio::test]
async fn a_failing_forward_is_retried_with_the_same_id_without_applying_the_payment_again() {
    let receiver = Receiver::start(&[503, 429]).await;
    let app = app_forwarding_to(&receiver, &["payment_succeeded"], &[], false).await;
    assert_eq!(
        app.deliver("stripe", &paid("evt_retry", "pi_retry"))
            .await
            .status,
        200
    );
    assert_eq!(
        app.event_status("evt_retry").await,
        "failed",
        "the forward is still to go"
    );
    app.run_due_retries().await;
    let got = receiver.received();
    assert_eq!(got.len(), 3);
    assert!(
        got.iter()
            .all(|r| r.verified && r.webhook_id == got[0].webhook_id)
    );
    assert_eq!(app.event_status("evt_retry").await, "processed");
    assert_eq!(
        attempts(&app, "evt_retry").await,
        [
            ("payment_succeeded".into(), "processed".into(), None),
            ("forward:billing".into(), "failed".into(), Some(503)),
            ("forward:billing".into(), "failed".into(), Some(429)),
            ("forward:billing".into(), "processed".into(), Some(200)),
        ],
        "the payment handler ran once"
    );
}

#[tokio::test]
async fn a_forward_refused_with_a_4xx_is_dead_and_an_operator_retry_sends_only_it() {
    let receiver = Receiver::start(&[422]).await;
    let app = app_forwarding_to(&receiver, &["payment_succeeded"], &[], false).await;
    assert_eq!(
        app.deliver("stripe", &paid("evt_4xx", "pi_4xx"))
            .await
            .status,
        200
    );
    app.run_due_retries().await;
    assert_eq!(app.event_status("evt_4xx").await, "dead");
    let error = app
        .strings(
            "SELECT last_error FROM webhook_events WHERE event_id = 'evt_4xx'",
            &[],
        )
        .await;
    assert!(
        error[0].contains("forward:billing") && error[0].contains("422"),
        "{error:?}"
    );
    let id = app.event_row_id("evt_4xx").await;
    let retried = app.operator().retry(id, None).await;
    assert_eq!(retried.json()["status"], "processed");
    let handlers: Vec<String> = attempts(&app, "evt_4xx")
        .await
        .into_iter()
        .map(|a| a.0)
        .collect();
    assert_eq!(
        handlers,
        ["payment_succeeded", "forward:billing", "forward:billing"]
    );
    // Its audit row, written as the retry began, has the outcome once it answered.
    let audited = app
        .strings(
            "SELECT detail->>'outcome' FROM admin_audit WHERE action = 'retried'",
            &[],
        )
        .await;
    assert_eq!(audited, ["processed"]);
}

/// Fails its first two runs.
struct FailsTwice(std::sync::atomic::AtomicI32);

#[async_trait::async_trait]
impl hookd::handlers::Handler for FailsTwice {
    async fn apply(
        &self,
        _tx: &deadpool_postgres::Transaction<'_>,
        _event: &hookd::handlers::Event<'_>,
    ) -> Result<(), hookd::handlers::HandlerError> {
        if self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < 2 {
            Err(hookd::handlers::HandlerError::Retry("not yet".into()))
        } else {
            Ok(())
        }
    }
}

#[tokio::test]
async fn a_failing_handler_is_retried_without_forwarding_again() {
    let receiver = Receiver::start(&[]).await;
    let app = app_with_payment_handler(&receiver, Arc::new(FailsTwice(0.into()))).await;
    assert_eq!(
        app.deliver("stripe", &paid("evt_local", "pi_local"))
            .await
            .status,
        200
    );
    app.run_due_retries().await;
    assert_eq!(app.event_status("evt_local").await, "processed");
    assert_eq!(receiver.received().len(), 1, "forwarded once");
    assert_eq!(
        attempts(&app, "evt_local").await,
        [
            ("payment_succeeded".into(), "failed".into(), None),
            ("payment_succeeded".into(), "failed".into(), None),
            ("forward:billing".into(), "processed".into(), Some(200)),
            ("payment_succeeded".into(), "processed".into(), None),
        ]
    );
}

#[tokio::test]
async fn forwards_by_type_take_events_without_a_handler_and_survive_a_restart() {
    let receiver = Receiver::start(&[]).await;
    let mut stopped = app_forwarding_to(&receiver, &[], &["customer.created"], false).await;
    let customer = stripe_event(
        "evt_customer",
        "customer.created",
        json!({"id": "cus_9", "object": "customer"}),
    );
    assert_eq!(stopped.deliver("stripe", &customer).await.status, 200);
    assert_eq!(
        stopped.event_status("evt_customer").await,
        "failed",
        "not ignored: it has a forward"
    );
    stopped.stop().await;
    assert!(receiver.received().is_empty());

    // Another instance (a restart) picks it up at once.
    let mut settings = shipped_settings();
    settings.forwards = vec![receiver.forward("billing", &[], &["customer.created"])];
    let restarted = spawn(Spawn {
        settings,
        db: stopped.db.clone(),
        parts: Spawn::LOOPS,
        ..Spawn::default()
    })
    .await;
    let got = receiver.wait_for(1).await;
    assert_eq!(got[0].header("hookd-kind"), Some(""));
    processed(&restarted, "evt_customer").await;
}

#[tokio::test]
async fn slow_each_handlers_state_shows_in_the_api_the_page_and_the_terminal() {
    let receiver = Receiver::start(&[503]).await;
    let app = app_forwarding_to(&receiver, &["payment_succeeded"], &[], false).await;
    assert_eq!(
        app.deliver("stripe", &paid("evt_states", "pi_states"))
            .await
            .status,
        200
    );
    assert_eq!(app.send_due_forwards().await, 1, "one send");
    let id = app.event_row_id("evt_states").await;
    let operator = app.operator();
    let detail = operator.event(id).await.json();
    assert_eq!(detail["status"], "failed");
    assert_eq!(
        detail["handlers"],
        json!([
            {"handler": "payment_succeeded", "status": "processed", "attempts": 1,
             "last_error": null, "http_status": null},
            {"handler": "forward:billing", "status": "failed", "attempts": 1,
             "last_error": detail["handlers"][1]["last_error"], "http_status": 503},
        ])
    );
    assert_eq!(detail["attempts"][1]["response"], "answer 503");
    let page = operator.event_page(id).await;
    let html = String::from_utf8_lossy(&page.body);
    assert!(
        html.contains("forward:billing") && html.contains("503"),
        "{html}"
    );
    let shown = crate::support::run_hookd(
        &["events", "show", &id.to_string()],
        Some(app.database_url()),
    )
    .await;
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        text.contains("handlers:") && text.contains("forward:billing"),
        "{text}"
    );
}

/// Waits (20 s at most) until `event_id` is `processed`.
async fn processed(app: &TestApp, event_id: &str) {
    let what = format!("{event_id} to be processed");
    wait_for(&what, Duration::from_secs(20), || async {
        (app.event_status(event_id).await == "processed").then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_consumer_slower_than_the_idle_timeout_is_recorded_retried_with_backoff_and_dead_at_last()
{
    let receiver = Receiver::slow(Duration::from_secs(2), &[503, 503, 503]).await;
    // PostgreSQL ends a session idle in a transaction for 1 s — less than the
    // consumer takes to answer.
    let db = Arc::new(TestDb::create().await);
    connect(db.config())
        .await
        .batch_execute(&format!(
            "ALTER DATABASE {} SET idle_in_transaction_session_timeout = '1s'",
            db.name
        ))
        .await
        .expect("alter database");
    let mut settings = shipped_settings();
    settings.forwards = vec![receiver.forward("billing", &["payment_succeeded"], &[])];
    settings.max_attempts = 3;
    settings.retry_base = Duration::from_secs(10);
    let app = spawn(Spawn {
        settings,
        db: Some(db),
        ..Spawn::default()
    })
    .await;
    let limit: String = app
        .app
        .pool
        .get()
        .await
        .expect("connection")
        .query_one("SHOW idle_in_transaction_session_timeout", &[])
        .await
        .expect("show")
        .get(0);
    assert_eq!(limit, "1s", "hookd's sessions keep the stricter limit");
    app.deliver_ok("stripe", &paid("evt_slow", "pi_slow")).await;

    for (run, expected) in [EventStatus::Failed, EventStatus::Failed, EventStatus::Dead]
        .into_iter()
        .enumerate()
    {
        if run > 0 {
            app.make_retries_due().await;
        }
        let sent = forwarder_step(&app).await;
        assert_eq!(sent, 1, "run {run}: the slow answer is recorded");
        assert_eq!(
            app.event_status("evt_slow").await,
            expected.as_str(),
            "run {run}"
        );
        assert_eq!(receiver.received().len(), run + 1, "sent once per run");
        if expected == EventStatus::Failed {
            // Equal jitter on a 10 s base doubling each run: the next try
            // comes 5–10 s after the first send ended, 10–20 s after the
            // second (measured from its end, however long the test took to
            // ask).
            let base = 10.0 * f64::from(1u32 << run);
            let waits: Vec<(Option<f64>, bool)> = app
                .query(
                    "SELECT extract(epoch FROM f.next_attempt_at - (
                                SELECT max(a.finished_at) FROM webhook_event_attempts a
                                WHERE a.webhook_event_id = e.id
                                  AND a.handler = 'forward:billing'))::float8,
                            f.lease_until IS NULL
                     FROM event_forwards f JOIN webhook_events e ON e.id = f.webhook_event_id
                     WHERE e.event_id = 'evt_slow' AND f.state = 'pending'",
                    &[],
                )
                .await
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect();
            assert!(
                matches!(waits[..], [(Some(wait), true)]
                    if (base / 2.0 - 0.5..=base + 0.5).contains(&wait)),
                "run {run}: retried with backoff, the lease ended: {waits:?}"
            );
        }
    }
    assert_eq!(
        attempts(&app, "evt_slow").await,
        [
            ("payment_succeeded".into(), "processed".into(), None),
            ("forward:billing".into(), "failed".into(), Some(503)),
            ("forward:billing".into(), "failed".into(), Some(503)),
            ("forward:billing".into(), "dead".into(), Some(503)),
        ]
    );
    let error = app
        .strings(
            "SELECT last_error FROM webhook_events WHERE event_id = 'evt_slow'",
            &[],
        )
        .await;
    assert!(error[0].contains("gave up after 3 attempts"), "{error:?}");
    assert_eq!(app.run_due_retries().await, 0, "dead: never sent again");
    assert_eq!(receiver.received().len(), 3);
}

#[tokio::test]
async fn a_consumer_flooding_its_answer_costs_hookd_only_the_256_bytes_it_keeps() {
    const FLOOD: usize = 256 * 1024 * 1024;
    let receiver = Receiver::flooding(&[500], FLOOD).await;
    let app = app_forwarding_to(&receiver, &["payment_succeeded"], &[], false).await;
    app.deliver_ok("stripe", &paid("evt_flood", "pi_flood"))
        .await;
    assert_eq!(forwarder_step(&app).await, 1);
    assert_eq!(app.event_status("evt_flood").await, "failed");
    let kept = app
        .strings(
            "SELECT a.response FROM webhook_event_attempts a WHERE a.handler = 'forward:billing'",
            &[],
        )
        .await;
    assert_eq!(kept, ["x".repeat(256)], "the first 256 bytes, no more");
    let error = app
        .strings(
            "SELECT last_error FROM webhook_events WHERE event_id = 'evt_flood'",
            &[],
        )
        .await;
    assert!(
        error[0].len() <= 256 && error[0].contains("answered 500"),
        "{error:?}"
    );
    // hookd dropped the connection after its bytes: the rest was never sent.
    assert!(
        receiver.streamed() < 32 * 1024 * 1024,
        "{} of {FLOOD} bytes streamed",
        receiver.streamed()
    );
    // And hookd goes on: the retry is delivered.
    app.run_due_retries().await;
    assert_eq!(app.event_status("evt_flood").await, "processed");
    assert_eq!(receiver.received().len(), 2);
}

#[tokio::test]
async fn a_forward_under_way_is_leased_and_a_send_cut_off_is_sent_again_once_the_lease_ends() {
    // Slow enough that the checks below run while it answers, well within
    // the forward's timeout (30 s here).
    let receiver = Receiver::slow(Duration::from_secs(4), &[]).await;
    let mut settings = shipped_settings();
    settings.forwards = vec![hookd::config::Forward {
        timeout: Duration::from_secs(30),
        ..receiver.forward("billing", &["payment_succeeded"], &[])
    }];
    let app = spawn(Spawn {
        settings,
        ..Spawn::default()
    })
    .await;
    app.deliver_ok("stripe", &paid("evt_lease", "pi_lease"))
        .await;
    let id = app.event_row_id("evt_lease").await;
    let forwarder = app.app.dispatcher.forwarder().clone();
    let first = tokio::spawn(async move { forwarder.try_send_due("billing").await });
    receiver.wait_for(1).await;
    // While the consumer takes its time, no other run sends it.
    assert_eq!(forwarder_step(&app).await, 0);
    let during = app.operator().retry(id, Some("key-lease")).await;
    assert_eq!(
        (during.status, during.json()["error"].clone()),
        (409, json!("in_flight"))
    );
    assert_eq!(first.await.expect("join").expect("step"), 1);
    assert_eq!(app.event_status("evt_lease").await, "processed");
    assert_eq!(receiver.received().len(), 1);
    // The 409 passed: the same Idempotency-Key runs the retry now.
    let after = app.operator().retry(id, Some("key-lease")).await;
    assert_eq!(
        (after.status, after.header("Idempotent-Replayed")),
        (200, None)
    );
    assert_eq!(receiver.received().len(), 2);

    // A run that dies mid-send leaves its lease; once it runs out, the forward
    // is claimed and sent again, with the same webhook-id.
    app.deliver_ok("stripe", &paid("evt_cut", "pi_cut")).await;
    let forwarder = app.app.dispatcher.forwarder().clone();
    let cut = tokio::spawn(async move { forwarder.try_send_due("billing").await });
    receiver.wait_for(3).await;
    cut.abort();
    assert!(cut.await.is_err(), "cut off mid-send");
    assert_eq!(forwarder_step(&app).await, 0, "the lease holds");
    assert_eq!(app.event_status("evt_cut").await, "failed");
    app.execute(
        "UPDATE event_forwards SET lease_until = now(), next_attempt_at = now()
         WHERE lease_until > now()",
        &[],
    )
    .await;
    app.run_due_retries().await;
    assert_eq!(app.event_status("evt_cut").await, "processed");
    let got = receiver.received();
    assert_eq!(got.len(), 4);
    assert_eq!(
        got[2].webhook_id, got[3].webhook_id,
        "at least once, one id"
    );
}

/// One step of the `billing` forward's lane; how many it sent.
async fn forwarder_step(app: &TestApp) -> usize {
    app.app
        .dispatcher
        .forwarder()
        .try_send_due("billing")
        .await
        .expect("lane step")
}

#[tokio::test]
async fn slow_a_forward_url_with_credentials_is_refused_at_load_without_showing_them() {
    let table = format!(
        "\n[[forwards]]\nname = \"billing\"\n\
         url = \"https://hookd:s3cr3t@billing.example/hooks?token=t0k3n\"\n\
         secret = \"{FORWARD_SECRET}\"\nkinds = [\"payment_succeeded\"]\n"
    );
    let check = |table: String| async move { crate::support::check_config(&table, &[]).await };
    let refused = check(table.clone()).await;
    assert_eq!(refused.status.code(), Some(78), "{refused:?}");
    let line = String::from_utf8_lossy(&refused.stderr).trim().to_string();
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(
        line.contains("forwards[0].url") && line.contains("user or password"),
        "{line}"
    );
    assert!(
        !line.contains("s3cr3t") && !line.contains("t0k3n"),
        "{line}"
    );
    let without = check(table.replace("hookd:s3cr3t@", "")).await;
    assert_eq!(without.status.code(), Some(0), "{without:?}");
}

#[tokio::test]
async fn an_event_of_a_batch_or_a_form_is_forwarded_as_its_own_json() {
    let receiver = Receiver::start(&[]).await;
    let app = app_forwarding_to(&receiver, &["payment_succeeded"], &[], true).await;
    // Two GoCardless events in one request: each forward carries its own event.
    let event = |id: &str, payment: &str| {
        json!({"id": id, "created_at": "2024-06-12T10:32:47.123Z", "resource_type": "payments",
               "action": "confirmed", "links": {"payment": payment}})
    };
    let batch = serde_json::to_vec(&json!({
        "events": [event("EVF1", "PMF1"), event("EVF2", "PMF2")],
        "meta": {"webhook_id": "WB1"}
    }))
    .expect("json");
    let headers = app.sign("gocardless", &batch, Default::default());
    assert_eq!(app.post("gocardless", &headers, batch).await.status, 200);
    let got = receiver.wait_for(2).await;
    let mut ids: Vec<String> = got
        .iter()
        .map(|r| {
            let body: Value = serde_json::from_slice(&r.body).expect("a forward is JSON");
            assert!(
                body.get("events").is_none(),
                "its own event, not the request"
            );
            body["id"].as_str().unwrap_or_default().to_string()
        })
        .collect();
    ids.sort();
    assert_eq!(ids, ["EVF1", "EVF2"]);
    assert!(got.iter().all(|r| r.verified));

    // A Braintree form: forwarded as the JSON of its notification.
    let fixture = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/braintree/01_transaction_settled.json"
    ))
    .expect("fixture");
    let (headers, form) = app.sign_body("braintree", &fixture);
    let answer = app.post("braintree", &headers, form).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    let got = receiver.wait_for(3).await;
    let forwarded: Value = serde_json::from_slice(&got[2].body).expect("a forward is JSON");
    assert_eq!(forwarded["kind"], "transaction_settled", "{forwarded}");
    assert!(got[2].verified);
}

/// Fails at receipt; on a retry, says so and waits to be let go before it
/// succeeds — so the test acts while the retry's transaction is open.
#[derive(Default)]
struct HeldOnRetry {
    entered: tokio::sync::Notify,
    release: tokio::sync::Notify,
}

#[async_trait::async_trait]
impl hookd::handlers::Handler for HeldOnRetry {
    async fn apply(
        &self,
        _tx: &deadpool_postgres::Transaction<'_>,
        event: &hookd::handlers::Event<'_>,
    ) -> Result<(), hookd::handlers::HandlerError> {
        if event.attempt == 1 {
            return Err(hookd::handlers::HandlerError::Retry("not yet".into()));
        }
        self.entered.notify_one();
        self.release.notified().await;
        Ok(())
    }
}

#[tokio::test]
async fn a_lane_never_sends_a_forward_an_operators_retry_is_about_to_send() {
    let receiver = Receiver::start(&[]).await;
    let held = Arc::new(HeldOnRetry::default());
    let app = app_with_payment_handler(&receiver, held.clone()).await;
    app.deliver_ok("stripe", &paid("evt_race", "pi_race")).await;
    assert_eq!(app.event_status("evt_race").await, "failed");
    let id = app.event_row_id("evt_race").await;
    // The operator's retry checks that no lane is sending the forward, then
    // runs the kind's handler, which takes its time…
    let operator = app.operator();
    let (answer, stepped) = tokio::join!(operator.retry(id, Some("key-race")), async {
        held.entered.notified().await;
        // …meanwhile the forward's lane looks for due rows: it must leave this
        // one to the retry, which sends it.
        let stepped = forwarder_step(&app).await;
        held.release.notify_one();
        stepped
    });
    assert_eq!(stepped, 0, "the lane took the retry's row");
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(app.event_status("evt_race").await, "processed");
    assert_eq!(receiver.received().len(), 1, "sent once, not twice at once");
    assert_eq!(forwarder_step(&app).await, 0, "nothing left to send");
}

#[tokio::test]
async fn an_operators_retry_on_an_instance_without_the_forward_lets_its_backlog_go() {
    let receiver = Receiver::start(&[]).await;
    // Planned on an instance with `billing` whose lanes never ran.
    let with_forward = app_forwarding_to(&receiver, &["payment_succeeded"], &[], false).await;
    with_forward
        .deliver_ok("stripe", &paid("evt_let_go", "pi_let_go"))
        .await;
    assert_eq!(with_forward.event_status("evt_let_go").await, "failed");
    let id = with_forward.event_row_id("evt_let_go").await;
    // The forward was removed; an operator retries on an instance without it:
    // the documented way to let a removed forward's backlog go.
    let without = spawn(Spawn {
        db: with_forward.db.clone(),
        ..Spawn::default()
    })
    .await;
    let answer = without.operator().retry(id, Some("let-go-1")).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    let event = answer.json();
    assert_eq!(event["status"], "dead", "{event}");
    assert!(
        event["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("forward billing is not in this instance's configuration")),
        "{event}"
    );
    assert_eq!(
        without
            .strings(
                "SELECT state FROM event_forwards WHERE forward = 'billing'",
                &[]
            )
            .await,
        ["dead"]
    );
    assert!(receiver.received().is_empty(), "nothing sent");
    // The payment's handler was done at receipt and is not run again.
    assert_eq!(
        attempts(&without, "evt_let_go").await,
        [
            ("payment_succeeded".into(), "processed".into(), None),
            ("forward:billing".into(), "dead".into(), None),
        ]
    );
    // The instance with the forward has nothing left to send.
    assert_eq!(with_forward.run_due_retries().await, 0);
    assert!(receiver.received().is_empty());
}

#[tokio::test]
async fn an_event_stored_before_plans_were_kept_takes_the_forwards_not_yet_done() {
    // Two forwards of payments: `erp` had taken the event, `billing` had not.
    let erp = Receiver::start(&[]).await;
    let billing = Receiver::start(&[]).await;
    let mut settings = shipped_settings();
    settings.forwards = vec![
        erp.forward("erp", &["payment_succeeded"], &[]),
        billing.forward("billing", &["payment_succeeded"], &[]),
    ];
    let mut registry = Registry::builtin();
    registry.register("payment_succeeded", Arc::new(FailsTwice(1.into())));
    let app = spawn(Spawn {
        settings,
        registry,
        ..Spawn::default()
    })
    .await;
    app.deliver_ok("stripe", &paid("evt_unplanned", "pi_unplanned"))
        .await;
    // As an older version left it: the handler failed, `erp` delivered,
    // `billing` failed, and no plan written down but the migration's '*' row.
    app.db()
        .await
        .batch_execute(
            "DELETE FROM event_forwards;
             INSERT INTO event_forwards (webhook_event_id, forward)
               SELECT id, '*' FROM webhook_events WHERE event_id = 'evt_unplanned';
             INSERT INTO webhook_event_attempts
               (webhook_event_id, attempt, handler, started_at, finished_at, outcome, http_status)
               SELECT id, 2, 'forward:erp', now(), now(), 'processed', 200
               FROM webhook_events WHERE event_id = 'evt_unplanned';
             INSERT INTO webhook_event_attempts
               (webhook_event_id, attempt, handler, started_at, finished_at, outcome, error, http_status)
               SELECT id, 3, 'forward:billing', now(), now(), 'failed', 'answer 503', 503
               FROM webhook_events WHERE event_id = 'evt_unplanned';
             UPDATE webhook_events SET attempts = 3 WHERE event_id = 'evt_unplanned';",
        )
        .await
        .expect("an older version's rows");
    // serve's retry loop and lanes, stepped.
    app.run_due_retries().await;
    assert_eq!(app.event_status("evt_unplanned").await, "processed");
    assert!(erp.received().is_empty(), "erp had it: not sent again");
    assert_eq!(billing.received().len(), 1, "billing sent once");
    let rows: Vec<(String, String)> = app
        .query(
            "SELECT forward, state FROM event_forwards ORDER BY forward",
            &[],
        )
        .await
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        rows,
        [
            ("billing".to_string(), "delivered".to_string()),
            ("erp".to_string(), "delivered".to_string())
        ]
    );
    assert_eq!(
        app.strings(
            "SELECT handler || ' ' || outcome FROM webhook_event_attempts ORDER BY attempt",
            &[]
        )
        .await,
        [
            "payment_succeeded failed",
            "forward:erp processed",
            "forward:billing failed",
            "payment_succeeded processed",
            "forward:billing processed"
        ]
    );
}
