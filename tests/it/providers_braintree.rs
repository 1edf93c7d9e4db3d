//! Scheme `braintree` through real HTTP: form bodies of base64 XML stored as
//! JSON, kinds by the transaction's type, payment rows in minor units with the
//! transaction's currency and customer, refunds (settled credits) in any order,
//! and refusals of its form's fields that store nothing.
//! (Resends, rotation, tampering and replay of its fixtures: the conformance suite.)

use hookd::providers::{Scheme, sign};
use hookd::signature::{Envelope, Secret};
use serde_json::{Value, json};

use crate::support::provider;
use crate::support::{TestApp, spawn_app};

const SOURCE: &str = "braintree";
const TIMESTAMP: &str = "2024-06-12T10:32:47Z";

fn notification(kind: &str, timestamp: &str, subject: Value) -> Value {
    json!({"timestamp": timestamp, "kind": kind, "subject": subject})
}

/// A notification about a transaction: a sale, or a credit refunding `refunds`
/// (to the sale's customer).
fn transaction(kind: &str, id: &str, amount: &str, refunds: Option<&str>) -> Value {
    let customer = format!("cust_{}", refunds.unwrap_or(id));
    let mut transaction = json!({"id": id, "type": "sale", "status": "settled",
        "amount": amount, "currency-iso-code": "USD", "customer-id": customer,
        "merchant-account-id": "hookdshop", "add-ons": []});
    if let Some(sale) = refunds {
        transaction["type"] = json!("credit");
        transaction["refunded-transaction-id"] = json!(sale);
    }
    notification(kind, TIMESTAMP, json!({"transaction": transaction}))
}

fn sale(id: &str) -> Value {
    transaction("transaction_settled", id, "15.00", None)
}

fn credit(id: &str, sale: &str, amount: &str) -> Value {
    transaction("transaction_settled", id, amount, Some(sale))
}

fn event_id(body: &Value) -> String {
    let kind = body["kind"].as_str().expect("kind");
    let subject = body["subject"]
        .as_object()
        .and_then(|s| s.values().find_map(|o| o["id"].as_str()))
        .unwrap_or("");
    format!(
        "{kind}:{subject}:{}",
        body["timestamp"].as_str().expect("ts")
    )
}

async fn row(app: &TestApp, payment: &str) -> (String, i64, i64, Option<String>, Option<String>) {
    provider::payment_row(app, SOURCE, payment).await
}

async fn count(app: &TestApp, sql: &str) -> i64 {
    app.count(sql, &[]).await
}

/// The form `keys` would sign for `body`, and its headers.
fn signed(keys: &Secret, body: &Value) -> (Vec<(String, String)>, Vec<u8>) {
    let envelope = Envelope {
        event_id: "",
        event_type: "",
        timestamp: 0,
    };
    let bytes = serde_json::to_vec(body).expect("json");
    let signed = sign(&Scheme::Braintree, keys, &bytes, &envelope).expect("sign");
    (signed.headers, signed.body.expect("a form"))
}

fn field(form: &[u8], name: &str) -> String {
    form_urlencoded::parse(form)
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.into_owned())
        .expect("field")
}

fn form(pairs: &[(&str, &str)]) -> Vec<u8> {
    let mut out = form_urlencoded::Serializer::new(String::new());
    for (name, value) in pairs {
        out.append_pair(name, value);
    }
    out.finish().into_bytes()
}

#[tokio::test]
async fn braintree_kinds_follow_the_transaction_type_and_the_rest_is_ignored() {
    let app = spawn_app().await;
    use provider::{ignored, processed};
    let dispute = notification(
        "dispute_opened",
        TIMESTAMP,
        json!({"dispute": {"id": "d_1", "status": "open", "amount": "15.00",
            "currency-iso-code": "USD", "transaction": {"id": "t_b", "amount": "15.00"}}}),
    );
    let cases = [
        (sale("t_a"), processed("payment_succeeded")),
        (credit("r_a", "t_a", "5.00"), processed("payment_refunded")),
        (
            transaction("transaction_settlement_declined", "t_c", "15.00", None),
            processed("payment_failed"),
        ),
        (
            transaction(
                "transaction_settlement_declined",
                "r_c",
                "1.00",
                Some("t_a"),
            ),
            ignored(),
        ),
        (sale("t_b"), processed("payment_succeeded")),
        (dispute, processed("dispute_opened")),
        (
            transaction("transaction_disbursed", "t_a", "15.00", None),
            ignored(),
        ),
        (
            notification("check", TIMESTAMP, json!({"check": "true"})),
            ignored(),
        ),
        (
            notification(
                "subscription_canceled",
                TIMESTAMP,
                json!({"subscription": {"id": "s_1", "status": "Canceled"}}),
            ),
            ignored(),
        ),
    ];
    let cases = cases.map(|(body, expected)| (event_id(&body), body, expected));
    provider::assert_stored_as(&app, SOURCE, &cases).await;
    assert_eq!(
        app.strings(
            "SELECT event_id FROM webhook_events WHERE event_type = 'check'",
            &[]
        )
        .await,
        [format!("check::{TIMESTAMP}")]
    );
    // What is stored: the notification as JSON, beside the form as received.
    let kept = &app
        .query(
            "SELECT payload, body FROM webhook_events WHERE event_id = $1",
            &[&event_id(&sale("t_a"))],
        )
        .await[0];
    assert_eq!(kept.get::<_, Value>(0), sale("t_a"));
    assert!(kept.get::<_, Vec<u8>>(1).starts_with(b"bt_signature="));
    let rows = [
        ("t_a", "partially_refunded", 500),
        ("t_b", "disputed", 0),
        ("t_c", "failed", 0),
    ];
    provider::assert_rows(&app, SOURCE, 1500, &rows).await;
}

#[tokio::test]
async fn braintree_payment_rows_are_minor_units_with_currency_and_customer_whatever_the_order() {
    let app = spawn_app().await;
    let of = |payment: &str| {
        let refunds = [
            credit(&format!("{payment}_r1"), payment, "4.00"),
            credit(&format!("{payment}_r2"), payment, "3.50"),
        ];
        // A refund notified again later (another timestamp, so another id) counts once.
        let mut again = refunds[0].clone();
        again["timestamp"] = json!("2024-06-13T00:00:00Z");
        provider::Refunded {
            paid: sale(payment),
            refunds,
            again: Some(again),
        }
    };
    let expected =
        |payment: &str| provider::partially_refunded(1500, 750, "USD", format!("cust_{payment}"));
    let payments = ["t_after", "t_before"];
    provider::assert_refunds_add_up_whatever_the_order(&app, SOURCE, payments, of, expected).await;
    // Minor units by the currency's exponent; the customer as a nested object.
    let mut yen = sale("t_yen");
    let transaction = &mut yen["subject"]["transaction"];
    transaction["amount"] = json!("1050");
    transaction["currency-iso-code"] = json!("JPY");
    transaction
        .as_object_mut()
        .expect("object")
        .remove("customer-id");
    transaction["customer"] = json!({"id": "cust_nested", "email": "a@example.com"});
    app.deliver_ok(SOURCE, &yen).await;
    assert_eq!(
        row(&app, "t_yen").await,
        (
            "succeeded".into(),
            1050,
            0,
            Some("JPY".into()),
            Some("cust_nested".into())
        )
    );
}

#[tokio::test]
async fn tampered_unsigned_or_foreign_braintree_deliveries_are_401_and_nothing_is_stored() {
    let app = spawn_app().await;
    let keys = app.settings().source(SOURCE).expect("braintree").secrets[0].clone();
    let (headers, good) = signed(&keys, &sale("t_bad"));
    let signature = field(&good, "bt_signature");
    let payload = field(&good, "bt_payload");
    let mut richer = sale("t_bad");
    richer["subject"]["transaction"]["amount"] = json!("1500.00");
    let other_payload = field(&signed(&keys, &richer).1, "bt_payload");
    let (public, _) = keys.expose().split_once(':').expect("a pair");
    let same_public = Secret::new(format!("{public}:not-the-private-key"));
    let other_private = field(&signed(&same_public, &sale("t_bad")).1, "bt_signature");
    let foreign = Secret::new("someonespublic01:00112233445566778899aabbccddeeff");
    let foreign_signature = field(&signed(&foreign, &sale("t_bad")).1, "bt_signature");
    let cases = [
        (
            form(&[("bt_signature", &signature), ("bt_payload", &other_payload)]),
            "signature mismatch",
        ),
        (
            form(&[("bt_signature", &other_private), ("bt_payload", &payload)]),
            "signature mismatch",
        ),
        (
            form(&[
                ("bt_signature", &foreign_signature),
                ("bt_payload", &payload),
            ]),
            "signature mismatch",
        ),
        (form(&[("bt_payload", &payload)]), "bt_signature: missing"),
        (form(&[("bt_signature", &signature)]), "bt_payload: missing"),
        (
            form(&[
                ("bt_signature", &signature),
                ("bt_payload", &payload.replace('\n', "\r\n")),
            ]),
            "bt_payload: has characters base64 does not use",
        ),
        (
            serde_json::to_vec(&sale("t_bad")).expect("json"),
            "bt_signature: missing",
        ),
    ];
    let cases = cases.map(|(bytes, reason)| (headers.clone(), bytes, reason));
    provider::assert_refused(&app, SOURCE, cases).await;
    // Genuine but without a kind: a clear 400, nothing stored either.
    let (_, kindless) = signed(&keys, &json!({"timestamp": TIMESTAMP}));
    let answer = app.post(SOURCE, &headers, kindless).await;
    assert_eq!(answer.status, 400, "{}", answer.text());
    assert!(
        answer.text().contains("notification.kind"),
        "{}",
        answer.text()
    );
    assert_eq!(count(&app, "SELECT count(*) FROM webhook_events").await, 0);
    // The control: the genuine delivery is taken.
    assert_eq!(app.post(SOURCE, &headers, good).await.status, 200);
    assert_eq!(count(&app, "SELECT count(*) FROM webhook_events").await, 1);
}
