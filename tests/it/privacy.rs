//! Personal data: masked for viewers in the API, the page and the terminal by
//! each provider's defaults and a source's own `mask`; revealed for one event by
//! an operator (audited); erased for good when a customer is forgotten, keeping
//! dedupe keys, fingerprints and payment state.

use serde_json::{Value, json};

use crate::support::{
    Credential, OPERATOR, Receiver, Spawn, TestApp, VIEWER, csrf_of, run_hookd, run_hookd_json,
    shipped_settings, spawn, spawn_app, stripe_event,
};

const EMAIL: &str = "jenny.rosen@example.com";
const SECRET: &str = "pi_privacy_secret_abc123";
const CUSTOMER: &str = "cus_jenny";

/// A Stripe payment of Jenny's, with the personal data Stripe sends.
fn jennys_payment(id: &str, payment: &str) -> Value {
    stripe_event(
        id,
        "payment_intent.succeeded",
        json!({
            "id": payment, "object": "payment_intent", "amount": 1500, "currency": "eur",
            "customer": CUSTOMER, "client_secret": SECRET, "receipt_email": EMAIL,
            "shipping": {"name": "Jenny Rosen", "phone": "+4915112345678",
                         "address": {"line1": "1 Main Street", "city": "Berlin"}},
            "payment_method_details": {"card": {"fingerprint": "fp_jenny", "last4": "4242"}},
            "metadata": {"order_note": "ring twice"}
        }),
    )
}

/// Jenny's partial refund of `payment`.
fn jennys_refund(id: &str, payment: &str) -> Value {
    stripe_event(
        id,
        "charge.refunded",
        json!({
            "id": "ch_jenny", "object": "charge", "payment_intent": payment, "amount": 1500,
            "amount_refunded": 500, "currency": "eur", "customer": CUSTOMER,
            "billing_details": {"email": EMAIL, "name": "Jenny Rosen"}
        }),
    )
}

async fn delivered(app: &TestApp, source: &str, event: &Value) {
    let answer = app.deliver(source, event).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
}

fn object(detail: &Value) -> &Value {
    &detail["payload"]["data"]["object"]
}

#[tokio::test]
async fn stripe_personal_data_is_masked_for_viewers_in_the_api_the_page_and_the_terminal() {
    let app = spawn_app().await;
    delivered(&app, "stripe", &jennys_payment("evt_mask_1", "pi_mask")).await;
    let id = app.event_row_id("evt_mask_1").await;

    let detail = app.viewer().event(id).await.json();
    assert_eq!(detail["masked"], true);
    let shown = object(&detail);
    assert_eq!(shown["receipt_email"], "•••@example.com");
    assert_eq!(shown["client_secret"], "•••");
    assert_eq!(
        shown["shipping"],
        json!({"name": "•••", "phone": "•••", "address": {"line1": "•••", "city": "•••"}})
    );
    assert_eq!(
        shown["payment_method_details"]["card"]["fingerprint"],
        "•••"
    );
    // What support needs stays: ids, amounts, the card's last digits.
    assert_eq!(shown["id"], "pi_mask");
    assert_eq!(shown["amount"], 1500);
    assert_eq!(shown["payment_method_details"]["card"]["last4"], "4242");
    assert_eq!(shown["metadata"]["order_note"], "ring twice");
    // An operator's plain view is masked too: revealing is a separate, audited act.
    assert_eq!(
        object(&app.operator().event(id).await.json())["receipt_email"],
        "•••@example.com"
    );

    let page = app.viewer().event_page(id).await.text();
    assert!(page.contains("•••@example.com"), "{page}");
    for hidden in [EMAIL, SECRET, "Jenny Rosen", "fp_jenny"] {
        assert!(!page.contains(hidden), "the page shows {hidden}");
    }
    assert!(
        !page.contains("Reveal personal data"),
        "viewers cannot reveal"
    );

    let terminal = run_hookd(
        &["events", "show", &id.to_string()],
        Some(app.database_url()),
    )
    .await;
    assert!(terminal.status.success());
    let text = String::from_utf8_lossy(&terminal.stdout);
    assert!(text.contains("•••@example.com"), "{text}");
    for hidden in [EMAIL, SECRET, "Jenny Rosen"] {
        assert!(!text.contains(hidden), "the terminal shows {hidden}");
    }
    let json = run_hookd_json(
        &["events", "show", &id.to_string(), "--json"],
        app.database_url(),
    )
    .await;
    assert_eq!(object(&json)["client_secret"], "•••");

    // Stored as received: masking is a view.
    let stored = app
        .strings(
            "SELECT payload->'data'->'object'->>'receipt_email' FROM webhook_events WHERE id = $1",
            &[&id],
        )
        .await;
    assert_eq!(stored, [EMAIL]);
}

#[tokio::test]
async fn adyen_items_are_masked_by_adyens_defaults() {
    let app = spawn_app().await;
    let item = json!({
        "additionalData": {"shopperReference": "shopper-9", "shopperEmail": EMAIL,
                           "shopperName": "Jenny Rosen", "cardHolderName": "J ROSEN"},
        "amount": {"currency": "EUR", "value": 1500},
        "eventCode": "AUTHORISATION",
        "eventDate": "2026-11-30T14:00:00+01:00",
        "merchantAccountCode": "HookdShopECOM",
        "merchantReference": "order-privacy",
        "pspReference": "8535296650159999",
        "success": "true",
    });
    let body = json!({"live": "false", "notificationItems": [{"NotificationRequestItem": item}]});
    let (headers, body) = app.sign_body("adyen", &serde_json::to_vec(&body).expect("json"));
    assert_eq!(app.post("adyen", &headers, body).await.status, 200);
    let id = app
        .count("SELECT id FROM webhook_events WHERE source = 'adyen'", &[])
        .await;
    let detail = app.viewer().event(id).await.json();
    let data = &detail["payload"]["additionalData"];
    assert_eq!(data["shopperEmail"], "•••@example.com");
    assert_eq!(data["shopperName"], "•••");
    assert_eq!(data["cardHolderName"], "•••");
    assert_eq!(data["shopperReference"], "shopper-9");
    assert_eq!(detail["payload"]["pspReference"], "8535296650159999");
}

#[tokio::test]
async fn a_sources_own_mask_adds_to_its_providers_defaults_and_forwards_stay_whole() {
    let receiver = Receiver::start(&[]).await;
    let mut settings = shipped_settings();
    settings.forwards = vec![receiver.forward("billing", &["payment_succeeded"], &[])];
    let stripe = settings
        .sources
        .iter_mut()
        .find(|s| s.name == "stripe")
        .expect("stripe");
    stripe.mask.push("/data/object/metadata/*".into());
    let app = spawn(Spawn {
        settings,
        parts: hookd::app::Parts {
            dispatcher: true,
            purge: false,
            http_workers: Some(2),
        },
        ..Spawn::default()
    })
    .await;
    delivered(&app, "stripe", &jennys_payment("evt_mask_own", "pi_own")).await;
    let id = app.event_row_id("evt_mask_own").await;
    let shown = app.viewer().event(id).await.json();
    assert_eq!(object(&shown)["metadata"]["order_note"], "•••");
    assert_eq!(object(&shown)["receipt_email"], "•••@example.com");
    // A forward is not a view: the receiving system gets the event as sent.
    let forwarded = receiver.wait_for(1).await;
    let body: Value = serde_json::from_slice(&forwarded[0].body).expect("json");
    assert_eq!(object(&json!({"payload": body}))["receipt_email"], EMAIL);
}

async fn audited(app: &TestApp, action: &str, id: i64) -> Vec<String> {
    app.strings(
        "SELECT who FROM admin_audit WHERE action = $1 AND webhook_event_id = $2 ORDER BY id",
        &[&action, &id],
    )
    .await
}

#[tokio::test]
async fn an_operator_reveals_one_payload_and_each_reveal_is_audited() {
    let app = spawn_app().await;
    delivered(&app, "stripe", &jennys_payment("evt_reveal", "pi_reveal")).await;
    let id = app.event_row_id("evt_reveal").await;
    let path = format!("/admin/api/events/{id}?reveal=true");

    let refused = app.viewer().get(&path).await;
    assert_eq!(refused.status, 403, "{}", refused.text());
    assert!(!refused.text().contains(EMAIL));
    assert_eq!(
        app.viewer()
            .get(&format!("/admin/api/events/{id}?reveal=yes"))
            .await
            .status,
        400
    );
    assert!(audited(&app, "revealed_payload", id).await.is_empty());

    let revealed = app.operator().get(&path).await;
    assert_eq!(revealed.status, 200);
    let detail = revealed.json();
    assert_eq!(detail["masked"], false);
    assert_eq!(object(&detail)["receipt_email"], EMAIL);
    assert_eq!(object(&detail)["client_secret"], SECRET);
    assert_eq!(audited(&app, "revealed_payload", id).await, ["operator"]);

    // The page: a button for operators, a form post with the session's token.
    let viewer = app.admin(Credential::Cookie(app.sign_in(VIEWER).await));
    let viewer_page = viewer.event_page(id).await.text();
    let reveal = format!("/admin/events/{id}/reveal");
    let refused = viewer
        .post_form(&reveal, &[], &[("csrf", &csrf_of(&viewer_page))])
        .await;
    assert_eq!(refused.status, 403);
    assert!(!refused.text().contains(EMAIL));
    let operator = app.admin(Credential::Cookie(app.sign_in(OPERATOR).await));
    let page = operator.event_page(id).await.text();
    assert!(page.contains("Reveal personal data"), "{page}");
    assert!(!page.contains(EMAIL));
    let without_token = operator
        .post_form(&reveal, &[], &[("csrf", "forged")])
        .await;
    assert_eq!(without_token.status, 403);
    let shown = operator
        .post_form(&reveal, &[], &[("csrf", &csrf_of(&page))])
        .await;
    assert_eq!(shown.status, 200);
    assert!(shown.text().contains(EMAIL), "{}", shown.text());
    assert_eq!(
        audited(&app, "revealed_payload", id).await,
        ["operator", "operator"]
    );

    // The terminal reveals with --reveal, under the user's name.
    let terminal = run_hookd(
        &["events", "show", &id.to_string(), "--reveal"],
        Some(app.database_url()),
    )
    .await;
    assert!(terminal.status.success());
    assert!(String::from_utf8_lossy(&terminal.stdout).contains(EMAIL));
    let who = audited(&app, "revealed_payload", id).await;
    assert_eq!(who.len(), 3);
    assert!(who[2].starts_with("cli:"), "{who:?}");
}

/// The columns forgetting must leave as they were: dedupe keys, fingerprints.
async fn keys_of(app: &TestApp) -> Vec<(String, Vec<u8>, Option<Vec<u8>>)> {
    app.query(
        "SELECT event_id, payload_sha256, stable_sha256 FROM webhook_events ORDER BY id",
        &[],
    )
    .await
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect()
}

/// Everything stored about events and payments, as text, for a search.
async fn everything_stored(app: &TestApp) -> String {
    app.strings(
        "SELECT concat_ws(' ', payload::text, convert_from(body, 'UTF8'), customer_id)
           FROM webhook_events
         UNION ALL SELECT coalesce(customer_id, '') FROM payments",
        &[],
    )
    .await
    .join("\n")
}

#[tokio::test]
async fn forgetting_a_customer_erases_their_data_and_keeps_dedupe_and_payment_state() {
    let app = spawn_app().await;
    let first = serde_json::to_vec(&jennys_payment("evt_forget_1", "pi_forget")).expect("json");
    let (headers, signed) = app.sign_body("stripe", &first);
    assert_eq!(
        app.post("stripe", &headers, signed.clone()).await.status,
        200
    );
    delivered(&app, "stripe", &jennys_refund("evt_forget_2", "pi_forget")).await;
    delivered(
        &app,
        "stripe",
        &stripe_event(
            "evt_other",
            "payment_intent.succeeded",
            json!({"id": "pi_other", "object": "payment_intent", "amount": 900,
                   "currency": "eur", "customer": "cus_other", "receipt_email": "other@example.org"}),
        ),
    )
    .await;
    let keys = keys_of(&app).await;
    let path = format!("/admin/api/customers/{CUSTOMER}/forget");
    let json_body = [("Content-Type", "application/json")];

    let refused = app
        .viewer()
        .send("POST", &path, &json_body, b"{}".to_vec())
        .await;
    assert_eq!(refused.status, 403);
    let unknown = app
        .operator()
        .send("POST", &path, &json_body, br#"{"source":"nope"}"#.to_vec())
        .await;
    assert_eq!(
        (unknown.status, unknown.json()["error"].clone()),
        (422, json!("unknown_source"))
    );

    let preview = app
        .operator()
        .send("POST", &path, &json_body, br#"{"dry_run":true}"#.to_vec())
        .await;
    assert_eq!(preview.status, 200, "{}", preview.text());
    let counts = json!({"dry_run": true, "events": 2, "payloads": 2, "bodies": 2,
                        "bodies_dropped": 0, "conflicts": 0, "payments": 1});
    assert_eq!(preview.json(), counts);
    assert!(
        everything_stored(&app).await.contains(EMAIL),
        "a dry run changes nothing"
    );

    let done = app
        .operator()
        .send(
            "POST",
            &path,
            &json_body,
            br#"{"source":"stripe"}"#.to_vec(),
        )
        .await;
    assert_eq!(done.status, 200, "{}", done.text());
    let mut counts = counts;
    counts["dry_run"] = json!(false);
    assert_eq!(done.json(), counts);

    let stored = everything_stored(&app).await;
    for erased in [
        EMAIL,
        SECRET,
        "Jenny Rosen",
        "fp_jenny",
        "1 Main Street",
        CUSTOMER,
    ] {
        assert!(
            !stored.contains(erased),
            "{erased} is still stored:\n{stored}"
        );
    }
    assert!(stored.contains("[redacted]"));
    assert!(
        stored.contains("other@example.org"),
        "another customer is untouched"
    );
    assert_eq!(
        keys_of(&app).await,
        keys,
        "dedupe keys and fingerprints stay"
    );
    let payment = crate::support::provider::payment_row(&app, "stripe", "pi_forget").await;
    assert_eq!(
        payment,
        (
            "partially_refunded".into(),
            1500,
            500,
            Some("eur".into()),
            None
        ),
        "the payment's state stays; its customer goes"
    );

    let audit = app
        .query(
            "SELECT who, source, detail FROM admin_audit WHERE action = 'forgot_customer'",
            &[],
        )
        .await;
    assert_eq!(audit.len(), 1, "one row: the dry run is not audited");
    let (who, source, detail): (String, Option<String>, Value) =
        (audit[0].get(0), audit[0].get(1), audit[0].get(2));
    assert_eq!(
        (who.as_str(), source.as_deref()),
        ("operator", Some("stripe"))
    );
    assert_eq!(detail, counts);

    let id = app.event_row_id("evt_forget_1").await;
    let origin = &app.viewer().event(id).await.json()["origin"];
    assert_eq!(origin["status"], "redacted", "{origin}");
    let verify = run_hookd(
        &["events", "verify", &id.to_string()],
        Some(app.database_url()),
    )
    .await;
    assert!(!verify.status.success());
    assert!(String::from_utf8_lossy(&verify.stdout).contains("redacted"));

    // The provider resends the original delivery: still a duplicate.
    let again = app.post("stripe", &headers, signed).await;
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(again.header("Idempotent-Replayed"), Some("true"));
    let rows = app
        .query(
            "SELECT deliveries, attempts FROM webhook_events WHERE event_id = 'evt_forget_1'",
            &[],
        )
        .await;
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].get::<_, i32>(0), rows[0].get::<_, i32>(1)), (2, 1));
    assert_eq!(
        app.count("SELECT count(*) FROM webhook_events", &[]).await,
        3
    );
}

#[tokio::test]
async fn hookd_forget_previews_erases_and_refuses_an_unknown_source_in_one_line() {
    let app = spawn_app().await;
    delivered(&app, "stripe", &jennys_payment("evt_cli_forget", "pi_cli")).await;
    let db = Some(app.database_url());

    let preview = run_hookd(&["forget", "--customer", CUSTOMER, "--dry-run"], db.clone()).await;
    assert!(preview.status.success());
    let text = String::from_utf8_lossy(&preview.stdout);
    assert!(
        text.starts_with("would erase") && text.contains("from 1 events"),
        "{text}"
    );
    assert!(everything_stored(&app).await.contains(EMAIL));

    let unknown = run_hookd(
        &["forget", "--customer", CUSTOMER, "--source", "nope"],
        db.clone(),
    )
    .await;
    assert_eq!(unknown.status.code(), Some(1));
    let error = String::from_utf8_lossy(&unknown.stderr);
    assert_eq!(error, "hookd: no source named \"nope\" is configured\n");

    let done = run_hookd_json(
        &["forget", "--customer", CUSTOMER, "--json"],
        app.database_url(),
    )
    .await;
    assert_eq!(
        (done["events"].clone(), done["payments"].clone()),
        (json!(1), json!(1))
    );
    assert!(!everything_stored(&app).await.contains(EMAIL));
    let who = app
        .strings(
            "SELECT who FROM admin_audit WHERE action = 'forgot_customer'",
            &[],
        )
        .await;
    assert!(who.len() == 1 && who[0].starts_with("cli:"), "{who:?}");
    // Nothing left to forget: a second run finds nothing, and says so.
    let again = run_hookd_json(
        &["forget", "--customer", CUSTOMER, "--json"],
        app.database_url(),
    )
    .await;
    assert_eq!(again["events"], 0);
}
