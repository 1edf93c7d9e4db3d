//! Receiving: every check of the receiver, in its order, for every scheme.

use std::time::Duration;

use hookd::simulate::Hints;
use serde_json::{Value, json};

use crate::support::{
    Answer, Spawn, TestApp, shipped_settings, spawn, spawn_app, spawn_with_settings, stripe_event,
    wait_for,
};

fn succeeded(id: &str, payment: &str) -> Value {
    stripe_event(
        id,
        "payment_intent.succeeded",
        json!({"id": payment, "object": "payment_intent", "amount": 2000, "currency": "usd",
               "customer": "cus_1"}),
    )
}

fn neutral(id: &str, ty: &str, payment: &str) -> Value {
    json!({"id": id, "type": ty, "created": 1_700_000_000,
           "data": {"payment_id": payment, "amount": 500, "currency": "eur", "customer_id": "c_1"}})
}

fn error_of(answer: &Answer) -> (u16, String) {
    let body = answer.json();
    (
        answer.status,
        body["error"].as_str().unwrap_or_default().to_string(),
    )
}

fn reason_of(answer: &Answer) -> String {
    answer.json()["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

async fn stored(app: &TestApp, source: &str, event_id: &str) -> i64 {
    app.count(
        "SELECT count(*) FROM webhook_events WHERE source = $1 AND event_id = $2",
        &[&source, &event_id],
    )
    .await
}

#[tokio::test]
async fn a_new_event_is_stored_and_acknowledged() {
    let app = spawn_app().await;
    let answer = app.deliver("stripe", &succeeded("evt_new", "pi_new")).await;
    assert_eq!(answer.status, 200);
    assert_eq!(
        answer.body,
        br#"{"status":"accepted","event_id":"evt_new"}"#
    );
    assert_eq!(answer.header("Idempotent-Replayed"), None);
    let rows = app
        .query(
            "SELECT event_type, kind, payment_id, customer_id, deliveries, signed_with, payload
             FROM webhook_events WHERE event_id = 'evt_new'",
            &[],
        )
        .await;
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!(row.get::<_, String>(0), "payment_intent.succeeded");
    assert_eq!(
        row.get::<_, Option<String>>(1).as_deref(),
        Some("payment_succeeded")
    );
    assert_eq!(row.get::<_, Option<String>>(2).as_deref(), Some("pi_new"));
    assert_eq!(row.get::<_, Option<String>>(3).as_deref(), Some("cus_1"));
    assert_eq!(row.get::<_, i32>(4), 1);
    assert_eq!(row.get::<_, i32>(5), 1);
    assert_eq!(row.get::<_, Value>(6)["data"]["object"]["id"], "pi_new");
}

#[tokio::test]
async fn a_resent_event_gets_the_first_answer_byte_for_byte() {
    let app = spawn_app().await;
    let event = succeeded("evt_dup", "pi_dup");
    let first = app.deliver("stripe", &event).await;
    let second = app.deliver("stripe", &event).await;
    let third = app.deliver("stripe", &event).await;
    assert_eq!(first.status, 200);
    for again in [&second, &third] {
        assert_eq!(again.status, 200);
        assert_eq!(again.body, first.body);
        assert_eq!(again.header("Idempotent-Replayed"), Some("true"));
        assert_eq!(again.header("content-type"), first.header("content-type"));
    }
    let rows = app
        .query(
            "SELECT deliveries, last_delivery_at > received_at, attempts
             FROM webhook_events WHERE event_id = 'evt_dup'",
            &[],
        )
        .await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<_, i32>(0), 3);
    assert!(rows[0].get::<_, bool>(1), "last_delivery_at moves on");
    assert_eq!(rows[0].get::<_, i32>(2), 1, "the handler ran once");
}

#[tokio::test]
async fn a_reserialised_resend_is_still_the_same_event() {
    let app = spawn_app().await;
    let compact = br#"{"id":"evt_ws","type":"customer.created","data":{"object":{"id":"cus_9","object":"customer"}}}"#.to_vec();
    let spaced = b"{\n  \"type\" : \"customer.created\",\n  \"data\" : { \"object\" : { \"object\" : \"customer\", \"id\" : \"cus_9\" } },\n  \"id\" : \"evt_ws\"\n}".to_vec();
    let first = app
        .post(
            "stripe",
            &app.sign("stripe", &compact, Hints::default()),
            compact.clone(),
        )
        .await;
    let second = app
        .post(
            "stripe",
            &app.sign("stripe", &spaced, Hints::default()),
            spaced,
        )
        .await;
    assert_eq!((first.status, second.status), (200, 200));
    assert_eq!(second.header("Idempotent-Replayed"), Some("true"));
    assert_eq!(first.body, second.body);
}

#[tokio::test]
async fn the_same_id_with_a_different_payload_is_refused() {
    let app = spawn_app().await;
    assert_eq!(
        app.deliver("stripe", &succeeded("evt_c", "pi_a"))
            .await
            .status,
        200
    );
    let answer = app.deliver("stripe", &succeeded("evt_c", "pi_b")).await;
    assert_eq!(error_of(&answer), (422, "event_id_conflict".into()));
    let row = &app
        .query(
            "SELECT deliveries, payment_id FROM webhook_events WHERE event_id = 'evt_c'",
            &[],
        )
        .await[0];
    assert_eq!(
        row.get::<_, i32>(0),
        1,
        "a conflicting delivery is not counted"
    );
    assert_eq!(row.get::<_, Option<String>>(1).as_deref(), Some("pi_a"));
}

#[tokio::test]
async fn an_unknown_source_is_404() {
    let app = spawn_app().await;
    let answer = app.post("nosuchprovider", &[], b"{}".to_vec()).await;
    assert_eq!(error_of(&answer), (404, "unknown_source".into()));
}

#[tokio::test]
async fn an_oversized_body_is_413_and_the_client_still_reads_the_answer() {
    let mut settings = shipped_settings();
    settings.max_body_bytes = 1024;
    let app = spawn_with_settings(settings).await;
    let mut event = succeeded("evt_big", "pi_big");
    event["padding"] = json!("x".repeat(4 * 1024 * 1024));
    // Declared length over the cap.
    let answer = app.deliver("stripe", &event).await;
    assert_eq!(error_of(&answer), (413, "payload_too_large".into()));
    // Streamed without a length: the cap is found while reading.
    let bytes = serde_json::to_vec(&event).expect("json");
    let headers = app.sign("stripe", &bytes, Hints::default());
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        bytes.chunks(64 * 1024).map(|c| Ok(c.to_vec())).collect();
    let mut request =
        app.http
            .post(format!("{}/webhooks/stripe", app.base))
            .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
                chunks,
            )));
    for (name, value) in &headers {
        request = request.header(name, value);
    }
    let response = request.send().await.expect("the 413 arrives, not a reset");
    assert_eq!(response.status().as_u16(), 413);
    assert_eq!(stored(&app, "stripe", "evt_big").await, 0);
    // A body exactly at the cap is fine.
    let small = json!({"id": "evt_small", "type": "x", "pad": ""});
    let len = serde_json::to_vec(&small).expect("json").len();
    let exact = json!({"id": "evt_small", "type": "x", "pad": "y".repeat(1024 - len)});
    assert_eq!(serde_json::to_vec(&exact).expect("json").len(), 1024);
    assert_eq!(app.deliver("stripe", &exact).await.status, 200);
}

#[tokio::test]
async fn checks_run_in_the_contract_order() {
    let mut settings = shipped_settings();
    settings.max_body_bytes = 64;
    let app = spawn_with_settings(settings).await;
    let big = vec![b'x'; 100];
    // Unknown source before size.
    assert_eq!(app.post("nope", &[], big.clone()).await.status, 404);
    // Size before signature.
    assert_eq!(app.post("stripe", &[], big).await.status, 413);
    // Signature before body: unsigned garbage is 401, signed garbage is 400.
    assert_eq!(
        app.post("stripe", &[], b"not json".to_vec()).await.status,
        401
    );
    let headers = app.sign_raw("github", b"not json", "d-1", "push");
    let answer = app.post("github", &headers, b"not json".to_vec()).await;
    assert_eq!(error_of(&answer), (400, "bad_request".into()));
    assert!(
        reason_of(&answer).contains("not JSON"),
        "{}",
        reason_of(&answer)
    );
}

#[tokio::test]
async fn bodies_without_an_id_or_type_are_400() {
    let app = spawn_app().await;
    for (body, reason) in [
        (json!({"type": "payment_intent.succeeded"}), "no event id"),
        (json!({"id": "evt_x"}), "no event type"),
    ] {
        let bytes = serde_json::to_vec(&body).expect("json");
        let headers = app.sign_raw("stripe", &bytes, "-", "-");
        let answer = app.post("stripe", &headers, bytes).await;
        assert_eq!(error_of(&answer), (400, "bad_request".into()));
        assert!(
            reason_of(&answer).contains(reason),
            "{}",
            reason_of(&answer)
        );
    }
    // Standard Webhooks take the type from the body.
    let body = br#"{"data":{}}"#.to_vec();
    let headers = app.sign(
        "standard",
        &body,
        Hints {
            event_type: Some("x"),
            event_id: Some("msg_1"),
        },
    );
    let answer = app.post("standard", &headers, body).await;
    assert_eq!(answer.status, 400);
    assert!(reason_of(&answer).contains("no event type"));
}

#[tokio::test]
async fn bad_signatures_are_401_with_a_reason() {
    let app = spawn_app().await;
    let body = serde_json::to_vec(&succeeded("evt_sig", "pi_sig")).expect("json");
    // Signed at a time of the test's choosing, so the cases below know it.
    let now = chrono::Utc::now().timestamp();
    let stripe = app.settings().source("stripe").expect("stripe").clone();
    let good = hookd::simulate::sign_delivery(&stripe, &body, Hints::default(), now)
        .expect("sign")
        .headers;
    let signature = good
        .iter()
        .find(|(k, _)| k == "Stripe-Signature")
        .map(|(_, v)| v.clone())
        .expect("signature");
    assert!(signature.starts_with(&format!("t={now},")), "{signature}");
    let with = |value: String| vec![("Stripe-Signature".to_string(), value)];
    let cases: Vec<(Vec<(String, String)>, &str)> = vec![
        (vec![], "missing"),
        (with("nonsense".into()), "malformed"),
        (with(format!("t={now},v1={}", "ab".repeat(32))), "mismatch"),
        (
            with(signature.replace(&format!("t={now}"), &format!("t={}", now - 1))),
            "mismatch",
        ),
    ];
    for (headers, reason) in cases {
        let answer = app.post("stripe", &headers, body.clone()).await;
        assert_eq!(error_of(&answer), (401, "invalid_signature".into()));
        assert!(
            reason_of(&answer).contains(reason),
            "{reason}: {}",
            reason_of(&answer)
        );
        assert!(!String::from_utf8_lossy(&answer.body).contains("whsec_"));
    }
    assert_eq!(stored(&app, "stripe", "evt_sig").await, 0);
    // The control: the genuine headers are taken.
    assert_eq!(app.post("stripe", &good, body).await.status, 200);
}

#[tokio::test]
async fn the_signature_is_checked_before_the_timestamp() {
    let app = spawn_app().await;
    let now = chrono::Utc::now().timestamp();
    for (source, body) in [
        ("stripe", succeeded("evt_order", "pi_order")),
        (
            "standard",
            neutral("msg_order", "payment.succeeded", "p_order"),
        ),
    ] {
        let settings = app.settings().source(source).expect("source").clone();
        let bytes = serde_json::to_vec(&body).expect("json");
        for (offset, genuine_reason) in [(-3600, "too old"), (3600, "too new")] {
            let signed =
                hookd::simulate::sign_delivery(&settings, &bytes, Hints::default(), now + offset)
                    .expect("sign");
            // Genuine but out of time: the timestamp is what is wrong.
            let answer = app.post(source, &signed.headers, bytes.clone()).await;
            assert_eq!(answer.status, 401);
            assert!(
                reason_of(&answer).contains(genuine_reason),
                "{source} {offset}: {}",
                reason_of(&answer)
            );
            // Not genuine and out of time: only the signature is spoken of.
            let mut other = bytes.clone();
            other.insert(1, b' ');
            let answer = app.post(source, &signed.headers, other).await;
            assert_eq!(
                (answer.status, reason_of(&answer).as_str()),
                (401, "signature mismatch"),
                "{source} {offset}"
            );
        }
    }
    assert_eq!(
        app.count("SELECT count(*) FROM webhook_events", &[]).await,
        0
    );
}

#[tokio::test]
async fn an_event_id_or_type_over_255_bytes_is_400_and_255_is_fine() {
    let app = spawn_app().await;
    let long_type = format!(
        "payment_intent.{}",
        "x".repeat(256 - "payment_intent.".len())
    );
    let long_id = format!("evt_{}", "y".repeat(252));
    assert_eq!((long_type.len(), long_id.len()), (256, 256));
    for (event, what) in [
        (
            stripe_event("evt_long_type", &long_type, json!({})),
            "event type",
        ),
        (
            stripe_event(&long_id, "customer.created", json!({})),
            "event id",
        ),
    ] {
        for _ in 0..2 {
            let answer = app.deliver("stripe", &event).await;
            assert_eq!(error_of(&answer), (400, "bad_request".into()));
            assert_eq!(
                reason_of(&answer),
                format!("{what} is longer than 255 bytes")
            );
        }
    }
    // GitHub's type is the X-GitHub-Event header and the body's action.
    let body = serde_json::to_vec(&json!({"action": "a".repeat(200)})).expect("json");
    let headers = app.sign(
        "github",
        &body,
        Hints {
            event_type: Some(&"e".repeat(60)),
            event_id: Some("gh-long-type"),
        },
    );
    let answer = app.post("github", &headers, body).await;
    assert_eq!(
        (answer.status, reason_of(&answer)),
        (400, "event type is longer than 255 bytes".to_string())
    );
    assert_eq!(
        app.count("SELECT count(*) FROM webhook_events", &[]).await,
        0
    );
    // At the limit, both are stored.
    let at_limit = stripe_event(&long_id[..255], &long_type[..255], json!({}));
    app.deliver_ok("stripe", &at_limit).await;
    assert_eq!(
        app.count("SELECT count(*) FROM webhook_events", &[]).await,
        1
    );
}

#[tokio::test]
async fn timestamps_outside_the_tolerance_are_refused_both_ways() {
    let app = spawn_app().await;
    let stripe = app.settings().source("stripe").expect("stripe").clone();
    let body = serde_json::to_vec(&succeeded("evt_old", "pi_old")).expect("json");
    let now = chrono::Utc::now().timestamp();
    for (offset, reason) in [(-400, "too old"), (400, "too new")] {
        let signed = hookd::simulate::sign_delivery(&stripe, &body, Hints::default(), now + offset)
            .expect("sign");
        let answer = app.post("stripe", &signed.headers, body.clone()).await;
        assert_eq!(answer.status, 401);
        assert!(
            reason_of(&answer).contains(reason),
            "{}",
            reason_of(&answer)
        );
    }
    let standard = app.settings().source("standard").expect("standard").clone();
    let body = serde_json::to_vec(&neutral("msg_old", "payment.succeeded", "p")).expect("json");
    let signed = hookd::simulate::sign_delivery(&standard, &body, Hints::default(), now - 400)
        .expect("sign");
    let answer = app.post("standard", &signed.headers, body).await;
    assert_eq!(
        (answer.status, reason_of(&answer).as_str()),
        (401, "timestamp too old")
    );
}

#[tokio::test]
async fn svix_header_names_are_accepted() {
    let app = spawn_app().await;
    let body =
        serde_json::to_vec(&neutral("msg_svix", "payment.succeeded", "p_svix")).expect("json");
    let headers: Vec<(String, String)> = app
        .sign("standard", &body, Hints::default())
        .into_iter()
        .map(|(k, v)| (k.replace("webhook-", "svix-"), v))
        .collect();
    assert!(headers.iter().any(|(k, _)| k == "svix-signature"));
    let answer = app.post("standard", &headers, body).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
}

#[tokio::test]
async fn a_hundred_concurrent_deliveries_of_one_event_store_one_row() {
    let app = spawn_app().await;
    let body = serde_json::to_vec(&succeeded("evt_race", "pi_race")).expect("json");
    let headers = app.sign("stripe", &body, Hints::default());
    let deliveries = (0..100).map(|_| app.post("stripe", &headers, body.clone()));
    let answers = futures_util::future::join_all(deliveries).await;
    assert!(answers.iter().all(|a| a.status == 200));
    assert!(answers.iter().all(|a| a.body == answers[0].body));
    let replayed = answers
        .iter()
        .filter(|a| a.header("Idempotent-Replayed") == Some("true"))
        .count();
    assert_eq!(replayed, 99, "exactly one delivery was the first");
    let row = &app
        .query(
            "SELECT count(*) OVER (), deliveries, attempts FROM webhook_events WHERE event_id = 'evt_race'",
            &[],
        )
        .await[0];
    assert_eq!(row.get::<_, i64>(0), 1);
    assert_eq!(row.get::<_, i32>(1), 100);
    assert_eq!(row.get::<_, i32>(2), 1);
}

#[tokio::test]
async fn health_and_readiness() {
    let app = spawn_app().await;
    assert_eq!(app.get("/healthz").await.status, 200);
    let ready = app.get("/readyz").await;
    assert_eq!(ready.status, 200);
    assert_eq!(ready.json()["status"], "ready");
}

/// Asks for every run of its events to be retried later: they wait in the backlog.
struct Later;

#[async_trait::async_trait]
impl hookd::handlers::Handler for Later {
    async fn apply(
        &self,
        _tx: &deadpool_postgres::Transaction<'_>,
        _event: &hookd::handlers::Event<'_>,
    ) -> Result<(), hookd::handlers::HandlerError> {
        Err(hookd::handlers::HandlerError::Retry("not now".into()))
    }
}

#[tokio::test]
async fn metrics_count_deliveries_failures_duplicates_and_events() {
    let mut settings = shipped_settings();
    settings.sources[0]
        .event_types
        .insert("test.later".into(), "test_later".into());
    let mut registry = hookd::handlers::Registry::builtin();
    registry.register("test_later", std::sync::Arc::new(Later));
    let app = spawn(Spawn {
        settings,
        registry,
        ..Spawn::default()
    })
    .await;
    let event = succeeded("evt_m", "pi_m");
    app.deliver_ok("stripe", &event).await;
    app.deliver_ok("stripe", &event).await;
    assert_eq!(app.post("stripe", &[], b"{}".to_vec()).await.status, 401);
    let answer = app.get("/metrics").await;
    assert_eq!(answer.status, 200);
    assert!(
        answer
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/plain"))
    );
    let metrics = crate::support::Exposition::parse(&String::from_utf8(answer.body).expect("utf8"));
    let stripe = ("source", "stripe");
    for (name, labels, value) in [
        (
            "hookd_deliveries_total",
            vec![stripe, ("outcome", "processed")],
            1.0,
        ),
        (
            "hookd_deliveries_total",
            vec![stripe, ("outcome", "duplicate")],
            1.0,
        ),
        (
            "hookd_deliveries_total",
            vec![stripe, ("outcome", "invalid_signature")],
            1.0,
        ),
        (
            "hookd_signature_failures_total",
            vec![stripe, ("reason", "missing")],
            1.0,
        ),
        ("hookd_duplicates_total", vec![stripe], 1.0),
        (
            "hookd_events_total",
            vec![("kind", "payment_succeeded"), ("status", "processed")],
            1.0,
        ),
        (
            "hookd_handler_duration_seconds_count",
            vec![("kind", "payment_succeeded")],
            1.0,
        ),
        ("hookd_retry_backlog", vec![], 0.0),
        ("hookd_dead_events", vec![], 0.0),
    ] {
        assert_eq!(metrics.value(name, &labels), value, "{name}{labels:?}");
    }
    assert!(
        metrics
            .types
            .contains(&("hookd_purged_rows_total".into(), "counter".into()))
    );

    // The backlog is read from the database (at most once a second): one failed
    // event, then two.
    for n in 1..=2 {
        let later = stripe_event(&format!("evt_later_{n}"), "test.later", json!({}));
        app.deliver_ok("stripe", &later).await;
        let metrics = wait_for(
            "the backlog to count it",
            Duration::from_secs(5),
            || async {
                let metrics = app.metrics().await;
                (metrics.series("hookd_retry_backlog", &[]) == Some(f64::from(n)))
                    .then_some(metrics)
            },
        )
        .await;
        assert_eq!(
            metrics.value(
                "hookd_events_total",
                &[("kind", "test_later"), ("status", "failed")]
            ),
            f64::from(n)
        );
        assert_eq!(metrics.value("hookd_dead_events", &[]), 0.0);
    }
    assert_eq!(
        app.count(
            "SELECT count(*) FROM webhook_events WHERE status = 'failed'",
            &[]
        )
        .await,
        2
    );
}

fn with_envelope(pending: i64, request: Value) -> Value {
    let mut event = succeeded("evt_volatile", "pi_volatile");
    event["pending_webhooks"] = json!(pending);
    event["request"] = request;
    event
}

#[tokio::test]
async fn a_resend_that_differs_only_in_stripe_volatile_fields_is_the_same_event() {
    let app = spawn_app().await;
    let first = app
        .deliver(
            "stripe",
            &with_envelope(1, json!({"id": "req_1", "idempotency_key": null})),
        )
        .await;
    assert_eq!(first.status, 200);
    let resend = app
        .deliver("stripe", &with_envelope(3, json!({"id": null})))
        .await;
    assert_eq!((resend.status, &resend.body), (200, &first.body));
    assert_eq!(resend.header("Idempotent-Replayed"), Some("true"));
    let mut changed = with_envelope(1, json!({"id": "req_1"}));
    changed["data"]["object"]["amount"] = json!(9999);
    let refused = app.deliver("stripe", &changed).await;
    assert_eq!(error_of(&refused), (422, "event_id_conflict".into()));
    assert_eq!(
        app.count(
            "SELECT deliveries::bigint FROM webhook_events WHERE event_id = 'evt_volatile'",
            &[]
        )
        .await,
        2
    );
}

#[tokio::test]
async fn events_stored_before_stable_fingerprints_still_dedupe_their_resends() {
    let app = spawn_app().await;
    assert_eq!(
        app.deliver("stripe", &with_envelope(1, json!({"id": "req_1"})))
            .await
            .status,
        200
    );
    // As a row written before the column existed: no stable fingerprint.
    app.execute("UPDATE webhook_events SET stable_sha256 = NULL", &[])
        .await;
    let same = app
        .deliver("stripe", &with_envelope(1, json!({"id": "req_1"})))
        .await;
    assert_eq!(same.header("Idempotent-Replayed"), Some("true"));
    app.execute("UPDATE webhook_events SET stable_sha256 = NULL", &[])
        .await;
    let volatile = app.deliver("stripe", &with_envelope(2, json!(null))).await;
    assert_eq!(volatile.status, 200);
    assert_eq!(volatile.header("Idempotent-Replayed"), Some("true"));
    assert_eq!(
        app.count(
            "SELECT count(*) FROM webhook_events WHERE stable_sha256 IS NOT NULL AND deliveries = 3",
            &[]
        )
        .await,
        1,
        "counted, and the stable fingerprint filled in"
    );
    let mut changed = with_envelope(2, json!(null));
    changed["data"]["object"]["currency"] = json!("eur");
    assert_eq!(app.deliver("stripe", &changed).await.status, 422);
}

#[tokio::test]
async fn a_source_can_fingerprint_the_whole_body() {
    let mut settings = shipped_settings();
    settings.sources[0].fingerprint_ignore = Vec::new().into();
    let app = spawn_with_settings(settings).await;
    assert_eq!(
        app.deliver("stripe", &with_envelope(1, json!(null)))
            .await
            .status,
        200
    );
    let resend = app.deliver("stripe", &with_envelope(2, json!(null))).await;
    assert_eq!(error_of(&resend), (422, "event_id_conflict".into()));
}

/// The shipped configuration with `extra` TOML appended, on a random port.
fn settings_with(extra: &str) -> hookd::config::Settings {
    let text = format!("{}\n{extra}", hookd_kit::settings::SHIPPED_TOML);
    let mut settings = hookd::config::Settings::from_toml("hookd.toml", &text, &Default::default())
        .unwrap_or_else(|e| panic!("{e}"));
    settings.listen = "127.0.0.1:0".parse().expect("addr");
    settings
}

/// Known answers, computed outside hookd when the test was written
/// (`printf '%s' CANONICAL | sha256sum`): the canonical form is keys sorted by
/// their bytes, no whitespace, serde_json's escapes and number spelling. A resend
/// of a purged event is recognised by this digest alone, so it must never change.
const CANONICAL_FINGERPRINTS: [(&str, &str, &str); 4] = [
    (
        r#"{ "b" : 1, "a" : [ true, null, "x" ] }"#,
        r#"{"a":[true,null,"x"],"b":1}"#,
        "54a65415ad370228851a1da4b31b6fd42dc58b19a50d35cae759325f7388ce64",
    ),
    (
        r#"{"z": {"y": 2, "x": "\u00e9é"}, "a": 1.50}"#,
        r#"{"a":1.5,"z":{"x":"éé","y":2}}"#,
        "d268d26da5d8f89cebed83340bb39155fa8861cadd6279ad984265adcd5f8f5e",
    ),
    (
        r#"{"é":"accent","a":"lower","_":"under","B":"upper"}"#,
        r#"{"B":"upper","_":"under","a":"lower","é":"accent"}"#,
        "a66f473b47562715963a06df34c349992a2fc4cfc768a2d7000a872354a5082e",
    ),
    (
        r#"{"s":"line\nbreak \"q\" \/ \u0000 tab\u0009","n":1.5e2}"#,
        r#"{"n":150.0,"s":"line\nbreak \"q\" / \u0000 tab\t"}"#,
        "049357627479ef6d9178d27f27cca8d08ef9bc4eda7e3c1eae17dfea6e35fbd6",
    ),
];

#[test]
fn the_fingerprint_is_sha256_of_a_fixed_canonical_form() {
    use sha2::Digest;
    for (text, canonical, digest) in CANONICAL_FINGERPRINTS {
        // The constants agree with each other (a typo would show here)...
        assert_eq!(hex::encode(sha2::Sha256::digest(canonical)), digest);
        // ...and hookd's fingerprint of the text is that digest.
        let value: Value = serde_json::from_str(text).expect("json");
        assert_eq!(
            hex::encode(hookd::event::fingerprint(&value)),
            digest,
            "{text}"
        );
    }
}

#[tokio::test]
async fn the_stored_fingerprints_are_the_known_digests() {
    let app = spawn_app().await;
    // As a provider might send it: its own key order and spacing.
    let body = br#"{ "type": "payment_intent.succeeded", "id": "evt_kat", "created": 1700000000,
  "object": "event", "pending_webhooks": 2,
  "data": { "object": { "currency": "usd", "amount": 2000, "object": "payment_intent", "id": "pi_kat" } } }"#
        .to_vec();
    let headers = app.sign("stripe", &body, Hints::default());
    assert_eq!(app.post("stripe", &headers, body).await.status, 200);
    let row = &app
        .query(
            "SELECT encode(payload_sha256, 'hex'), encode(stable_sha256, 'hex')
             FROM webhook_events WHERE event_id = 'evt_kat'",
            &[],
        )
        .await[0];
    // printf '%s' '{"created":1700000000,"data":{"object":{"amount":2000,"currency":"usd",
    //   "id":"pi_kat","object":"payment_intent"}},"id":"evt_kat","object":"event",
    //   "pending_webhooks":2,"type":"payment_intent.succeeded"}' | sha256sum
    assert_eq!(
        row.get::<_, String>(0),
        "121ded920a4e72f815abaa23194cf3760194f29146d6245df1fa9b6018a46c0c"
    );
    // The same without "pending_webhooks", which Stripe changes between resends.
    assert_eq!(
        row.get::<_, String>(1),
        "10dd5d0d82be1f95dd208c7346dfe339d3a3f70df69670b6b63e340d62123183"
    );
}

#[tokio::test]
async fn generic_hmac_signatures_match_independently_computed_vectors() {
    let app = spawn(Spawn {
        settings: settings_with(
            "[[sources]]\nname = \"generic\"\nscheme = \"hmac\"\n\
             secrets = [\"kat-generic-secret-0123\"]\nsignature_header = \"X-Signature\"\n\
             signature_encoding = \"hex\"\nsignature_prefix = \"sha256=\"\n\
             id_pointer = \"/order\"\ntype_pointer = \"/kind\"\n",
        ),
        ..Spawn::default()
    })
    .await;
    let body =
        br#"{"order":"ord_42","kind":"payments/succeeded","data":{"payment_id":"p_kat","amount":990}}"#
            .to_vec();
    // printf '%s' BODY | openssl dgst -sha256 -hmac 'kat-generic-secret-0123'
    let hex_tag = "8bfbf4d59a6537252ce411de1e76392bdca24febca147f7eecb26aaa2fd66a27";
    let header = |tag: &str| vec![("X-Signature".to_string(), format!("sha256={tag}"))];
    let mut wrong = hex_tag.to_string();
    wrong.replace_range(0..1, "9");
    let refused = app.post("generic", &header(&wrong), body.clone()).await;
    assert_eq!(
        (refused.status, reason_of(&refused).as_str()),
        (401, "signature mismatch")
    );
    let unprefixed = vec![("X-Signature".to_string(), hex_tag.to_string())];
    assert_eq!(
        app.post("generic", &unprefixed, body.clone()).await.status,
        401
    );
    let answer = app.post("generic", &header(hex_tag), body.clone()).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.json()["event_id"], "ord_42");
    assert_eq!(
        app.strings(
            "SELECT event_type FROM webhook_events WHERE source = 'generic'",
            &[]
        )
        .await,
        ["payments/succeeded"]
    );
    // hookd's own signer (replay, sign) writes the same header.
    let signed = app.sign_raw("generic", &body, "ord_42", "payments/succeeded");
    assert!(
        signed.contains(&("X-Signature".to_string(), format!("sha256={hex_tag}"))),
        "{signed:?}"
    );

    // The shipped Shopify-style source: base64, no prefix, identity in headers.
    // printf '%s' BODY | openssl dgst -sha256 -hmac 'dev-shop-secret' -binary | base64
    let shop = vec![
        (
            "X-Shopify-Hmac-Sha256".to_string(),
            "7hcwV/Z3vbP7qS+m9p+rG+CjLLil7bfeg5Px0n6eU6k=".to_string(),
        ),
        ("X-Shopify-Webhook-Id".to_string(), "shop_kat".to_string()),
        (
            "X-Shopify-Topic".to_string(),
            "payments/succeeded".to_string(),
        ),
    ];
    let answer = app.post("shop", &shop, body).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.json()["event_id"], "shop_kat");
}

#[tokio::test]
async fn scheme_svix_is_another_name_for_standard_webhooks() {
    let secret = "whsec_c3ZpeC1uYW1lZC1zb3VyY2Utc2VjcmV0LTMyYnl0ZQ==";
    let app = spawn(Spawn {
        settings: settings_with(&format!(
            "[[sources]]\nname = \"svixed\"\nscheme = \"svix\"\nsecrets = [\"{secret}\"]\n\
             event_types = {{ \"payment.succeeded\" = \"payment_succeeded\" }}\n"
        )),
        ..Spawn::default()
    })
    .await;
    let source = app.settings().source("svixed").expect("source");
    assert_eq!(source.scheme.name(), "standard");
    let body =
        serde_json::to_vec(&neutral("msg_svixed", "payment.succeeded", "p_svixed")).expect("json");
    // Signed by the Standard Webhooks reference library, sent with svix-* names.
    let timestamp = chrono::Utc::now().timestamp();
    let signature = standardwebhooks::Webhook::new(secret)
        .expect("secret")
        .sign("msg_svixed", timestamp, &body)
        .expect("sign");
    let headers = vec![
        ("svix-id".to_string(), "msg_svixed".to_string()),
        ("svix-timestamp".to_string(), timestamp.to_string()),
        ("svix-signature".to_string(), signature),
    ];
    let answer = app.post("svixed", &headers, body).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(
        app.strings(
            "SELECT status FROM webhook_events WHERE source = 'svixed' AND event_id = 'msg_svixed'",
            &[]
        )
        .await,
        ["processed"]
    );
}

/// The payload goes to jsonb as the body's own text only when PostgreSQL reads
/// it as serde did: a number serde reads as 0 but numeric refuses (`1e-20000`),
/// or one of 16,400 decimal places, is stored as serde read it, not refused.
#[tokio::test]
async fn numbers_jsonb_cannot_read_as_written_are_stored_as_read() {
    let app = crate::support::spawn_app().await;
    let tiny = format!("0.{}1", "0".repeat(16_400));
    for (id, number) in [("evt_underflow", "1e-20000"), ("evt_tiny", tiny.as_str())] {
        let body = format!(
            r#"{{"id":"{id}","object":"event","type":"charge.updated","data":{{"object":{{"n":{number}}}}}}}"#
        );
        let (headers, signed) = app.sign_body("stripe", body.as_bytes());
        let answer = app.post("stripe", &headers, signed).await;
        assert_eq!(answer.status, 200, "{}", answer.text());
        assert_eq!(
            app.strings(
                "SELECT (payload #>> '{data,object,n}') FROM webhook_events WHERE event_id = $1",
                &[&id]
            )
            .await,
            ["0.0"]
        );
    }
}
