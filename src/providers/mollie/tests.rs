use serde_json::json;

use super::*;

fn identity(payment: &Value) -> (String, String) {
    ANY.identity(&Vec::<(String, String)>::new(), payment)
        .expect("identity")
}

#[test]
fn each_state_of_a_payment_is_one_event() {
    let mut payment = json!({"id": "tr_WDqYK6vllg", "status": "open",
        "amount": {"value": "10.00", "currency": "EUR"}});
    assert_eq!(
        identity(&payment),
        ("tr_WDqYK6vllg:open".into(), "payment.open".into())
    );
    payment["status"] = json!("paid");
    assert_eq!(
        identity(&payment),
        ("tr_WDqYK6vllg:paid".into(), "payment.paid".into())
    );
    // A refund of nothing is no refund.
    payment["amountRefunded"] = json!({"value": "0.00", "currency": "EUR"});
    assert_eq!(identity(&payment).0, "tr_WDqYK6vllg:paid");
    payment["amountRefunded"] = json!({"value": "4.00", "currency": "EUR"});
    assert_eq!(
        identity(&payment),
        (
            "tr_WDqYK6vllg:paid:refunded=4.00".into(),
            "payment.refunded".into()
        )
    );
    payment["amountChargedBack"] = json!({"value": "10.00", "currency": "EUR"});
    assert_eq!(
        identity(&payment),
        (
            "tr_WDqYK6vllg:paid:refunded=4.00:charged_back=10.00".into(),
            "payment.charged_back".into()
        )
    );
}

#[test]
fn kinds_follow_what_changed_and_amounts_are_minor_units() {
    let kind = |ty: &str| ANY.kind_of(ty, &Value::Null);
    assert_eq!(kind("payment.paid"), Some(PaymentKind::Succeeded));
    for failed in ["payment.failed", "payment.expired", "payment.canceled"] {
        assert_eq!(kind(failed), Some(PaymentKind::Failed));
    }
    assert_eq!(kind("payment.refunded"), Some(PaymentKind::Refunded));
    assert_eq!(
        kind("payment.charged_back"),
        Some(PaymentKind::DisputeOpened)
    );
    for none in [
        "payment.open",
        "payment.pending",
        "payment.authorized",
        "payment.unknown",
    ] {
        assert_eq!(kind(none), None);
    }
    let facts = ANY
        .payment_facts(
            &json!({"id": "tr_1", "status": "paid", "customerId": "cst_1",
            "amount": {"value": "1000", "currency": "JPY"},
            "amountRefunded": {"value": "250", "currency": "JPY"}}),
        )
        .expect("facts");
    assert_eq!(
        (
            facts.amount,
            facts.amount_refunded,
            facts.currency.as_deref()
        ),
        (Some(1000), Some(250), Some("JPY"))
    );
    assert!(ANY.payment_facts(&json!({"id": "tr_1"})).is_err());
}

#[test]
fn the_form_names_a_payment_to_fetch_and_nothing_else() {
    let named = |body: &str| ANY.receipt_fetch(body.as_bytes()).expect("fetches");
    let (fetch, unknown) = named("id=tr_WDqYK6vllg").expect("a payment");
    assert_eq!(fetch.path, "/v2/payments/tr_WDqYK6vllg");
    assert_eq!(identity(&unknown).0, "tr_WDqYK6vllg:unknown");
    assert!(named("id=..%2Fv2%2Fmethods").is_err());
    assert!(named("id=").is_err());
    assert!(named("other=1").is_err());
    // `hookd sign` sends the form for a payment.
    let signed = ANY
        .sign(
            b"",
            br#"{"id":"tr_abc","status":"paid"}"#,
            &Envelope {
                event_id: "tr_abc:paid",
                event_type: "payment.paid",
                timestamp: 0,
            },
        )
        .expect("signed");
    assert_eq!(signed.body.as_deref(), Some(&b"id=tr_abc"[..]));
}
