//! Personal data: masked for viewers in the API, the page and the terminal by
//! each provider's defaults and a source's own `mask`; revealed for one event by
//! an operator (audited); erased for good when a customer is forgotten, keeping
//! dedupe keys, fingerprints and payment state.

use hookd::config::Settings;
use hookd::handlers::Registry;
use serde_json::{Value, json};

use crate::support::{
    Credential, OPERATOR, Receiver, TestApp, VIEWER, csrf_of, run_hookd, run_hookd_json,
    shipped_settings, spawn_app, spawn_looping, stripe_event,
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

fn stripe_of(settings: &mut Settings) -> &mut hookd::config::Source {
    settings
        .sources
        .iter_mut()
        .find(|s| s.name == "stripe")
        .expect("stripe")
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
    stripe_of(&mut settings)
        .mask
        .push("/data/object/metadata/*".into());
    let app = spawn_looping(settings, Registry::builtin()).await;
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

/// Every text, json, jsonb and bytea column of hookd's tables (in its schema)
/// that holds `needle` somewhere, as `table.column`. Bytea is searched as bytes:
/// a body reads back decompressed whatever its column's compression.
async fn columns_holding(app: &TestApp, needle: &str) -> Vec<String> {
    let columns = app
        .query(
            "SELECT c.table_name::text, c.column_name::text, c.data_type::text
               FROM information_schema.columns c
               JOIN information_schema.tables t
                 ON t.table_schema = c.table_schema AND t.table_name = c.table_name
              WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'
                AND c.data_type IN ('text', 'character varying', 'character', 'json', 'jsonb',
                                    'bytea', 'ARRAY')
              ORDER BY 1, 2",
            &[],
        )
        .await;
    assert!(columns.len() > 20, "the search must see hookd's tables");
    let mut found = Vec::new();
    for row in &columns {
        let (table, column, kind): (String, String, String) = (row.get(0), row.get(1), row.get(2));
        let test = if kind == "bytea" {
            format!("position(convert_to($1, 'UTF8') in \"{column}\") > 0")
        } else {
            format!("strpos(\"{column}\"::text, $1) > 0")
        };
        let sql = format!("SELECT count(*) FROM \"{table}\" WHERE {test}");
        if app.count(&sql, &[&needle]).await > 0 {
            found.push(format!("{table}.{column}"));
        }
    }
    found
}

/// A team's handler syncing customers to a CRM that refuses Jenny, quoting her
/// address in its error (as serde's and most clients' errors quote values).
struct Crm;

#[async_trait::async_trait]
impl hookd::handlers::Handler for Crm {
    async fn apply(
        &self,
        _: &deadpool_postgres::Transaction<'_>,
        event: &hookd::handlers::Event<'_>,
    ) -> Result<(), hookd::handlers::HandlerError> {
        let email = event.text("/data/object/email")?;
        Err(hookd::handlers::HandlerError::Permanent(format!(
            "the CRM refused {email}: already taken"
        )))
    }
}

/// A receiver that refuses an event and quotes the e-mail it carried.
fn quoting_the_email(body: &[u8]) -> String {
    let event: Value = serde_json::from_slice(body).unwrap_or_default();
    let email = event["data"]["object"]["receipt_email"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    format!(r#"{{"error":"no account for {email}"}}"#)
}

#[tokio::test]
async fn errors_and_answers_are_masked_for_viewers_and_forgetting_leaves_no_column_holding_the_customer()
 {
    let receiver = Receiver::echoing(&[422], quoting_the_email).await;
    let mut settings = shipped_settings();
    settings.forwards = vec![receiver.forward("echo", &["payment_succeeded"], &[])];
    stripe_of(&mut settings)
        .event_types
        .insert("customer.updated".into(), "test_crm".into());
    let mut registry = Registry::builtin();
    registry.register("test_crm", std::sync::Arc::new(Crm));
    let app = spawn_looping(settings, registry).await;
    delivered(&app, "stripe", &jennys_payment("evt_all_pay", "pi_all")).await;
    app.wait_for_count(
        "SELECT count(*) FROM webhook_event_attempts WHERE response IS NOT NULL",
        1,
        std::time::Duration::from_secs(30),
    )
    .await;
    let customer = stripe_event(
        "evt_all_crm",
        "customer.updated",
        json!({"id": CUSTOMER, "object": "customer", "email": EMAIL, "name": "Jenny Rosen"}),
    );
    delivered(&app, "stripe", &customer).await;
    let (paid, crm) = (
        app.event_row_id("evt_all_pay").await,
        app.event_row_id("evt_all_crm").await,
    );

    // Viewers: the receiver's answer and the errors are masked like the payload.
    let masked = "•••@example.com";
    let shown = app.viewer().event(paid).await.json();
    let forward = shown["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .find(|a| a["handler"] == "forward:echo")
        .expect("the forward's run");
    assert_eq!(
        forward["response"],
        format!(r#"{{"error":"no account for {masked}"}}"#)
    );
    let refused = app.viewer().event(crm).await.json();
    assert_eq!(refused["status"], "dead");
    for error in [
        &refused["last_error"],
        &refused["attempts"][0]["error"],
        &refused["handlers"][0]["last_error"],
    ] {
        let error = error.as_str().expect("an error");
        assert!(
            error.contains(&format!("the CRM refused {masked}")),
            "{error}"
        );
    }
    let payment = app.viewer().payment("stripe", "pi_all").await;
    assert_eq!(payment.status, 200);
    let list = app.viewer().events(&format!("q={CUSTOMER}")).await;
    let pages = [
        app.viewer().event_page(paid).await,
        app.viewer().event_page(crm).await,
        app.viewer().get("/admin/payments/stripe/pi_all").await,
    ];
    let seen = [
        shown.to_string(),
        refused.to_string(),
        payment.text(),
        list.text(),
    ];
    for answer in seen.iter().chain(&pages.map(|p| p.text())) {
        assert!(!answer.contains(EMAIL), "a viewer sees {EMAIL}: {answer}");
    }
    assert!(payment.text().contains(masked), "{}", payment.text());
    // An operator who reveals sees them as stored (audited).
    let revealed = app
        .operator()
        .get(&format!("/admin/api/events/{crm}?reveal=true"))
        .await
        .json();
    assert_eq!(
        revealed["last_error"].as_str().map(|e| e.contains(EMAIL)),
        Some(true)
    );

    // Operators search by the customer and retry under an Idempotency-Key.
    let bulk = app
        .operator()
        .bulk_retry(&json!({"q": CUSTOMER}), None)
        .await;
    assert_eq!(bulk.status, 200, "{}", bulk.text());
    let retried = app.operator().retry(crm, Some("retry-jenny")).await;
    assert_eq!(retried.status, 200, "{}", retried.text());
    assert_eq!(retried.json()["customer_id"], CUSTOMER);
    let before = columns_holding(&app, EMAIL).await;
    for column in [
        "webhook_events.payload",
        "webhook_events.body",
        "webhook_events.last_error",
        "webhook_event_attempts.error",
        "webhook_event_attempts.response",
    ] {
        assert!(before.contains(&column.to_string()), "{before:?}");
    }
    let before = columns_holding(&app, CUSTOMER).await;
    for column in ["admin_audit.detail", "admin_idempotency_keys.response_body"] {
        assert!(before.contains(&column.to_string()), "{before:?}");
    }

    let path = format!("/admin/api/customers/{CUSTOMER}/forget");
    let done = app
        .operator()
        .send(
            "POST",
            &path,
            &[("Idempotency-Key", "forget-jenny")],
            Vec::new(),
        )
        .await;
    assert_eq!(done.status, 200, "{}", done.text());
    for needle in [CUSTOMER, EMAIL, "Jenny Rosen"] {
        assert_eq!(
            columns_holding(&app, needle).await,
            Vec::<String>::new(),
            "{needle} is still stored"
        );
    }
    // What operators need stays: the status, the receiver's status, the payment.
    assert_eq!(app.event_status("evt_all_crm").await, "dead");
    let statuses = app
        .strings(
            "SELECT http_status::text FROM webhook_event_attempts WHERE handler = 'forward:echo'",
            &[],
        )
        .await;
    assert!(statuses.contains(&"422".to_string()), "{statuses:?}");
    let row = crate::support::provider::payment_row(&app, "stripe", "pi_all").await;
    assert_eq!((row.0.as_str(), row.1), ("succeeded", 1500));
}

/// A GoCardless event of `customer` about `payment`.
fn gocardless_event(id: &str, payment: &str, customer: &str) -> Value {
    json!({"id": id, "created_at": "2024-06-14T10:02:11.789Z", "resource_type": "payments",
           "action": "confirmed",
           "links": {"payment": payment, "mandate": "MD_SHARED", "customer": customer},
           "details": {"origin": "gocardless", "cause": "payment_confirmed"},
           "metadata": {}, "resource_metadata": {}})
}

#[tokio::test]
async fn forgetting_reaches_the_request_a_gocardless_batch_mate_keeps() {
    let app = spawn_app().await;
    let batch = json!({"events": [gocardless_event("EV_FORGET_A", "PM_FORGET_A", "CU_FORGOTTEN"),
                                  gocardless_event("EV_FORGET_B", "PM_FORGET_B", "CU_KEPT")],
                       "meta": {"webhook_id": "WB_FORGET"}});
    let (headers, body) = app.sign_body("gocardless", &serde_json::to_vec(&batch).expect("json"));
    let answer = app.post("gocardless", &headers, body).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert!(
        columns_holding(&app, "CU_FORGOTTEN")
            .await
            .contains(&"webhook_events.body".to_string())
    );

    let forgotten = run_hookd_json(
        &["forget", "--customer", "CU_FORGOTTEN", "--json"],
        app.database_url(),
    )
    .await;
    assert_eq!(forgotten["events"], 1, "{forgotten}");
    assert_eq!(
        columns_holding(&app, "CU_FORGOTTEN").await,
        Vec::<String>::new(),
        "CU_FORGOTTEN is still stored"
    );
    // The batch-mate keeps its customer, its payload as received and its own
    // item of the request (a retry or a forward reads that); what it keeps no
    // longer matches the signature.
    let kept = columns_holding(&app, "CU_KEPT").await;
    for column in [
        "webhook_events.payload",
        "webhook_events.body",
        "webhook_events.customer_id",
        "payments.customer_id",
    ] {
        assert!(kept.contains(&column.to_string()), "{kept:?}");
    }
    let mate = app.event_row_id("EV_FORGET_B").await;
    let read = |sql: &'static str| {
        let app = &app;
        async move {
            let text = app.strings(sql, &[&mate]).await;
            serde_json::from_str::<Value>(&text[0]).expect("json")
        }
    };
    let own = read("SELECT convert_from(body, 'UTF8') FROM webhook_events WHERE id = $1").await;
    assert_eq!(
        own,
        gocardless_event("EV_FORGET_B", "PM_FORGET_B", "CU_KEPT")
    );
    // The request both came in, kept once: the customer's item rewritten, the
    // batch-mate's as it came.
    let request = read(
        "SELECT convert_from(r.body, 'UTF8') FROM event_requests r
           JOIN webhook_events e ON e.request_id = r.id WHERE e.id = $1",
    )
    .await;
    assert_eq!(
        request["events"][1],
        gocardless_event("EV_FORGET_B", "PM_FORGET_B", "CU_KEPT")
    );
    assert_eq!(request["events"][0]["links"]["customer"], "[redacted]");
    let origin = &app.viewer().event(mate).await.json()["origin"];
    assert_eq!(origin["status"], "redacted", "{origin}");
}

#[tokio::test]
async fn forgetting_an_adyen_shopper_reference_leaves_it_nowhere() {
    let app = spawn_app().await;
    let item = json!({
        "additionalData": {"shopperReference": "shopper-forgotten", "shopperEmail": EMAIL,
                           "shopperName": "Jenny Rosen"},
        "amount": {"currency": "EUR", "value": 1500},
        "eventCode": "AUTHORISATION",
        "eventDate": "2026-11-30T14:00:00+01:00",
        "merchantAccountCode": "HookdShopECOM",
        "merchantReference": "order-forget",
        "pspReference": "8535296650150001",
        "success": "true",
    });
    let body = json!({"live": "false", "notificationItems": [{"NotificationRequestItem": item}]});
    let (headers, body) = app.sign_body("adyen", &serde_json::to_vec(&body).expect("json"));
    assert_eq!(app.post("adyen", &headers, body).await.status, 200);
    // Support staff look the shopper up and retry their event.
    let id = app
        .event_row_id("8535296650150001:AUTHORISATION:true")
        .await;
    let customer = app.viewer().get("/admin/customers/shopper-forgotten").await;
    assert_eq!(customer.status, 200);
    let bulk = json!({"q": "shopper-forgotten"});
    assert_eq!(
        app.operator()
            .bulk_retry(&bulk, Some("bulk-shopper"))
            .await
            .status,
        200
    );
    assert_eq!(
        app.operator().retry(id, Some("retry-shopper")).await.status,
        200
    );
    assert!(!columns_holding(&app, "shopper-forgotten").await.is_empty());

    let forgotten = run_hookd_json(
        &["forget", "--customer", "shopper-forgotten", "--json"],
        app.database_url(),
    )
    .await;
    assert_eq!(forgotten["events"], 1, "{forgotten}");
    for needle in ["shopper-forgotten", EMAIL, "Jenny Rosen"] {
        assert_eq!(
            columns_holding(&app, needle).await,
            Vec::<String>::new(),
            "{needle} is still stored"
        );
    }
    let row = crate::support::provider::payment_row(&app, "adyen", "8535296650150001").await;
    assert_eq!((row.0.as_str(), row.1, row.4), ("succeeded", 1500, None));
}
