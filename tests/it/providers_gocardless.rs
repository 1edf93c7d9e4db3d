//! Scheme `gocardless` through real HTTP: several events per request, each its
//! own; kinds by `{resource_type}.{action}`; payment rows with GoCardless's ids
//! and no amounts (refunds count without one, and the payment view says so);
//! a resend's changed event recorded as a conflict, and the request kept once.
//! (Resends, rotation, tampering and replay of its fixtures: the conformance suite.)

use serde_json::{Value, json};

use crate::process::{Hookd, free_port, write_config};
use crate::support::provider;
use crate::support::{
    Answer, Credential, TestApp, TestDb, VIEWER, cluster, shipped_settings, spawn_app,
    spawn_with_settings,
};

const SOURCE: &str = "gocardless";

/// A GoCardless event: `{resource_type}.{action}` about what `links` names.
fn event(id: &str, event_type: &str, links: Value) -> Value {
    let (resource, action) = event_type.split_once('.').expect("type");
    json!({"id": id, "created_at": "2024-06-12T10:32:47.123Z", "resource_type": resource,
           "action": action, "links": links,
           "details": {"origin": "gocardless", "cause": action, "description": event_type},
           "metadata": {}})
}

fn payment(id: &str, action: &str, payment: &str) -> Value {
    event(
        id,
        &format!("payments.{action}"),
        json!({"payment": payment, "customer": format!("CU_{payment}")}),
    )
}

fn refund(id: &str, payment: &str, refund: &str) -> Value {
    event(
        id,
        "refunds.paid",
        json!({"refund": refund, "payment": payment, "mandate": "MD1"}),
    )
}

/// The request GoCardless sends: its events and a `meta`.
fn request(events: &[Value]) -> Vec<u8> {
    serde_json::to_vec(&json!({"events": events, "meta": {"webhook_id": "WB1"}})).expect("json")
}

async fn send(app: &TestApp, events: &[Value]) -> Answer {
    let body = request(events);
    let headers = app.sign(SOURCE, &body, Default::default());
    app.post(SOURCE, &headers, body).await
}

async fn send_ok(app: &TestApp, events: &[Value]) -> Answer {
    let answer = send(app, events).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    answer
}

/// Every stored event: id, type, kind, status, deliveries.
async fn stored(app: &TestApp) -> Vec<(String, String, Option<String>, String, i32)> {
    app.query(
        "SELECT event_id, event_type, kind, status, deliveries FROM webhook_events
          WHERE source = $1 ORDER BY event_id",
        &[&SOURCE],
    )
    .await
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
    .collect()
}

/// A payment's row: status, amount, refunded, currency, customer.
async fn row(app: &TestApp, payment: &str) -> (String, i64, i64, Option<String>, Option<String>) {
    provider::payment_row(app, SOURCE, payment).await
}

async fn count(app: &TestApp, sql: &str) -> i64 {
    app.count(sql, &[]).await
}

fn processed(id: &str, ty: &str, kind: &str) -> (String, String, Option<String>, String, i32) {
    (
        id.into(),
        ty.into(),
        Some(kind.into()),
        "processed".into(),
        1,
    )
}

fn ignored(id: &str, ty: &str) -> (String, String, Option<String>, String, i32) {
    (id.into(), ty.into(), None, "ignored".into(), 1)
}

#[tokio::test]
async fn each_event_of_a_request_is_stored_with_its_kind_and_the_rest_ignored() {
    let app = spawn_app().await;
    let events = [
        payment("EV01", "created", "PM_a"),
        payment("EV02", "confirmed", "PM_a"),
        payment("EV03", "paid_out", "PM_b"),
        payment("EV04", "failed", "PM_c"),
        refund("EV05", "PM_a", "RF_a"),
        payment("EV06", "charged_back", "PM_b"),
        event("EV07", "mandates.active", json!({"mandate": "MD1"})),
        event(
            "EV08",
            "refunds.created",
            json!({"refund": "RF_b", "payment": "PM_b"}),
        ),
    ];
    let answer = send_ok(&app, &events).await;
    assert_eq!(answer.header("content-type"), Some("application/json"));
    assert_eq!(
        answer.json(),
        json!({"status": "accepted",
               "event_ids": ["EV01", "EV02", "EV03", "EV04", "EV05", "EV06", "EV07", "EV08"]})
    );
    assert_eq!(
        stored(&app).await,
        [
            ignored("EV01", "payments.created"),
            processed("EV02", "payments.confirmed", "payment_succeeded"),
            processed("EV03", "payments.paid_out", "payment_succeeded"),
            processed("EV04", "payments.failed", "payment_failed"),
            processed("EV05", "refunds.paid", "payment_refunded"),
            processed("EV06", "payments.charged_back", "dispute_opened"),
            ignored("EV07", "mandates.active"),
            ignored("EV08", "refunds.created"),
        ]
    );
    // One event alone is answered as every single-event request is.
    let alone = send_ok(&app, &[payment("EV09", "confirmed", "PM_d")]).await;
    assert_eq!(
        alone.json(),
        json!({"status": "accepted", "event_id": "EV09"})
    );
    // The payment and customer ids are indexed on each event for look-ups.
    let indexed = app
        .query(
            "SELECT payment_id, customer_id FROM webhook_events WHERE event_id = 'EV05'",
            &[],
        )
        .await;
    let (payment_id, customer): (Option<String>, Option<String>) =
        (indexed[0].get(0), indexed[0].get(1));
    assert_eq!((payment_id.as_deref(), customer), (Some("PM_a"), None));
}

#[tokio::test]
async fn payment_rows_carry_gocardless_ids_and_no_amounts_and_refunds_leave_the_status() {
    let app = spawn_app().await;
    // The refund first, then the payment: the same row either way.
    send_ok(&app, &[refund("EV11", "PM_r", "RF_1")]).await;
    send_ok(&app, &[payment("EV12", "confirmed", "PM_r")]).await;
    send_ok(
        &app,
        &[
            refund("EV13", "PM_r", "RF_2"),
            payment("EV14", "paid_out", "PM_r"),
        ],
    )
    .await;
    send_ok(
        &app,
        &[
            payment("EV15", "failed", "PM_f"),
            payment("EV16", "charged_back", "PM_d"),
        ],
    )
    .await;
    let none = |status: &str, customer: Option<&str>| {
        (status.to_string(), 0, 0, None, customer.map(String::from))
    };
    assert_eq!(row(&app, "PM_r").await, none("succeeded", Some("CU_PM_r")));
    assert_eq!(row(&app, "PM_f").await, none("failed", Some("CU_PM_f")));
    assert_eq!(row(&app, "PM_d").await, none("disputed", Some("CU_PM_d")));
    // No refund of an unknown amount is made up, and nothing went dead.
    assert_eq!(count(&app, "SELECT count(*) FROM payment_refunds").await, 0);
    assert_eq!(
        count(
            &app,
            "SELECT count(*) FROM webhook_events WHERE status <> 'processed'"
        )
        .await,
        0
    );

    // The payment view says the provider sends no amounts, and lists the refunds.
    let view = app.viewer().payment(SOURCE, "PM_r").await;
    assert_eq!(view.status, 200, "{}", view.text());
    let view = view.json();
    assert_eq!(view["amounts_sent"], json!(false), "{view}");
    let types: Vec<&str> = view["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["event_type"].as_str())
        .collect();
    assert_eq!(
        types,
        [
            "refunds.paid",
            "payments.confirmed",
            "refunds.paid",
            "payments.paid_out"
        ]
    );
    let cookie = app.sign_in(VIEWER).await;
    let page = app
        .admin(Credential::Cookie(cookie))
        .get("/admin/payments/gocardless/PM_r")
        .await;
    assert_eq!(page.status, 200);
    assert!(
        page.text().contains("This provider sends no amounts"),
        "{}",
        page.text()
    );
    // A provider that sends amounts says so.
    app.deliver_ok("stripe", &hookd_kit::app::stripe_event(
        "evt_gc_control",
        "payment_intent.succeeded",
        json!({"id": "pi_gc_control", "object": "payment_intent", "amount": 700, "currency": "usd"}),
    ))
    .await;
    let stripe = app.viewer().payment("stripe", "pi_gc_control").await.json();
    assert_eq!(stripe["amounts_sent"], json!(true), "{stripe}");
}

#[tokio::test]
async fn a_resend_is_all_duplicates_and_a_changed_event_is_recorded_as_a_conflict() {
    let app = spawn_app().await;
    let events = [
        payment("EV21", "confirmed", "PM_x"),
        refund("EV22", "PM_x", "RF_x"),
    ];
    let body = request(&events);
    let headers = app.sign(SOURCE, &body, Default::default());
    // GoCardless signs no time: the same headers are valid whenever resent.
    let first = app.post(SOURCE, &headers, body.clone()).await;
    let second = app.post(SOURCE, &headers, body).await;
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!((second.status, &second.body), (200, &first.body));
    assert_eq!(second.header("Idempotent-Replayed"), Some("true"));
    let deliveries: Vec<i32> = stored(&app).await.into_iter().map(|e| e.4).collect();
    assert_eq!(deliveries, [2, 2]);
    let attempts = count(&app, "SELECT sum(attempts)::bigint FROM webhook_events").await;
    assert_eq!(attempts, 2);

    // A single resend of one of them answers with its first answer.
    let alone = send_ok(&app, &events[..1]).await;
    assert_eq!(
        alone.json(),
        json!({"status": "accepted", "event_id": "EV21"})
    );
    assert_eq!(alone.header("Idempotent-Replayed"), Some("true"));

    // An event reusing a stored id with another payload, beside a new one: the
    // new one is stored, the conflict recorded, the request acknowledged.
    let mut changed = events[0].clone();
    changed["links"]["payment"] = json!("PM_other");
    send_ok(&app, &[changed, payment("EV23", "failed", "PM_y")]).await;
    let ids: Vec<String> = stored(&app).await.into_iter().map(|e| e.0).collect();
    assert_eq!(ids, ["EV21", "EV22", "EV23"]);
    assert_eq!(count(&app, "SELECT count(*) FROM event_conflicts").await, 1);
    assert_eq!(
        count(
            &app,
            "SELECT count(*) FROM payments WHERE payment_id = 'PM_other'"
        )
        .await,
        0
    );
}

/// hookd with the shipped configuration, its `gocardless` source changed.
async fn spawn_with(change: impl FnOnce(&mut hookd::config::Source)) -> TestApp {
    let mut settings = shipped_settings();
    let source = settings
        .sources
        .iter_mut()
        .find(|s| s.name == SOURCE)
        .expect("gocardless source");
    change(source);
    spawn_with_settings(settings).await
}

/// An operator's retry of `event_id`: processed, and its proof of origin verified.
async fn retried_and_verified(app: &TestApp, event_id: &str) -> Value {
    let id = app.event_row_id(event_id).await;
    let retried = app.operator().retry(id, None).await;
    assert_eq!(retried.status, 200, "{}", retried.text());
    assert_eq!(retried.json()["status"], "processed", "{}", retried.text());
    let detail = app.viewer().event(id).await.json();
    assert_eq!(detail["origin"]["status"], "verified", "{detail}");
    detail
}

#[tokio::test]
async fn a_retried_event_reads_its_own_event_of_the_kept_request() {
    let app = spawn_app().await;
    let events = [
        payment("EVR1", "confirmed", "PMR1"),
        payment("EVR2", "failed", "PMR2"),
    ];
    send_ok(&app, &events).await;
    // An operator's retry of the second event applies that event again (its
    // own item, kept as it came; the request the signature covers is kept
    // once beside it).
    let item: Vec<u8> = app
        .query(
            "SELECT body FROM webhook_events WHERE event_id = 'EVR2'",
            &[],
        )
        .await[0]
        .get(0);
    assert_eq!(
        serde_json::from_slice::<Value>(&item).expect("json"),
        events[1]
    );
    retried_and_verified(&app, "EVR2").await;
    assert_eq!(row(&app, "PMR2").await.0, "failed");

    // Events stored before requests were kept once hold the whole request
    // each: a retry still reads its own item, and the request verifies.
    app.execute(
        "UPDATE webhook_events e SET body = r.body, request_id = NULL
           FROM event_requests r WHERE e.request_id = r.id",
        &[],
    )
    .await;
    app.execute("DELETE FROM event_requests", &[]).await;
    let detail = retried_and_verified(&app, "EVR2").await;
    assert_eq!(detail["payload"]["id"], "EVR2", "{detail}");
    // Their resend finds both stored: nothing new is kept.
    let again = send_ok(&app, &events).await;
    assert_eq!(again.header("Idempotent-Replayed"), Some("true"));
    assert_eq!(count(&app, "SELECT count(*) FROM event_requests").await, 0);
}

/// `count` GoCardless events of about `size` bytes each, as GoCardless writes
/// them (a payment's, with its links and details), ids `{prefix}{n}`.
fn many_events(prefix: &str, count: usize, size: usize) -> Vec<Value> {
    (0..count)
        .map(|n| {
            let mut e = payment(
                &format!("{prefix}{n:05}"),
                "confirmed",
                &format!("PM{n:05}"),
            );
            let so_far = serde_json::to_vec(&e).expect("json").len();
            e["details"]["description"] = json!("x".repeat(size.saturating_sub(so_far)));
            e
        })
        .collect()
}

#[tokio::test]
async fn a_request_of_2000_events_is_kept_once_within_a_measured_memory_bound() {
    // The real `hookd serve`, alone in its process: its peak resident memory
    // is what one request costs it.
    let db = TestDb::create().await;
    let port = free_port();
    let config = write_config(port, "gocardless-2000");
    let hookd = Hookd::start_against(
        &config,
        port,
        &cluster().connection_string(&db.name),
        "warn",
    )
    .await;
    // 2,000 events of ~500 bytes: a request just under `max_body_bytes` (1 MiB).
    let body = request(&many_events("EVM", 2_000, 500));
    assert!((950_000..1_048_576).contains(&body.len()), "{}", body.len());
    let settings = shipped_settings();
    let source = settings.source(SOURCE).expect("gocardless source");
    let headers = provider::signed_bare(&source.scheme, &source.secrets[0], &body);
    let http = reqwest::Client::new();
    let post = || async {
        let mut request = http.post(format!("{}/webhooks/{SOURCE}", hookd.base));
        for (name, value) in &headers {
            request = request.header(name, value);
        }
        Answer::read(request.body(body.clone()).send().await.expect("sent")).await
    };
    let before = hookd.peak_rss_kib();
    let answer = post().await;
    let after = hookd.peak_rss_kib();
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(
        answer.json()["event_ids"].as_array().map(Vec::len),
        Some(2_000)
    );

    // Measured: the request raises the server's peak by about 30 MiB (debug
    // build); keeping it with every event took 2,000 copies (~2 GiB) and a
    // bind message over PostgreSQL's 1 GB limit.
    let grown = after.saturating_sub(before);
    eprintln!(
        "peak RSS {before} KiB -> {after} KiB (+{grown} KiB) for {} bytes",
        body.len()
    );
    assert!(grown < 128 * 1024, "the peak grew by {grown} KiB");

    // Stored once: one request, its exact bytes; each event its own item.
    let client = crate::support::connect(db.config()).await;
    let row = client
        .query_one(
            "SELECT count(*), sum(octet_length(body))::bigint, bool_and(body = $1)
               FROM event_requests",
            &[&body],
        )
        .await
        .expect("requests");
    assert_eq!(
        (
            row.get::<_, i64>(0),
            row.get::<_, i64>(1),
            row.get::<_, bool>(2)
        ),
        (1, i64::try_from(body.len()).expect("len"), true)
    );
    let row = client
        .query_one(
            "SELECT count(*), sum(octet_length(e.body))::bigint,
                    count(*) FILTER (WHERE e.request_id = r.id)
               FROM webhook_events e CROSS JOIN event_requests r",
            &[],
        )
        .await
        .expect("events");
    let (events, item_bytes, pointing): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!((events, pointing), (2_000, 2_000));
    assert!(
        item_bytes < i64::try_from(body.len()).expect("len"),
        "the events' own items: {item_bytes} bytes"
    );
    let item: Vec<u8> = client
        .query_one(
            "SELECT body FROM webhook_events WHERE event_id = 'EVM01999'",
            &[],
        )
        .await
        .expect("item")
        .get(0);
    assert_eq!(
        serde_json::from_slice::<Value>(&item).expect("json")["id"],
        "EVM01999"
    );

    // The resend is all duplicates, and keeps nothing more.
    let again = post().await;
    assert_eq!(
        (again.status, again.header("Idempotent-Replayed")),
        (200, Some("true"))
    );
    let counts = client
        .query_one(
            "SELECT (SELECT count(*) FROM event_requests), (SELECT sum(deliveries)::bigint
               FROM webhook_events)",
            &[],
        )
        .await
        .expect("counts");
    assert_eq!(
        (counts.get::<_, i64>(0), counts.get::<_, i64>(1)),
        (1, 4_000)
    );
}

#[tokio::test]
async fn a_request_of_more_than_2500_events_is_refused_whole_with_413() {
    let app = spawn_app().await;
    let too_many = send(&app, &many_events("EVX", 2_501, 200)).await;
    assert_eq!(too_many.status, 413, "{}", too_many.text());
    assert_eq!(too_many.json()["error"], "payload_too_large");
    let reason = too_many.json()["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        reason.contains("2501 events") && reason.contains("at most 2500"),
        "{reason}"
    );
    assert_eq!(count(&app, "SELECT count(*) FROM webhook_events").await, 0);
    assert_eq!(count(&app, "SELECT count(*) FROM event_requests").await, 0);
    // At the limit, every event is stored, in one commit, the request once.
    let at_limit = send_ok(&app, &many_events("EVL", 2_500, 200)).await;
    assert_eq!(
        at_limit.json()["event_ids"].as_array().map(Vec::len),
        Some(2_500)
    );
    assert_eq!(
        count(&app, "SELECT count(*) FROM webhook_events").await,
        2_500
    );
    assert_eq!(count(&app, "SELECT count(*) FROM event_requests").await, 1);
}

#[tokio::test]
async fn a_kept_request_goes_with_its_events_payloads_and_its_row_with_their_keys() {
    let app = spawn_app().await;
    send_ok(
        &app,
        &[
            payment("EVP1", "confirmed", "PMP1"),
            payment("EVP2", "created", "PMP2"),
        ],
    )
    .await;
    let age = |days: i32| {
        let app = &app;
        async move {
            for table in ["webhook_events", "event_requests"] {
                app.execute(
                    &format!("UPDATE {table} SET received_at = now() - make_interval(days => $1)"),
                    &[&days],
                )
                .await;
            }
            app.app.purger.run_once(None).await.expect("purge")
        }
    };
    // Within `retention`: the request stays, whole.
    assert_eq!(age(10).await.requests_dropped, 0);
    let kept = "SELECT count(*) FROM event_requests WHERE body IS NOT NULL";
    assert_eq!(count(&app, kept).await, 1);
    // Past it, with its events' payloads.
    assert_eq!(age(40).await.requests_dropped, 1);
    assert_eq!(count(&app, kept).await, 0);
    let id = app.event_row_id("EVP1").await;
    let detail = app.viewer().event(id).await.json();
    assert_eq!(detail["origin"]["status"], "unavailable", "{detail}");
    // Past `key_retention`, its row goes with its events' keys.
    age(400).await;
    assert_eq!(count(&app, "SELECT count(*) FROM webhook_events").await, 0);
    assert_eq!(count(&app, "SELECT count(*) FROM event_requests").await, 0);
}

#[tokio::test]
async fn forgetting_a_customer_erases_them_from_the_request_their_batch_mates_were_signed_in() {
    let app = spawn_with(|source| source.mask.push("/metadata".into())).await;
    let mut theirs = payment("EVG1", "confirmed", "PMG1");
    theirs["metadata"] = json!({"email": "gone@example.org"});
    let mut mate = payment("EVG2", "confirmed", "PMG2");
    mate["metadata"] = json!({"email": "stays@example.org"});
    send_ok(&app, &[theirs, mate]).await;
    let path = "/admin/api/customers/CU_PMG1/forget";
    let done = app
        .operator()
        .send(
            "POST",
            path,
            &[("Content-Type", "application/json")],
            b"{}".to_vec(),
        )
        .await;
    assert_eq!(done.status, 200, "{}", done.text());
    // Its own item and the request, which held it: rewritten.
    assert_eq!(done.json()["bodies"], 2, "{}", done.text());
    let request = app
        .strings("SELECT convert_from(body, 'UTF8') FROM event_requests", &[])
        .await
        .join("");
    assert!(
        !request.contains("gone@example.org") && !request.contains("CU_PMG1"),
        "{request}"
    );
    let everything = app
        .strings(
            "SELECT concat_ws(' ', payload::text, convert_from(body, 'UTF8'), customer_id)
               FROM webhook_events",
            &[],
        )
        .await
        .join("\n");
    assert!(!everything.contains("gone@example.org"), "{everything}");
    // The batch-mate keeps its own item whole; the request no longer proves it.
    assert!(everything.contains("stays@example.org"), "{everything}");
    let id = app.event_row_id("EVG2").await;
    let detail = app.viewer().event(id).await.json();
    assert_eq!(detail["origin"]["status"], "redacted", "{detail}");
}
