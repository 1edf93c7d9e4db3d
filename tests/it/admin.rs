//! Support staff: the history API, retries with Idempotency-Key, and the web page
//! with its session cookie and cross-site protection.

use std::time::Duration;

use hookd::store::events::EventStatus;
use hookd::store::history::EventFilter;
use serde_json::{Value, json};

use hookd_kit::gate::{GATED_TYPE, RetryGate};

use crate::support::{
    AdminClient, Answer, Credential, OPERATOR, TestApp, VIEWER, csrf_of, shipped_settings,
    spawn_app, stripe_event,
};

/// Admin requests with `token` as the bearer, or without a credential.
fn client<'a>(app: &'a TestApp, token: Option<&str>) -> AdminClient<'a> {
    app.admin(token.map_or(Credential::None, |t| Credential::Bearer(t.into())))
}

/// One admin request, with `token` as the bearer or none.
async fn call(
    app: &TestApp,
    method: &str,
    path: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
) -> Answer {
    client(app, token)
        .send(method, path, headers, Vec::new())
        .await
}

/// `POST /admin/api/events/{id}/retry` with a bearer token, or none.
async fn retry(app: &TestApp, id: i64, token: Option<&str>) -> Answer {
    client(app, token).retry(id, None).await
}

fn payment(id: &str, ty: &str, payment: &str, customer: &str) -> Value {
    stripe_event(
        id,
        ty,
        json!({"id": payment, "object": "payment_intent", "amount": 1200, "currency": "usd",
               "customer": customer}),
    )
}

/// Six events: four payments (two on pi_a), one ignored, one dead.
async fn history(app: &TestApp) {
    let events = [
        payment("evt_h1", "payment_intent.succeeded", "pi_a", "cus_x"),
        payment("evt_h2", "payment_intent.payment_failed", "pi_b", "cus_y"),
        payment("evt_h3", "payment_intent.succeeded", "pi_c", "cus_y"),
        stripe_event(
            "evt_h4",
            "customer.created",
            json!({"id": "cus_z", "object": "customer"}),
        ),
        stripe_event(
            "evt_h5",
            "payment_intent.succeeded",
            json!({"amount": "bad"}),
        ),
        payment("evt_h6", "payment_intent.payment_failed", "pi_a", "cus_x"),
    ];
    for event in events {
        assert_eq!(app.deliver("stripe", &event).await.status, 200);
    }
}

fn ids(answer: &Answer) -> Vec<String> {
    answer.json()["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["event_id"].as_str().expect("event_id").to_string())
        .collect()
}

#[tokio::test]
async fn the_api_needs_a_known_token() {
    let app = spawn_app().await;
    for token in [None, Some("not-a-token-at-all-000")] {
        let answer = call(&app, "GET", "/admin/api/events", token, &[]).await;
        assert_eq!(answer.status, 401);
        assert_eq!(answer.json()["error"], "unauthorized");
    }
    assert_eq!(
        call(&app, "GET", "/admin/api/events", Some(VIEWER), &[])
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn the_history_lists_newest_first_with_the_column_names() {
    let app = spawn_app().await;
    history(&app).await;
    let answer = call(&app, "GET", "/admin/api/events", Some(VIEWER), &[]).await;
    assert_eq!(answer.status, 200);
    assert_eq!(
        ids(&answer),
        ["evt_h6", "evt_h5", "evt_h4", "evt_h3", "evt_h2", "evt_h1"]
    );
    let body = answer.json();
    assert_eq!(body["next_cursor"], Value::Null);
    let first = &body["events"][0];
    for field in [
        "id",
        "source",
        "event_id",
        "event_type",
        "kind",
        "status",
        "payment_id",
        "customer_id",
        "deliveries",
        "attempts",
        "last_error",
        "received_at",
        "processed_at",
    ] {
        assert!(first.get(field).is_some(), "missing {field}: {first}");
    }
    assert_eq!(first["kind"], "payment_failed");
    assert_eq!(first["payment_id"], "pi_a");
    assert!(first.get("payload").is_none(), "lists stay light");
}

#[tokio::test]
async fn the_history_filters() {
    let app = spawn_app().await;
    history(&app).await;
    let list = |query: &'static str| {
        let app = &app;
        async move {
            ids(&call(
                app,
                "GET",
                &format!("/admin/api/events?{query}"),
                Some(VIEWER),
                &[],
            )
            .await)
        }
    };
    assert_eq!(list("q=pi_a").await, ["evt_h6", "evt_h1"]);
    assert_eq!(list("q=cus_y").await, ["evt_h3", "evt_h2"]);
    assert_eq!(list("q=evt_h4").await, ["evt_h4"]);
    assert_eq!(
        list("q=cus_z").await,
        ["evt_h4"],
        "a customer object is indexed as a customer"
    );
    assert_eq!(list("status=dead").await, ["evt_h5"]);
    assert_eq!(list("status=ignored").await, ["evt_h4"]);
    assert_eq!(list("kind=payment_failed").await, ["evt_h6", "evt_h2"]);
    assert_eq!(list("type=customer.created").await, ["evt_h4"]);
    assert_eq!(list("source=github").await, Vec::<String>::new());
    assert_eq!(
        list("source=stripe&status=processed&q=pi_a").await,
        ["evt_h6", "evt_h1"]
    );
    assert_eq!(list("since=1h").await.len(), 6);
    assert_eq!(list("until=1h").await.len(), 0);
    assert_eq!(
        list("since=2020-01-01T00:00:00Z&until=2999-01-01T00:00:00%2B02:00")
            .await
            .len(),
        6
    );
    for bad in [
        "status=done",
        "limit=0",
        "limit=501",
        "since=yesterday",
        "cursor=xyz",
    ] {
        let answer = call(
            &app,
            "GET",
            &format!("/admin/api/events?{bad}"),
            Some(VIEWER),
            &[],
        )
        .await;
        assert_eq!(answer.status, 400, "{bad}");
        assert_eq!(answer.json()["error"], "bad_request");
    }
}

async fn page_of(app: &TestApp, cursor: Option<&str>) -> (Vec<String>, Option<String>) {
    let path = match cursor {
        Some(cursor) => format!("/admin/api/events?limit=2&cursor={cursor}"),
        None => "/admin/api/events?limit=2".to_string(),
    };
    let answer = call(app, "GET", &path, Some(VIEWER), &[]).await;
    assert_eq!(answer.status, 200, "{path}");
    let next = answer.json()["next_cursor"].as_str().map(String::from);
    (ids(&answer), next)
}

#[tokio::test]
async fn pages_follow_the_cursor_without_gaps_or_repeats() {
    let app = spawn_app().await;
    history(&app).await;
    // Same received_at for all: the id breaks ties.
    app.execute(
        "UPDATE webhook_events SET received_at = '2026-01-01T00:00:00Z'",
        &[],
    )
    .await;
    let mut seen = Vec::new();
    let mut cursor = None;
    let mut arrived = 0;
    loop {
        let (page, next) = page_of(&app, cursor.as_deref()).await;
        seen.extend(page);
        assert!(seen.len() <= 6, "the pages run on: {seen:?}");
        // New events arrive between the pages, as they do while someone reads.
        for _ in 0..3 {
            arrived += 1;
            let event = payment(
                &format!("evt_new_{arrived}"),
                "payment_intent.succeeded",
                &format!("pi_new_{arrived}"),
                "cus_new",
            );
            app.deliver_ok("stripe", &event).await;
        }
        match next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(
        seen,
        ["evt_h6", "evt_h5", "evt_h4", "evt_h3", "evt_h2", "evt_h1"],
        "the pages neither skipped nor repeated an event, nor took in newer ones"
    );
    assert_eq!(arrived, 9);
    // The new arrivals are at the top of a fresh first page.
    let (first, _) = page_of(&app, None).await;
    assert_eq!(first, ["evt_new_9", "evt_new_8"]);
}

#[tokio::test]
async fn one_event_comes_with_its_payload_and_attempts() {
    let app = spawn_app().await;
    history(&app).await;
    let id = app.event_row_id("evt_h5").await;
    let answer = call(
        &app,
        "GET",
        &format!("/admin/api/events/{id}"),
        Some(VIEWER),
        &[],
    )
    .await;
    assert_eq!(answer.status, 200);
    let event = answer.json();
    assert_eq!(event["id"], id);
    assert_eq!(event["status"], "dead");
    assert_eq!(event["payload"]["id"], "evt_h5");
    let attempts = event["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0]["outcome"], "dead");
    assert!(
        attempts[0]["error"]
            .as_str()
            .expect("error")
            .contains("payment_intent")
    );
    for missing in ["/admin/api/events/999999", "/admin/api/events/abc"] {
        let answer = call(&app, "GET", missing, Some(VIEWER), &[]).await;
        assert_eq!(
            (answer.status, answer.json()["error"].clone()),
            (404, json!("not_found"))
        );
    }
}

async fn stats(app: &TestApp, window: &str) -> Value {
    let answer = call(
        app,
        "GET",
        &format!("/admin/api/stats?window={window}"),
        Some(VIEWER),
        &[],
    )
    .await;
    assert_eq!(answer.status, 200, "{window}");
    answer.json()
}

#[tokio::test]
async fn stats_count_by_status_kind_and_source() {
    let app = spawn_app().await;
    history(&app).await;
    let neutral = json!({"id": "msg_stats", "type": "payment.succeeded", "created": 1,
                         "data": {"payment_id": "p_stats", "amount": 100}});
    app.deliver_ok("standard", &neutral).await;
    // Two events received before the last 24 hours: one 25 hours ago, one 3 days ago.
    app.execute(
        "UPDATE webhook_events SET received_at = now() - interval '25 hours' WHERE event_id = 'evt_h1'",
        &[],
    )
    .await;
    app.execute(
        "UPDATE webhook_events SET received_at = now() - interval '3 days' WHERE event_id = 'evt_h4'",
        &[],
    )
    .await;

    let day = stats(&app, "24h").await;
    let since = chrono::DateTime::parse_from_rfc3339(day["since"].as_str().expect("since"))
        .expect("RFC 3339");
    let ago = chrono::Utc::now().signed_duration_since(since);
    assert!(
        ago > chrono::Duration::hours(23) && ago < chrono::Duration::hours(25),
        "since {since}"
    );
    assert_eq!(day["total"], 5);
    assert_eq!(day["by_status"], json!({"processed": 4, "dead": 1}));
    assert_eq!(
        day["by_kind"],
        json!({"payment_succeeded": 3, "payment_failed": 2})
    );
    assert_eq!(day["by_source"], json!({"stripe": 4, "standard": 1}));

    let two_days = stats(&app, "2d").await;
    assert_eq!(two_days["total"], 6);
    assert_eq!(
        two_days["by_kind"],
        json!({"payment_succeeded": 4, "payment_failed": 2})
    );

    let week = stats(&app, "7d").await;
    assert_eq!(week["total"], 7);
    assert_eq!(
        week["by_status"],
        json!({"processed": 5, "ignored": 1, "dead": 1})
    );
    assert_eq!(
        week["by_kind"],
        json!({"payment_succeeded": 4, "payment_failed": 2, "none": 1})
    );
    assert_eq!(week["by_source"], json!({"stripe": 6, "standard": 1}));
    assert_eq!(
        call(
            &app,
            "GET",
            "/admin/api/stats?window=soon",
            Some(VIEWER),
            &[]
        )
        .await
        .status,
        400
    );
}

#[tokio::test]
async fn operators_retry_viewers_may_not() {
    let app = spawn_app().await;
    history(&app).await;
    let dead = app.event_row_id("evt_h5").await;
    let denied = retry(&app, dead, Some(VIEWER)).await;
    assert_eq!(
        (denied.status, denied.json()["error"].clone()),
        (403, json!("forbidden"))
    );
    assert_eq!(retry(&app, dead, None).await.status, 401);

    let retried = retry(&app, dead, Some(OPERATOR)).await;
    assert_eq!(retried.status, 200);
    let body = retried.json();
    assert_eq!(
        (body["status"].clone(), body["attempts"].clone()),
        (json!("dead"), json!(2))
    );

    // Re-applying a processed event is safe: the payment does not change.
    let done = app.event_row_id("evt_h1").await;
    let before = app
        .query(
            "SELECT status, amount FROM payments WHERE payment_id = 'pi_a'",
            &[],
        )
        .await;
    let again = retry(&app, done, Some(OPERATOR)).await;
    assert_eq!(
        (again.status, again.json()["status"].clone()),
        (200, json!("processed"))
    );
    let after = app
        .query(
            "SELECT status, amount FROM payments WHERE payment_id = 'pi_a'",
            &[],
        )
        .await;
    assert_eq!(
        (before[0].get::<_, String>(0), before[0].get::<_, i64>(1)),
        (after[0].get::<_, String>(0), after[0].get::<_, i64>(1))
    );

    let ignored = app.event_row_id("evt_h4").await;
    let answer = retry(&app, ignored, Some(OPERATOR)).await;
    assert_eq!(
        (answer.status, answer.json()["error"].clone()),
        (409, json!("no_handler"))
    );
    assert_eq!(
        call(
            &app,
            "POST",
            "/admin/api/events/424242/retry",
            Some(OPERATOR),
            &[]
        )
        .await
        .status,
        404
    );

    app.execute(
        "UPDATE webhook_events SET payload = NULL, purged_at = now() WHERE id = $1",
        &[&done],
    )
    .await;
    let gone = retry(&app, done, Some(OPERATOR)).await;
    assert_eq!(
        (gone.status, gone.json()["error"].clone()),
        (410, json!("gone"))
    );
}

#[tokio::test]
async fn a_bulk_retry_cut_off_by_the_connection_deadline_runs_to_its_end_and_answers_the_repeat() {
    // Each retry takes 0.9 s, within its 1 s limit; 36 of them outlast the
    // connection's answer deadline (about 28 s with these settings).
    let gate = RetryGate::slow(Duration::from_millis(900));
    let mut settings = shipped_settings();
    settings.body_timeout = Duration::from_secs(1);
    let app = gate
        .spawn_with_limit(settings, None, Duration::from_secs(1))
        .await;
    const EVENTS: i64 = 36;
    for n in 0..EVENTS {
        app.deliver_ok(
            "stripe",
            &stripe_event(&format!("evt_long_{n}"), GATED_TYPE, json!({})),
        )
        .await;
    }
    let filter = json!({"type": GATED_TYPE}).to_string();
    let cut_off = reqwest::Client::new()
        .post(format!("{}/admin/api/events/retry", app.base))
        .bearer_auth(OPERATOR)
        .header("Idempotency-Key", "bulk-long")
        .body(filter.clone())
        .send()
        .await;
    assert!(
        cut_off.is_err(),
        "the connection's deadline cuts the client off: {cut_off:?}"
    );

    app.wait_for_count(
        "SELECT count(*) FROM admin_idempotency_keys
         WHERE idempotency_key = 'bulk-long' AND response_status = 200",
        1,
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(
        app.count(
            "SELECT count(*) FROM webhook_events WHERE attempts = 2",
            &[]
        )
        .await,
        EVENTS,
        "every matched event was retried once"
    );
    assert_eq!(
        app.count(
            "SELECT count(*) FROM admin_audit WHERE action = 'bulk_retried'",
            &[]
        )
        .await,
        1,
        "the bulk retry is audited"
    );
    let repeat = client(&app, Some(OPERATOR))
        .send(
            "POST",
            "/admin/api/events/retry",
            &[("Idempotency-Key", "bulk-long")],
            filter.into_bytes(),
        )
        .await;
    assert_eq!(repeat.status, 200, "{}", repeat.text());
    assert_eq!(repeat.header("Idempotent-Replayed"), Some("true"));
    assert_eq!(repeat.json()["retried"], json!(EVENTS));
    assert_eq!(gate.arrived(), EVENTS as usize, "the repeat ran nothing");
}

#[tokio::test]
async fn idempotency_keys_replay_refuse_reuse_and_report_work_in_progress() {
    let gate = RetryGate::closed();
    let app = gate.spawn(shipped_settings(), None).await;
    app.deliver_ok("stripe", &stripe_event("evt_slow", GATED_TYPE, json!({})))
        .await;
    app.deliver_ok("stripe", &stripe_event("evt_other", GATED_TYPE, json!({})))
        .await;
    let slow = app.event_row_id("evt_slow").await;
    let other = app.event_row_id("evt_other").await;
    let path = format!("/admin/api/events/{slow}/retry");
    let key = [("Idempotency-Key", "key-1")];

    let (first, during) = tokio::join!(call(&app, "POST", &path, Some(OPERATOR), &key), async {
        // The first request has claimed the key (its handler is held at the gate).
        let app = &app;
        app.wait_for_count(
            "SELECT count(*) FROM admin_idempotency_keys
             WHERE idempotency_key = 'key-1' AND response_status IS NULL",
            1,
            Duration::from_secs(20),
        )
        .await;
        let during = call(app, "POST", &path, Some(OPERATOR), &key).await;
        // Only now may the first request's handler finish.
        gate.open(1);
        during
    });
    assert_eq!(first.status, 200);
    assert_eq!(
        (during.status, during.json()["error"].clone()),
        (409, json!("request_in_progress"))
    );

    let repeat = call(&app, "POST", &path, Some(OPERATOR), &key).await;
    assert_eq!(repeat.status, 200);
    assert_eq!(repeat.body, first.body, "the stored answer");
    assert_eq!(repeat.header("Idempotent-Replayed"), Some("true"));
    assert_eq!(
        app.count(
            "SELECT attempts::bigint FROM webhook_events WHERE id = $1",
            &[&slow]
        )
        .await,
        2,
        "the repeat did not run the handler"
    );

    let reused = call(
        &app,
        "POST",
        &format!("/admin/api/events/{other}/retry"),
        Some(OPERATOR),
        &key,
    )
    .await;
    assert_eq!(
        (reused.status, reused.json()["error"].clone()),
        (422, json!("idempotency_key_reused"))
    );

    // Keys are scoped to the token: another operator's key-1 is its own.
    let mut settings = shipped_settings();
    settings.admin_tokens.push(hookd::config::AdminToken {
        name: "second-operator".into(),
        token: hookd::signature::Secret::new("second-operator-token-000"),
        role: hookd::config::Role::Operator,
        key: "admin.tokens[2].token".into(),
    });
    let open = RetryGate::closed();
    open.open(100);
    let second = open.spawn(settings, app.db.clone()).await;
    let mine = call(
        &second,
        "POST",
        &format!("/admin/api/events/{other}/retry"),
        Some("second-operator-token-000"),
        &key,
    )
    .await;
    assert_eq!(mine.status, 200);
    assert_eq!(mine.header("Idempotent-Replayed"), None);
}

// --- The web page ---

/// Signs in through the page's form, checks the cookie's attributes, and returns
/// a client that sends the session cookie.
async fn signed_in<'a>(app: &'a TestApp, token: &str) -> AdminClient<'a> {
    let answer = app.admin(Credential::None).login(token).await;
    assert_eq!(answer.status, 303);
    assert_eq!(answer.header("location"), Some("/admin"));
    let cookie = answer.header("set-cookie").expect("cookie").to_string();
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    assert!(cookie.contains("SameSite=Strict"), "{cookie}");
    let pair = cookie.split(';').next().expect("name=value").to_string();
    app.admin(Credential::Cookie(pair))
}

#[tokio::test]
async fn the_page_asks_people_to_sign_in_first() {
    let app = spawn_app().await;
    let anonymous = app.admin(Credential::None);
    let answer = anonymous.list_page("").await;
    assert_eq!(answer.status, 303);
    assert_eq!(answer.header("location"), Some("/admin/login"));
    let form = anonymous.get("/admin/login").await;
    assert_eq!(form.status, 200);
    assert!(form.text().contains("name=\"token\""));
    let wrong = anonymous.login("wrong-token-wrong-token").await;
    assert_eq!(wrong.status, 401);
    assert!(wrong.header("set-cookie").is_none());
    // Scripts may sign in with JSON.
    let scripted = anonymous.login_json(VIEWER).await;
    assert_eq!(scripted.status, 303);
    assert!(scripted.header("set-cookie").is_some());
}

#[tokio::test]
async fn signed_in_staff_browse_and_retry_from_the_page() {
    let app = spawn_app().await;
    history(&app).await;
    let staff = signed_in(&app, OPERATOR).await;
    let list = staff.list_page("status=dead").await;
    assert_eq!(list.status, 200);
    let list = list.text();
    assert!(
        list.contains("evt_h5") && !list.contains("evt_h1"),
        "filtered list"
    );

    let dead = app.event_row_id("evt_h5").await;
    let detail = staff.event_page(dead).await;
    assert_eq!(detail.status, 200);
    let detail = detail.text();
    assert!(
        detail.contains("&quot;id&quot;: &quot;evt_h5&quot;"),
        "pretty-printed, escaped payload"
    );
    assert!(detail.contains("Apply this event again"));
    let csrf = csrf_of(&detail);

    // The cookie works for the JSON API too.
    assert_eq!(staff.events("").await.status, 200);

    let evil = [("Origin", "https://evil.example")];
    assert_eq!(staff.retry_from_page(dead, "forged", &[]).await.status, 403);
    assert_eq!(staff.retry_from_page(dead, &csrf, &evil).await.status, 403);
    let attempts = "SELECT attempts::bigint FROM webhook_events WHERE id = $1";
    assert_eq!(app.count(attempts, &[&dead]).await, 1);
    assert_eq!(staff.retry_from_page(dead, &csrf, &[]).await.status, 303);
    assert_eq!(app.count(attempts, &[&dead]).await, 2);

    // A cross-site request riding the cookie to the API is refused as well.
    let path = format!("/admin/api/events/{dead}/retry");
    assert_eq!(staff.post(&path, &evil).await.status, 403);

    let logout = staff.sign_out(&csrf).await;
    assert_eq!(logout.status, 303);
    let cleared = logout.header("set-cookie").expect("cookie");
    assert!(cleared.starts_with("hookd_session=;"), "{cleared}");
}

#[tokio::test]
async fn viewers_see_no_retry_button_and_cannot_post_one() {
    let app = spawn_app().await;
    history(&app).await;
    let viewer = signed_in(&app, VIEWER).await;
    let dead = app.event_row_id("evt_h5").await;
    let detail = viewer.event_page(dead).await.text();
    assert!(!detail.contains("Apply this event again"));
    let refused = viewer.retry_from_page(dead, &csrf_of(&detail), &[]).await;
    assert_eq!(refused.status, 403);
}

#[tokio::test]
async fn history_queries_use_indexes_at_scale() {
    let app = spawn_app().await;
    app.db()
        .await
        .batch_execute(
            "INSERT INTO webhook_events (source, event_id, event_type, kind, status, payload,
                 payload_sha256, signed_with, payment_id, customer_id, received_at)
             SELECT 'stripe', 'evt_' || g, 'payment_intent.succeeded', 'payment_succeeded',
                    CASE WHEN g % 1000 = 0 THEN 'dead' ELSE 'processed' END, NULL, '\\x00', 1,
                    'pi_' || g, 'cus_' || (g % 5000), now() - g * interval '1 second'
             FROM generate_series(1, 200000) g;
             ANALYZE webhook_events;",
        )
        .await
        .expect("fill");
    // The plans of hookd's own listing queries, as the API builds them.
    let db = app.db().await;
    let base = EventFilter {
        limit: 51,
        ..EventFilter::default()
    };
    let filters = [
        ("newest", base.clone()),
        (
            "q",
            EventFilter {
                q: Some("pi_77".into()),
                ..base.clone()
            },
        ),
        (
            "status",
            EventFilter {
                status: Some(EventStatus::Dead),
                ..base.clone()
            },
        ),
        (
            "status and source",
            EventFilter {
                status: Some(EventStatus::Dead),
                source: Some("stripe".into()),
                ..base.clone()
            },
        ),
        (
            "next page",
            EventFilter {
                after: Some((chrono::Utc::now() - chrono::Duration::days(1), 100)),
                ..base.clone()
            },
        ),
    ];
    for (name, filter) in filters {
        let (sql, params) = filter.to_sql();
        let plan: Vec<String> = db
            .query_typed(&format!("EXPLAIN {sql}"), &params)
            .await
            .expect("explain")
            .iter()
            .map(|r| r.get(0))
            .collect();
        let plan = plan.join("\n");
        assert!(!plan.contains("Seq Scan"), "{name}: {plan}");
        // Pages come straight from the index order; only a search sorts (its matches).
        if name != "q" {
            assert!(!plan.contains("Sort "), "{name}: {plan}");
        }
    }
    let answer = call(
        &app,
        "GET",
        "/admin/api/events?q=cus_42&limit=5",
        Some(VIEWER),
        &[],
    )
    .await;
    assert_eq!(answer.json()["events"].as_array().map(Vec::len), Some(5));
}

// --- The terminal ---

async fn events_cli(app: &TestApp, args: &[&str]) -> std::process::Output {
    let args: Vec<&str> = std::iter::once("events")
        .chain(args.iter().copied())
        .collect();
    crate::support::run_hookd(&args, Some(app.database_url())).await
}

#[tokio::test]
async fn slow_hookd_events_lists_shows_and_retries_from_a_terminal() {
    let app = spawn_app().await;
    history(&app).await;
    let listed = events_cli(&app, &["list", "-q", "pi_a"]).await;
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let table = String::from_utf8_lossy(&listed.stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("STATUS"),
        "{table}"
    );
    assert_eq!(lines.len(), 3, "{table}");
    assert!(lines[1].contains("evt_h6") && lines[2].contains("evt_h1"));

    let json = events_cli(&app, &["list", "--status", "dead", "--json"]).await;
    let body: Value = serde_json::from_slice(&json.stdout).expect("json");
    assert_eq!(body["events"][0]["event_id"], "evt_h5");
    assert_eq!(body["next_cursor"], Value::Null);

    let dead = app.event_row_id("evt_h5").await.to_string();
    let shown = events_cli(&app, &["show", &dead]).await;
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        text.contains("\"id\": \"evt_h5\"") && text.contains("#1"),
        "{text}"
    );

    let retried = events_cli(&app, &["retry", &dead]).await;
    assert!(retried.status.success());
    assert!(
        String::from_utf8_lossy(&retried.stdout)
            .starts_with(&format!("event {dead}: dead after attempt 2"))
    );

    for args in [vec!["show", "999999"], vec!["list", "--status", "done"]] {
        let failed = events_cli(&app, &args).await;
        assert!(!failed.status.success());
        assert_eq!(
            String::from_utf8_lossy(&failed.stderr)
                .trim()
                .lines()
                .count(),
            1
        );
    }
}

#[tokio::test]
async fn an_events_detail_has_its_runs_with_durations_and_a_null_payload_once_purged() {
    let app = spawn_app().await;
    history(&app).await;
    let id = app.event_row_id("evt_h5").await;
    for _ in 0..2 {
        assert_eq!(retry(&app, id, Some(OPERATOR)).await.status, 200);
    }
    let path = format!("/admin/api/events/{id}");
    let detail = call(&app, "GET", &path, Some(VIEWER), &[]).await.json();
    assert_eq!(detail["payload"]["id"], "evt_h5");
    assert_eq!(detail["attempt_count"], 3);
    let runs = detail["attempts"].as_array().expect("attempts");
    assert_eq!(runs.len(), 3);
    let stored: Vec<f64> = app
        .query(
            "SELECT extract(epoch FROM finished_at - started_at)::float8 * 1000
             FROM webhook_event_attempts WHERE webhook_event_id = $1 ORDER BY attempt",
            &[&id],
        )
        .await
        .iter()
        .map(|r| r.get(0))
        .collect();
    for (n, run) in runs.iter().enumerate() {
        assert_eq!(run["attempt"], n + 1);
        assert_eq!(run["handler"], "payment_succeeded");
        let at = |key: &str| {
            chrono::DateTime::parse_from_rfc3339(run[key].as_str().expect(key)).expect(key)
        };
        let between = (at("finished_at") - at("started_at"))
            .num_microseconds()
            .expect("µs") as f64
            / 1000.0;
        let duration = run["duration_ms"].as_f64().expect("duration_ms");
        assert!(duration >= 0.0, "{run}");
        assert!((duration - between).abs() < 0.01, "{duration} vs {between}");
        assert!(
            (duration - stored[n]).abs() < 0.01,
            "{duration} vs {}",
            stored[n]
        );
    }

    // Past `retention` the purge drops the payload and the runs; the counter stays.
    app.execute(
        "UPDATE webhook_events SET received_at = now() - interval '31 days' WHERE id = $1",
        &[&id],
    )
    .await;
    app.app.purger.run_once(None).await.expect("purge");
    let purged = call(&app, "GET", &path, Some(VIEWER), &[]).await;
    assert_eq!(purged.status, 200);
    let purged = purged.json();
    assert!(
        purged.get("payload").is_some_and(Value::is_null),
        "{purged}"
    );
    assert_eq!(purged["attempts"], json!([]));
    assert_eq!(purged["attempt_count"], 3);
    assert!(purged["purged_at"].is_string(), "{purged}");
    assert_eq!(purged["origin"]["status"], "unavailable");
}

#[tokio::test]
async fn people_get_error_pages_under_admin_and_the_api_keeps_json() {
    let app = spawn_app().await;
    for path in ["/admin/events", "/admin/no/such/page", "/admin/eventsx"] {
        let answer = call(&app, "GET", path, Some(VIEWER), &[("Accept", "text/html")]).await;
        assert_eq!(answer.status, 404, "{path}");
        assert_eq!(
            answer.header("content-type"),
            Some("text/html; charset=utf-8"),
            "{path}"
        );
        let page = answer.text();
        assert!(page.contains("There is no such page."), "{path}: {page}");
        assert!(
            page.contains("<a href=\"/admin\">Back to the list</a>"),
            "{path}"
        );
    }
    // A viewer may not open the audit trail: a page says so.
    let refused = call(&app, "GET", "/admin/audit", Some(VIEWER), &[]).await;
    assert_eq!(refused.status, 403);
    assert!(refused.text().contains("the operator role is needed"));
    assert!(
        refused
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/html"))
    );

    for (path, status) in [
        ("/admin/api/nosuch", 404),
        ("/admin/api", 404),
        ("/nosuch", 404),
        ("/admin/api/audit", 403),
    ] {
        let answer = call(&app, "GET", path, Some(VIEWER), &[("Accept", "text/html")]).await;
        assert_eq!(answer.status, status, "{path}");
        assert_eq!(
            answer.header("content-type"),
            Some("application/json"),
            "{path}"
        );
        let code = if status == 404 {
            "not_found"
        } else {
            "forbidden"
        };
        assert_eq!(answer.json()["error"], code, "{path}");
    }
}
