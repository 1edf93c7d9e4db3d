//! Applying events: inline attempts, retries with backoff, dead events, time
//! limits, and dispatchers on several instances side by side.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::Transaction;
use hookd::handlers::{Event, Handler, HandlerError, Registry};
use serde_json::{Value, json};

use crate::support::{
    Spawn, TestApp, shipped_settings, spawn, spawn_with_settings, stripe_event, wait_for,
};

/// A business effect tests can look for: a `payments` row named `marker`.
/// Sent unnamed, so it is the handler's very first message: it runs inside the
/// savepoint only if the savepoint went out before it.
async fn leave_effect(
    tx: &Transaction<'_>,
    source: &str,
    marker: &str,
) -> Result<(), HandlerError> {
    use tokio_postgres::types::Type;
    tx.execute_typed(
        "INSERT INTO payments (source, payment_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        &[(&source, Type::TEXT), (&marker, Type::TEXT)],
    )
    .await
    .map(|_| ())
    .map_err(|e| HandlerError::Retry(e.to_string()))
}

/// Fails its first `failures` runs of each event, then succeeds, writing a marker
/// row so tests can see whether its effects were kept.
struct Flaky {
    failures: i32,
    runs: Mutex<HashMap<i64, i32>>,
}

#[async_trait]
impl Handler for Flaky {
    async fn apply(&self, tx: &Transaction<'_>, event: &Event<'_>) -> Result<(), HandlerError> {
        let marker = format!("effect-{}-{}", event.event_id, event.attempt);
        leave_effect(tx, event.source, &marker).await?;
        let mut runs = self.runs.lock().expect("lock");
        let run = runs.entry(event.id).or_insert(0);
        *run += 1;
        if *run <= self.failures {
            Err(HandlerError::Retry(format!("flaky failure {run}")))
        } else {
            Ok(())
        }
    }
}

/// Sleeps inside PostgreSQL for an hour, its session's statement timeout lifted:
/// only a cancel stops it.
struct Stuck;

#[async_trait]
impl Handler for Stuck {
    async fn apply(&self, tx: &Transaction<'_>, event: &Event<'_>) -> Result<(), HandlerError> {
        leave_effect(tx, event.source, "stuck-effect").await?;
        tx.batch_execute("SET LOCAL statement_timeout = 0")
            .await
            .map_err(|e| HandlerError::Retry(e.to_string()))?;
        tx.execute("SELECT pg_sleep(3600)", &[])
            .await
            .map_err(|e| HandlerError::Retry(e.to_string()))?;
        Ok(())
    }
}

/// Counts runs of an event that start while another run of it is under way.
#[derive(Default)]
struct Overlap {
    running: Mutex<HashSet<i64>>,
    overlaps: AtomicI32,
}

#[async_trait]
impl Handler for Overlap {
    async fn apply(&self, _tx: &Transaction<'_>, event: &Event<'_>) -> Result<(), HandlerError> {
        if !self.running.lock().expect("lock").insert(event.id) {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        self.running.lock().expect("lock").remove(&event.id);
        if event.attempt < 3 {
            Err(HandlerError::Retry("not yet".into()))
        } else {
            Ok(())
        }
    }
}

async fn app_with(
    kind: &str,
    handler: Arc<dyn Handler>,
    tweak: impl FnOnce(&mut hookd::config::Settings),
) -> TestApp {
    let mut settings = shipped_settings();
    for source in &mut settings.sources {
        source
            .event_types
            .insert(format!("test.{kind}"), kind.to_string());
    }
    tweak(&mut settings);
    let mut registry = Registry::builtin();
    registry.register(kind, handler);
    spawn(Spawn {
        settings,
        registry,
        ..Spawn::default()
    })
    .await
}

fn test_event(id: &str, kind: &str) -> Value {
    stripe_event(id, &format!("test.{kind}"), json!({"id": "obj"}))
}

/// Status, attempts, last error, and whether a retry is due; `processed_at` is
/// checked to be set exactly when the event is processed.
async fn event_state(app: &TestApp, event_id: &str) -> (String, i32, Option<String>, bool) {
    let row = &app
        .query(
            "SELECT status, attempts, last_error, next_attempt_at IS NOT NULL,
                    (processed_at IS NOT NULL) = (status IN ('processed', 'ignored'))
             FROM webhook_events WHERE event_id = $1",
            &[&event_id],
        )
        .await[0];
    assert!(
        row.get::<_, bool>(4),
        "processed_at is set only once processed"
    );
    (row.get(0), row.get(1), row.get(2), row.get(3))
}

async fn attempt_outcomes(app: &TestApp, event_id: &str) -> Vec<(i32, String)> {
    app.query(
        "SELECT a.attempt, a.outcome FROM webhook_event_attempts a
         JOIN webhook_events e ON e.id = a.webhook_event_id
         WHERE e.event_id = $1 ORDER BY a.attempt",
        &[&event_id],
    )
    .await
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

#[tokio::test]
async fn a_handler_that_fails_n_times_is_processed_after_n_retries() {
    let flaky = Arc::new(Flaky {
        failures: 3,
        runs: Mutex::default(),
    });
    let app = app_with("test_flaky", flaky, |_| {}).await;
    let answer = app
        .deliver("stripe", &test_event("evt_flaky", "test_flaky"))
        .await;
    assert_eq!(
        answer.status, 200,
        "a handler failure does not change the answer"
    );
    let (status, attempts, error, due) = event_state(&app, "evt_flaky").await;
    assert_eq!((status.as_str(), attempts, due), ("failed", 1, true));
    assert_eq!(error.as_deref(), Some("flaky failure 1"));
    assert_eq!(
        app.count(
            "SELECT count(*) FROM payments WHERE payment_id LIKE 'effect-evt_flaky-%'",
            &[]
        )
        .await,
        0,
        "a failed attempt's effects are rolled back with its savepoint"
    );

    assert_eq!(app.run_due_retries().await, 3);
    let (status, attempts, error, due) = event_state(&app, "evt_flaky").await;
    assert_eq!(
        (status.as_str(), attempts, error, due),
        ("processed", 4, None, false)
    );
    assert_eq!(
        attempt_outcomes(&app, "evt_flaky").await,
        vec![
            (1, "failed".into()),
            (2, "failed".into()),
            (3, "failed".into()),
            (4, "processed".into())
        ]
    );
    let effects = app
        .strings(
            "SELECT payment_id FROM payments WHERE payment_id LIKE 'effect-evt_flaky-%'",
            &[],
        )
        .await;
    assert_eq!(
        effects,
        ["effect-evt_flaky-4"],
        "only the successful attempt's effect stays"
    );
}

#[tokio::test]
async fn a_handler_that_always_fails_is_dead_after_max_attempts() {
    let flaky = Arc::new(Flaky {
        failures: i32::MAX,
        runs: Mutex::default(),
    });
    let app = app_with("test_broken", flaky, |s| s.max_attempts = 4).await;
    assert_eq!(
        app.deliver("stripe", &test_event("evt_broken", "test_broken"))
            .await
            .status,
        200
    );
    assert_eq!(app.run_due_retries().await, 3);
    let (status, attempts, error, due) = event_state(&app, "evt_broken").await;
    assert_eq!((status.as_str(), attempts, due), ("dead", 4, false));
    assert!(error.expect("error").contains("gave up after 4 attempts"));
    let outcomes = attempt_outcomes(&app, "evt_broken").await;
    assert_eq!(outcomes.len(), 4);
    assert_eq!(outcomes[3], (4, "dead".into()));
    assert_eq!(
        app.run_due_retries().await,
        0,
        "dead events wait for a person"
    );
}

/// How long after its last run ended the one event's next retry is due
/// (measured from the run's end, not from now: however long the test took
/// to ask).
async fn seconds_until_due(app: &TestApp) -> f64 {
    app.query(
        "SELECT extract(epoch FROM e.next_attempt_at - a.finished_at)::float8
         FROM webhook_events e JOIN webhook_event_attempts a ON a.webhook_event_id = e.id
         ORDER BY a.attempt DESC LIMIT 1",
        &[],
    )
    .await[0]
        .get(0)
}

#[tokio::test]
async fn retries_back_off_exponentially() {
    let flaky = Arc::new(Flaky {
        failures: i32::MAX,
        runs: Mutex::default(),
    });
    let app = app_with("test_backoff", flaky, |s| {
        s.retry_base = Duration::from_secs(60);
        s.retry_cap = Duration::from_secs(600);
    })
    .await;
    assert_eq!(
        app.deliver("stripe", &test_event("evt_backoff", "test_backoff"))
            .await
            .status,
        200
    );
    let first = seconds_until_due(&app).await;
    assert!(
        (29.0..=61.0).contains(&first),
        "1st retry in base/2..base: {first}"
    );
    assert_eq!(
        app.app.dispatcher.try_dispatch_due().await.expect("step"),
        hookd::dispatch::DispatchStep::Idle,
        "not due yet"
    );
    for (step, low, high) in [
        (2, 59.0, 121.0),
        (3, 119.0, 241.0),
        (4, 239.0, 481.0),
        (5, 299.0, 601.0),
        (6, 299.0, 601.0),
    ] {
        app.execute("UPDATE webhook_events SET next_attempt_at = now()", &[])
            .await;
        app.app.dispatcher.try_dispatch_due().await.expect("step");
        let d = seconds_until_due(&app).await;
        assert!((low..=high).contains(&d), "after attempt {step}: {d}");
    }
}

/// Backends of the test database (other than the one asking) running the stuck
/// handler's query.
async fn stuck_queries(app: &TestApp) -> i64 {
    app.count(
        "SELECT count(*) FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()
           AND state = 'active' AND query LIKE '%pg_sleep(3600)%'",
        &[],
    )
    .await
}

/// Waits until the stuck handler's query runs, then until nothing of it runs any
/// more: the time limit must have cancelled it in PostgreSQL (nothing else would
/// stop it within the hour).
async fn the_stuck_query_runs_then_is_cancelled(app: &TestApp) {
    wait_for(
        "the handler's query to start",
        Duration::from_secs(20),
        || async move { (stuck_queries(app).await > 0).then_some(()) },
    )
    .await;
    wait_for(
        "the handler's query to be cancelled",
        Duration::from_secs(20),
        || async move { (stuck_queries(app).await == 0).then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn events_failing_together_retry_at_spread_out_times() {
    let flaky = Arc::new(Flaky {
        failures: i32::MAX,
        runs: Mutex::default(),
    });
    let app = app_with("test_jitter", flaky, |s| {
        s.retry_base = Duration::from_secs(60);
        s.retry_cap = Duration::from_secs(600);
    })
    .await;
    for i in 0..20 {
        app.deliver_ok(
            "stripe",
            &test_event(&format!("evt_jitter_{i}"), "test_jitter"),
        )
        .await;
    }
    // Each first retry is due base/2 .. base after its run ended.
    let delays: Vec<f64> = app
        .query(
            "SELECT extract(epoch FROM e.next_attempt_at - a.finished_at)::float8
             FROM webhook_events e JOIN webhook_event_attempts a ON a.webhook_event_id = e.id",
            &[],
        )
        .await
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(delays.len(), 20);
    for d in &delays {
        assert!((29.9..=61.0).contains(d), "{d}");
    }
    // Equal jitter: the second half of each delay is random, so twenty events that
    // failed together do not come back together. (Uniform over 30 s, twenty
    // delays all within 7.5 s of each other would happen once in 10^10 runs.)
    let lowest = delays.iter().copied().fold(f64::INFINITY, f64::min);
    let highest = delays.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    assert!(highest - lowest >= 7.5, "{delays:?}");
    let mut distinct: Vec<i64> = delays.iter().map(|d| (d * 10.0).round() as i64).collect();
    distinct.sort_unstable();
    distinct.dedup();
    assert!(distinct.len() >= 15, "{delays:?}");
}

#[tokio::test]
async fn a_handler_over_its_time_limit_is_stopped_and_rolled_back() {
    let app = app_with("test_stuck", Arc::new(Stuck), |s| {
        s.handler_timeout = Duration::from_secs(2);
    })
    .await;
    let stuck = test_event("evt_stuck", "test_stuck");
    let (answer, ()) = tokio::join!(
        app.deliver("stripe", &stuck),
        the_stuck_query_runs_then_is_cancelled(&app)
    );
    assert_eq!(answer.status, 200);
    let (status, attempts, error, due) = event_state(&app, "evt_stuck").await;
    assert_eq!((status.as_str(), attempts, due), ("failed", 1, true));
    assert!(error.expect("error").contains("timed out after 2s"));
    assert_eq!(stuck_queries(&app).await, 0, "nothing of it left running");
    let no_effect = "SELECT count(*) FROM payments WHERE payment_id = 'stuck-effect'";
    assert_eq!(app.count(no_effect, &[]).await, 0);

    // Its retry is held to the same limit: cancelled, rolled back, failed again.
    app.execute("UPDATE webhook_events SET next_attempt_at = now()", &[])
        .await;
    let (step, ()) = tokio::join!(
        app.app.dispatcher.try_dispatch_due(),
        the_stuck_query_runs_then_is_cancelled(&app)
    );
    crate::support::assert_retry_failed(step);
    let (status, attempts, error, due) = event_state(&app, "evt_stuck").await;
    assert_eq!((status.as_str(), attempts, due), ("failed", 2, true));
    assert!(error.expect("error").contains("timed out after 2s"));
    assert_eq!(
        attempt_outcomes(&app, "evt_stuck").await,
        vec![(1, "failed".into()), (2, "failed".into())]
    );
    assert_eq!(app.count(no_effect, &[]).await, 0);
    assert_eq!(stuck_queries(&app).await, 0);
    // The dispatcher's connection came back usable: the next step finds nothing due.
    assert_eq!(
        app.app.dispatcher.try_dispatch_due().await.expect("step"),
        hookd::dispatch::DispatchStep::Idle
    );
}

#[tokio::test]
async fn unknown_kinds_are_ignored_and_malformed_payments_are_dead() {
    let mut settings = shipped_settings();
    settings.sources[0]
        .event_types
        .insert("invoice.paid".into(), "invoice_paid".into());
    let app = spawn_with_settings(settings).await;
    let invoice = stripe_event(
        "evt_inv",
        "invoice.paid",
        json!({"id": "in_1", "object": "invoice"}),
    );
    assert_eq!(app.deliver("stripe", &invoice).await.status, 200);
    let (status, attempts, _, _) = event_state(&app, "evt_inv").await;
    assert_eq!(
        (status.as_str(), attempts),
        ("ignored", 0),
        "a configured kind without a handler"
    );
    assert_eq!(
        app.strings(
            "SELECT kind FROM webhook_events WHERE event_id = 'evt_inv'",
            &[]
        )
        .await,
        ["invoice_paid"]
    );

    let other = stripe_event(
        "evt_other",
        "customer.created",
        json!({"id": "cus_1", "object": "customer"}),
    );
    assert_eq!(app.deliver("stripe", &other).await.status, 200);
    let (status, attempts, _, due) = event_state(&app, "evt_other").await;
    assert_eq!((status.as_str(), attempts, due), ("ignored", 0, false));

    let malformed = stripe_event(
        "evt_bad",
        "payment_intent.succeeded",
        json!({"amount": "lots"}),
    );
    assert_eq!(app.deliver("stripe", &malformed).await.status, 200);
    let (status, attempts, error, due) = event_state(&app, "evt_bad").await;
    assert_eq!((status.as_str(), attempts, due), ("dead", 1, false));
    assert!(
        error
            .expect("error")
            .contains("neither payment_intent nor id")
    );

    let refund = stripe_event(
        "evt_refund_bad",
        "charge.refunded",
        json!({"id": "ch_1", "amount": 5}),
    );
    app.deliver_ok("stripe", &refund).await;
    let (status, _, error, _) = event_state(&app, "evt_refund_bad").await;
    assert_eq!(status, "dead");
    assert!(error.expect("error").contains("amount_refunded"));
}

#[tokio::test]
async fn dispatchers_on_two_instances_never_run_one_event_twice_at_once() {
    let overlap = Arc::new(Overlap::default());
    let first = app_with("test_overlap", overlap.clone(), |_| {}).await;
    let mut settings = shipped_settings();
    for source in &mut settings.sources {
        source
            .event_types
            .insert("test.test_overlap".into(), "test_overlap".into());
    }
    let mut registry = Registry::builtin();
    registry.register("test_overlap", overlap.clone());
    let second = spawn(Spawn {
        settings,
        registry,
        db: first.db.clone(),
        ..Spawn::default()
    })
    .await;
    for i in 0..20 {
        first
            .deliver_ok(
                "stripe",
                &test_event(&format!("evt_ov_{i}"), "test_overlap"),
            )
            .await;
    }
    // Both instances drain the queue at once, several workers each.
    let mut rounds = 0;
    while first
        .count(
            "SELECT count(*) FROM webhook_events WHERE status = 'failed'",
            &[],
        )
        .await
        > 0
    {
        first
            .execute(
                "UPDATE webhook_events SET next_attempt_at = now() WHERE status = 'failed'",
                &[],
            )
            .await;
        let steps = (0..4).flat_map(|_| {
            [
                first.app.dispatcher.try_dispatch_due(),
                second.app.dispatcher.try_dispatch_due(),
            ]
        });
        for step in futures_util::future::join_all(steps).await {
            step.expect("step");
        }
        rounds += 1;
        assert!(rounds < 100, "the queue drains");
    }
    let attempts = first
        .query(
            "SELECT webhook_event_id, count(*), count(DISTINCT attempt), max(attempt)
             FROM webhook_event_attempts GROUP BY webhook_event_id",
            &[],
        )
        .await;
    assert_eq!(attempts.len(), 20);
    for row in attempts {
        assert_eq!(
            (
                row.get::<_, i64>(1),
                row.get::<_, i64>(2),
                row.get::<_, i32>(3)
            ),
            (3, 3, 3),
            "each event ran exactly three times, numbered 1..3"
        );
    }
    assert_eq!(
        first
            .count(
                "SELECT count(*) FROM webhook_events WHERE status = 'processed'",
                &[]
            )
            .await,
        20
    );
    assert_eq!(overlap.overlaps.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn the_retry_loops_as_serve_runs_them_apply_what_failed() {
    let flaky = Arc::new(Flaky {
        failures: 2,
        runs: Mutex::default(),
    });
    let mut settings = shipped_settings();
    for source in &mut settings.sources {
        source
            .event_types
            .insert("test.test_loop".into(), "test_loop".into());
    }
    settings.retry_base = Duration::from_millis(200);
    settings.dispatchers = 2;
    let mut registry = Registry::builtin();
    registry.register("test_loop", flaky);
    // The retry loops run on their own, as in `hookd serve`; nothing here drives them.
    let app = crate::support::spawn_looping(settings, registry).await;
    for i in 0..5 {
        app.deliver_ok("stripe", &test_event(&format!("evt_loop_{i}"), "test_loop"))
            .await;
    }
    let app = &app;
    app.wait_for_count(
        "SELECT count(*) FROM webhook_events WHERE status = 'processed'",
        5,
        Duration::from_secs(30),
    )
    .await;
    for i in 0..5 {
        assert_eq!(
            attempt_outcomes(app, &format!("evt_loop_{i}")).await,
            vec![
                (1, "failed".into()),
                (2, "failed".into()),
                (3, "processed".into())
            ]
        );
    }
}

#[tokio::test]
async fn the_most_overdue_event_is_retried_first() {
    let flaky = Arc::new(Flaky {
        failures: i32::MAX,
        runs: Mutex::default(),
    });
    // Once run, an event is not due again for minutes: each is attempted once here.
    let app = app_with("test_order", flaky, |s| {
        s.retry_base = Duration::from_secs(600)
    })
    .await;
    // Due 1, 5, 3, 4 and 2 minutes ago, delivered in another order.
    let overdue = [1, 5, 3, 4, 2];
    let mut ids = Vec::new();
    for (i, minutes) in overdue.iter().enumerate() {
        let event_id = format!("evt_due_{i}");
        app.deliver_ok("stripe", &test_event(&event_id, "test_order"))
            .await;
        app.execute(
            "UPDATE webhook_events SET next_attempt_at = now() - make_interval(mins => $1)
             WHERE event_id = $2",
            &[minutes, &event_id],
        )
        .await;
        ids.push(app.event_row_id(&event_id).await);
    }
    let mut order = Vec::new();
    while let hookd::dispatch::DispatchStep::Attempted { id, .. } =
        app.app.dispatcher.try_dispatch_due().await.expect("step")
    {
        order.push(id);
    }
    // 5, 4, 3, 2, 1 minutes overdue: events 1, 3, 2, 4, 0.
    assert_eq!(order, [ids[1], ids[3], ids[2], ids[4], ids[0]]);
}
