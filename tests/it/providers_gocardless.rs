//! Scheme `gocardless` through real HTTP: several events per request, each its
//! own; kinds by `{resource_type}.{action}`; payment rows with GoCardless's ids
//! and no amounts (refunds count without one, and the payment view says so);
//! duplicates, rotation, and refusals answered 498 that store nothing.

use hookd::providers::{Scheme, sign};
use hookd::signature::{Envelope, Secret};
use serde_json::{Value, json};

use crate::support::provider;
use crate::support::{
    Answer, Credential, Spawn, TestApp, VIEWER, shipped_settings, spawn, spawn_app,
};

const SOURCE: &str = "gocardless";
const SIGNATURE: &str = "Webhook-Signature";

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

fn signed(scheme: &Scheme, key: &Secret, body: &[u8]) -> Vec<(String, String)> {
    let envelope = Envelope {
        event_id: "",
        event_type: "",
        timestamp: 0,
    };
    sign(scheme, key, body, &envelope).expect("sign").headers
}

#[tokio::test]
async fn a_delivery_signed_with_the_previous_secret_is_taken_and_says_so() {
    let mut settings = shipped_settings();
    let source = settings
        .sources
        .iter_mut()
        .find(|s| s.name == SOURCE)
        .expect("gocardless source");
    let previous = source.secrets[0].clone();
    source.secrets = vec![Secret::new("the-newer-gocardless-secret"), previous.clone()];
    let app = spawn(Spawn {
        settings,
        ..Spawn::default()
    })
    .await;
    let body = request(&[
        payment("EV31", "confirmed", "PM_rot"),
        refund("EV32", "PM_rot", "RF"),
    ]);
    let answer = app
        .post(SOURCE, &signed(&Scheme::GoCardless, &previous, &body), body)
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    let signed_with = app
        .query(
            "SELECT signed_with FROM webhook_events ORDER BY event_id",
            &[],
        )
        .await
        .iter()
        .map(|r| r.get::<_, i32>(0))
        .collect::<Vec<_>>();
    assert_eq!(signed_with, [2, 2]);
}

#[tokio::test]
async fn tampered_unsigned_or_missigned_deliveries_are_498_and_nothing_is_stored() {
    let app = spawn_app().await;
    let body = request(&[
        payment("EV41", "confirmed", "PM_bad"),
        refund("EV42", "PM_bad", "RF"),
    ]);
    let good = app.sign(SOURCE, &body, Default::default());
    let tampered = String::from_utf8(body.clone())
        .expect("utf-8")
        .replace("PM_bad", "PM_bae");
    let other_secret = signed(&Scheme::GoCardless, &Secret::new("not-the-secret"), &body);
    let cases = [
        (good.clone(), tampered.into_bytes(), "signature mismatch"),
        (vec![], body.clone(), "missing Webhook-Signature header"),
        (other_secret, body.clone(), "signature mismatch"),
        (
            vec![(SIGNATURE.to_string(), "sha256=00".to_string())],
            body.clone(),
            "malformed Webhook-Signature header: not hex",
        ),
    ];
    for (headers, bytes, reason) in cases {
        let answer = app.post(SOURCE, &headers, bytes).await;
        let json = answer.json();
        assert_eq!(
            (answer.status, json["error"].as_str()),
            (498, Some("invalid_signature")),
            "{reason}"
        );
        assert_eq!(json["reason"].as_str(), Some(reason), "{reason}");
        assert_eq!(answer.header("content-type"), Some("application/json"));
    }
    assert_eq!(count(&app, "SELECT count(*) FROM webhook_events").await, 0);
    // Other providers' refusals stay 401.
    let stripe = app.post("stripe", &[], b"{}".to_vec()).await;
    assert_eq!(stripe.status, 401);
    // The control: the genuine delivery is taken.
    assert_eq!(app.post(SOURCE, &good, body).await.status, 200);
    assert_eq!(count(&app, "SELECT count(*) FROM webhook_events").await, 2);
}

#[tokio::test]
async fn a_retried_event_reads_its_own_event_of_the_kept_request() {
    let app = spawn_app().await;
    send_ok(
        &app,
        &[
            payment("EVR1", "confirmed", "PMR1"),
            payment("EVR2", "failed", "PMR2"),
        ],
    )
    .await;
    // An operator's retry of the second event applies that event again (not
    // the whole request, which the signature covers and which is kept).
    let id = app.event_row_id("EVR2").await;
    let retried = app.operator().retry(id, None).await;
    assert_eq!(retried.status, 200, "{}", retried.text());
    assert_eq!(retried.json()["status"], "processed", "{}", retried.text());
    assert_eq!(row(&app, "PMR2").await.0, "failed");
    let detail = app.viewer().event(id).await.json();
    assert_eq!(detail["origin"]["status"], "verified", "{detail}");
}
