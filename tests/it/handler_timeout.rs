//! After `handler_timeout`: the cancel hookd sends for a handler's statement
//! may reach the server late, and land on whatever that session runs next. A
//! relay holds the cancels until the test lets them go, while another
//! delivery's statement runs: the session that was cut must be closed, not
//! pooled, on the lone delivery's path, the batch's and a retry's, so the late
//! cancel touches nothing else; a cancel that never arrives holds nothing long
//! once the session is closed. And a batch stored one by one holds half the pool at
//! most.

use std::sync::Arc;
use std::time::Duration;

use hookd::handlers::{Event, Handler, HandlerError, Registry};
use serde_json::{Value, json};

use crate::support::provider::{adyen_authorisation, send_adyen};
use crate::support::relay::CancelRelay;
use crate::support::{
    Spawn, TestApp, TestDb, connect, shipped_settings, spawn, stripe_event, wait_for,
};

/// The advisory locks the test holds and the handlers wait on.
const CUT: i64 = 1;
const NEXT: i64 = 2;
const BATCH: i64 = 3;
const ONE_BY_ONE: i64 = 4;

/// A stripe event of `test.locks` waits on the lock its object names; a batch
/// (of Adyen items) waits on `BATCH` — or fails at once when its items'
/// references say `one-by-one` — and each item stored on its own waits on
/// `ONE_BY_ONE` (shared, so they all wait at once).
struct WaitsOnLocks;

#[async_trait::async_trait]
impl Handler for WaitsOnLocks {
    async fn apply(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        event: &Event<'_>,
    ) -> Result<(), HandlerError> {
        match event
            .payload
            .pointer("/data/object/lock")
            .and_then(Value::as_i64)
        {
            Some(lock) => {
                tx.execute("SELECT pg_advisory_xact_lock($1)", &[&lock])
                    .await?;
            }
            None => {
                tx.execute("SELECT pg_advisory_xact_lock_shared($1)", &[&ONE_BY_ONE])
                    .await?;
            }
        }
        Ok(())
    }

    async fn apply_batch(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        events: &[Event<'_>],
    ) -> Result<(), HandlerError> {
        let reference = |e: &Event<'_>| e.payload["merchantReference"].as_str().map(String::from);
        if events
            .iter()
            .any(|e| reference(e).is_some_and(|r| r.starts_with("one-by-one")))
        {
            return Err(HandlerError::Retry("stored one by one".into()));
        }
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&BATCH])
            .await?;
        Ok(())
    }
}

/// An app whose database connections (and cancels) pass a `CancelRelay`, with
/// `WaitsOnLocks` for stripe's `test.locks` and Adyen's authorisations, and a
/// connection of the test's own holding every lock.
struct Setup {
    app: TestApp,
    relay: CancelRelay,
    holder: tokio_postgres::Client,
    _db: Arc<TestDb>,
}

async fn setup() -> Setup {
    let db = Arc::new(TestDb::create().await);
    let relay = CancelRelay::to(db.config()).await;
    let mut settings = shipped_settings();
    settings.handler_timeout = Duration::from_secs(5);
    settings.sources[0]
        .event_types
        .insert("test.locks".into(), "test_locks".into());
    let mut registry = Registry::builtin();
    registry.register("test_locks", Arc::new(WaitsOnLocks));
    registry.register("payment_succeeded", Arc::new(WaitsOnLocks));
    let app = spawn(Spawn {
        settings,
        registry,
        database: Some(relay.config()),
        ..Spawn::default()
    })
    .await;
    let holder = connect(db.config()).await;
    holder
        .execute(
            "SELECT pg_advisory_lock(l) FROM unnest($1::bigint[]) AS l",
            &[&vec![CUT, NEXT, BATCH, ONE_BY_ONE]],
        )
        .await
        .expect("hold the locks");
    Setup {
        app,
        relay,
        holder,
        _db: db,
    }
}

impl Setup {
    async fn unlock(&self, lock: i64) {
        self.holder
            .execute("SELECT pg_advisory_unlock($1)", &[&lock])
            .await
            .expect("unlock");
    }

    /// hookd's sessions waiting on an advisory lock in a statement like `query`.
    async fn waiting(&self, query: &str) -> i64 {
        self.holder
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                  WHERE application_name = 'hookd' AND wait_event = 'advisory'
                    AND query LIKE $1",
                &[&query],
            )
            .await
            .expect("pg_stat_activity")
            .get(0)
    }

    async fn until_waiting(&self, what: &str, query: &str, sessions: i64) {
        wait_for(what, Duration::from_secs(30), || async move {
            (self.waiting(query).await >= sessions).then_some(())
        })
        .await;
    }

    async fn until_a_cancel_is_held(&self) {
        wait_for(
            "the cancel of the statement cut",
            Duration::from_secs(30),
            || async { (self.relay.held() > 0).then_some(()) },
        )
        .await;
    }

    /// The next delivery (`id`) takes the session returned last; the late
    /// cancels held reach the server while its handler waits on a lock, and
    /// cancel nothing of it.
    async fn the_next_delivery_is_not_cancelled(&self, id: &str) {
        let next = async { self.app.deliver("stripe", &locks(id, NEXT)).await };
        let steps = async {
            self.until_waiting("the next delivery's handler", "%pg_advisory_xact_lock(%", 1)
                .await;
            self.relay.release().await;
            self.unlock(NEXT).await;
        };
        let (answer, ()) = tokio::join!(next, steps);
        assert_eq!(answer.status, 200, "{}", answer.text());
        assert_eq!(self.cancelled_by_another().await, Vec::<String>::new());
        assert_eq!(self.app.event_status(id).await, "processed");
    }

    /// The events whose runs were cancelled by someone else's cancel.
    async fn cancelled_by_another(&self) -> Vec<String> {
        self.app
            .strings(
                "SELECT e.event_id FROM webhook_events e
                   JOIN webhook_event_attempts a ON a.webhook_event_id = e.id
                  WHERE a.error LIKE '%canceling statement due to user request%'",
                &[],
            )
            .await
    }
}

fn locks(id: &str, lock: i64) -> Value {
    stripe_event(id, "test.locks", json!({"lock": lock}))
}

#[tokio::test]
async fn a_lone_delivery_cut_at_handler_timeout_leaves_no_cancel_for_the_next() {
    let s = setup().await;
    let app = &s.app;
    let cut = async { app.deliver("stripe", &locks("evt_cut", CUT)).await };
    let steps = async {
        s.until_a_cancel_is_held().await;
        s.unlock(CUT).await;
    };
    let (answer, ()) = tokio::join!(cut, steps);
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(app.event_status("evt_cut").await, "failed");
    let error = app
        .strings(
            "SELECT last_error FROM webhook_events WHERE event_id = 'evt_cut'",
            &[],
        )
        .await;
    assert!(error[0].contains("timed out"), "{error:?}");

    s.the_next_delivery_is_not_cancelled("evt_next").await;
}

#[tokio::test]
async fn a_cut_statement_whose_cancel_is_lost_ends_with_its_closed_session() {
    let s = setup().await;
    let app = &s.app;
    // The cancel never arrives (the relay keeps it) and the lock stays taken:
    // the statement cut at handler_timeout (5 s) ends because hookd closed its
    // session, and with it what it held — the new event's row, which the
    // failed run's record waits for. Otherwise statement_timeout (30 s) ends
    // it, and the provider waits that long for its answer.
    let started = std::time::Instant::now();
    let cut = async { app.deliver("stripe", &locks("evt_lost_cancel", CUT)).await };
    let (answer, ()) = tokio::join!(cut, s.until_a_cancel_is_held());
    let waited = started.elapsed();
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert!(
        waited < Duration::from_secs(15),
        "answered after {waited:?}, past handler_timeout by far"
    );
    assert_eq!(app.event_status("evt_lost_cancel").await, "failed");
    let still_waiting: i64 = s
        .holder
        .query_one(
            "SELECT count(*) FROM pg_stat_activity
              WHERE datname = current_database() AND application_name = 'hookd'
                AND wait_event = 'advisory'",
            &[],
        )
        .await
        .expect("pg_stat_activity")
        .get(0);
    assert_eq!(still_waiting, 0, "the cut statement still waits");
}

#[tokio::test]
async fn a_retry_cut_at_handler_timeout_leaves_no_cancel_for_the_next() {
    let s = setup().await;
    let app = &s.app;
    // Cut at receipt (its late cancel let go at once: it reaches a closed
    // session), then due again, its lock still held.
    let cut = async { app.deliver("stripe", &locks("evt_retry_cut", CUT)).await };
    let (answer, ()) = tokio::join!(cut, s.until_a_cancel_is_held());
    assert_eq!(answer.status, 200, "{}", answer.text());
    s.relay.release().await;
    app.execute(
        "UPDATE webhook_events SET next_attempt_at = now() WHERE event_id = 'evt_retry_cut'",
        &[],
    )
    .await;
    // The retry loop's step is cut too; its cancel is held.
    let (step, ()) = tokio::join!(
        app.app.dispatcher.try_dispatch_due(),
        s.until_a_cancel_is_held()
    );
    crate::support::assert_retry_failed(step);
    let attempts = app
        .strings(
            "SELECT attempts::text FROM webhook_events WHERE event_id = 'evt_retry_cut'",
            &[],
        )
        .await;
    assert_eq!(attempts, vec!["2".to_string()]);

    s.the_next_delivery_is_not_cancelled("evt_after_retry")
        .await;
}

/// An Adyen authorisation of `reference`.
fn adyen_item(psp: &str, reference: &str) -> Value {
    adyen_authorisation(psp, reference, "2026-11-30T14:00:00+01:00")
}

#[tokio::test]
async fn a_batch_cut_at_handler_timeout_leaves_no_cancel_for_its_deliveries_stored_one_by_one() {
    let s = setup().await;
    let app = &s.app;
    // Two events of one request share a batch; its handler is cut, and each is
    // then stored on its own, its handler waiting on a lock — one of them, had
    // the batch's session gone back to the pool, on that session.
    let request = send_adyen(
        app,
        vec![
            adyen_item("psp_a", "order-a"),
            adyen_item("psp_b", "order-b"),
        ],
    );
    let steps = async {
        s.until_a_cancel_is_held().await;
        s.unlock(BATCH).await;
        s.until_waiting("both deliveries stored one by one", "%lock_shared%", 2)
            .await;
        s.relay.release().await;
        s.unlock(ONE_BY_ONE).await;
    };
    let (answer, ()) = tokio::join!(request, steps);
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(s.cancelled_by_another().await, Vec::<String>::new());
    let processed =
        "SELECT count(*) FROM webhook_events WHERE source = 'adyen' AND status = 'processed'";
    assert_eq!(app.count(processed, &[]).await, 2);
}

#[tokio::test]
async fn a_batch_stored_one_by_one_holds_half_the_pool_at_most() {
    let s = setup().await;
    let app = &s.app;
    let pool_size = app.app.pool.status().max_size as i64;
    // Twenty events of one request: their batch fails, then each waits on
    // `ONE_BY_ONE` in a transaction of its own.
    let items = (0..20)
        .map(|i| adyen_item(&format!("psp_{i}"), &format!("one-by-one-{i}")))
        .collect();
    let request = send_adyen(app, items);
    let observed = async {
        s.until_waiting(
            "the deliveries stored one by one",
            "%lock_shared%",
            pool_size / 2,
        )
        .await;
        // All of them are there to start; watch a while for more than half.
        let mut most = 0;
        for _ in 0..25 {
            most = most.max(s.waiting("%lock_shared%").await);
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
        s.unlock(ONE_BY_ONE).await;
        most
    };
    let (answer, most) = tokio::join!(request, observed);
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(most, pool_size / 2, "sessions storing deliveries at once");
    let processed =
        "SELECT count(*) FROM webhook_events WHERE source = 'adyen' AND status = 'processed'";
    assert_eq!(app.count(processed, &[]).await, 20);
}
