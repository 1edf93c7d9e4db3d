//! Group commit: deliveries that arrive together share one transaction, yet one
//! event's failure, time limit or conflict never fails its batch-mates or delays
//! them beyond `handler_timeout`, and copies of one event in a batch are one row,
//! one effect and one answer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hookd::handlers::{Event, Handler, HandlerError, Registry};
use serde_json::json;

use crate::support::relay::StallRelay;
use crate::support::{
    Spawn, TestApp, TestDb, connect, hold_payment_row, shipped_settings, spawn,
    spawn_with_settings, stripe_event,
};

/// Marks each event it applies; `evt_stuck` never finishes, `evt_broken` fails for
/// good, `evt_flaky` fails once.
struct Picky;

#[async_trait::async_trait]
impl Handler for Picky {
    async fn apply(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        event: &Event<'_>,
    ) -> Result<(), HandlerError> {
        match event.event_id {
            "evt_stuck" => {
                tx.execute("SELECT pg_sleep(60)", &[]).await?;
            }
            "evt_broken" => return Err(HandlerError::Permanent("broken on purpose".into())),
            "evt_flaky" if event.attempt == 1 => {
                return Err(HandlerError::Retry("flaky on purpose".into()));
            }
            _ => {}
        }
        tx.execute(
            "INSERT INTO payments (source, payment_id) VALUES ($1, $2)",
            &[&event.source, &format!("effect-{}", event.event_id)],
        )
        .await?;
        Ok(())
    }
}

async fn picky_app() -> TestApp {
    let mut settings = shipped_settings();
    settings.handler_timeout = Duration::from_secs(1);
    settings.sources[0]
        .event_types
        .insert("test.picky".into(), "test_picky".into());
    let mut registry = Registry::builtin();
    registry.register("test_picky", Arc::new(Picky));
    spawn(Spawn {
        settings,
        registry,
        ..Spawn::default()
    })
    .await
}

fn picky(id: &str) -> serde_json::Value {
    stripe_event(id, "test.picky", json!({"n": id}))
}

#[tokio::test]
async fn one_events_failure_never_fails_or_holds_its_batch_mates() {
    let app = picky_app().await;
    let mut ids: Vec<String> = (0..40).map(|i| format!("evt_fine_{i}")).collect();
    ids.extend(["evt_stuck", "evt_broken", "evt_flaky"].map(String::from));
    // A conflicting delivery of one event id among them: whichever is stored
    // first wins, the other is 422, and nobody else notices.
    let conflicting = stripe_event("evt_fine_0", "test.picky", json!({"n": "other"}));
    let mut events: Vec<serde_json::Value> = ids.iter().map(|id| picky(id)).collect();
    events.push(conflicting);
    let started = Instant::now();
    let answers = futures_util::future::join_all(events.iter().map(|event| {
        let app = &app;
        async move { (app.deliver("stripe", event).await, started.elapsed()) }
    }))
    .await;
    for (answer, took) in &answers[1..ids.len()] {
        assert_eq!(answer.status, 200, "{}", answer.text());
        // The stuck handler (60 s) costs its batch-mates one handler_timeout
        // (1 s) at most; the rest of the bound is a loaded machine's slack.
        assert!(*took < Duration::from_secs(5), "answered after {took:?}");
    }
    let mut pair = [answers[0].0.status, answers[ids.len()].0.status];
    pair.sort_unstable();
    assert_eq!(pair, [200, 422]);

    assert_eq!(app.event_status("evt_stuck").await, "failed");
    assert_eq!(app.event_status("evt_broken").await, "dead");
    assert_eq!(app.event_status("evt_flaky").await, "failed");
    assert_eq!(
        app.count(
            "SELECT count(*) FROM webhook_events WHERE event_id LIKE 'evt_fine_%' AND status = 'processed'",
            &[]
        )
        .await,
        40
    );
    // Effects exactly for what was applied: the 40, not the failed ones.
    assert_eq!(
        app.count(
            "SELECT count(*) FROM payments WHERE payment_id LIKE 'effect-%'",
            &[]
        )
        .await,
        40
    );
    app.assert_deliveries_shared_transactions().await;
    // Retries apply what failed (the stuck one set aside: it would only time out).
    app.execute(
        "UPDATE webhook_events SET status = 'dead' WHERE event_id = 'evt_stuck'",
        &[],
    )
    .await;
    app.run_due_retries().await;
    assert_eq!(app.event_status("evt_flaky").await, "processed");
}

#[tokio::test]
async fn copies_of_one_event_in_one_batch_are_one_row_one_effect_one_answer() {
    let app = crate::support::spawn_app().await;
    let event = stripe_event(
        "evt_copies",
        "payment_intent.succeeded",
        json!({"id": "pi_copies", "amount": 100, "currency": "usd"}),
    );
    let mut events = vec![event.clone(); 30];
    // Others in the same batches.
    for i in 0..30 {
        events.push(stripe_event(
            &format!("evt_other_{i}"),
            "payment_intent.succeeded",
            json!({"id": format!("pi_other_{i}"), "amount": 100, "currency": "usd"}),
        ));
    }
    let answers =
        futures_util::future::join_all(events.iter().map(|e| app.deliver("stripe", e))).await;
    let copies: Vec<_> = answers[..30].iter().collect();
    assert!(
        copies
            .iter()
            .all(|a| a.status == 200 && a.body == copies[0].body)
    );
    assert_eq!(
        copies
            .iter()
            .filter(|a| a.header("Idempotent-Replayed").is_none())
            .count(),
        1,
        "one copy is the first; the others are replays"
    );
    let row = &app
        .query(
            "SELECT deliveries, attempts FROM webhook_events WHERE event_id = 'evt_copies'",
            &[],
        )
        .await[0];
    assert_eq!((row.get::<_, i32>(0), row.get::<_, i32>(1)), (30, 1));
    assert_eq!(
        app.count(
            "SELECT count(*) FROM webhook_event_attempts a JOIN webhook_events e
             ON e.id = a.webhook_event_id WHERE e.event_id = 'evt_copies'",
            &[]
        )
        .await,
        1
    );
    assert_eq!(
        app.count("SELECT count(*) FROM payments WHERE succeeded", &[])
            .await,
        31
    );
}

/// Holds each event it applies until told to let go, counting those it holds.
struct Holding {
    held: Arc<std::sync::atomic::AtomicUsize>,
    release: Arc<tokio::sync::Semaphore>,
}

#[async_trait::async_trait]
impl Handler for Holding {
    async fn apply(
        &self,
        _tx: &deadpool_postgres::Transaction<'_>,
        _event: &Event<'_>,
    ) -> Result<(), HandlerError> {
        self.held.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let _permit = self
            .release
            .acquire()
            .await
            .map_err(|e| HandlerError::Permanent(e.to_string()))?;
        Ok(())
    }
}

#[tokio::test]
async fn a_delivery_leads_its_own_transaction_while_others_are_busy() {
    let held = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let mut settings = shipped_settings();
    settings.handler_timeout = Duration::from_secs(30);
    settings.sources[0]
        .event_types
        .insert("test.held".into(), "test_held".into());
    let mut registry = Registry::builtin();
    registry.register(
        "test_held",
        Arc::new(Holding {
            held: held.clone(),
            release: release.clone(),
        }),
    );
    let app = Arc::new(
        spawn(Spawn {
            settings,
            registry,
            ..Spawn::default()
        })
        .await,
    );
    // Every leader but one busy, each in a transaction of its own: sent one by
    // one, each once the one before is held.
    let busy = hookd::ingest::max_leaders(16) - 1;
    let mut waiting = Vec::new();
    for i in 0..busy {
        let event = stripe_event(&format!("evt_held_{i}"), "test.held", json!({}));
        let app = app.clone();
        waiting.push(tokio::spawn(async move {
            app.deliver("stripe", &event).await.status
        }));
        let deadline = Instant::now() + Duration::from_secs(10);
        while held.load(std::sync::atomic::Ordering::SeqCst) <= i {
            assert!(
                Instant::now() < deadline,
                "delivery {i} never reached its handler"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    // The next delivery does not queue behind them: it leads its own.
    let answer = tokio::time::timeout(
        Duration::from_secs(20),
        app.deliver(
            "stripe",
            &serde_json::from_str::<serde_json::Value>(&hookd_kit::load::stripe_payment_succeeded(
                "evt_free",
                "pi_free",
                1_700_000_000,
            ))
            .expect("json"),
        ),
    )
    .await
    .expect("answered while the others are held");
    assert_eq!(answer.status, 200);
    assert_eq!(app.event_status("evt_free").await, "processed");
    assert_eq!(held.load(std::sync::atomic::Ordering::SeqCst), busy);
    release.add_permits(busy);
    for delivery in waiting {
        assert_eq!(delivery.await.expect("delivery"), 200);
    }
}

/// Payment events write their merge in the statement that stores them. One whose
/// payment row another transaction holds is cut at `handler_timeout` like any
/// handler: it is stored `failed` (retried later), and its batch-mates wait one
/// `handler_timeout` at most.
#[tokio::test]
async fn a_payment_merge_held_by_a_lock_costs_its_batch_mates_one_handler_timeout_at_most() {
    let mut settings = shipped_settings();
    settings.handler_timeout = Duration::from_secs(1);
    let app = spawn_with_settings(settings).await;
    let holder = hold_payment_row(app.db().await, "pi_held").await;
    let mut events: Vec<serde_json::Value> = (0..30)
        .map(|i| payment_event(&format!("evt_free_{i}"), &format!("pi_free_{i}")))
        .collect();
    events.push(payment_event("evt_held", "pi_held"));
    let started = Instant::now();
    let answers = futures_util::future::join_all(events.iter().map(|event| {
        let app = &app;
        async move { (app.deliver("stripe", event).await, started.elapsed()) }
    }))
    .await;
    for (answer, took) in &answers {
        assert_eq!(answer.status, 200, "{}", answer.text());
        assert!(*took < Duration::from_secs(10), "answered after {took:?}");
    }
    // One handler_timeout (1 s) at most, and a loaded machine's slack.
    for (_, took) in &answers[..30] {
        assert!(
            *took < Duration::from_secs(5),
            "a batch-mate answered after {took:?}"
        );
    }
    assert_eq!(app.event_status("evt_held").await, "failed");
    let free_paid = "SELECT count(*) FROM payments WHERE payment_id LIKE 'pi_free_%' AND succeeded";
    assert_eq!(app.count(free_paid, &[]).await, 30);
    let free_processed = "SELECT count(*) FROM webhook_events \
                          WHERE event_id LIKE 'evt_free_%' AND status = 'processed' AND attempts = 1";
    assert_eq!(app.count(free_processed, &[]).await, 30);
    let free_attempts = "SELECT count(*) FROM webhook_event_attempts a \
                         JOIN webhook_events e ON e.id = a.webhook_event_id \
                         WHERE e.event_id LIKE 'evt_free_%' AND a.outcome = 'processed' \
                           AND a.handler = 'payment_succeeded'";
    assert_eq!(app.count(free_attempts, &[]).await, 30);

    // Once the row is free, the retry applies it.
    holder.batch_execute("ROLLBACK").await.expect("release");
    app.run_due_retries().await;
    assert_eq!(app.event_status("evt_held").await, "processed");
    let held_paid = "SELECT count(*) FROM payments WHERE payment_id = 'pi_held' AND succeeded";
    assert_eq!(app.count(held_paid, &[]).await, 1);
}

/// A batch whose statement and `COMMIT` went through, but whose answers were
/// late past `handler_timeout` (a slow link; under synchronous replication, a
/// cancel cutting the wait for the standby reads the same): hookd never
/// acknowledges it on its own word. The delivery is stored on its own, found
/// stored, answered as a copy, and its payment merged once.
#[tokio::test]
async fn a_batch_cut_at_its_time_limit_that_committed_after_all_is_a_copy_applied_once() {
    let db = TestDb::create().await;
    let relay = StallRelay::to(db.config()).await;
    let mut settings = shipped_settings();
    settings.handler_timeout = Duration::from_secs(1);
    let app = spawn(Spawn {
        settings,
        database: Some(relay.config()),
        ..Spawn::default()
    })
    .await;
    // A first delivery opens the pool's session to the database.
    let warm = app
        .deliver("stripe", &payment_event("evt_warm", "pi_warm"))
        .await;
    assert_eq!(warm.status, 200);

    relay.stall_answers();
    let event = payment_event("evt_late", "pi_late");
    let delivery = app.deliver("stripe", &event);
    let resume = async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        relay.resume();
    };
    let (answer, ()) = tokio::join!(delivery, resume);
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(
        answer.header("Idempotent-Replayed"),
        Some("true"),
        "answered on the batch's own word"
    );
    let row = &app
        .query(
            "SELECT status, deliveries, attempts FROM webhook_events WHERE event_id = 'evt_late'",
            &[],
        )
        .await[0];
    let (status, deliveries, attempts): (String, i32, i32) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(
        (status.as_str(), deliveries, attempts),
        ("processed", 2, 1),
        "stored once, counted twice, run once"
    );
    let merged = "SELECT count(*) FROM webhook_event_attempts a JOIN webhook_events e \
                  ON e.id = a.webhook_event_id WHERE e.event_id = 'evt_late'";
    assert_eq!(app.count(merged, &[]).await, 1, "its payment merged once");
    let paid = "SELECT count(*) FROM payments WHERE payment_id = 'pi_late' AND succeeded";
    assert_eq!(app.count(paid, &[]).await, 1);
}

/// A payment row held past a `lock_timeout` the database sets for its sessions:
/// the payment merge fails like a handler, the event is stored `failed` and
/// retried, and neither it nor its batch-mates are refused with a 503.
#[tokio::test]
async fn a_lock_timeout_of_the_databases_own_fails_the_payment_merge_never_the_delivery() {
    let db = Arc::new(TestDb::create().await);
    connect(db.config())
        .await
        .batch_execute(&format!(
            "ALTER DATABASE {} SET lock_timeout = '200ms'",
            db.name
        ))
        .await
        .expect("set the database's lock_timeout");
    let mut settings = shipped_settings();
    settings.handler_timeout = Duration::from_secs(5);
    let app = spawn(Spawn {
        settings,
        db: Some(db),
        ..Spawn::default()
    })
    .await;
    let holder = hold_payment_row(app.db().await, "pi_held").await;

    // Alone, then among batch-mates.
    let lone = app
        .deliver("stripe", &payment_event("evt_held_alone", "pi_held"))
        .await;
    assert_eq!(lone.status, 200, "{}", lone.text());
    assert_eq!(app.event_status("evt_held_alone").await, "failed");
    let mut events: Vec<serde_json::Value> = (0..20)
        .map(|i| payment_event(&format!("evt_mate_{i}"), &format!("pi_mate_{i}")))
        .collect();
    events.push(payment_event("evt_held_among", "pi_held"));
    let answers =
        futures_util::future::join_all(events.iter().map(|event| app.deliver("stripe", event)))
            .await;
    for answer in &answers {
        assert_eq!(answer.status, 200, "{}", answer.text());
    }
    assert_eq!(app.event_status("evt_held_among").await, "failed");
    let mates_paid =
        "SELECT count(*) FROM payments WHERE payment_id LIKE 'pi_mate_%' AND succeeded";
    assert_eq!(app.count(mates_paid, &[]).await, 20);
    let held_error = "SELECT count(*) FROM webhook_events \
                      WHERE event_id LIKE 'evt_held_%' AND last_error LIKE '%lock timeout%'";
    assert_eq!(app.count(held_error, &[]).await, 2);

    holder.batch_execute("ROLLBACK").await.expect("release");
    app.run_due_retries().await;
    assert_eq!(app.event_status("evt_held_alone").await, "processed");
    assert_eq!(app.event_status("evt_held_among").await, "processed");
}

/// A Stripe `payment_intent.succeeded` event `id` for `payment`.
fn payment_event(id: &str, payment: &str) -> serde_json::Value {
    stripe_event(
        id,
        "payment_intent.succeeded",
        json!({"id": payment, "object": "payment_intent", "amount": 500, "currency": "eur"}),
    )
}

/// The pool hands out the connection returned last, so batch after batch at a
/// moderate rate runs on one warm backend instead of going round them all.
#[tokio::test]
async fn the_pool_hands_out_the_connection_used_last() {
    let db = TestDb::create().await;
    let pool = hookd::store::pool(db.config(), hookd::store::DbConnector::Plain, 4);
    // Three connections open and idle, returned in this order.
    let (a, b, c) = (
        pool.get().await.expect("a"),
        pool.get().await.expect("b"),
        pool.get().await.expect("c"),
    );
    let last = backend_pid(&c).await;
    drop(a);
    drop(b);
    drop(c);
    for _ in 0..5 {
        let client = pool.get().await.expect("get");
        assert_eq!(
            backend_pid(&client).await,
            last,
            "a different backend was handed out"
        );
    }
}

async fn backend_pid(client: &deadpool_postgres::Object) -> i32 {
    client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("pid")
        .get(0)
}

/// A delivery whose whole run is the built-in payment merge costs one round trip
/// to the database: `BEGIN`, its one statement and `COMMIT` go together (the
/// `COMMIT` leaves before the statement's result is back), in that order, and
/// the delivery is answered only after the `COMMIT`'s own answer.
#[tokio::test]
async fn a_payment_delivery_is_one_round_trip_to_the_database() {
    let db = TestDb::create().await;
    let relay = ProtocolRelay::to(db.config()).await;
    let app = spawn(Spawn {
        database: Some(relay.config()),
        // Without the sources' activity written every 5 s, whose statements
        // would otherwise fall into a delivery's window of the log now and then.
        parts: hookd::app::Parts {
            activity: false,
            ..Spawn::default().parts
        },
        ..Spawn::default()
    })
    .await;
    // The first delivery on a connection prepares its statements there.
    app.deliver_ok("stripe", &payment_event("evt_rt_0", "pi_rt_0"))
        .await;
    for n in 1..=3 {
        relay.take();
        // The server's answers wait for hookd's COMMIT (two seconds at most),
        // and the COMMIT's own answer a little longer.
        relay.hold_answers_until_commit();
        app.deliver_ok(
            "stripe",
            &payment_event(&format!("evt_rt_{n}"), &format!("pi_rt_{n}")),
        )
        .await;
        relay.note("answered");
        let seen = relay.take();
        let sent: Vec<&str> = seen
            .iter()
            .filter_map(|m| m.strip_prefix("hookd "))
            .collect();
        assert_eq!(
            sent,
            ["Q BEGIN", "B", "E", "S", "Q COMMIT"],
            "what hookd sent for delivery {n}: {seen:#?}"
        );
        let at = |message: &str| {
            seen.iter()
                .position(|m| m == message)
                .unwrap_or_else(|| panic!("no {message:?} for delivery {n}: {seen:#?}"))
        };
        // The statement's result: the `CommandComplete` that is neither BEGIN's
        // nor COMMIT's.
        let result = seen
            .iter()
            .position(|m| {
                m.starts_with("server C ") && !m.ends_with("BEGIN") && !m.ends_with("COMMIT")
            })
            .unwrap_or_else(|| panic!("no statement result for delivery {n}: {seen:#?}"));
        assert!(
            at("hookd Q COMMIT") < result,
            "the COMMIT waited for the statement's result (delivery {n}): {seen:#?}"
        );
        assert!(
            at("server C COMMIT") < at("answered"),
            "answered before the COMMIT's answer (delivery {n}): {seen:#?}"
        );
    }
    let payments = connect(db.config())
        .await
        .query_one(
            "SELECT count(*) FROM payments WHERE status = 'succeeded'",
            &[],
        )
        .await
        .expect("count")
        .get::<_, i64>(0);
    assert_eq!(payments, 4);
}

/// Relays TCP connections to a test database and logs the protocol messages
/// both ways, in the order it relays them: `hookd T …` for what the client sent,
/// `server T …` for what the server answered (`T` the message type; a query's
/// text and a `CommandComplete`'s tag follow).
struct ProtocolRelay {
    addr: std::net::SocketAddr,
    upstream: tokio_postgres::Config,
    log: Log,
    gate: AnswerGate,
}

type Log = Arc<std::sync::Mutex<Vec<String>>>;

/// While armed, the server's answers wait until the client has sent a
/// `COMMIT` (two seconds at most), and the `COMMIT`'s answer alone 200 ms more
/// (what arrived with it before it goes on at once): a
/// client that waits for an answer before its `COMMIT`, or answers its caller
/// before the `COMMIT`'s, shows in the log whatever the machine's timing.
#[derive(Clone, Default)]
struct AnswerGate(Arc<(std::sync::Mutex<AnswerGateState>, tokio::sync::Notify)>);

#[derive(Default)]
struct AnswerGateState {
    armed: bool,
    commit_sent: bool,
}

impl AnswerGate {
    fn arm(&self) {
        *self.0.0.lock().expect("gate") = AnswerGateState {
            armed: true,
            commit_sent: false,
        };
    }

    fn commit_sent(&self) {
        self.0.0.lock().expect("gate").commit_sent = true;
        self.0.1.notify_waiters();
    }

    /// Before the server's answers go on: while armed, until the client has
    /// sent its `COMMIT` (two seconds at most).
    async fn until_commit_sent(&self) {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
        loop {
            let notified = self.0.1.notified();
            let (armed, commit_sent) = {
                let state = self.0.0.lock().expect("gate");
                (state.armed, state.commit_sent)
            };
            if !armed || commit_sent {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return;
            }
        }
    }

    /// Before the `COMMIT`'s answer goes on, once: 200 ms while armed, then
    /// disarmed.
    async fn hold_commit_answer(&self) {
        let armed = std::mem::take(&mut self.0.0.lock().expect("gate").armed);
        if armed {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }
}

impl ProtocolRelay {
    async fn to(upstream: tokio_postgres::Config) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let log = Log::default();
        let gate = AnswerGate::default();
        let (config, logged, gated) = (upstream.clone(), log.clone(), gate.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = crate::support::relay::connect(&config).await;
                relay(client, server, &logged, &gated);
            }
        });
        ProtocolRelay {
            addr,
            upstream,
            log,
            gate,
        }
    }

    /// The upstream database's settings, through the relay.
    fn config(&self) -> tokio_postgres::Config {
        crate::support::relay::through(self.addr.port(), &self.upstream)
    }

    /// The messages relayed since the last call.
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.log.lock().expect("log"))
    }

    /// Adds a line of the test's own to the log.
    fn note(&self, line: &str) {
        self.log.lock().expect("log").push(line.to_string());
    }

    fn hold_answers_until_commit(&self) {
        self.gate.arm();
    }
}

/// Relays one connection both ways, logging each whole message as it passes
/// it on (so a message is logged before the other side can react to it).
fn relay<S>(client: tokio::net::TcpStream, server: S, log: &Log, gate: &AnswerGate)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    let (client_read, client_write) = tokio::io::split(client);
    let (server_read, server_write) = tokio::io::split(server);
    // The client's first message (startup) has no type byte.
    let to_server = Pump {
        side: "hookd",
        untyped_first: true,
        log: log.clone(),
        gate: gate.clone(),
    };
    let to_client = Pump {
        side: "server",
        untyped_first: false,
        log: log.clone(),
        gate: gate.clone(),
    };
    tokio::spawn(to_server.run(client_read, server_write));
    tokio::spawn(to_client.run(server_read, client_write));
}

/// One direction of a relayed connection.
struct Pump {
    side: &'static str,
    untyped_first: bool,
    log: Log,
    gate: AnswerGate,
}

impl Pump {
    async fn run(
        mut self,
        mut from: impl tokio::io::AsyncRead + Unpin,
        mut to: impl tokio::io::AsyncWrite + Unpin,
    ) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut pending: Vec<u8> = Vec::new();
        let mut buf = vec![0; 64 * 1024];
        while let Ok(n @ 1..) = from.read(&mut buf).await {
            pending.extend_from_slice(&buf[..n]);
            let (whole, messages) = self.messages(&pending);
            if self.side == "server" && !messages.is_empty() {
                self.gate.until_commit_sent().await;
            }
            // Message by message, each logged before it goes on, so that only
            // the `COMMIT`'s answer is held, not what came with it.
            let mut sent = 0;
            for (message, start) in messages {
                if message == "server C COMMIT" {
                    // What came before it goes on; the answer itself is logged
                    // only once held, just before it goes on too.
                    if to.write_all(&pending[sent..start]).await.is_err() {
                        return;
                    }
                    let _ = to.flush().await;
                    sent = start;
                    self.gate.hold_commit_answer().await;
                }
                let is_commit = message == "hookd Q COMMIT";
                self.log.lock().expect("log").push(message);
                if is_commit {
                    self.gate.commit_sent();
                }
            }
            if to.write_all(&pending[sent..whole]).await.is_err() {
                break;
            }
            pending.drain(..whole);
        }
        let _ = to.shutdown().await;
    }

    /// How many bytes of `pending` are whole messages, and those messages, each
    /// with where it starts.
    fn messages(&mut self, pending: &[u8]) -> (usize, Vec<(String, usize)>) {
        let side = self.side;
        let mut messages = Vec::new();
        let mut whole = 0;
        loop {
            let rest = &pending[whole..];
            let (head, kind) = if self.untyped_first {
                (0, None)
            } else {
                (1, rest.first().copied())
            };
            let Some(length) = rest
                .get(head..head + 4)
                .map(|l| u32::from_be_bytes([l[0], l[1], l[2], l[3]]) as usize)
            else {
                break;
            };
            let Some(message) = rest.get(..head + length) else {
                break;
            };
            if let Some(kind) = kind {
                let body = &message[5..];
                let text = String::from_utf8_lossy(body.strip_suffix(&[0]).unwrap_or(body));
                let line = match kind {
                    b'Q' | b'C' => format!("{side} {} {text}", kind as char),
                    _ => format!("{side} {}", kind as char),
                };
                messages.push((line, whole));
            }
            self.untyped_first = false;
            whole += head + length;
        }
        (whole, messages)
    }
}
