//! What the tests of each provider read back: a stored event's kind and status,
//! a payment's row, and why a delivery was refused; and an Adyen request for
//! tests that need several events in one request.

use hookd::providers::{Scheme, sign};
use hookd::signature::{Envelope, Secret};
use hookd::simulate::{Hints, sign_delivery};
use hookd_kit::app::{Answer, TestApp};
use hookd_kit::settings::{SHIPPED_TOML, shipped_settings};
use serde_json::Value;

/// The kind and status of the event `source` stored under `event_id`.
pub async fn stored(app: &TestApp, source: &str, event_id: &str) -> (Option<String>, String) {
    let row = &app
        .query(
            "SELECT kind, status FROM webhook_events WHERE source = $1 AND event_id = $2",
            &[&source, &event_id],
        )
        .await[0];
    (row.get(0), row.get(1))
}

/// A payment's row: status, amount, refunded, currency, customer.
pub async fn payment_row(
    app: &TestApp,
    source: &str,
    payment: &str,
) -> (String, i64, i64, Option<String>, Option<String>) {
    let row = &app
        .query(
            "SELECT status, amount, amount_refunded, currency, customer_id
             FROM payments WHERE source = $1 AND payment_id = $2",
            &[&source, &payment],
        )
        .await[0];
    (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4))
}

/// A refusal's status, `error` and `reason`.
pub fn refusal(answer: &Answer) -> (u16, String, String) {
    let json = answer.json();
    let text = |k: &str| json[k].as_str().unwrap_or_default().to_string();
    (answer.status, text("error"), text("reason"))
}

/// Posts each `(headers, body, reason)`: each is refused 401 `invalid_signature`
/// for a reason that contains `reason`, and `source` stores no event.
pub async fn assert_refused<'r>(
    app: &TestApp,
    source: &str,
    cases: impl IntoIterator<Item = (Vec<(String, String)>, Vec<u8>, &'r str)>,
) {
    for (headers, bytes, reason) in cases {
        let (status, error, why) = refusal(&app.post(source, &headers, bytes).await);
        assert_eq!(
            (status, error.as_str()),
            (401, "invalid_signature"),
            "{reason}"
        );
        assert!(why.contains(reason), "{reason}: {why}");
    }
    assert_eq!(
        app.count("SELECT count(*) FROM webhook_events", &[]).await,
        0
    );
}

/// `body` signed under `scheme` with `key`, with no event id, type or time
/// beside it: the headers only.
pub fn signed_bare(scheme: &Scheme, key: &Secret, body: &[u8]) -> Vec<(String, String)> {
    let envelope = Envelope {
        event_id: "",
        event_type: "",
        timestamp: 0,
    };
    sign(scheme, key, body, &envelope).expect("sign").headers
}

/// An instance with the shipped configuration read with one environment
/// variable set (`name` to `value`).
pub async fn spawn_with_env(name: &str, value: &str) -> TestApp {
    let env = [(name.to_string(), value.to_string())];
    let mut settings =
        hookd::config::Settings::from_toml("hookd.toml", SHIPPED_TOML, &env.into_iter().collect())
            .expect("settings");
    settings.listen = "127.0.0.1:0".parse().expect("addr");
    super::spawn_with_settings(settings).await
}

/// `headers` without the one named `name`.
pub fn without_header(headers: &[(String, String)], name: &str) -> Vec<(String, String)> {
    headers.iter().filter(|(k, _)| k != name).cloned().collect()
}

/// Posts one delivery twice: the second is a duplicate with the first answer,
/// and the source's one event counts two deliveries and `attempts` attempts
/// (one for an event of a kind, none for one ignored). Returns the first answer.
pub async fn assert_resend_is_a_duplicate(
    app: &TestApp,
    source: &str,
    headers: &[(String, String)],
    body: Vec<u8>,
    attempts: i32,
) -> Answer {
    let first = app.post(source, headers, body.clone()).await;
    let second = app.post(source, headers, body).await;
    assert_eq!(first.status, 200, "{source}: {}", first.text());
    assert_eq!(
        (second.status, &second.body),
        (200, &first.body),
        "{source}"
    );
    assert_eq!(second.header("Idempotent-Replayed"), Some("true"));
    let rows = app
        .query(
            "SELECT deliveries, attempts FROM webhook_events WHERE source = $1",
            &[&source],
        )
        .await;
    assert_eq!(rows.len(), 1, "{source}");
    assert_eq!(
        (rows[0].get::<_, i32>(0), rows[0].get::<_, i32>(1)),
        (2, attempts),
        "{source}"
    );
    first
}

/// An instance whose `source` holds `newer` before its shipped secret, which is
/// returned: a delivery signed with it is signed with secret 2.
pub async fn spawn_rotated(source: &str, newer: &str) -> (TestApp, Secret) {
    let mut settings = shipped_settings();
    let configured = settings
        .sources
        .iter_mut()
        .find(|s| s.name == source)
        .expect("a shipped source");
    let previous = configured.secrets[0].clone();
    configured.secrets = vec![Secret::new(newer), previous.clone()];
    let app = super::spawn_with_settings(settings).await;
    (app, previous)
}

/// A successful Adyen authorisation of 10.00 EUR, as an item of a notification.
pub fn adyen_authorisation(psp: &str, reference: &str, event_date: &str) -> serde_json::Value {
    serde_json::json!({"NotificationRequestItem": {
        "amount": {"currency": "EUR", "value": 1000},
        "eventCode": "AUTHORISATION",
        "eventDate": event_date,
        "merchantAccountCode": "HookdShopECOM",
        "merchantReference": reference,
        "pspReference": psp,
        "success": "true",
    }})
}

/// Sends `items` in one notification, each signed as Adyen would.
pub async fn send_adyen(app: &TestApp, items: Vec<serde_json::Value>) -> Answer {
    let body = serde_json::json!({"live": "false", "notificationItems": items});
    let (headers, signed) = app.sign_body("adyen", &serde_json::to_vec(&body).expect("json"));
    app.post("adyen", &headers, signed).await
}

/// A payment and two of its refunds as one provider sends them, and
/// optionally the first refund again under another event id.
pub struct Refunded {
    pub paid: serde_json::Value,
    pub refunds: [serde_json::Value; 2],
    pub again: Option<serde_json::Value>,
}

/// A payment's row as `payment_row` reads it.
pub type PaymentRow = (String, i64, i64, Option<String>, Option<String>);

/// The row of a payment of `amount` of which `refunded` was refunded, in
/// `currency`, by `customer`.
pub fn partially_refunded(
    amount: i64,
    refunded: i64,
    currency: &str,
    customer: String,
) -> PaymentRow {
    (
        "partially_refunded".into(),
        amount,
        refunded,
        Some(currency.into()),
        Some(customer),
    )
}

/// Each `(payment, status, refunded)` of `rows`: its row has that status, that
/// refunded amount, and `amount`.
pub async fn assert_rows(app: &TestApp, source: &str, amount: i64, rows: &[(&str, &str, i64)]) {
    for &(payment, status, refunded) in rows {
        let (s, paid, r, ..) = payment_row(app, source, payment).await;
        assert_eq!(
            (s.as_str(), paid, r),
            (status, amount, refunded),
            "{payment}"
        );
    }
}

/// For each of `payments` (`of` builds its events), the payment and its two
/// refunds, the first payment before its refunds and the second after them,
/// then the refund sent again: each row is `expected` of its payment, and the
/// source holds each refund once.
pub async fn assert_refunds_add_up_whatever_the_order(
    app: &TestApp,
    source: &str,
    payments: [&str; 2],
    of: impl Fn(&str) -> Refunded,
    expected: impl Fn(&str) -> PaymentRow,
) {
    for (payment, refunds_first) in [(payments[0], false), (payments[1], true)] {
        let Refunded {
            paid,
            refunds,
            again,
        } = of(payment);
        let mut bodies = refunds.to_vec();
        match refunds_first {
            true => bodies.push(paid),
            false => bodies.insert(0, paid),
        }
        bodies.extend(again);
        for body in &bodies {
            app.deliver_ok(source, body).await;
        }
        let row = payment_row(app, source, payment).await;
        assert_eq!(row, expected(payment), "{source} {payment}");
    }
    let refunds = app
        .count(
            "SELECT count(*) FROM payment_refunds WHERE source = $1",
            &[&source],
        )
        .await;
    assert_eq!(refunds, 4, "{source}");
}

/// How a delivery's event is stored: its kind (none when ignored) and status.
pub type StoredAs = (Option<String>, String);

/// Stored as processed, of `kind`.
pub fn processed(kind: &str) -> StoredAs {
    (Some(kind.to_string()), "processed".to_string())
}

/// Stored as ignored, of no kind.
pub fn ignored() -> StoredAs {
    (None, "ignored".to_string())
}

/// Delivers each `(id, body)` signed as the source's provider would (under
/// `id` where the id travels beside the body): each is answered as accepted
/// naming `id`, byte for byte, and its event stored as said.
pub async fn assert_stored_as(app: &TestApp, source: &str, cases: &[(String, Value, StoredAs)]) {
    for (id, body, expected) in cases {
        let bytes = serde_json::to_vec(body).expect("json");
        let hints = Hints {
            event_id: Some(id),
            event_type: None,
        };
        let configured = app.settings().source(source).expect("source");
        let now = chrono::Utc::now().timestamp();
        let signed = sign_delivery(configured, &bytes, hints, now).expect("sign");
        let answer = app.post(source, &signed.headers, signed.body).await;
        assert_eq!(answer.status, 200, "{source} {id}: {}", answer.text());
        let named = format!(r#"{{"status":"accepted","event_id":"{id}"}}"#);
        assert_eq!(answer.text(), named, "{source}");
        assert_eq!(&stored(app, source, id).await, expected, "{source} {id}");
    }
}
