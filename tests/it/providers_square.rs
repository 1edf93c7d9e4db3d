//! Scheme `square` through real HTTP: kinds by the payment's or refund's status,
//! payment rows in minor units with Square's currency and customer, refunds in
//! any order, and deliveries signed for another notification URL refused.
//! (Resends, rotation, tampering and replay of its fixtures: the conformance suite.)

use hookd::providers::Scheme;
use serde_json::{Value, json};

use crate::support::provider;
use crate::support::{TestApp, spawn_app};

const SOURCE: &str = "square";

/// A Square event of `event_type` about `object` (`payment`, `refund`, `dispute`).
fn event(id: &str, event_type: &str, object: Value) -> Value {
    let name = event_type.split('.').next().expect("type");
    json!({"merchant_id": "6SSW7HV8K2ST5", "type": event_type, "event_id": id,
           "created_at": "2024-06-12T21:27:34.308Z",
           "data": {"type": name, "id": object["id"], "object": {name: object}}})
}

fn payment(id: &str, event_type: &str, payment: &str, status: &str) -> Value {
    event(
        id,
        event_type,
        json!({"id": payment, "status": status, "customer_id": format!("cus_{payment}"),
               "amount_money": {"amount": 1500, "currency": "USD"}, "source_type": "CARD"}),
    )
}

fn refund(id: &str, event_type: &str, payment: &str, refund: &str, amount: i64) -> Value {
    refund_in(id, event_type, payment, refund, amount, "COMPLETED")
}

fn refund_in(id: &str, ty: &str, payment: &str, refund: &str, amount: i64, status: &str) -> Value {
    event(
        id,
        ty,
        json!({"id": refund, "payment_id": payment, "status": status,
               "amount_money": {"amount": amount, "currency": "USD"}}),
    )
}

fn dispute(id: &str, payment: &str) -> Value {
    event(
        id,
        "dispute.created",
        json!({"id": format!("dp_{payment}"), "state": "EVIDENCE_REQUIRED", "reason": "NOT_AS_DESCRIBED",
               "amount_money": {"amount": 1500, "currency": "USD"},
               "disputed_payment": {"payment_id": payment}}),
    )
}

async fn count(app: &TestApp, sql: &str) -> i64 {
    app.count(sql, &[]).await
}

#[tokio::test]
async fn square_kinds_follow_the_status_and_the_rest_is_ignored() {
    let app = spawn_app().await;
    use provider::{ignored, processed};
    let cases = [
        (
            payment("sq_1", "payment.created", "p_a", "APPROVED"),
            ignored(),
        ),
        (
            payment("sq_2", "payment.updated", "p_a", "COMPLETED"),
            processed("payment_succeeded"),
        ),
        (
            payment("sq_3", "payment.created", "p_b", "COMPLETED"),
            processed("payment_succeeded"),
        ),
        (
            payment("sq_4", "payment.updated", "p_c", "FAILED"),
            processed("payment_failed"),
        ),
        (
            payment("sq_5", "payment.updated", "p_d", "CANCELED"),
            processed("payment_failed"),
        ),
        (
            refund_in("sq_6", "refund.created", "p_a", "r_a", 500, "PENDING"),
            ignored(),
        ),
        (
            refund("sq_7", "refund.updated", "p_a", "r_a", 500),
            processed("payment_refunded"),
        ),
        (
            refund("sq_8", "refund.created", "p_b", "r_b", 1500),
            processed("payment_refunded"),
        ),
        (
            refund_in("sq_9", "refund.updated", "p_b", "r_c", 100, "FAILED"),
            ignored(),
        ),
        (dispute("sq_10", "p_b"), processed("dispute_opened")),
        (
            json!({"type": "customer.created", "event_id": "sq_11",
                   "data": {"type": "customer", "object": {"customer": {"id": "cus_x"}}}}),
            ignored(),
        ),
    ];
    let id = |body: &Value| body["event_id"].as_str().expect("id").to_string();
    let cases = cases.map(|(body, expected)| (id(&body), body, expected));
    provider::assert_stored_as(&app, SOURCE, &cases).await;
    let rows = [
        ("p_a", "partially_refunded", 500),
        ("p_b", "disputed", 1500),
        ("p_c", "failed", 0),
        ("p_d", "failed", 0),
    ];
    provider::assert_rows(&app, SOURCE, 1500, &rows).await;
}

#[tokio::test]
async fn square_payment_rows_are_minor_units_with_currency_and_customer_whatever_the_order() {
    let app = spawn_app().await;
    // Two refunds and the payment itself, in two orders: the same row.
    let of = |payment: &str| {
        let refunds = [
            refund(
                &format!("{payment}_r1"),
                "refund.updated",
                payment,
                &format!("{payment}_1"),
                400,
            ),
            refund(
                &format!("{payment}_r2"),
                "refund.created",
                payment,
                &format!("{payment}_2"),
                350,
            ),
        ];
        // A refund resent under another event id counts once.
        let mut again = refunds[0].clone();
        again["event_id"] = json!(format!("{payment}_r1_again"));
        provider::Refunded {
            paid: payment_body(payment),
            refunds,
            again: Some(again),
        }
    };
    let expected =
        |payment: &str| provider::partially_refunded(1500, 750, "USD", format!("cus_{payment}"));
    let payments = ["p_after", "p_before"];
    provider::assert_refunds_add_up_whatever_the_order(&app, SOURCE, payments, of, expected).await;
}

fn payment_body(id: &str) -> Value {
    payment(&format!("{id}_paid"), "payment.updated", id, "COMPLETED")
}

#[tokio::test]
/// Square signs the notification URL too: a delivery signed for another URL
/// than the source's, even by one `/`, is refused and nothing stored. (The
/// refusals of a delivery altered or signed otherwise are the conformance suite's.)
async fn misaddressed_square_deliveries_are_401_and_nothing_is_stored() {
    let app = spawn_app().await;
    let source = app.settings().source(SOURCE).expect("square").clone();
    let body = serde_json::to_vec(&payment_body("p_bad")).expect("json");
    let good = app.sign(SOURCE, &body, Default::default());
    // Signed for another notification URL than the one set for the source.
    let Scheme::Square(mut elsewhere) = source.scheme.clone() else {
        panic!("a square source");
    };
    elsewhere.notification_url.push_str("?env=other");
    let misaddressed = provider::signed_bare(&Scheme::Square(elsewhere), &source.secrets[0], &body);
    let with_trailing_slash = {
        let Scheme::Square(mut s) = source.scheme.clone() else {
            panic!("a square source");
        };
        s.notification_url.push('/');
        provider::signed_bare(&Scheme::Square(s), &source.secrets[0], &body)
    };
    let cases = [
        (misaddressed, body.clone(), "signature mismatch"),
        (with_trailing_slash, body.clone(), "signature mismatch"),
    ];
    provider::assert_refused(&app, SOURCE, cases).await;
    // The control: the genuine delivery is taken.
    assert_eq!(app.post(SOURCE, &good, body).await.status, 200);
    assert_eq!(count(&app, "SELECT count(*) FROM webhook_events").await, 1);
}
