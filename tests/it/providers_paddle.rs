//! Scheme `paddle` through real HTTP: Paddle-Signature (any h1, 5 s either way),
//! every type → kind rule, string minor-unit amounts into payment rows, refunds as
//! facts in any order, either h1 during rotation, and stale or future refusals.
//! (Resends, rotation, tampering and replay of its fixtures: the conformance suite.)

use hookd::providers::{Scheme, sign};
use hookd::signature::{Envelope, Secret};
use serde_json::{Value, json};

use crate::support::{Answer, TestApp, shipped_settings, spawn_app, spawn_with_settings};

const SOURCE: &str = "paddle";

fn transaction(id: &str, event_type: &str, txn: &str, grand_total: &str) -> Value {
    json!({"event_id": id, "event_type": event_type, "occurred_at": "2024-09-20T09:14:32.118402Z",
           "notification_id": format!("ntf_{id}"),
           "data": {"id": txn, "status": "completed", "customer_id": "ctm_01j8z9x1", "currency_code": "USD",
                    "details": {"totals": {"subtotal": "30000", "tax": "4800", "total": grand_total,
                                           "grand_total": grand_total, "currency_code": "USD"}}}})
}

fn adjustment(id: &str, adj: &str, action: &str, status: &str, txn: &str, total: &str) -> Value {
    json!({"event_id": id, "event_type": "adjustment.created", "occurred_at": "2024-09-21T11:02:08Z",
           "notification_id": format!("ntf_{id}"),
           "data": {"id": adj, "action": action, "status": status, "type": "partial", "transaction_id": txn,
                    "customer_id": "ctm_01j8z9x1", "currency_code": "USD",
                    "totals": {"subtotal": total, "tax": "0", "total": total, "currency_code": "USD"}}})
}

/// The Paddle-Signature of `body` under `secret` at `ts`, as hookd signs.
fn signature(secret: &str, body: &[u8], ts: i64) -> Vec<(String, String)> {
    let envelope = Envelope {
        event_id: "",
        event_type: "",
        timestamp: ts,
    };
    sign(&Scheme::Paddle, &Secret::new(secret), body, &envelope)
        .expect("sign")
        .headers
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

fn dev_secret(app: &TestApp) -> String {
    let source = app.settings().source(SOURCE).expect("a paddle source");
    source.secrets[0].expose().to_string()
}

async fn event(app: &TestApp, id: &str) -> (Option<String>, String, Option<String>, i32) {
    let row = &app
        .query(
            "SELECT kind, status, payment_id, deliveries FROM webhook_events
             WHERE source = $1 AND event_id = $2",
            &[&SOURCE, &id],
        )
        .await[0];
    (row.get(0), row.get(1), row.get(2), row.get(3))
}

async fn payment(app: &TestApp, txn: &str) -> (String, i64, i64, Option<String>, Option<String>) {
    let row = &app
        .query(
            "SELECT status, amount, amount_refunded, currency, customer_id FROM payments
             WHERE source = $1 AND payment_id = $2",
            &[&SOURCE, &txn],
        )
        .await[0];
    (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4))
}

async fn stored(app: &TestApp) -> i64 {
    app.count(
        "SELECT count(*) FROM webhook_events WHERE source = $1",
        &[&SOURCE],
    )
    .await
}

fn reason(answer: &Answer) -> (u16, String) {
    (
        answer.status,
        answer.json()["reason"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

#[tokio::test]
async fn every_paddle_type_maps_to_its_kind_and_the_rest_are_ignored() {
    let app = spawn_app().await;
    let cases = [
        (
            transaction("evt_ok", "transaction.completed", "txn_1", "34800"),
            Some("payment_succeeded"),
            "processed",
        ),
        (
            transaction("evt_fail", "transaction.payment_failed", "txn_2", "2599"),
            Some("payment_failed"),
            "processed",
        ),
        (
            adjustment("evt_ref", "adj_1", "refund", "approved", "txn_1", "100"),
            Some("payment_refunded"),
            "processed",
        ),
        (
            adjustment("evt_cb", "adj_2", "chargeback", "approved", "txn_2", "2599"),
            Some("dispute_opened"),
            "processed",
        ),
        (
            adjustment(
                "evt_pend",
                "adj_3",
                "refund",
                "pending_approval",
                "txn_1",
                "50",
            ),
            None,
            "ignored",
        ),
        (
            adjustment("evt_rej", "adj_4", "refund", "rejected", "txn_1", "50"),
            None,
            "ignored",
        ),
        (
            adjustment("evt_cred", "adj_5", "credit", "approved", "txn_1", "50"),
            None,
            "ignored",
        ),
        (
            adjustment(
                "evt_warn",
                "adj_6",
                "chargeback_warning",
                "approved",
                "txn_1",
                "0",
            ),
            None,
            "ignored",
        ),
        (
            transaction("evt_upd", "transaction.updated", "txn_3", "1"),
            None,
            "ignored",
        ),
        (
            json!({"event_id": "evt_sub", "event_type": "subscription.created",
                   "data": {"id": "sub_1", "customer_id": "ctm_01j8z9x1", "transaction_id": "txn_1"}}),
            None,
            "ignored",
        ),
    ];
    let cases = cases.map(|(body, kind, status)| {
        let id = body["event_id"].as_str().expect("id").to_string();
        (id, body, (kind.map(String::from), status.to_string()))
    });
    crate::support::provider::assert_stored_as(&app, SOURCE, &cases).await;
    // Ignored adjustments changed nothing: only the approved refund counts.
    assert_eq!(
        payment(&app, "txn_1").await,
        (
            "partially_refunded".into(),
            34800,
            100,
            Some("USD".into()),
            Some("ctm_01j8z9x1".into())
        )
    );
    assert_eq!(payment(&app, "txn_2").await.0, "disputed");
    assert_eq!(
        app.count(
            "SELECT count(*) FROM payments WHERE payment_id = 'txn_3'",
            &[]
        )
        .await,
        0
    );
}

#[tokio::test]
async fn a_transaction_stores_its_string_amount_as_minor_units_and_garbage_goes_dead() {
    let app = spawn_app().await;
    app.deliver_ok(
        SOURCE,
        &transaction("evt_amt", "transaction.completed", "txn_amt", "34800"),
    )
    .await;
    assert_eq!(
        payment(&app, "txn_amt").await,
        (
            "succeeded".into(),
            34800,
            0,
            Some("USD".into()),
            Some("ctm_01j8z9x1".into())
        )
    );
    let (_, _, indexed, _) = event(&app, "evt_amt").await;
    assert_eq!(indexed.as_deref(), Some("txn_amt"));

    for (id, total) in [
        ("evt_dec", "348.00"),
        ("evt_neg", "-1"),
        ("evt_txt", "lots"),
    ] {
        app.deliver_ok(
            SOURCE,
            &transaction(id, "transaction.completed", "txn_bad", total),
        )
        .await;
        let row = &app
            .query(
                "SELECT status, last_error FROM webhook_events WHERE event_id = $1",
                &[&id],
            )
            .await[0];
        let error: Option<String> = row.get(1);
        assert_eq!(row.get::<_, String>(0), "dead", "{id}");
        assert!(
            error
                .as_deref()
                .is_some_and(|e| e.contains("data.details.totals.grand_total is \"")
                    && e.contains("not an amount in minor units")),
            "{id}: {error:?}"
        );
    }
    assert_eq!(
        app.count(
            "SELECT count(*) FROM payments WHERE payment_id = 'txn_bad'",
            &[]
        )
        .await,
        0
    );
}

#[tokio::test]
async fn during_rotation_either_secret_and_either_h1_is_taken() {
    const NEWER: &str = "pdl_ntfset_01j9newer000000000000000000_NewerSecretKey0123456789abcdefgh";
    let mut settings = shipped_settings();
    let source = settings
        .sources
        .iter_mut()
        .find(|s| s.name == SOURCE)
        .expect("paddle source");
    let old = source.secrets[0].expose().to_string();
    source.secrets.insert(0, Secret::new(NEWER));
    let app = spawn_with_settings(settings).await;
    let signed_with = |id: &str| {
        let id = id.to_string();
        let app = &app;
        async move {
            app.count(
                "SELECT signed_with::bigint FROM webhook_events WHERE event_id = $1",
                &[&id],
            )
            .await
        }
    };
    let body = serde_json::to_vec(&transaction(
        "evt_old",
        "transaction.completed",
        "txn_r",
        "1",
    ))
    .expect("json");
    let answer = app.post(SOURCE, &signature(&old, &body, now()), body).await;
    assert_eq!(answer.status, 200);
    assert_eq!(signed_with("evt_old").await, 2);

    // Paddle sends an h1 per key while rotating, in either order: the one
    // hookd knows may come first (Paddle's SDK would read only the last).
    for (n, (first, second)) in [(old.as_str(), NEWER), (NEWER, "pdl_ntfset_retired")]
        .into_iter()
        .enumerate()
    {
        let id = format!("evt_both_{n}");
        let body = serde_json::to_vec(&transaction(&id, "transaction.completed", "txn_r", "1"))
            .expect("json");
        let ts = now();
        let h1 = |secret: &str| {
            let headers = signature(secret, &body, ts);
            let (_, value) = headers
                .iter()
                .find(|(name, _)| name == "Paddle-Signature")
                .expect("Paddle-Signature");
            value.split_once(";h1=").expect("h1").1.to_string()
        };
        let both = format!("ts={ts};h1={};h1={}", h1(first), h1(second));
        let headers = vec![("Paddle-Signature".to_string(), both)];
        assert_eq!(app.post(SOURCE, &headers, body).await.status, 200, "{id}");
        assert_eq!(signed_with(&id).await, 1, "{id}: the newer secret matched");
    }
}

#[tokio::test]
async fn tampered_stale_and_future_deliveries_are_refused_and_nothing_is_stored() {
    let app = spawn_app().await;
    let secret = dev_secret(&app);
    let body = serde_json::to_vec(&transaction(
        "evt_bad",
        "transaction.completed",
        "txn_x",
        "500",
    ))
    .expect("json");
    let mut tampered = body.clone();
    let at = tampered.len() - 3;
    tampered[at] = b' ';
    let cases = [
        (
            signature(&secret, &body, now()),
            tampered,
            "signature mismatch",
        ),
        (
            signature(&secret, &body, now() - 60),
            body.clone(),
            "timestamp too old",
        ),
        (
            signature(&secret, &body, now() + 60),
            body.clone(),
            "timestamp too new",
        ),
        (
            signature("pdl_ntfset_someone_else", &body, now()),
            body.clone(),
            "signature mismatch",
        ),
        (Vec::new(), body.clone(), "missing Paddle-Signature header"),
    ];
    for (headers, bytes, why) in cases {
        let answer = app.post(SOURCE, &headers, bytes).await;
        assert_eq!(reason(&answer), (401, why.to_string()));
    }
    assert_eq!(stored(&app).await, 0);
    assert_eq!(app.count("SELECT count(*) FROM payments", &[]).await, 0);
    // The same body, signed now, is taken.
    let answer = app
        .post(SOURCE, &signature(&secret, &body, now()), body)
        .await;
    assert_eq!(answer.status, 200);
}

#[tokio::test]
async fn refunds_count_once_each_whatever_the_order_and_resends() {
    let app = spawn_app().await;
    let paid = |txn: &str| {
        transaction(
            &format!("evt_paid_{txn}"),
            "transaction.completed",
            txn,
            "10000",
        )
    };
    let refund = |txn: &str, n: usize, total: &str| {
        adjustment(
            &format!("evt_ref_{txn}_{n}"),
            &format!("adj_{txn}_{n}"),
            "refund",
            "approved",
            txn,
            total,
        )
    };
    // The same facts in three orders, with a resent refund (same event, and the
    // same refund under another event id, as adjustment.updated would restate it).
    let orders: [(&str, Vec<Value>); 3] = [
        (
            "txn_a",
            vec![
                paid("txn_a"),
                refund("txn_a", 1, "3000"),
                refund("txn_a", 2, "2000"),
            ],
        ),
        (
            "txn_b",
            vec![
                refund("txn_b", 2, "2000"),
                refund("txn_b", 1, "3000"),
                paid("txn_b"),
            ],
        ),
        ("txn_c", {
            let mut restated = refund("txn_c", 1, "3000");
            restated["event_id"] = json!("evt_ref_txn_c_1_updated");
            restated["event_type"] = json!("adjustment.updated");
            vec![
                refund("txn_c", 1, "3000"),
                paid("txn_c"),
                refund("txn_c", 1, "3000"),
                restated,
                refund("txn_c", 2, "2000"),
            ]
        }),
    ];
    for (txn, events) in &orders {
        for body in events {
            app.deliver_ok(SOURCE, body).await;
        }
        assert_eq!(
            payment(&app, txn).await,
            (
                "partially_refunded".into(),
                10000,
                5000,
                Some("USD".into()),
                Some("ctm_01j8z9x1".into())
            ),
            "{txn}"
        );
    }
    // A refund of the rest makes it refunded.
    app.deliver_ok(SOURCE, &refund("txn_a", 3, "5000")).await;
    assert_eq!(payment(&app, "txn_a").await.0, "refunded");
}
