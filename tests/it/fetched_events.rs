//! Deliveries that only name their event, through the real binary against the
//! provider's API served over HTTPS with the test CA (`reconcile::ProviderApi`):
//! Stripe's thin events, fetched before handlers run and retried as a failed
//! run is when the fetch fails; Mollie's webhooks, an unsigned `id=tr_…` whose
//! payment is fetched at receipt and is the event.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::process::{Hookd, free_port, stripe_signer, write_config};
use crate::reconcile::{Answer, ProviderApi};
use crate::support::upstream::Seen;
use crate::support::{TestDb, cluster, connect, spawn_app, wait_for};

/// The key the test's provider accepts.
const KEY: &str = "rk_test_thin_0123456789abcdef";

/// A thin event as an event destination sends it: it names its event only.
fn thin(id: &str, event_type: &str) -> Value {
    json!({
        "id": id,
        "object": "v2.core.event",
        "type": event_type,
        "livemode": false,
        "created": "2026-12-04T10:00:00.000Z",
        "related_object": {"id": format!("pi_{id}"), "type": "payment_intent",
                           "url": format!("/v1/payment_intents/pi_{id}")},
        "reason": {"type": "request", "request": {"id": "req_thin", "idempotency_key": null}},
    })
}

/// What `GET /v1/payment_intents/pi_{id}` answers for the payment intent a
/// thin event `id` names (its `related_object.url`): the resource as it is now.
fn fetched(id: &str) -> Value {
    json!({"id": format!("pi_{id}"), "object": "payment_intent",
        "amount": 2500, "amount_received": 2500, "currency": "eur", "status": "succeeded"})
}

/// The thin event a read names, and whether it reads the event
/// (`/v2/core/events/{id}`) rather than the resource it names.
fn named_in(target: &str) -> (&str, bool) {
    match target.strip_prefix("/v2/core/events/") {
        Some(id) => (id, true),
        None => {
            let id = target
                .strip_prefix("/v1/payment_intents/pi_")
                .unwrap_or_else(|| panic!("hookd asked for {target}"));
            (id, false)
        }
    }
}

/// `hookd serve` asking `api` with `KEY` for the shipped `stripe` source.
async fn serve(api: &ProviderApi, db: &TestDb, name: &str) -> Hookd {
    serve_source(api, db, name, "stripe", "").await.0
}

/// `hookd serve` on the shipped configuration with `extra` appended, asking
/// `api` with `KEY` for `source`.
async fn serve_source(
    api: &ProviderApi,
    db: &TestDb,
    name: &str,
    source: &str,
    extra: &str,
) -> (Hookd, PathBuf) {
    serve_source_limited(api, db, name, source, extra, None).await
}

/// `serve_source`, with the shipped `handler_timeout` changed to `limit`.
async fn serve_source_limited(
    api: &ProviderApi,
    db: &TestDb,
    name: &str,
    source: &str,
    extra: &str,
    limit: Option<&str>,
) -> (Hookd, PathBuf) {
    let port = free_port();
    let config = config_with(port, name, extra);
    if let Some(limit) = limit {
        let text = std::fs::read_to_string(&config).expect("config");
        let shipped = "handler_timeout = \"5s\"";
        assert!(text.contains(shipped), "the shipped limit");
        let text = text.replace(shipped, &format!("handler_timeout = \"{limit}\""));
        std::fs::write(&config, text).expect("config");
    }
    let env = api.env(source, KEY, cluster().connection_string(&db.name));
    (
        Hookd::start_with_env(&config, port, &env, "info").await,
        config,
    )
}

/// The row of event `id` once it is `processed` (30 s at most): its status,
/// attempts, kind and payload's `object`.
async fn until_processed(client: &tokio_postgres::Client, id: &str) -> tokio_postgres::Row {
    wait_for(
        "the thin event to be applied",
        Duration::from_secs(30),
        || async move {
            let row = client
                .query_one(
                    "SELECT status, attempts, kind, payload->>'object' FROM webhook_events \
                 WHERE event_id = $1",
                    &[&id],
                )
                .await
                .ok()?;
            (row.get::<_, String>(0) == "processed").then_some(row)
        },
    )
    .await
}

/// How many deliveries of event `id` hookd received.
async fn deliveries_of(client: &tokio_postgres::Client, id: &str) -> i32 {
    client
        .query_one(
            "SELECT deliveries FROM webhook_events WHERE event_id = $1",
            &[&id],
        )
        .await
        .expect("row")
        .get(0)
}

/// How many payment rows the event `id` names made (`pi_{id}`).
async fn payments_of(client: &tokio_postgres::Client, id: &str) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM payments WHERE payment_id = $1",
            &[&format!("pi_{id}")],
        )
        .await
        .expect("payments")
        .get(0)
}

/// What the API answers for the event a call names: a payment succeeded.
fn the_named_event(seen: &Seen) -> Answer {
    // The v2 event as Stripe documents it: it names its v1 resource
    // (`related_object`) without carrying it.
    let answer = match named_in(&seen.target) {
        (id, true) => {
            let mut event = thin(id, "v1.payment_intent.succeeded");
            event["data"] = Value::Null;
            event
        }
        (id, false) => fetched(id),
    };
    (200, vec![], answer.to_string())
}

/// A thin `v1.payment_intent.succeeded` naming `id`, signed and posted.
async fn post_thin(hookd: &Hookd, id: &str) -> (u16, String) {
    let body = serde_json::to_vec(&thin(id, "v1.payment_intent.succeeded")).expect("json");
    post(&hookd.base, "stripe", &stripe_signer()(&body), &body).await
}

/// Waits for the operator's `retry` to read the event (the API's second call),
/// checks no transaction waits on that read (`why` if one does), lets the API
/// answer, and checks the retry's 200.
async fn answered_after_a_read_holding_nothing(
    retry: tokio::task::JoinHandle<(u16, String)>,
    calls: &Arc<AtomicUsize>,
    gate: &AtomicUsize,
    client: &tokio_postgres::Client,
    db: &TestDb,
    why: &str,
) {
    wait_for("the retry's read", Duration::from_secs(30), || {
        let calls = calls.clone();
        async move { (calls.load(Ordering::SeqCst) == 2).then_some(()) }
    })
    .await;
    assert_eq!(open_transactions(client, db).await, 0, "{why}");
    gate.store(1, Ordering::SeqCst);
    let (status, answer) = retry.await.expect("join");
    assert_eq!(status, 200, "{answer}");
}

/// A forward of event row `row_id` being sent, its lease running for `lease`
/// (an interval), by a lane no instance here has.
async fn lease_a_forward(client: &tokio_postgres::Client, row_id: i64, lease: &str) {
    client
        .execute(
            "INSERT INTO event_forwards (webhook_event_id, forward, next_attempt_at, lease_until) \
             VALUES ($1, 'elsewhere', now() + interval '1 hour', now() + $2::text::interval)",
            &[&row_id, &lease],
        )
        .await
        .expect("a leased forward");
}

/// An operator's retry of the event row `row_id` through the admin API: its
/// status and answer.
async fn operator_retry(base: String, row_id: i64) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(format!("{base}/admin/api/events/{row_id}/retry"))
        .bearer_auth(hookd_kit::admin::OPERATOR_TOKEN)
        .send()
        .await
        .expect("retry");
    let status = response.status().as_u16();
    (status, response.text().await.expect("answer"))
}

/// Posts the thin event `id`, whose read at receipt fails, and puts its retry
/// an hour ahead, so that the operator's retry alone runs it; its row id.
async fn failed_for_the_operator(hookd: &Hookd, client: &tokio_postgres::Client, id: &str) -> i64 {
    let (status, answer) = post_thin(hookd, id).await;
    assert_eq!(status, 200, "{answer}");
    client
        .query_one(
            "UPDATE webhook_events SET next_attempt_at = now() + interval '1 hour' \
             WHERE event_id = $1 AND status = 'failed' RETURNING id",
            &[&id],
        )
        .await
        .expect("the failed event")
        .get(0)
}

/// The provider's API answering the event each call names once the test
/// sets the gate to 1 (each call blocking a worker of its own until then), and
/// with a 500 at once to the first call when `fail_first`; with the count of
/// calls and the gate. (Reads of the payment intent an event names answer at
/// once, uncounted.)
async fn held_api(fail_first: bool) -> (ProviderApi, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let (calls, gate) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (counted, held) = (calls.clone(), gate.clone());
    let api = ProviderApi::start(move |seen: &Seen| -> Answer {
        // Reads of the event are counted and held; of its resource, not.
        if !named_in(&seen.target).1 {
            return the_named_event(seen);
        }
        if counted.fetch_add(1, Ordering::SeqCst) == 0 && fail_first {
            let later = json!({"error": {"message": "later"}});
            return (500, vec![], later.to_string());
        }
        held_until_let_go(&held);
        the_named_event(seen)
    })
    .await;
    (api, calls, gate)
}

/// Blocks the API's worker until the test sets `gate` to 1 (20 s at most).
fn held_until_let_go(gate: &AtomicUsize) {
    tokio::task::block_in_place(|| {
        for _ in 0..400 {
            if gate.load(Ordering::SeqCst) == 1 {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
}

/// The sessions of `db` inside a transaction, waiting for their client for
/// three seconds or more: what waits for a held API. (`serve`'s own loops go
/// idle in a transaction between their statements for a moment at any time;
/// three seconds leaves room for a loaded machine's pauses.)
async fn open_transactions(client: &tokio_postgres::Client, db: &TestDb) -> i64 {
    tokio::time::sleep(Duration::from_millis(3500)).await;
    client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 \
             AND state LIKE 'idle in transaction%' \
             AND state_change < now() - interval '3 seconds'",
            &[&db.name],
        )
        .await
        .expect("pg_stat_activity")
        .get(0)
}

/// The shipped configuration on `port` with `extra` appended.
fn config_with(port: u16, name: &str, extra: &str) -> PathBuf {
    let config = write_config(port, name);
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(&config, format!("{text}\n{extra}")).expect("config");
    config
}

/// `hookd ARGS --config CONFIG` under `env`, which must succeed.
async fn run_ok(
    config: &Path,
    args: &[&str],
    env: &[(&'static str, String)],
) -> std::process::Output {
    let mut command = crate::support::hookd_binary();
    command
        .args(args)
        .arg("--config")
        .arg(config)
        .env_remove("DATABASE_URL")
        .env("RUST_LOG", "warn")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    let out = tokio::task::spawn_blocking(move || command.output().expect("run hookd"))
        .await
        .expect("join");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

async fn post(
    base: &str,
    source: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> (u16, String) {
    let mut request = reqwest::Client::new().post(format!("{base}/webhooks/{source}"));
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let response = request.body(body.to_vec()).send().await.expect("post");
    let status = response.status().as_u16();
    (status, response.text().await.expect("answer"))
}

#[tokio::test]
async fn a_thin_event_is_fetched_before_its_handler_and_a_failed_fetch_is_retried() {
    let db = TestDb::create().await;
    let id = "evt_test_65R9thin0001";
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let api = ProviderApi::start(move |seen: &Seen| -> Answer {
        assert_eq!(seen.method, "GET");
        let (named, event) = named_in(&seen.target);
        assert_eq!(named, id);
        if !event {
            return the_named_event(seen);
        }
        // Counted first: a call the asserts below refuse still counts.
        let call = counted.fetch_add(1, Ordering::SeqCst);
        assert_eq!(
            seen.header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
        assert!(seen.header("stripe-version").is_some_and(|v| !v.is_empty()));
        // The first fetch fails: Stripe is having a moment.
        if call == 0 {
            let body = json!({"error": {"message": "try again"}});
            return (500, vec![], body.to_string());
        }
        the_named_event(seen)
    })
    .await;
    let hookd = serve(&api, &db, "thin-events").await;
    let sign = stripe_signer();
    let body = serde_json::to_vec(&thin(id, "v1.payment_intent.succeeded")).expect("json");
    let (status, first) = post(&hookd.base, "stripe", &sign(&body), &body).await;
    assert_eq!(status, 200, "{first}");

    let client = connect(db.config()).await;
    let row = until_processed(&client, id).await;
    // Stored as delivered (the notification, its signature's proof), with the
    // kind of its classic type; run twice: the failed fetch, then the handler.
    assert_eq!(row.get::<_, i32>(1), 2);
    assert_eq!(
        row.get::<_, Option<String>>(2).as_deref(),
        Some("payment_succeeded")
    );
    assert_eq!(
        row.get::<_, Option<String>>(3).as_deref(),
        Some("v2.core.event")
    );
    let errors: Vec<Option<String>> = client
        .query(
            "SELECT a.error FROM webhook_event_attempts a JOIN webhook_events e \
             ON e.id = a.webhook_event_id WHERE e.event_id = $1 ORDER BY a.attempt",
            &[&id],
        )
        .await
        .expect("attempts")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(errors.len(), 2, "{errors:?}");
    let failed = errors[0].as_deref().expect("the failed fetch's error");
    assert!(
        failed.contains("fetching the event") && failed.contains("500") && !failed.contains(KEY),
        "{failed}"
    );
    assert_eq!(errors[1], None);
    // The handler saw the fetched event: its payment is the fetched data's.
    let payment = client
        .query_one(
            "SELECT status, amount, currency FROM payments WHERE source = 'stripe' \
             AND payment_id = $1",
            &[&format!("pi_{id}")],
        )
        .await
        .expect("the fetched event's payment");
    assert_eq!(
        (payment.get::<_, String>(0), payment.get::<_, i64>(1)),
        ("succeeded".to_string(), 2500)
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    // Stripe sends it again: the same answer, nothing fetched or run again.
    let (status, again) = post(&hookd.base, "stripe", &sign(&body), &body).await;
    assert_eq!(status, 200, "{again}");
    let event_id =
        |text: &str| serde_json::from_str::<Value>(text).expect("json")["event_id"].clone();
    assert_eq!(event_id(&again), event_id(&first));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(deliveries_of(&client, id).await, 2);
    // The failed read; then the event, and the payment intent it names.
    assert_eq!(api.seen().len(), 3);

    // A thin event of a type no handler here runs on is stored as delivered,
    // and nothing is read for it.
    let other = thin(
        "evt_test_65R9thin0002",
        "v1.billing.meter.error_report_triggered",
    );
    let body = serde_json::to_vec(&other).expect("json");
    let (status, answer) = post(&hookd.base, "stripe", &sign(&body), &body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "nothing read for a type without a handler"
    );
}

#[tokio::test]
async fn a_connected_accounts_thin_event_and_its_resource_are_read_in_its_context() {
    let db = TestDb::create().await;
    let id = "evt_test_65R9ctx00001";
    // Each read: what was asked, and its `Stripe-Context`.
    type Asked = Vec<(String, Option<String>)>;
    let asked: Arc<Mutex<Asked>> = Arc::default();
    let seen_by = asked.clone();
    let api = ProviderApi::start(move |seen: &Seen| -> Answer {
        let context = seen.header("stripe-context").map(str::to_string);
        seen_by
            .lock()
            .expect("asked")
            .push((seen.target.clone(), context));
        the_named_event(seen)
    })
    .await;
    let hookd = serve(&api, &db, "thin-context").await;
    let client = connect(db.config()).await;
    let mut event = thin(id, "v1.payment_intent.succeeded");
    event["context"] = json!("acct_1Connected0001");
    let body = serde_json::to_vec(&event).expect("json");
    let (status, answer) = post(&hookd.base, "stripe", &stripe_signer()(&body), &body).await;
    assert_eq!(status, 200, "{answer}");
    until_processed(&client, id).await;
    assert_eq!(payments_of(&client, id).await, 1);
    assert_eq!(
        *asked.lock().expect("asked"),
        vec![
            (
                format!("/v2/core/events/{id}"),
                Some("acct_1Connected0001".to_string())
            ),
            (
                format!("/v1/payment_intents/pi_{id}"),
                Some("acct_1Connected0001".to_string())
            ),
        ],
        "the event, then the resource it names, each read once in the account's context"
    );
}

#[tokio::test]
async fn an_event_read_with_its_object_is_not_read_again_for_it() {
    let db = TestDb::create().await;
    let id = "evt_test_65R9whole001";
    // An API whose v2 event carries its object: nothing more is asked.
    let api = ProviderApi::start(move |seen: &Seen| -> Answer {
        let (named, _) = named_in(&seen.target);
        let mut event = thin(named, "v1.payment_intent.succeeded");
        event["data"] = json!({ "object": fetched(named) });
        (200, vec![], event.to_string())
    })
    .await;
    let hookd = serve(&api, &db, "thin-whole").await;
    let client = connect(db.config()).await;
    let (status, answer) = post_thin(&hookd, id).await;
    assert_eq!(status, 200, "{answer}");
    until_processed(&client, id).await;
    assert_eq!(payments_of(&client, id).await, 1);
    let asked: Vec<String> = api.seen().into_iter().map(|s| s.target).collect();
    assert_eq!(asked, vec![format!("/v2/core/events/{id}")]);
}

#[tokio::test]
async fn a_thin_event_of_a_source_without_api_key_fails_saying_so() {
    let app = spawn_app().await;
    let id = "evt_test_65R9thin0002";
    let answer = app
        .deliver("stripe", &thin(id, "v1.payment_intent.succeeded"))
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(app.event_status(id).await, "failed");
    let error: String = app
        .query(
            "SELECT a.error FROM webhook_event_attempts a JOIN webhook_events e \
             ON e.id = a.webhook_event_id WHERE e.event_id = $1",
            &[&id],
        )
        .await[0]
        .get(0);
    assert!(error.contains("has no api_key"), "{error}");
    assert_eq!(
        app.count(
            "SELECT count(*) FROM payments WHERE payment_id = $1",
            &[&format!("pi_{id}")]
        )
        .await,
        0
    );
    // A classic event of the same source needs no key.
    let classic = crate::support::stripe_event(
        "evt_classic_beside_thin",
        "payment_intent.succeeded",
        json!({"id": "pi_classic_beside_thin", "object": "payment_intent", "amount": 100,
               "amount_received": 100, "currency": "eur", "status": "succeeded"}),
    );
    app.deliver_ok("stripe", &classic).await;
    assert_eq!(
        app.event_status("evt_classic_beside_thin").await,
        "processed"
    );
}

/// What `GET /metrics` of the hookd at `base` says.
async fn metrics_of(base: &str) -> crate::support::Exposition {
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    crate::support::Exposition::parse(&text)
}

/// A Mollie source, its key and API from the environment.
const MOLLIE: &str = "[[sources]]\nname = \"mollie\"\nscheme = \"mollie\"\n";

/// A payment as `GET /v2/payments/{id}` answers it.
fn payment(id: &str, status: &str, refunded: &str) -> Value {
    let mut payment = json!({
        "resource": "payment", "id": id, "mode": "test", "status": status,
        "createdAt": chrono::Utc::now().to_rfc3339(),
        "amount": {"value": "10.00", "currency": "EUR"},
        "description": "Order 12345", "method": "ideal", "customerId": "cst_8wmqcHMN4U",
        "_links": {"self": {"href": format!("https://api.mollie.com/v2/payments/{id}"),
                            "type": "application/hal+json"}},
    });
    if !refunded.is_empty() {
        payment["amountRefunded"] = json!({"value": refunded, "currency": "EUR"});
        payment["_links"]["refunds"] = json!({"href": format!(
            "https://api.mollie.com/v2/payments/{id}/refunds"), "type": "application/hal+json"});
    }
    payment
}

/// Mollie's call for `id`: the status and the answer, which must be the
/// same empty 200 whatever the API said (a prober learns nothing).
async fn post_form(base: &str, id: &str) -> (u16, String) {
    post_form_to(&format!("{base}/webhooks/mollie"), id).await
}

/// `post_form` to `url`, the webhookUrl the payment was created with.
async fn post_form_to(url: &str, id: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(url)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(format!("id={id}"))
        .send()
        .await
        .expect("post");
    let status = response.status().as_u16();
    if status == 200 {
        assert!(
            response.headers().get("idempotent-replayed").is_none(),
            "{id}: a replay header tells a prober the id was seen"
        );
    }
    let answer = response.text().await.expect("answer");
    if status == 200 {
        assert_eq!(
            answer, "",
            "{id}: the answer must say nothing of the payment"
        );
    }
    (status, answer)
}

#[tokio::test]
async fn a_mollie_webhook_is_the_payment_fetched_for_its_id() {
    let db = TestDb::create().await;
    // What the API knows: tr_m1 as it is now, and tr_m2 (never notified).
    let payments: Arc<Mutex<Vec<Value>>> = Arc::new(Mutex::new(vec![
        payment("tr_m2missed", "paid", ""),
        payment("tr_m1paid", "paid", ""),
    ]));
    let known = payments.clone();
    let api = ProviderApi::start(move |seen: &Seen| -> Answer {
        if seen.header("authorization") != Some(format!("Bearer {KEY}").as_str()) {
            return (
                401,
                vec![],
                json!({"status": 401, "title": "Unauthorized Request",
                "detail": "Missing authentication, or failed to authenticate"})
                .to_string(),
            );
        }
        let payments = known.lock().expect("payments").clone();
        // No refunds or chargebacks of payments before the window.
        for name in ["refunds", "chargebacks"] {
            if seen.target.starts_with(&format!("/v2/{name}?")) {
                let body = json!({"count": 0, "_embedded": {name: []}, "_links": {"next": null}});
                return (200, vec![], body.to_string());
            }
        }
        if let Some(query) = seen.target.strip_prefix("/v2/payments?") {
            assert!(query.contains("limit=250"), "{query}");
            let body = json!({"count": payments.len(), "_embedded": {"payments": payments},
                "_links": {"next": null}});
            return (200, vec![], body.to_string());
        }
        let id = seen
            .target
            .strip_prefix("/v2/payments/")
            .expect("a payment");
        match payments.iter().find(|p| p["id"] == id) {
            Some(payment) => (200, vec![], payment.to_string()),
            None => (
                404,
                vec![],
                json!({"status": 404, "title": "Not Found",
                "detail": "No payment exists with token tr_unknown."})
                .to_string(),
            ),
        }
    })
    .await;
    let (hookd, config) = serve_source(&api, &db, "mollie", "mollie", MOLLIE).await;
    let client = connect(db.config()).await;
    let event = |id: &'static str| {
        let client = &client;
        async move {
            client
                .query_opt(
                    "SELECT status, kind, event_type, origin FROM webhook_events \
                     WHERE source = 'mollie' AND event_id = $1",
                    &[&id],
                )
                .await
                .expect("event")
                .map(|r| {
                    (0..4)
                        .map(|i| r.get::<_, Option<String>>(i).unwrap_or_default())
                        .collect::<Vec<String>>()
                })
        }
    };

    // Paid: the payment fetched is the event, its amount in cents.
    let (status, answer) = post_form(&hookd.base, "tr_m1paid").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        event("tr_m1paid:paid").await,
        Some(vec![
            "processed".into(),
            "payment_succeeded".into(),
            "payment.paid".into(),
            "api".into()
        ])
    );
    let row = client
        .query_one(
            "SELECT status, amount, currency, amount_refunded FROM payments \
             WHERE source = 'mollie' AND payment_id = 'tr_m1paid'",
            &[],
        )
        .await
        .expect("payment");
    assert_eq!(
        (
            row.get::<_, String>(0),
            row.get::<_, i64>(1),
            row.get::<_, Option<String>>(2)
        ),
        ("succeeded".into(), 1000, Some("EUR".into()))
    );
    // Mollie calls again for the same status: a duplicate.
    let (status, _) = post_form(&hookd.base, "tr_m1paid").await;
    assert_eq!(status, 200);
    assert_eq!(
        client
            .query_one(
                "SELECT count(*) FROM webhook_events WHERE source = 'mollie'",
                &[]
            )
            .await
            .expect("count")
            .get::<_, i64>(0),
        1
    );

    // The same state read again with another body (Mollie's own fields moved
    // on): answered alike, kept beside the stored event, never refused.
    payments.lock().expect("payments")[1]["description"] = json!("Order 12345, edited");
    let (status, _) = post_form(&hookd.base, "tr_m1paid").await;
    assert_eq!(status, 200);
    let kept: i64 = client
        .query_one(
            "SELECT count(*) FROM event_conflicts c JOIN webhook_events e \
             ON e.id = c.webhook_event_id WHERE e.event_id = 'tr_m1paid:paid'",
            &[],
        )
        .await
        .expect("conflicts")
        .get(0);
    assert_eq!(kept, 1);
    // Counted as any single delivery is: the new event by its status, the
    // copy as a duplicate, the other reading as a conflict kept.
    let metrics = metrics_of(&hookd.base).await;
    for (outcome, count) in [
        ("processed", 1.0),
        ("duplicate", 1.0),
        ("conflict_recorded", 1.0),
    ] {
        let labels = [("source", "mollie"), ("outcome", outcome)];
        assert_eq!(
            metrics.value("hookd_deliveries_total", &labels),
            count,
            "{outcome}"
        );
    }

    // A refund: the next change is another event.
    payments.lock().expect("payments")[1] = payment("tr_m1paid", "paid", "4.00");
    let (status, answer) = post_form(&hookd.base, "tr_m1paid").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        event("tr_m1paid:paid:refunded=4.00")
            .await
            .map(|e| e[..3].to_vec()),
        Some(vec![
            "processed".into(),
            "payment_refunded".into(),
            "payment.refunded".into()
        ])
    );
    let refunded: i64 = client
        .query_one(
            "SELECT amount_refunded FROM payments WHERE payment_id = 'tr_m1paid'",
            &[],
        )
        .await
        .expect("payment")
        .get(0);
    assert_eq!(refunded, 400);

    // An id the API does not know: the same answer, stored ignored.
    let (status, _) = post_form(&hookd.base, "tr_unknown").await;
    assert_eq!(status, 200);
    assert_eq!(
        event("tr_unknown:unknown").await.map(|e| e[0].clone()),
        Some("ignored".into())
    );
    // A form naming nothing that can be asked for is refused, unfetched.
    let asked = api.seen().len();
    let (status, _) = post_form(&hookd.base, "..%2Fv2%2Fmethods").await;
    assert_eq!(status, 400);
    // Only a payment's id is asked for.
    for other in [
        "ord_kEn1PlbGa",
        "sub_8JfGzs6v3K",
        &format!("tr_{}", "x".repeat(62)),
    ] {
        assert_eq!(post_form(&hookd.base, other).await.0, 400, "{other}");
    }
    assert_eq!(api.seen().len(), asked);

    // Reconcile lists the payments: the one never notified is recovered once.
    let env = api.env("mollie", KEY, cluster().connection_string(&db.name));
    let pass = || run_ok(&config, &["reconcile", "--source", "mollie"], &env);
    let out = pass().await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "2 listed, 1 present, 1 recovered, 0 conflicts\n"
    );
    assert_eq!(
        event("tr_m2missed:paid").await.map(|e| e[0].clone()),
        Some("processed".into())
    );
    let out = pass().await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "2 listed, 2 present, 0 recovered, 0 conflicts\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 40)]
async fn a_flood_of_mollie_ids_asks_the_api_at_most_8_at_once_and_the_rest_get_503() {
    let db = TestDb::create().await;
    // An API that holds every call until the test lets go, counting the calls
    // it is in at once (its handler blocks a worker of its own for each).
    let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let open = Arc::new(AtomicBool::new(false));
    let (counting, highest, gate) = (now.clone(), most.clone(), open.clone());
    let api = ProviderApi::start(move |seen: &Seen| -> Answer {
        let at_once = counting.fetch_add(1, Ordering::SeqCst) + 1;
        highest.fetch_max(at_once, Ordering::SeqCst);
        tokio::task::block_in_place(|| {
            while !gate.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        counting.fetch_sub(1, Ordering::SeqCst);
        let id = seen.target.trim_start_matches("/v2/payments/");
        (200, vec![], payment(id, "paid", "").to_string())
    })
    .await;
    // The held reads may wait as long as the test needs (30 s at most).
    let (hookd, _config) =
        serve_source_limited(&api, &db, "mollie", "mollie", MOLLIE, Some("30s")).await;
    let posts: Vec<_> = (0..30)
        .map(|n| {
            let base = hookd.base.clone();
            tokio::spawn(async move { post_form(&base, &format!("tr_flood{n}")).await.0 })
        })
        .collect();
    // Eight reads held at the API; every other post answered meanwhile.
    wait_for("8 reads at the API", Duration::from_secs(20), || {
        std::future::ready((now.load(Ordering::SeqCst) >= 8).then_some(()))
    })
    .await;
    wait_for("the other posts answered", Duration::from_secs(20), || {
        let answered = posts.iter().filter(|p| p.is_finished()).count();
        std::future::ready((answered >= 22).then_some(()))
    })
    .await;
    open.store(true, Ordering::SeqCst);
    let mut statuses = Vec::new();
    for post in posts {
        statuses.push(post.await.expect("post"));
    }
    let (ok, busy) = (
        statuses.iter().filter(|s| **s == 200).count(),
        statuses.iter().filter(|s| **s == 503).count(),
    );
    assert_eq!((ok, busy), (8, 22), "{statuses:?}");
    assert_eq!(most.load(Ordering::SeqCst), 8, "at once");
    assert_eq!(api.seen().len(), ok, "a 503 never asked the API");
    // The flood over, the next call is fetched as usual.
    assert_eq!(post_form(&hookd.base, "tr_afterflood").await.0, 200);
}

/// Two URL tokens: the newest, and one payments made before a rotation carry.
const NEW_TOKEN: &str = "mollie-url-token-2026-12-new";
const OLD_TOKEN: &str = "mollie-url-token-2026-06-old";

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn a_mollie_source_with_url_tokens_refuses_a_request_naming_none_before_asking_the_api() {
    let db = TestDb::create().await;
    let api = ProviderApi::start(|seen: &Seen| -> Answer {
        let id = seen.target.trim_start_matches("/v2/payments/");
        (200, vec![], payment(id, "paid", "").to_string())
    })
    .await;
    let tokens = format!("{MOLLIE}url_tokens = [\"{NEW_TOKEN}\", \"{OLD_TOKEN}\"]\n");
    let (hookd, config) = serve_source(&api, &db, "mollie-tokens", "mollie", &tokens).await;
    let url = format!("{}/webhooks/mollie", hookd.base);
    // A flood of made-up ids without the token: each refused at once, the
    // API never asked (its key spends nothing), nothing stored.
    let posts: Vec<_> = (0..30)
        .map(|n| {
            let url = url.clone();
            tokio::spawn(async move { post_form_to(&url, &format!("tr_flood{n}")).await })
        })
        .collect();
    for post in posts {
        let (status, answer) = post.await.expect("post");
        assert_eq!(status, 401, "{answer}");
        let answer: Value = serde_json::from_str(&answer).expect("json");
        assert_eq!(answer["error"], "invalid_signature", "{answer}");
    }
    for wrong in [
        format!("{url}?token=mollie-url-token-2026-12-neW"),
        format!("{url}?token="),
        format!("{url}?other={NEW_TOKEN}"),
    ] {
        assert_eq!(post_form_to(&wrong, "tr_wrong01").await.0, 401, "{wrong}");
    }
    assert_eq!(api.seen().len(), 0, "a refused request never asked the API");
    let client = connect(db.config()).await;
    let stored = || async {
        client
            .query_one("SELECT count(*) FROM webhook_events", &[])
            .await
            .expect("count")
            .get::<_, i64>(0)
    };
    assert_eq!(stored().await, 0);
    let metrics = metrics_of(&hookd.base).await;
    let failures = |reason| {
        metrics.value(
            "hookd_signature_failures_total",
            &[("source", "mollie"), ("reason", reason)],
        )
    };
    assert_eq!((failures("missing"), failures("mismatch")), (31.0, 2.0));

    // A payment made before the rotation still names the old token; a new
    // one the newest: both fetched and stored, as `api` events.
    let (status, answer) = post_form_to(&format!("{url}?token={OLD_TOKEN}"), "tr_oldtoken1").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        post_form_to(&format!("{url}?token={NEW_TOKEN}"), "tr_newtoken1")
            .await
            .0,
        200
    );
    assert_eq!(api.seen().len(), 2);
    let origins: Vec<String> = client
        .query("SELECT origin FROM webhook_events ORDER BY event_id", &[])
        .await
        .expect("rows")
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(origins, ["api", "api"]);

    // `hookd replay` sends to the URL with the newest token.
    let dir = config.with_extension("replay");
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("payment.json");
    std::fs::write(&file, payment("tr_replayed1", "paid", "").to_string()).expect("file");
    let env = api.env("mollie", KEY, cluster().connection_string(&db.name));
    let out = run_ok(
        &config,
        &["replay", "--source", "mollie", file.to_str().expect("path")],
        &env,
    )
    .await;
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("200"),
        "{out:?}"
    );
    assert_eq!(
        api.seen().last().map(|seen| seen.target.clone()),
        Some("/v2/payments/tr_replayed1".to_string())
    );
    assert_eq!(stored().await, 3);
    // `hookd sign` names the URL to send the form to, never the token.
    let out = run_ok(
        &config,
        &["sign", "--source", "mollie", file.to_str().expect("path")],
        &env,
    )
    .await;
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("send to /webhooks/mollie?token=<one of the source's url_tokens>"),
        "{out:?}"
    );
    assert!(!String::from_utf8_lossy(&out.stderr).contains(NEW_TOKEN));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_mollie_payment_the_api_does_not_give_within_handler_timeout_is_answered_503() {
    let db = TestDb::create().await;
    // The first call is not answered in time; the next at once.
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let api = ProviderApi::start(move |seen: &Seen| -> Answer {
        if counted.fetch_add(1, Ordering::SeqCst) == 0 {
            tokio::task::block_in_place(|| std::thread::sleep(Duration::from_secs(4)));
        }
        let id = seen.target.trim_start_matches("/v2/payments/");
        (200, vec![], payment(id, "paid", "").to_string())
    })
    .await;
    let (hookd, _config) =
        serve_source_limited(&api, &db, "mollie-late", "mollie", MOLLIE, Some("1s")).await;
    // Unfetched within the 1 s: 503, nothing stored; Mollie calls again.
    assert_eq!(post_form(&hookd.base, "tr_late1").await.0, 503);
    let client = connect(db.config()).await;
    let stored: i64 = client
        .query_one("SELECT count(*) FROM webhook_events", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(stored, 0);
    assert_eq!(post_form(&hookd.base, "tr_late1").await.0, 200);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_mollie_sources_keys_are_checked_at_startup_each_problem_in_one_line() {
    let out = crate::support::check_config(MOLLIE, &[]).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("api_key")
            && stderr.contains("Mollie")
            && stderr.trim().lines().count() == 1,
        "{stderr}"
    );
    // Keyed, but without url_tokens: it starts, and says what that leaves open.
    let keyed = format!("{MOLLIE}api_key = \"test_key\"\n");
    let out = crate::support::check_config(&keyed, &[]).await;
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("source mollie: no url_tokens"),
        "{out:?}"
    );
    let tokened = format!("{keyed}url_tokens = [\"{NEW_TOKEN}\"]\n");
    let out = crate::support::check_config(&tokened, &[]).await;
    assert!(out.status.success(), "{out:?}");
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("url_tokens"),
        "{out:?}"
    );
    // A token easy to guess, or one a URL would have to escape: one line each.
    for (token, problem) in [
        ("short", "shorter than 16 characters"),
        ("a token with spaces in it", "only letters, digits"),
    ] {
        let out =
            crate::support::check_config(&format!("{keyed}url_tokens = [\"{token}\"]\n"), &[])
                .await;
        assert_eq!(out.status.code(), Some(78), "{out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("url_tokens[0]")
                && stderr.contains(problem)
                && stderr.trim().lines().count() == 1,
            "{stderr}"
        );
    }
    // Nor does it take secrets: nothing in its webhooks is signed.
    let with_secret = format!("{MOLLIE}api_key = \"test_key\"\nsecrets = [\"whsec_x\"]\n");
    let out = crate::support::check_config(&with_secret, &[]).await;
    assert_eq!(out.status.code(), Some(78));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("fetches each event from the provider's API with api_key"),
        "{stderr}"
    );
}

#[tokio::test]
async fn hookd_sign_sends_mollies_form_and_verify_says_nothing_is_signed() {
    let config = config_with(free_port(), "mollie-sign", MOLLIE);
    let env = [("HOOKD_SOURCE_MOLLIE_API_KEY", KEY.to_string())];
    let dir = config.with_extension("d");
    std::fs::create_dir_all(&dir).expect("dir");
    let body = dir.join("payment.json");
    std::fs::write(&body, payment("tr_signme01", "paid", "").to_string()).expect("body");
    let out = run_ok(
        &config,
        &["sign", "--source", "mollie", body.to_str().expect("path")],
        &env,
    )
    .await;
    // The body changes (Mollie posts a form): it goes to stdout, the header
    // to send it with to stderr.
    assert_eq!(String::from_utf8_lossy(&out.stdout), "id=tr_signme01");
    let header = "Content-Type: application/x-www-form-urlencoded";
    assert!(String::from_utf8_lossy(&out.stderr).contains(header));
    let headers_file = dir.join("headers");
    std::fs::write(&headers_file, header).expect("headers");
    let form = dir.join("form");
    std::fs::write(&form, &out.stdout).expect("form");
    let out = run_ok(
        &config,
        &[
            "verify",
            "--source",
            "mollie",
            "--headers",
            headers_file.to_str().expect("path"),
            form.to_str().expect("path"),
        ],
        &env,
    )
    .await;
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.starts_with("ok: scheme \"mollie\" signs nothing"),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn a_thin_event_waiting_for_a_slow_api_holds_no_session_and_no_other_delivery() {
    let db = TestDb::create().await;
    // The API holds every call until the test lets go (each blocks a worker
    // of its own), then answers the event named.
    let (api, asked, release) = held_api(false).await;
    // The reads may wait as long as the test needs (the API lets go within 20 s).
    let hookd = serve_source_limited(&api, &db, "thin-slow-api", "stripe", "", Some("30s"))
        .await
        .0;
    let sign = stripe_signer();
    // More thin events at once than receiving has leaders (one per core and
    // one more): were they stored in batches, every leader would wait.
    let ids: Vec<String> = (0..4).map(|n| format!("evt_test_65R9slow000{n}")).collect();
    let thin_posts: Vec<_> = ids
        .iter()
        .map(|id| {
            let body = serde_json::to_vec(&thin(id, "v1.payment_intent.succeeded")).expect("json");
            let (base, headers) = (hookd.base.clone(), sign(&body));
            tokio::spawn(async move { post(&base, "stripe", &headers, &body).await })
        })
        .collect();
    let client = connect(db.config()).await;
    wait_for(
        "the API to be asked for all four",
        Duration::from_secs(30),
        || {
            let asked = asked.clone();
            async move { (asked.load(Ordering::SeqCst) == 4).then_some(()) }
        },
    )
    .await;
    // While the API keeps them waiting, hookd holds no transaction open.
    assert_eq!(
        open_transactions(&client, &db).await,
        0,
        "a transaction waits for the provider's API"
    );
    // And a classic event is stored and answered meanwhile.
    let classic = json!({
        "id": "evt_test_65R9classic01", "object": "event", "type": "payment_intent.succeeded",
        "created": 1_780_000_000, "livemode": false,
        "data": {"object": {"id": "pi_classic", "object": "payment_intent", "amount": 900,
                            "amount_received": 900, "currency": "eur", "status": "succeeded"}},
    });
    let body = serde_json::to_vec(&classic).expect("json");
    let answered = tokio::time::timeout(
        Duration::from_secs(20),
        post(&hookd.base, "stripe", &sign(&body), &body),
    )
    .await
    .expect("a classic delivery answered while the API keeps the thin ones waiting");
    assert_eq!(answered.0, 200, "{}", answered.1);
    assert_eq!(asked.load(Ordering::SeqCst), 4, "the thin ones still wait");

    release.store(1, Ordering::SeqCst);
    for post in thin_posts {
        let (status, answer) = post.await.expect("post");
        assert_eq!(status, 200, "{answer}");
    }
    // Each applied at receipt, on the event read before its transaction.
    for id in &ids {
        let row = client
            .query_one(
                "SELECT e.status, e.attempts, p.amount FROM webhook_events e \
                 JOIN payments p ON p.source = e.source AND p.payment_id = $2 \
                 WHERE e.event_id = $1",
                &[id, &format!("pi_{id}")],
            )
            .await
            .expect("the thin event and its payment");
        assert_eq!(
            (
                row.get::<_, String>(0),
                row.get::<_, i32>(1),
                row.get::<_, i64>(2)
            ),
            ("processed".to_string(), 1, 2500),
            "{id}"
        );
    }
    // Each event, and the payment intent it names, read once.
    assert_eq!(api.seen().len(), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thin_event_whose_api_does_not_answer_within_handler_timeout_is_answered_and_retried() {
    let db = TestDb::create().await;
    let id = "evt_test_65R9late0001";
    // The first read never answers in time; the next answers at once.
    let calls = Arc::new(AtomicUsize::new(0));
    let first_read_answered = Arc::new(AtomicBool::new(false));
    let (counted, answered) = (calls.clone(), first_read_answered.clone());
    let api = ProviderApi::start(move |seen: &Seen| -> Answer {
        if counted.fetch_add(1, Ordering::SeqCst) == 0 {
            tokio::task::block_in_place(|| std::thread::sleep(Duration::from_secs(4)));
            answered.store(true, Ordering::SeqCst);
        }
        the_named_event(seen)
    })
    .await;
    let hookd = serve_source_limited(&api, &db, "thin-late-api", "stripe", "", Some("1s"))
        .await
        .0;
    let (status, answer) = post_thin(&hookd, id).await;
    // Read at once: the retry (due a second later) may read it again at any time.
    let api_had_answered = first_read_answered.load(Ordering::SeqCst);
    // Answered once the read ran out of its 1 s: the run failed, saying so.
    assert_eq!(status, 200, "{answer}");
    let client = connect(db.config()).await;
    let first = client
        .query_one(
            "SELECT a.error FROM webhook_event_attempts a JOIN webhook_events e \
             ON e.id = a.webhook_event_id WHERE e.event_id = $1 AND a.attempt = 1",
            &[&id],
        )
        .await
        .expect("the first run");
    let error: Option<String> = first.get(0);
    assert!(
        error
            .as_deref()
            .is_some_and(|e| e.contains("no answer within 1s")),
        "{error:?}"
    );
    assert!(!api_had_answered, "answered before the API was");
    // The retry reads it again and applies it.
    until_processed(&client, id).await;
    assert!(calls.load(Ordering::SeqCst) >= 2, "read again by the retry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thin_events_retry_reads_its_event_holding_no_transaction() {
    let db = TestDb::create().await;
    // Per event: the first read fails (so the event is retried); the retry's
    // read waits until the test lets that event go.
    let calls: Arc<Mutex<std::collections::HashMap<String, usize>>> = Arc::default();
    let released: Arc<Mutex<Vec<String>>> = Arc::default();
    let (counted, gates) = (calls.clone(), released.clone());
    let api = ProviderApi::start(move |seen: &Seen| -> Answer {
        let (id, event) = named_in(&seen.target);
        if !event {
            return the_named_event(seen);
        }
        let id = id.to_string();
        let call = {
            let mut calls = counted.lock().expect("calls");
            let n = calls.entry(id.clone()).or_default();
            *n += 1;
            *n
        };
        if call == 1 {
            let later = json!({"error": {"message": "later"}});
            return (500, vec![], later.to_string());
        }
        tokio::task::block_in_place(|| {
            for _ in 0..400 {
                if gates.lock().expect("gates").contains(&id) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        the_named_event(seen)
    })
    .await;
    let calls_of = |id: &str| calls.lock().expect("calls").get(id).copied().unwrap_or(0);
    let hookd = serve_source_limited(&api, &db, "thin-retry-read", "stripe", "", Some("30s"))
        .await
        .0;
    let client = connect(db.config()).await;
    let retry_reading = |id: &'static str| {
        let (hookd, calls_of) = (&hookd, &calls_of);
        async move {
            let (status, answer) = post_thin(hookd, id).await;
            assert_eq!(status, 200, "{answer}");
            wait_for("the retry's read", Duration::from_secs(30), || async move {
                (calls_of(id) == 2).then_some(())
            })
            .await;
        }
    };

    // A retry whose read waits holds no transaction; a forward's run recorded
    // meanwhile (it counts an attempt, keeps the handler's time) does not stop it.
    let forwarded = "evt_test_65R9retry0001";
    retry_reading(forwarded).await;
    assert_eq!(
        open_transactions(&client, &db).await,
        0,
        "a transaction waits for the provider's API"
    );
    client
        .execute(
            "UPDATE webhook_events SET attempts = attempts + 1 WHERE event_id = $1",
            &[&forwarded],
        )
        .await
        .expect("a forward's attempt");
    released.lock().expect("gates").push(forwarded.into());
    let row = until_processed(&client, forwarded).await;
    // The failed read at receipt, the forward's, then the retry, once.
    assert_eq!(row.get::<_, i32>(1), 3);
    assert_eq!(calls_of(forwarded), 2);

    // Settled by another run meanwhile (an operator's retry): the read is
    // dropped and nothing runs again.
    let settled = "evt_test_65R9retry0002";
    retry_reading(settled).await;
    client
        .execute(
            "UPDATE webhook_events SET status = 'processed', attempts = attempts + 1, \
             next_attempt_at = NULL WHERE event_id = $1",
            &[&settled],
        )
        .await
        .expect("another run");
    released.lock().expect("gates").push(settled.into());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let applied = payments_of(&client, settled).await;
    assert_eq!(
        applied, 0,
        "the handler ran on an event another run settled"
    );
    let attempts: i32 = client
        .query_one(
            "SELECT attempts FROM webhook_events WHERE event_id = $1",
            &[&settled],
        )
        .await
        .expect("row")
        .get(0);
    assert_eq!(attempts, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operators_retry_of_a_thin_event_reads_it_holding_no_transaction() {
    let db = TestDb::create().await;
    let id = "evt_test_65R9oper0001";
    // The read at receipt fails (the event is left failed); the operator's
    // retry's read waits until the test lets it go.
    let (api, calls, gate) = held_api(true).await;
    let hookd = serve(&api, &db, "thin-operator-retry").await;
    let client = connect(db.config()).await;
    let row_id = failed_for_the_operator(&hookd, &client, id).await;

    let retry = tokio::spawn(operator_retry(hookd.base.clone(), row_id));
    answered_after_a_read_holding_nothing(
        retry,
        &calls,
        &gate,
        &client,
        &db,
        "an operator's retry holds a transaction while the provider's API answers",
    )
    .await;
    let row = until_processed(&client, id).await;
    assert_eq!(
        row.get::<_, i32>(1),
        2,
        "the run at receipt, then the retry"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let applied = payments_of(&client, id).await;
    assert_eq!(applied, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operators_retry_refused_as_in_flight_does_not_read_the_event_first() {
    let db = TestDb::create().await;
    let id = "evt_test_65R9oper0002";
    // The read at receipt fails; any later read would wait for the gate,
    // which this test never opens.
    let (api, calls, _gate) = held_api(true).await;
    let hookd = serve(&api, &db, "thin-retry-in-flight").await;
    let client = connect(db.config()).await;
    let row_id = failed_for_the_operator(&hookd, &client, id).await;
    // A forward of the event is being sent (its lease runs): a retry now is
    // refused, whatever the API would answer.
    lease_a_forward(&client, row_id, "1 hour").await;

    let started = std::time::Instant::now();
    let (status, answer) = operator_retry(hookd.base.clone(), row_id).await;
    assert_eq!(status, 409, "{answer}");
    assert!(answer.contains("in_flight"), "{answer}");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "a retry that is refused asked the provider's API for the event first"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the refusal waited for the provider's API: {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operators_retry_whose_forward_lease_ends_meanwhile_still_reads_holding_nothing() {
    let db = TestDb::create().await;
    let id = "evt_test_65R9oper0003";
    let (api, calls, gate) = held_api(true).await;
    let hookd = serve(&api, &db, "thin-retry-lease-ends").await;
    let mut client = connect(db.config()).await;
    let row_id = failed_for_the_operator(&hookd, &client, id).await;
    // A forward's lease ends in two seconds; the retry's first look at the
    // event waits behind a lock until after that, still seeing the lease (its
    // statement began before), so it does not read: its transaction then
    // finds the lease over.
    lease_a_forward(&client, row_id, "2 seconds").await;
    let lock = client.transaction().await.expect("begin");
    lock.execute(
        "SELECT 1 FROM webhook_events WHERE id = $1 FOR NO KEY UPDATE",
        &[&row_id],
    )
    .await
    .expect("lock");
    let retry = tokio::spawn(operator_retry(hookd.base.clone(), row_id));
    tokio::time::sleep(Duration::from_secs(3)).await;
    lock.commit().await.expect("release");

    answered_after_a_read_holding_nothing(
        retry,
        &calls,
        &gate,
        &client,
        &db,
        "the retry read the provider's API inside its transaction",
    )
    .await;
    // Applied (the event itself waits for its forward, which no lane here sends).
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(payments_of(&client, id).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn copies_of_a_thin_event_arriving_while_it_is_read_share_the_read() {
    let db = TestDb::create().await;
    let id = "evt_test_65R9copy0001";
    let (api, calls, gate) = held_api(false).await;
    let port = free_port();
    let config = config_with(port, "thin-copies", "");
    let env = api.env("stripe", KEY, cluster().connection_string(&db.name));
    let hookd = Hookd::start_with_env(&config, port, &env, "info,hookd::ingest=debug").await;
    // Three copies at once, as a provider redelivering sends them.
    let copies: Vec<_> = (0..3)
        .map(|_| {
            let base = hookd.base.clone();
            tokio::spawn(async move {
                let body =
                    serde_json::to_vec(&thin(id, "v1.payment_intent.succeeded")).expect("json");
                post(&base, "stripe", &stripe_signer()(&body), &body).await
            })
        })
        .collect();
    wait_for("the API to be asked", Duration::from_secs(30), || {
        let calls = calls.clone();
        async move { (calls.load(Ordering::SeqCst) >= 1).then_some(()) }
    })
    .await;
    // The other copies arrive while the first's read is held, and wait for it.
    let joined = "this copy waits for it";
    crate::support::wait_for_log(&config.with_extension("log"), joined, 2).await;
    gate.store(1, Ordering::SeqCst);
    for copy in copies {
        let (status, answer) = copy.await.expect("join");
        assert_eq!(status, 200, "{answer}");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1, "each copy read the event");
    let client = connect(db.config()).await;
    let row = until_processed(&client, id).await;
    assert_eq!(row.get::<_, i32>(1), 1, "the handler ran once");
    assert_eq!(deliveries_of(&client, id).await, 3);
}

#[tokio::test]
async fn mollie_reconcile_reads_the_payments_the_windows_refunds_and_chargebacks_name() {
    let db = TestDb::create().await;
    let at = |age: chrono::Duration| json!((chrono::Utc::now() - age).to_rfc3339());
    let (old, recent) = (chrono::Duration::days(10), chrono::Duration::hours(1));
    let created = |mut payment: Value, age| {
        payment["createdAt"] = at(age);
        payment
    };
    // Newest first: a payment of the window, refunded; then three created ten
    // days ago, before the window — one refunded an hour ago, one charged
    // back an hour ago, one refunded ten days ago.
    let mut charged = payment("tr_oldcharge", "paid", "");
    charged["amountChargedBack"] = json!({"value": "10.00", "currency": "EUR"});
    let payments = vec![
        created(payment("tr_newrefund", "paid", "2.00"), recent),
        created(payment("tr_oldrefund", "paid", "3.00"), old),
        created(charged, old),
        created(payment("tr_oldquiet", "paid", "1.00"), old),
    ];
    let change = |id: &str, payment: &str, age| {
        json!({"resource": "refund", "id": id, "paymentId": payment, "createdAt": at(age),
               "amount": {"value": "1.00", "currency": "EUR"}, "status": "refunded"})
    };
    let refunds = vec![
        change("re_new", "tr_newrefund", recent),
        change("re_old", "tr_oldrefund", recent),
        change("re_quiet", "tr_oldquiet", old),
    ];
    let chargebacks = vec![change("chb_old", "tr_oldcharge", recent)];
    let api = ProviderApi::start(move |seen: &Seen| -> Answer {
        let (path, query) = seen.target.split_once('?').unwrap_or((&seen.target, ""));
        let list = |name: &str, items: &Vec<Value>| {
            assert!(query.contains("limit=250"), "{query}");
            let body = json!({"count": items.len(), "_embedded": {name: items},
                              "_links": {"next": null}});
            (200, vec![], body.to_string())
        };
        match path {
            "/v2/payments" => list("payments", &payments),
            "/v2/refunds" => list("refunds", &refunds),
            "/v2/chargebacks" => list("chargebacks", &chargebacks),
            _ => {
                let id = path.strip_prefix("/v2/payments/").expect("a payment");
                let payment = payments.iter().find(|p| p["id"] == id).expect("known");
                (200, vec![], payment.to_string())
            }
        }
    })
    .await;
    let (_hookd, config) = serve_source(&api, &db, "mollie-changes", "mollie", MOLLIE).await;
    let env = api.env("mollie", KEY, cluster().connection_string(&db.name));
    let pass = || run_ok(&config, &["reconcile", "--source", "mollie"], &env);
    let read = || {
        let mut read: Vec<String> = api
            .seen()
            .iter()
            .filter_map(|seen| seen.target.strip_prefix("/v2/payments/").map(String::from))
            .collect();
        read.sort();
        read
    };

    let out = pass().await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "3 listed, 0 present, 3 recovered, 0 conflicts\n"
    );
    // Read: the two payments older than the window that changed in it; not
    // the one the first list gave, nor the one whose refund is older.
    assert_eq!(read(), ["tr_oldcharge", "tr_oldrefund"]);
    let client = connect(db.config()).await;
    let rows: Vec<(String, String, String)> = client
        .query(
            "SELECT event_id, kind, status FROM webhook_events ORDER BY event_id",
            &[],
        )
        .await
        .expect("rows")
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect();
    let row = |id: &str, kind: &str| (id.to_string(), kind.to_string(), "processed".to_string());
    assert_eq!(
        rows,
        [
            row("tr_newrefund:paid:refunded=2.00", "payment_refunded"),
            row("tr_oldcharge:paid:charged_back=10.00", "dispute_opened"),
            row("tr_oldrefund:paid:refunded=3.00", "payment_refunded"),
        ]
    );
    let out = pass().await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "3 listed, 3 present, 0 recovered, 0 conflicts\n"
    );
}
