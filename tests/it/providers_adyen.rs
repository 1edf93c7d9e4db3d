//! Adyen: several events per request, each signed inside the body; every item
//! verified before anything is stored; `[accepted]` for every taken request;
//! kinds by event code and success; refunds as facts; conflicting items recorded
//! and acknowledged; and the verdicts of Adyen's own library on its vectors.

use hookd::providers::Verifier;
use hookd::signature::Secret;
use serde_json::{Value, json};

use crate::support::{TestApp, shipped_settings, spawn_app};

const VECTORS: &str = include_str!("../vectors/adyen.json");
const MERCHANT: &str = "HookdShopECOM";

fn item(psp: &str, code: &str, success: bool, value: i64, original: Option<&str>) -> Value {
    let mut item = json!({
        "additionalData": {"shopperReference": "shopper-7"},
        "amount": {"currency": "EUR", "value": value},
        "eventCode": code,
        "eventDate": "2026-11-30T14:00:00+01:00",
        "merchantAccountCode": MERCHANT,
        "merchantReference": format!("order-{psp}"),
        "pspReference": psp,
        "success": if success { "true" } else { "false" },
    });
    if let Some(original) = original {
        item["originalReference"] = json!(original);
    }
    item
}

fn notification(items: &[Value]) -> Value {
    let items: Vec<Value> = items
        .iter()
        .map(|i| json!({"NotificationRequestItem": i}))
        .collect();
    json!({"live": "false", "notificationItems": items})
}

/// The request Adyen would send: every item signed with the source's first key.
fn signed(app: &TestApp, items: &[Value]) -> (Vec<(String, String)>, Vec<u8>) {
    let body = serde_json::to_vec(&notification(items)).expect("json");
    app.sign_body("adyen", &body)
}

async fn send(app: &TestApp, items: &[Value]) -> crate::support::Answer {
    let (headers, body) = signed(app, items);
    app.post("adyen", &headers, body).await
}

fn accepted(answer: &crate::support::Answer) {
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.body, b"[accepted]");
    assert_eq!(answer.header("content-type"), Some("text/plain"));
}

async fn events(app: &TestApp) -> Vec<(String, String, Option<String>, String, i32)> {
    app.query(
        "SELECT event_id, event_type, kind, status, deliveries FROM webhook_events
          WHERE source = 'adyen' ORDER BY event_id",
        &[],
    )
    .await
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
    .collect()
}

async fn payment(app: &TestApp, id: &str) -> (String, i64, i64, Option<String>, Option<String>) {
    let rows = app
        .query(
            "SELECT status, amount, amount_refunded, currency, customer_id FROM payments
              WHERE source = 'adyen' AND payment_id = $1",
            &[&id],
        )
        .await;
    let row = rows.first().unwrap_or_else(|| panic!("no payment {id}"));
    (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4))
}

#[tokio::test]
async fn each_event_code_maps_to_its_kind_and_every_answer_is_accepted() {
    let app = spawn_app().await;
    let cases = [
        (
            item("1001", "AUTHORISATION", true, 1500, None),
            Some("payment_succeeded"),
        ),
        (
            item("1002", "AUTHORISATION", false, 900, None),
            Some("payment_failed"),
        ),
        (
            item("1003", "CAPTURE", true, 1500, Some("1001")),
            Some("payment_succeeded"),
        ),
        (item("1004", "CAPTURE", false, 1500, Some("1001")), None),
        (
            item("1005", "REFUND", true, 200, Some("1001")),
            Some("payment_refunded"),
        ),
        (item("1006", "REFUND", false, 200, Some("1001")), None),
        (
            item("1007", "CHARGEBACK", true, 1500, Some("1001")),
            Some("dispute_opened"),
        ),
        (
            item(
                "1008",
                "NOTIFICATION_OF_CHARGEBACK",
                true,
                1500,
                Some("1001"),
            ),
            Some("dispute_opened"),
        ),
        (item("1009", "REPORT_AVAILABLE", true, 0, None), None),
    ];
    for (item, _) in &cases {
        accepted(&send(&app, std::slice::from_ref(item)).await);
    }
    let stored = events(&app).await;
    assert_eq!(stored.len(), cases.len());
    for ((item, kind), row) in cases.iter().zip(&stored) {
        let success = item["success"].as_str().expect("success");
        let code = item["eventCode"].as_str().expect("code");
        let psp = item["pspReference"].as_str().expect("psp");
        assert_eq!(row.0, format!("{psp}:{code}:{success}"));
        assert_eq!(row.1, code);
        assert_eq!(row.2.as_deref(), *kind, "{code} {success}");
        let status = if kind.is_some() {
            "processed"
        } else {
            "ignored"
        };
        assert_eq!(row.3, status, "{code} {success}");
    }
    // The authorisation states the amount; a refund's own value is a refund,
    // and the chargeback's value is not the payment's amount.
    assert_eq!(
        payment(&app, "1001").await,
        (
            "disputed".into(),
            1500,
            200,
            Some("EUR".into()),
            Some("shopper-7".into())
        )
    );
    assert_eq!(payment(&app, "1002").await.0, "failed");

    // The desk shows them as it shows Stripe's: the payment with every event
    // naming it (the ignored ones too), and each event's page.
    let view = app.viewer().payment("adyen", "1001").await;
    assert_eq!(view.status, 200, "{}", view.text());
    let names: Vec<String> = view.json()["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["event_id"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(names.len(), 7, "{names:?}");
    assert!(names.contains(&"1004:CAPTURE:false".to_string()));
    let id = app.event_row_id("1005:REFUND:true").await;
    let page = app.viewer().event_page(id).await;
    assert_eq!(page.status, 200);
    assert!(page.text().contains("1005:REFUND:true"));
}

#[tokio::test]
async fn refunds_add_up_once_each_in_any_order_and_resends_are_duplicates() {
    let app = spawn_app().await;
    let refunds = [
        item("r1", "REFUND", true, 500, Some("2001")),
        item("r2", "REFUND", true, 300, Some("2001")),
    ];
    // Refunds before the payment, one of them twice, the other inside a batch.
    accepted(&send(&app, &refunds[1..]).await);
    accepted(&send(&app, &refunds[1..]).await);
    accepted(
        &send(
            &app,
            &[
                refunds[0].clone(),
                item("2001", "AUTHORISATION", true, 1500, None),
            ],
        )
        .await,
    );
    assert_eq!(
        payment(&app, "2001").await,
        (
            "partially_refunded".into(),
            1500,
            800,
            Some("EUR".into()),
            Some("shopper-7".into())
        )
    );
    let deliveries: Vec<(String, i32)> =
        events(&app).await.into_iter().map(|e| (e.0, e.4)).collect();
    assert_eq!(
        deliveries,
        [
            ("2001:AUTHORISATION:true".into(), 1),
            ("r1:REFUND:true".into(), 1),
            ("r2:REFUND:true".into(), 2)
        ]
    );
}

#[tokio::test]
async fn a_batch_is_stored_whole_in_one_commit_and_its_resend_is_all_duplicates() {
    let app = spawn_app().await;
    let batch = [
        item("3001", "AUTHORISATION", true, 1000, None),
        item("3002", "AUTHORISATION", true, 2000, None),
        item("3003", "REPORT_AVAILABLE", true, 0, None),
    ];
    let (headers, body) = signed(&app, &batch);
    let first = app.post("adyen", &headers, body.clone()).await;
    accepted(&first);
    assert_eq!(first.header("Idempotent-Replayed"), None);
    // One transaction stored the three: their rows share its xmin.
    let transactions = app
        .count(
            "SELECT count(DISTINCT xmin::text) FROM webhook_events WHERE source = 'adyen'",
            &[],
        )
        .await;
    assert_eq!(transactions, 1);

    let again = app.post("adyen", &headers, body).await;
    accepted(&again);
    assert_eq!(again.header("Idempotent-Replayed"), Some("true"));
    let counts: Vec<i32> = events(&app).await.into_iter().map(|e| e.4).collect();
    assert_eq!(counts, [2, 2, 2]);

    // New and known items together: the new one is stored, the known counted.
    accepted(
        &send(
            &app,
            &[
                batch[0].clone(),
                item("3004", "AUTHORISATION", false, 50, None),
            ],
        )
        .await,
    );
    let counts: Vec<(String, i32)> = events(&app).await.into_iter().map(|e| (e.0, e.4)).collect();
    assert_eq!(counts[0], ("3001:AUTHORISATION:true".into(), 3));
    assert_eq!(counts[3], ("3004:AUTHORISATION:false".into(), 1));
}

#[tokio::test]
async fn changing_any_signed_field_of_any_item_refuses_the_whole_batch_and_stores_nothing() {
    let app = spawn_app().await;
    let good = item("4001", "AUTHORISATION", true, 1000, Some("4000"));
    let mate = item("4002", "CAPTURE", true, 5, Some("4001"));
    let (headers, body) = signed(&app, &[good.clone(), mate]);
    let signed_body: Value = serde_json::from_slice(&body).expect("json");
    let pointers = [
        "/pspReference",
        "/originalReference",
        "/merchantAccountCode",
        "/merchantReference",
        "/amount/value",
        "/amount/currency",
        "/eventCode",
        "/success",
    ];
    for (index, pointer) in pointers.iter().enumerate() {
        // The second item is tampered with, so the first would verify alone.
        let mut tampered = signed_body.clone();
        let at = format!("/notificationItems/1/NotificationRequestItem{pointer}");
        let slot = tampered.pointer_mut(&at).expect("field");
        *slot = match slot {
            Value::Number(_) => json!(6),
            Value::String(s) if s == "true" => json!("false"),
            Value::String(s) => json!(format!("{s}x")),
            other => panic!("unexpected {other}"),
        };
        let answer = app
            .post(
                "adyen",
                &headers,
                serde_json::to_vec(&tampered).expect("json"),
            )
            .await;
        assert_eq!(answer.status, 401, "{pointer} ({index}): {}", answer.text());
    }
    // An unsigned field may change (Adyen does not sign it).
    let mut reworded = signed_body.clone();
    reworded["notificationItems"][1]["NotificationRequestItem"]["eventDate"] = json!("later");
    reworded["live"] = json!("true");
    // A signature missing, or not base64.
    let mut unsigned = signed_body.clone();
    unsigned["notificationItems"][0]["NotificationRequestItem"]["additionalData"]
        .as_object_mut()
        .expect("data")
        .remove("hmacSignature");
    let mut garbled = signed_body.clone();
    garbled["notificationItems"][0]["NotificationRequestItem"]["additionalData"]["hmacSignature"] =
        json!("not base64!");
    for (what, body, status) in [
        ("missing", unsigned, 401),
        ("garbled", garbled, 401),
        (
            "no items",
            json!({"live": "false", "notificationItems": []}),
            401,
        ),
        ("not a notification", json!({"id": "x"}), 401),
    ] {
        let answer = app
            .post("adyen", &headers, serde_json::to_vec(&body).expect("json"))
            .await;
        assert_eq!(answer.status, status, "{what}: {}", answer.text());
    }
    assert_eq!(
        app.count("SELECT count(*) FROM webhook_events", &[]).await,
        0,
        "a refused batch stores nothing"
    );
    let answer = app
        .post(
            "adyen",
            &headers,
            serde_json::to_vec(&reworded).expect("json"),
        )
        .await;
    accepted(&answer);
    assert_eq!(events(&app).await.len(), 2);
}

#[tokio::test]
async fn an_item_reusing_an_id_with_another_payload_is_recorded_and_the_batch_acknowledged() {
    let app = spawn_app().await;
    let original = item("5001", "AUTHORISATION", true, 1000, None);
    accepted(&send(&app, std::slice::from_ref(&original)).await);
    let mut changed = original.clone();
    changed["merchantReference"] = json!("order-rewritten");

    // Alone, the conflict is refused as for every single-event request.
    let alone = send(&app, std::slice::from_ref(&changed)).await;
    assert_eq!(alone.status, 422, "{}", alone.text());

    // In a batch, its batch-mate is stored and the request acknowledged.
    let mate = item("5002", "AUTHORISATION", true, 700, None);
    let (headers, body) = signed(&app, &[changed.clone(), mate]);
    accepted(&app.post("adyen", &headers, body.clone()).await);
    // Its resend is the same record, counted.
    accepted(&app.post("adyen", &headers, body).await);
    let ids: Vec<String> = events(&app).await.into_iter().map(|e| e.0).collect();
    assert_eq!(ids, ["5001:AUTHORISATION:true", "5002:AUTHORISATION:true"]);
    let rows = app
        .query(
            "SELECT c.stored_sha256 = e.payload_sha256, c.offered_sha256 <> e.payload_sha256,
                    c.offered_payload->>'merchantReference'
               FROM event_conflicts c JOIN webhook_events e ON e.id = c.webhook_event_id",
            &[],
        )
        .await;
    assert_eq!(rows.len(), 1);
    assert!(rows[0].get::<_, bool>(0) && rows[0].get::<_, bool>(1));
    assert_eq!(rows[0].get::<_, String>(2), "order-rewritten");
    // The stored event is unchanged, and the desk shows the conflict.
    assert_eq!(payment(&app, "5001").await.1, 1000);
    let id = app.event_row_id("5001:AUTHORISATION:true").await;
    let detail = app.viewer().event(id).await.json();
    let conflicts = detail["conflicts"].as_array().expect("conflicts");
    assert_eq!(conflicts.len(), 1, "{detail}");
    assert_eq!(
        conflicts[0]["stored_fingerprint"], detail["payload_sha256"],
        "{detail}"
    );
    assert_ne!(
        conflicts[0]["offered_fingerprint"],
        detail["payload_sha256"]
    );
    assert_eq!(conflicts[0]["deliveries"], 2, "{detail}");

    // The record holds a payload: it goes with the payloads, after `retention`.
    app.execute(
        "UPDATE event_conflicts SET received_at = now() - interval '60 days'",
        &[],
    )
    .await;
    let purged = app.app.purger.run_once(None).await.expect("purge");
    assert_eq!(purged.conflicts_deleted, 1);
    assert_eq!(
        app.count("SELECT count(*) FROM event_conflicts", &[]).await,
        0
    );
}

#[tokio::test]
async fn a_conflict_the_database_fails_to_record_after_the_commit_is_a_503_and_its_resend_records_it()
 {
    let app = spawn_app().await;
    let original = item("5101", "AUTHORISATION", true, 1000, None);
    accepted(&send(&app, std::slice::from_ref(&original)).await);
    let mut changed = original.clone();
    changed["merchantReference"] = json!("order-rewritten");
    let mate = item("5102", "AUTHORISATION", true, 700, None);
    // The database fails (out of disk) just after the request's commit, at
    // the conflict's record.
    app.execute(
        "CREATE FUNCTION refuse_record() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'no room' USING ERRCODE = '53100'; END $$",
        &[],
    )
    .await;
    app.execute(
        "CREATE TRIGGER refuse_record BEFORE INSERT OR UPDATE ON event_conflicts
         FOR EACH ROW EXECUTE FUNCTION refuse_record()",
        &[],
    )
    .await;
    let (headers, body) = signed(&app, &[changed, mate]);
    let failed = app.post("adyen", &headers, body.clone()).await;
    assert_eq!(failed.status, 503, "{}", failed.text());
    assert!(failed.header("Retry-After").is_some());
    // The batch-mate committed; nothing of the conflict is kept yet.
    assert_eq!(payment(&app, "5102").await.1, 700);
    assert_eq!(
        app.count("SELECT count(*) FROM event_conflicts", &[]).await,
        0
    );

    // The database recovers; Adyen resends the request: the batch-mate is a
    // copy, the conflict is recorded, and the request acknowledged.
    app.execute("DROP TRIGGER refuse_record ON event_conflicts", &[])
        .await;
    accepted(&app.post("adyen", &headers, body).await);
    assert_eq!(
        app.count("SELECT count(*) FROM event_conflicts", &[]).await,
        1
    );
    let mate_row =
        "SELECT deliveries FROM webhook_events WHERE event_id = '5102:AUTHORISATION:true'";
    assert_eq!(app.query(mate_row, &[]).await[0].get::<_, i32>(0), 2);
    let runs = "SELECT count(*) FROM webhook_event_attempts a JOIN webhook_events e \
                ON e.id = a.webhook_event_id WHERE e.event_id = '5102:AUTHORISATION:true'";
    assert_eq!(app.count(runs, &[]).await, 1, "applied once");
    assert_eq!(
        payment(&app, "5101").await.1,
        1000,
        "the stored event unchanged"
    );
}

#[tokio::test]
async fn one_genuine_item_resent_with_other_unsigned_fields_keeps_ten_records_and_counts_the_rest()
{
    let app = spawn_app().await;
    let original = item("5101", "AUTHORISATION", true, 1000, None);
    let mate = item("5102", "AUTHORISATION", true, 700, None);
    // The genuine request, as Adyen signed it: whoever holds it (a forward's
    // receiver gets each item byte for byte) holds a genuine item.
    let (headers, genuine) = signed(&app, &[original, mate]);
    accepted(&app.post("adyen", &headers, genuine.clone()).await);
    let genuine: Value = serde_json::from_slice(&genuine).expect("json");
    // The item again, an unsigned field changed each time, beside its signed
    // batch-mate (a duplicate): every copy verifies as it is, re-signed by nobody.
    let copy = |n: usize| {
        let mut request = genuine.clone();
        let item = &mut request["notificationItems"][0]["NotificationRequestItem"];
        item["eventDate"] = json!(format!("2026-12-01T10:00:{n:02}+01:00"));
        serde_json::to_vec(&request).expect("json")
    };
    for n in 0..15 {
        accepted(&app.post("adyen", &headers, copy(n)).await);
    }
    // A kept copy again counts on its own record.
    accepted(&app.post("adyen", &headers, copy(0)).await);
    // A copy alone is refused, as every single-event conflict.
    let mut alone = genuine.clone();
    alone["notificationItems"] = json!([genuine["notificationItems"][0].clone()]);
    alone["notificationItems"][0]["NotificationRequestItem"]["eventDate"] = json!("later");
    let alone = app
        .post("adyen", &headers, serde_json::to_vec(&alone).expect("json"))
        .await;
    assert_eq!(alone.status, 422, "{}", alone.text());
    assert_eq!(alone.json()["error"], "event_id_conflict");

    // Ten records are kept, whole; the five copies past them are counted.
    assert_eq!(
        app.count("SELECT count(*) FROM event_conflicts", &[]).await,
        10
    );
    let id = app.event_row_id("5101:AUTHORISATION:true").await;
    let detail = app.viewer().event(id).await.json();
    let conflicts = detail["conflicts"].as_array().expect("conflicts");
    assert_eq!(conflicts.len(), 10, "{detail}");
    assert_eq!(conflicts[0]["deliveries"], 2, "{detail}");
    assert_eq!(detail["conflicts_not_kept"], 5, "{detail}");
    let page = app.viewer().event_page(id).await.text();
    assert!(
        page.contains("5 more conflicting deliveries came past the 10 items kept"),
        "{page}"
    );
    // The stored event and its batch-mate are unchanged.
    assert_eq!(payment(&app, "5101").await.1, 1000);
    let stored = events(&app).await;
    assert_eq!(stored.len(), 2);
    assert_eq!(stored[1].4, 17, "the batch-mate's every delivery counted");
}

#[tokio::test]
async fn basic_credentials_when_configured_are_checked_too() {
    let app = crate::support::provider::spawn_with_env(
        "HOOKD_SOURCE_ADYEN_BASIC_AUTH",
        "adyen-user:s3cret-pass",
    )
    .await;
    let (headers, body) = signed(&app, &[item("7001", "AUTHORISATION", true, 1, None)]);
    assert!(headers.iter().any(|(k, _)| k == "Authorization"));
    let without = crate::support::provider::without_header(&headers, "Authorization");
    let mut wrong = without.clone();
    wrong.push((
        "Authorization".into(),
        "Basic YWR5ZW4tdXNlcjp3cm9uZw==".into(),
    ));
    assert_eq!(app.post("adyen", &without, body.clone()).await.status, 401);
    assert_eq!(app.post("adyen", &wrong, body.clone()).await.status, 401);
    assert_eq!(
        app.count("SELECT count(*) FROM webhook_events", &[]).await,
        0
    );
    accepted(&app.post("adyen", &headers, body.clone()).await);
    // The scheme's name is case-insensitive, as HTTP says.
    let lower: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| (k.clone(), v.replacen("Basic ", "basic ", 1)))
        .collect();
    let again = app.post("adyen", &lower, body).await;
    assert_eq!(again.status, 200, "{}", again.text());
}

/// hookd's verdict on every case Adyen's own `HmacValidator` judged.
#[test]
fn the_verdicts_of_adyens_own_library_on_its_vectors() {
    let vectors: Value = serde_json::from_str(VECTORS).expect("vectors");
    let settings = shipped_settings();
    let source = settings.source("adyen").expect("adyen");
    let mut checked = 0;
    for case in vectors["cases"].as_array().expect("cases") {
        let name = case["name"].as_str().expect("name");
        let secrets = [Secret::new(case["key"].as_str().expect("key"))];
        let verifier = Verifier {
            scheme: &source.scheme,
            secrets: &secrets,
            tolerance: source.tolerance,
        };
        let body = case["body"].as_str().expect("body");
        let verdict = verifier.verify(&Vec::new(), body.as_bytes(), 0);
        let valid = case["valid"].as_bool().expect("valid");
        assert_eq!(verdict.is_ok(), valid, "{name}: {verdict:?}");
        checked += 1;
    }
    assert!(checked >= 20, "{checked} cases");
    // Where Adyen's library is more lenient than hookd: signatures in unpadded
    // or URL-safe base64, or followed by junk, are refused here; a non-hex key
    // is refused when the configuration loads.
    let mut quirks = 0;
    for quirk in vectors["quirks"].as_array().expect("quirks") {
        let name = quirk["name"].as_str().expect("name");
        let body = quirk["body"].as_str().expect("body");
        let key = quirk["key"].as_str().unwrap_or_default();
        quirks += 1;
        if name == "key_not_hex" {
            // Refused before any delivery: the key cannot be configured.
            let table =
                format!("[[sources]]\nname = \"a\"\nscheme = \"adyen\"\nsecrets = [{key:?}]\n");
            let loaded = hookd::config::Settings::from_toml("t.toml", &table, &Default::default());
            let refused = loaded.expect_err("a key that is not hex").to_string();
            assert!(refused.contains("sources[0].secrets[0]"), "{refused}");
            continue;
        }
        let secrets = [Secret::new(key)];
        let verifier = Verifier {
            scheme: &source.scheme,
            secrets: &secrets,
            tolerance: source.tolerance,
        };
        let verdict = verifier.verify(&Vec::new(), body.as_bytes(), 0).is_ok();
        let sdk = quirk["valid"].as_bool().unwrap_or(false);
        let expected = match name {
            "signature_unpadded" | "signature_urlsafe" | "signature_trailing_junk" => false,
            // No amount (its signature is the item's with one): refused, as the
            // library refuses it by throwing.
            _ => sdk,
        };
        assert_eq!(verdict, expected, "quirk {name}");
    }
    assert!(quirks >= 9, "{quirks} quirks");
}

#[tokio::test]
async fn each_event_keeps_its_own_item_so_retries_and_the_proof_of_origin_read_that_item() {
    let app = spawn_app().await;
    let batch = [
        item("8001", "AUTHORISATION", true, 1200, None),
        item("8002", "REFUND", true, 200, Some("8001")),
    ];
    accepted(&send(&app, &batch).await);
    // The kept bytes are the item as it came, not the whole notification.
    let kept = app
        .query(
            "SELECT body FROM webhook_events WHERE event_id = '8002:REFUND:true'",
            &[],
        )
        .await;
    let kept: Value = serde_json::from_slice(&kept[0].get::<_, Vec<u8>>(0)).expect("json");
    assert_eq!(kept["pspReference"], "8002");
    assert!(kept.get("notificationItems").is_none());

    // An operator's retry applies the item again (the payment is unchanged),
    // and the proof of origin verifies the item's own signature.
    let id = app.event_row_id("8002:REFUND:true").await;
    let retried = app.operator().retry(id, None).await;
    assert_eq!(retried.status, 200, "{}", retried.text());
    assert_eq!(retried.json()["status"], "processed", "{}", retried.text());
    assert_eq!(payment(&app, "8001").await.2, 200);
    let detail = app.viewer().event(id).await.json();
    assert_eq!(detail["origin"]["status"], "verified", "{detail}");
    assert_eq!(detail["origin"]["secret"], 1, "{detail}");
}

#[tokio::test]
async fn a_signature_cannot_be_moved_to_other_fields_across_a_colon() {
    let app = spawn_app().await;
    // A genuine item whose merchant reference holds a colon, signed.
    let mut genuine = item("8515", "AUTHORISATION", true, 1000, Some("Acme"));
    genuine["merchantAccountCode"] = json!("order");
    genuine["merchantReference"] = json!("42:x");
    let (headers, body) = signed(&app, &[genuine]);
    let signed_item = serde_json::from_slice::<Value>(&body).expect("json")["notificationItems"][0]
        ["NotificationRequestItem"]
        .clone();
    // The same signing string spelled with the fields shifted, which would name
    // another payment: refused, and nothing stored.
    let mut shifted = signed_item.clone();
    shifted["pspReference"] = json!("8515:Acme");
    shifted["originalReference"] = json!("order");
    shifted["merchantAccountCode"] = json!("42");
    shifted["merchantReference"] = json!("x");
    for (what, forged) in [
        ("shifted", shifted),
        ("value as text", {
            let mut v = signed_item.clone();
            v["amount"]["value"] = json!("1000.0");
            v
        }),
    ] {
        let answer = app
            .post(
                "adyen",
                &headers,
                serde_json::to_vec(&notification(&[forged])).expect("json"),
            )
            .await;
        assert_eq!(answer.status, 401, "{what}: {}", answer.text());
    }
    assert_eq!(
        app.count("SELECT count(*) FROM webhook_events", &[]).await,
        0
    );
    // The genuine one, with its colon in the merchant reference, is taken.
    accepted(&app.post("adyen", &headers, body).await);
}
