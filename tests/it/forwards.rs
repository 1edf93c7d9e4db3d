//! Forwarding to any stack: matching events are POSTed, byte for byte and signed
//! as Standard Webhooks, right after the provider's 200; failures are retried
//! without applying the payment again (and the other way round).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hookd::app::Parts;
use hookd::handlers::Registry;
use serde_json::{Value, json};

use crate::support::{Receiver, Spawn, TestApp, shipped_settings, spawn, stripe_event, wait_for};

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
            http_workers: Some(2),
        },
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

async fn status(app: &TestApp, event_id: &str) -> String {
    app.strings(
        "SELECT status FROM webhook_events WHERE event_id = $1",
        &[&event_id],
    )
    .await
    .remove(0)
}

#[tokio::test]
async fn a_matching_event_is_forwarded_byte_for_byte_and_signed_right_after_the_200() {
    let receiver = Receiver::start(&[]).await;
    let app = app_forwarding_to(&receiver, &["payment_succeeded"], &[], true).await;
    // Spaced, as a provider may send it: the receiver must get these exact bytes.
    let body = serde_json::to_vec_pretty(&paid("evt_fwd", "pi_fwd")).expect("json");
    let headers = app.sign("stripe", &body, Default::default());
    let answer = app.post("stripe", &headers, body.clone()).await;
    let answered = Instant::now();
    assert_eq!(answer.status, 200);
    let got = receiver.wait_for(1).await;
    assert!(
        got[0].at.duration_since(answered) < Duration::from_millis(500),
        "forwarded {:?} after the 200",
        got[0].at.duration_since(answered)
    );
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
    // A resend from the provider forwards nothing again.
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
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(receiver.received().len(), 1);
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
        status(&app, "evt_retry").await,
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
    assert_eq!(status(&app, "evt_retry").await, "processed");
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
    assert_eq!(status(&app, "evt_4xx").await, "dead");
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
    let id = app
        .count(
            "SELECT id FROM webhook_events WHERE event_id = 'evt_4xx'",
            &[],
        )
        .await;
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
    let mut settings = shipped_settings();
    settings.forwards = vec![receiver.forward("billing", &["payment_succeeded"], &[])];
    let mut registry = Registry::builtin();
    registry.register("payment_succeeded", Arc::new(FailsTwice(0.into())));
    let app = spawn(Spawn {
        settings,
        registry,
        ..Spawn::default()
    })
    .await;
    assert_eq!(
        app.deliver("stripe", &paid("evt_local", "pi_local"))
            .await
            .status,
        200
    );
    app.run_due_retries().await;
    assert_eq!(status(&app, "evt_local").await, "processed");
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
        status(&stopped, "evt_customer").await,
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
        parts: Parts {
            dispatcher: true,
            purge: false,
            http_workers: Some(2),
        },
        ..Spawn::default()
    })
    .await;
    let got = receiver.wait_for(1).await;
    assert_eq!(got[0].header("hookd-kind"), Some(""));
    processed(&restarted, "evt_customer").await;
}

#[tokio::test]
async fn each_handlers_state_shows_in_the_api_the_page_and_the_terminal() {
    let receiver = Receiver::start(&[503]).await;
    let app = app_forwarding_to(&receiver, &["payment_succeeded"], &[], false).await;
    assert_eq!(
        app.deliver("stripe", &paid("evt_states", "pi_states"))
            .await
            .status,
        200
    );
    app.execute(
        "UPDATE webhook_events SET next_attempt_at = now() WHERE status = 'failed'",
        &[],
    )
    .await;
    app.app
        .dispatcher
        .try_dispatch_due()
        .await
        .expect("one run");
    let id = app
        .count(
            "SELECT id FROM webhook_events WHERE event_id = 'evt_states'",
            &[],
        )
        .await;
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

/// Waits (5 s at most) until `event_id` is `processed`.
async fn processed(app: &TestApp, event_id: &str) {
    let what = format!("{event_id} to be processed");
    wait_for(&what, Duration::from_secs(5), || async {
        (status(app, event_id).await == "processed").then_some(())
    })
    .await;
}
