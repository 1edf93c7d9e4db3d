//! Scheme `checkout` (Checkout.com) through real HTTP: the documented types
//! mapped to the kinds and the rest ignored, payment rows in minor units with
//! the currency and customer, refunds (actions of a payment) in any order, and
//! the optional authorization key.
//! (Resends, rotation, tampering and replay of its fixtures: the conformance suite.)

use serde_json::{Value, json};

use crate::support::provider;
use crate::support::{TestApp, spawn_app};

const SOURCE: &str = "checkout";

fn event(id: &str, ty: &str, data: Value) -> Value {
    json!({"id": id, "type": ty, "version": "1.0.33", "created_on": "2024-06-12T10:20:41Z",
           "data": data,
           "_links": {"self": {"href": format!("https://api.checkout.com/workflows/events/{id}")}}})
}

fn payment(id: &str, ty: &str, payment: &str) -> Value {
    event(
        id,
        ty,
        json!({"id": payment, "action_id": format!("act_{id}"), "amount": 6540, "currency": "EUR",
               "response_summary": "Approved",
               "customer": {"id": format!("cus_{payment}"), "email": "a@example.com"}}),
    )
}

fn refund(id: &str, payment: &str, action: &str, amount: i64) -> Value {
    event(
        id,
        "payment_refunded",
        json!({"id": payment, "action_id": action, "amount": amount, "currency": "EUR"}),
    )
}

fn dispute(id: &str, ty: &str, payment: &str) -> Value {
    event(
        id,
        ty,
        json!({"id": format!("dsp_{payment}"), "payment_id": payment, "amount": 6540,
               "currency": "EUR", "reason_code": "10.4", "category": "fraudulent"}),
    )
}

async fn count(app: &TestApp, sql: &str) -> i64 {
    app.count(sql, &[]).await
}

#[tokio::test]
async fn checkout_types_map_to_the_kinds_and_the_rest_is_ignored() {
    let app = spawn_app().await;
    use provider::{ignored, processed};
    let cases = [
        (payment("evt_1", "payment_approved", "pay_a"), ignored()),
        (
            payment("evt_2", "payment_captured", "pay_a"),
            processed("payment_succeeded"),
        ),
        (
            payment("evt_3", "payment_declined", "pay_b"),
            processed("payment_failed"),
        ),
        (
            refund("evt_4", "pay_a", "act_r_a", 1000),
            processed("payment_refunded"),
        ),
        (
            dispute("evt_5", "dispute_received", "pay_a"),
            processed("dispute_opened"),
        ),
        (
            dispute("evt_6", "dispute_evidence_required", "pay_c"),
            processed("dispute_opened"),
        ),
        (dispute("evt_7", "dispute_won", "pay_a"), ignored()),
        (
            event("evt_8", "card_verified", json!({"id": "pay_v"})),
            ignored(),
        ),
    ];
    let cases =
        cases.map(|(body, expected)| (body["id"].as_str().expect("id").into(), body, expected));
    provider::assert_stored_as(&app, SOURCE, &cases).await;
    let (status, amount, refunded, ..) = provider::payment_row(&app, SOURCE, "pay_a").await;
    assert_eq!(
        (status.as_str(), amount, refunded),
        ("disputed", 6540, 1000)
    );
    assert_eq!(
        provider::payment_row(&app, SOURCE, "pay_b").await.0,
        "failed"
    );
    let disputed = count(
        &app,
        "SELECT count(*) FROM payments WHERE payment_id = 'pay_c' AND disputed",
    )
    .await;
    assert_eq!(disputed, 1);
}

#[tokio::test]
async fn checkout_payment_rows_are_minor_units_with_currency_and_customer_whatever_the_order() {
    let app = spawn_app().await;
    let of = |payment_id: &str| {
        let refunds = [
            refund(
                &format!("{payment_id}_r1"),
                payment_id,
                &format!("act_{payment_id}_1"),
                2000,
            ),
            refund(
                &format!("{payment_id}_r2"),
                payment_id,
                &format!("act_{payment_id}_2"),
                540,
            ),
        ];
        // A refund resent under another event id counts once: the action is the refund.
        let mut again = refunds[0].clone();
        again["id"] = json!(format!("{payment_id}_r1_again"));
        provider::Refunded {
            paid: payment(
                &format!("{payment_id}_paid"),
                "payment_captured",
                payment_id,
            ),
            refunds,
            again: Some(again),
        }
    };
    let expected = |payment_id: &str| {
        provider::partially_refunded(6540, 2540, "EUR", format!("cus_{payment_id}"))
    };
    let payments = ["pay_after", "pay_before"];
    provider::assert_refunds_add_up_whatever_the_order(&app, SOURCE, payments, of, expected).await;
}

#[tokio::test]
async fn the_authorization_key_when_configured_is_checked_too() {
    let app =
        provider::spawn_with_env("HOOKD_SOURCE_CHECKOUT_AUTHORIZATION", "cko-auth-0b7e5d2a").await;
    let body =
        serde_json::to_vec(&payment("evt_auth", "payment_captured", "pay_auth")).expect("json");
    let headers = app.sign(SOURCE, &body, Default::default());
    assert!(headers.contains(&("Authorization".into(), "cko-auth-0b7e5d2a".into())));
    let without = provider::without_header(&headers, "Authorization");
    let with = |key: &str| {
        let mut headers = without.clone();
        headers.push(("Authorization".into(), key.into()));
        headers
    };
    // Another key, the key cut short, the key and more: each refused alike.
    let cases = [
        (
            without.clone(),
            body.clone(),
            "missing Authorization header",
        ),
        (with("cko-auth-0b7e5d2b"), body.clone(), "mismatch"),
        (with("cko-auth-0b7e5d2"), body.clone(), "mismatch"),
        (with("cko-auth-0b7e5d2a0"), body.clone(), "mismatch"),
    ];
    provider::assert_refused(&app, SOURCE, cases).await;
    let answer = app.post(SOURCE, &headers, body).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    // The key is not kept with the event.
    let kept = count(
        &app,
        "SELECT count(*) FROM webhook_events WHERE signature_headers::text ILIKE '%cko-auth%'",
    )
    .await;
    assert_eq!(kept, 0);
}
