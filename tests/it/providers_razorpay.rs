//! Scheme `razorpay` through real HTTP: the four kinds and the rest ignored,
//! payment rows in paise with Razorpay's currency and customer, refunds in any
//! order, duplicates by id and by body (the id travels unsigned), and a
//! delivery without its id header refused.
//! (Resends, rotation, tampering and replay of its fixtures: the conformance suite.)

use hookd::simulate::Hints;
use serde_json::{Value, json};

use crate::support::provider;
use crate::support::{TestApp, spawn_app};

const SOURCE: &str = "razorpay";
const EVENT_ID: &str = "x-razorpay-event-id";

fn event(event: &str, payload: Value) -> Value {
    let contains: Vec<&String> = payload.as_object().expect("payload").keys().collect();
    json!({"entity": "event", "account_id": "acc_BFQ7uQEaa7j2z7", "event": event,
           "contains": contains, "payload": payload, "created_at": 1_718_000_000})
}

fn payment(event_type: &str, payment: &str, status: &str) -> Value {
    event(
        event_type,
        json!({"payment": {"entity": {"id": payment, "entity": "payment", "amount": 50000,
            "currency": "INR", "status": status, "method": "upi", "email": "a@example.com",
            "customer_id": format!("cust_{payment}")}}}),
    )
}

fn refund(event_type: &str, payment: &str, refund: &str, amount: i64) -> Value {
    event(
        event_type,
        json!({"refund": {"entity": {"id": refund, "entity": "refund", "amount": amount,
                "currency": "INR", "payment_id": payment, "status": "processed"}},
               "payment": {"entity": {"id": payment, "entity": "payment", "amount": 50000}}}),
    )
}

fn dispute(payment: &str) -> Value {
    event(
        "payment.dispute.created",
        json!({"payment": {"entity": {"id": payment, "entity": "payment", "amount": 50000}},
               "dispute": {"entity": {"id": format!("disp_{payment}"), "entity": "dispute",
                "payment_id": payment, "amount": 50000, "currency": "INR", "phase": "chargeback"}}}),
    )
}

async fn count(app: &TestApp, sql: &str) -> i64 {
    app.count(sql, &[]).await
}

#[tokio::test]
async fn razorpay_events_map_to_the_kinds_and_the_rest_is_ignored() {
    let app = spawn_app().await;
    use provider::{ignored, processed};
    let cases = [
        (
            "rp_1",
            payment("payment.authorized", "pay_a", "authorized"),
            ignored(),
        ),
        (
            "rp_2",
            payment("payment.captured", "pay_a", "captured"),
            processed("payment_succeeded"),
        ),
        (
            "rp_3",
            payment("payment.failed", "pay_b", "failed"),
            processed("payment_failed"),
        ),
        (
            "rp_4",
            refund("refund.created", "pay_a", "rfnd_a", 20000),
            ignored(),
        ),
        (
            "rp_5",
            refund("refund.processed", "pay_a", "rfnd_a", 20000),
            processed("payment_refunded"),
        ),
        ("rp_6", dispute("pay_a"), processed("dispute_opened")),
        (
            "rp_7",
            event(
                "order.paid",
                json!({"order": {"entity": {"id": "order_1"}}}),
            ),
            ignored(),
        ),
    ];
    let cases = cases.map(|(id, body, expected)| (id.to_string(), body, expected));
    provider::assert_stored_as(&app, SOURCE, &cases).await;
    let (status, amount, refunded, ..) = provider::payment_row(&app, SOURCE, "pay_a").await;
    assert_eq!(
        (status.as_str(), amount, refunded),
        ("disputed", 50000, 20000)
    );
    let (status, ..) = provider::payment_row(&app, SOURCE, "pay_b").await;
    assert_eq!(status, "failed");
}

#[tokio::test]
async fn razorpay_payment_rows_are_paise_with_currency_and_customer_whatever_the_order() {
    let app = spawn_app().await;
    let of = |payment_id: &str| provider::Refunded {
        paid: payment("payment.captured", payment_id, "captured"),
        refunds: [
            refund(
                "refund.processed",
                payment_id,
                &format!("{payment_id}_1"),
                15000,
            ),
            refund(
                "refund.processed",
                payment_id,
                &format!("{payment_id}_2"),
                5000,
            ),
        ],
        again: None,
    };
    let expected = |payment_id: &str| {
        provider::partially_refunded(50000, 20000, "INR", format!("cust_{payment_id}"))
    };
    let payments = ["pay_after", "pay_before"];
    provider::assert_refunds_add_up_whatever_the_order(&app, SOURCE, payments, of, expected).await;
}

#[tokio::test]
async fn a_razorpay_resend_is_a_duplicate_under_its_id_or_any_other() {
    let app = spawn_app().await;
    let body =
        serde_json::to_vec(&payment("payment.captured", "pay_dup", "captured")).expect("json");
    let hints = Hints {
        event_id: Some("rp_dup"),
        event_type: None,
    };
    let headers = app.sign(SOURCE, &body, hints);
    let first = app.post(SOURCE, &headers, body.clone()).await;
    let second = app.post(SOURCE, &headers, body.clone()).await;
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!((second.status, &second.body), (200, &first.body));
    assert_eq!(second.header("Idempotent-Replayed"), Some("true"));
    // The id is not signed: the same body under another id is the first event
    // again (a refund or payment replayed under a made-up id is never applied twice).
    let mut renamed = headers.clone();
    for (name, value) in &mut renamed {
        if name == EVENT_ID {
            *value = "rp_forged".into();
        }
    }
    let third = app.post(SOURCE, &renamed, body.clone()).await;
    assert_eq!((third.status, &third.body), (200, &first.body));
    assert_eq!(third.header("Idempotent-Replayed"), Some("true"));
    let rows = app
        .query(
            "SELECT event_id, deliveries, attempts FROM webhook_events WHERE source = 'razorpay'",
            &[],
        )
        .await;
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (
            rows[0].get::<_, String>(0),
            rows[0].get::<_, i32>(1),
            rows[0].get::<_, i32>(2)
        ),
        ("rp_dup".into(), 3, 1)
    );
}

/// The id travels beside the signed body: a genuine delivery without it is a
/// bad request naming the header, and nothing is stored. (The refusals of a
/// delivery altered or signed otherwise are the conformance suite's.)
#[tokio::test]
async fn a_signed_razorpay_delivery_without_its_id_header_is_refused_as_a_bad_request() {
    let app = spawn_app().await;
    let body =
        serde_json::to_vec(&payment("payment.captured", "pay_bad", "captured")).expect("json");
    let hints = Hints {
        event_id: Some("rp_bad"),
        event_type: None,
    };
    let good = app.sign(SOURCE, &body, hints);
    let no_id: Vec<_> = good
        .iter()
        .filter(|(k, _)| k != EVENT_ID)
        .cloned()
        .collect();
    let answer = app.post(SOURCE, &no_id, body.clone()).await;
    assert_eq!(answer.status, 400, "{}", answer.text());
    assert!(answer.text().contains(EVENT_ID), "{}", answer.text());
    assert_eq!(count(&app, "SELECT count(*) FROM webhook_events").await, 0);
    // The control: the genuine delivery is taken.
    assert_eq!(app.post(SOURCE, &good, body).await.status, 200);
    assert_eq!(count(&app, "SELECT count(*) FROM webhook_events").await, 1);
}
