//! The support desk: a payment with its events, a customer's payments, the
//! dashboard, bulk retries, the audit trail and proof of origin — the same from
//! the API, the page and the terminal.

use serde_json::{Value, json};

use std::time::Duration;

use hookd::dispatch::RetryOutcome;
use hookd_kit::gate::{GATED_TYPE, RetryGate};

use crate::support::provider::{adyen_authorisation, send_adyen};
use crate::support::{
    Credential, OPERATOR, Spawn, TestApp, VIEWER, run_hookd, run_hookd_json, shipped_settings,
    spawn, spawn_app, stripe_event, wait_for,
};

fn payment_event(id: &str, ty: &str, payment: &str, object: Value) -> Value {
    let mut object = object;
    object["payment_intent"] = json!(payment);
    stripe_event(id, ty, object)
}

/// pi_desk: succeeded 2000 usd for cus_desk, then refunded 500.
async fn a_refunded_payment(app: &TestApp) {
    for event in [
        stripe_event(
            "evt_desk_1",
            "payment_intent.succeeded",
            json!({"id": "pi_desk", "object": "payment_intent", "amount": 2000,
                   "currency": "usd", "customer": "cus_desk"}),
        ),
        payment_event(
            "evt_desk_2",
            "charge.refunded",
            "pi_desk",
            json!({"id": "ch_desk", "object": "charge", "amount": 2000, "amount_refunded": 500,
                   "currency": "usd", "customer": "cus_desk"}),
        ),
    ] {
        assert_eq!(app.deliver("stripe", &event).await.status, 200);
    }
}

#[tokio::test]
async fn slow_a_payment_comes_with_its_events_oldest_first_and_their_runs() {
    let app = spawn_app().await;
    a_refunded_payment(&app).await;
    let answer = app.viewer().get("/admin/api/payments/stripe/pi_desk").await;
    assert_eq!(answer.status, 200);
    let view = answer.json();
    let payment = &view["payment"];
    assert_eq!(payment["payment_id"], "pi_desk");
    assert_eq!(payment["status"], "partially_refunded");
    assert_eq!(
        (
            payment["amount"].clone(),
            payment["amount_refunded"].clone()
        ),
        (json!(2000), json!(500))
    );
    assert_eq!(payment["customer_id"], "cus_desk");
    for column in [
        "succeeded",
        "failed",
        "disputed",
        "currency",
        "created_at",
        "updated_at",
        "source",
    ] {
        assert!(payment.get(column).is_some(), "{column}");
    }
    let events = view["events"].as_array().expect("events");
    let ids: Vec<&str> = events
        .iter()
        .map(|e| e["event_id"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(ids, ["evt_desk_1", "evt_desk_2"], "oldest first");
    assert_eq!(events[1]["attempts"][0]["handler"], "payment_refunded");
    assert_eq!(events[1]["attempts"][0]["outcome"], "processed");
    assert_eq!(
        app.viewer()
            .get("/admin/api/payments/stripe/pi_none")
            .await
            .status,
        404
    );
    assert_eq!(
        app.admin(Credential::None)
            .get("/admin/api/payments/stripe/pi_desk")
            .await
            .status,
        401
    );

    // The same from a terminal.
    let from_cli = run_hookd_json(
        &["payments", "show", "stripe", "pi_desk", "--json"],
        app.database_url(),
    )
    .await;
    assert_eq!(from_cli["payment"], view["payment"]);
    assert_eq!(from_cli["events"].as_array().map(Vec::len), Some(2));
}

#[tokio::test]
async fn a_customers_payments_page_newest_first_without_gaps() {
    let app = spawn_app().await;
    for i in 0..5 {
        let event = stripe_event(
            &format!("evt_cust_{i}"),
            "payment_intent.succeeded",
            json!({"id": format!("pi_cust_{i}"), "object": "payment_intent", "amount": 100 + i,
                   "currency": "eur", "customer": "cus_many"}),
        );
        assert_eq!(app.deliver("stripe", &event).await.status, 200);
        app.execute(
            "UPDATE payments SET created_at = now() - make_interval(mins => $1)
             WHERE payment_id = $2",
            &[&(10 - i), &format!("pi_cust_{i}")],
        )
        .await;
    }
    let mut seen = Vec::new();
    let mut path = "/admin/api/payments?customer=cus_many&limit=2".to_string();
    loop {
        let page = app.viewer().get(&path).await.json();
        for p in page["payments"].as_array().expect("payments") {
            seen.push(p["payment_id"].as_str().expect("id").to_string());
        }
        assert!(seen.len() <= 50, "the pages run on: {seen:?}");
        match page["next_cursor"].as_str() {
            Some(cursor) => {
                path = format!("/admin/api/payments?customer=cus_many&limit=2&cursor={cursor}")
            }
            None => break,
        }
    }
    assert_eq!(
        seen,
        [
            "pi_cust_4",
            "pi_cust_3",
            "pi_cust_2",
            "pi_cust_1",
            "pi_cust_0"
        ]
    );
    assert_eq!(app.viewer().get("/admin/api/payments").await.status, 400);
    assert_eq!(
        app.viewer()
            .get("/admin/api/payments?customer=x&cursor=nope")
            .await
            .status,
        400
    );
}

/// The pages show amounts as people read money, by each currency's decimals;
/// the API keeps the minor units the payments table holds.
#[tokio::test]
async fn the_pages_show_amounts_as_money_by_their_currency() {
    let app = spawn_app().await;
    a_refunded_payment(&app).await;
    for (id, amount, currency) in [("pi_jpy", 5000, "jpy"), ("pi_kwd", 1005, "kwd")] {
        let paid = stripe_event(
            &format!("evt_{id}"),
            "payment_intent.succeeded",
            json!({"id": id, "object": "payment_intent", "amount": amount,
                   "currency": currency, "customer": "cus_desk"}),
        );
        assert_eq!(app.deliver("stripe", &paid).await.status, 200);
    }
    let page = app.viewer().get("/admin/payments/stripe/pi_desk").await;
    assert_eq!(page.status, 200);
    let page = page.text();
    assert!(page.contains("20.00 USD"), "{page}");
    assert!(page.contains("refunded: 5.00 USD"), "{page}");
    assert!(!page.contains("2000 "), "{page}");
    let customer = app.viewer().get("/admin/customers/cus_desk").await.text();
    for shown in ["20.00 USD", "5.00 USD", "5000 JPY", "1.005 KWD"] {
        assert!(customer.contains(shown), "{shown}: {customer}");
    }
    for minor in ["2000 ", "500<", "1005"] {
        assert!(!customer.contains(minor), "{minor}: {customer}");
    }
    let api = app
        .viewer()
        .get("/admin/api/payments/stripe/pi_desk")
        .await
        .json();
    assert_eq!(
        (
            &api["payment"]["amount"],
            &api["payment"]["amount_refunded"]
        ),
        (&json!(2000), &json!(500))
    );
}

/// Adyen and Square sign no time, so a genuine body may come again at any
/// time: an event they dated more than `key_retention` (365 days here) before
/// it arrived is marked on its page; one dated lately is not.
#[tokio::test]
async fn the_event_page_marks_an_event_its_unsigned_provider_dated_before_key_retention() {
    let app = spawn_app().await;
    let days_ago = |days: i64| (chrono::Utc::now() - chrono::Duration::days(days)).to_rfc3339();
    let (old, recent) = (days_ago(400), days_ago(2));
    let answer = send_adyen(
        &app,
        vec![
            adyen_authorisation("psp_old", "order-old", &old),
            adyen_authorisation("psp_recent", "order-recent", &recent),
        ],
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    for (id, created) in [("sq_old", &old), ("sq_recent", &recent)] {
        let event = json!({"merchant_id": "M1", "type": "payment.updated", "event_id": id,
                           "created_at": created,
                           "data": {"type": "payment", "id": "sq_pay",
                                    "object": {"payment": {"id": "sq_pay", "status": "APPROVED"}}}});
        assert_eq!(app.deliver("square", &event).await.status, 200);
    }
    let mark = "Dated more than key_retention (365d) before it arrived";
    for (event_id, marked) in [
        ("psp_old:AUTHORISATION:true", true),
        ("psp_recent:AUTHORISATION:true", false),
        ("sq_old", true),
        ("sq_recent", false),
    ] {
        let id = app.event_row_id(event_id).await;
        let page = app
            .viewer()
            .get(&format!("/admin/events/{id}"))
            .await
            .text();
        assert!(page.contains("Provider's time"), "{page}");
        assert_eq!(page.contains(mark), marked, "{event_id}: {page}");
    }
    // A provider that signs its time shows none.
    a_refunded_payment(&app).await;
    let id = app.event_row_id("evt_desk_1").await;
    let page = app
        .viewer()
        .get(&format!("/admin/events/{id}"))
        .await
        .text();
    assert!(!page.contains("Provider"), "{page}");
}

async fn dead_events(app: &TestApp, n: usize) -> Vec<i64> {
    let mut ids = Vec::new();
    for i in 0..n {
        let id = format!("evt_dead_{i}");
        let event = stripe_event(&id, "payment_intent.succeeded", json!({"amount": "bad"}));
        assert_eq!(app.deliver("stripe", &event).await.status, 200);
        ids.push(app.event_row_id(&id).await);
    }
    ids
}

#[tokio::test]
async fn slow_a_bulk_retry_previews_runs_once_per_key_and_is_bounded() {
    let app = spawn_app().await;
    dead_events(&app, 3).await;
    a_refunded_payment(&app).await;
    let body = |v: Value| serde_json::to_vec(&v).expect("json");
    let preview = app
        .operator()
        .send(
            "POST",
            "/admin/api/events/retry",
            &[],
            body(json!({"status": "dead", "since": "24h", "dry_run": true})),
        )
        .await;
    assert_eq!(preview.status, 200);
    assert_eq!(
        preview.json(),
        json!({"matched": 3, "retried": 0, "outcomes": {}})
    );
    assert_eq!(
        app.count(
            "SELECT sum(attempts)::bigint FROM webhook_events WHERE status = 'dead'",
            &[]
        )
        .await,
        3,
        "a preview runs nothing"
    );
    let run = app
        .operator()
        .bulk_retry(&json!({"status": "dead", "since": "24h"}), Some("bulk-1"))
        .await;
    assert_eq!(
        run.json(),
        json!({"matched": 3, "retried": 3, "outcomes": {"dead": 3}})
    );
    let again = app
        .operator()
        .bulk_retry(&json!({"status": "dead", "since": "24h"}), Some("bulk-1"))
        .await;
    assert_eq!(
        (again.body.clone(), again.header("Idempotent-Replayed")),
        (run.body.clone(), Some("true"))
    );
    assert_eq!(
        app.count(
            "SELECT sum(attempts)::bigint FROM webhook_events WHERE status = 'dead'",
            &[]
        )
        .await,
        6,
        "the repeat ran nothing"
    );
    let reused = app
        .operator()
        .bulk_retry(&json!({"status": "failed"}), Some("bulk-1"))
        .await;
    assert_eq!(reused.status, 422);
    assert_eq!(
        app.viewer()
            .post("/admin/api/events/retry", &[])
            .await
            .status,
        403
    );
    let unknown = app
        .operator()
        .send(
            "POST",
            "/admin/api/events/retry",
            &[],
            body(json!({"stauts": "dead"})),
        )
        .await;
    assert_eq!(
        unknown.status, 400,
        "a misspelt filter is refused, not ignored"
    );

    // More than a thousand match: refused, nothing runs.
    app.execute(
        "INSERT INTO webhook_events (source, event_id, event_type, kind, status, payload,
                                     payload_sha256, signed_with)
         SELECT 'stripe', 'evt_many_' || g, 'x', 'payment_succeeded', 'dead', '{}', '\\x00', 1
         FROM generate_series(1, 1001) g",
        &[],
    )
    .await;
    let many = app
        .operator()
        .send(
            "POST",
            "/admin/api/events/retry",
            &[],
            body(json!({"status": "dead"})),
        )
        .await;
    assert_eq!(
        (many.status, many.json()["error"].clone()),
        (422, json!("too_many_events"))
    );

    // From a terminal.
    let out = run_hookd_json(
        &[
            "events",
            "retry",
            "--status",
            "dead",
            "--q",
            "evt_dead_0",
            "--json",
        ],
        app.database_url(),
    )
    .await;
    assert_eq!(
        (out["matched"].clone(), out["retried"].clone()),
        (json!(1), json!(1))
    );
}

#[tokio::test]
async fn who_viewed_and_retried_what_is_audited_for_operators() {
    let app = spawn_app().await;
    let ids = dead_events(&app, 1).await;
    a_refunded_payment(&app).await;
    app.viewer()
        .get(&format!("/admin/api/events/{}", ids[0]))
        .await;
    app.viewer().get("/admin/api/payments/stripe/pi_desk").await;
    app.operator()
        .post(&format!("/admin/api/events/{}/retry", ids[0]), &[])
        .await;
    assert_eq!(app.viewer().get("/admin/api/audit").await.status, 403);
    let entries = app.operator().get("/admin/api/audit").await.json()["entries"].clone();
    let seen: Vec<(String, String)> = entries
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            (
                e["who"].as_str().unwrap_or("").into(),
                e["action"].as_str().unwrap_or("").into(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("operator".to_string(), "retried".to_string()),
            ("viewer".to_string(), "viewed_payment".to_string()),
            ("viewer".to_string(), "viewed_event".to_string()),
        ],
        "newest first"
    );
    assert_eq!(entries[2]["webhook_event_id"], json!(ids[0]));
    assert_eq!(entries[1]["payment_id"], "pi_desk");
    assert_eq!(entries[0]["detail"]["outcome"], "dead");
}

#[tokio::test]
async fn a_bulk_retry_cut_off_half_way_has_audited_every_retry_it_made() {
    let gate = RetryGate::closed();
    let app = gate.spawn(shipped_settings(), None).await;
    for i in 0..5 {
        let event = stripe_event(&format!("evt_cut_{i}"), GATED_TYPE, json!({}));
        app.deliver_ok("stripe", &event).await;
    }
    // The two oldest retries go through; the third is held at the gate, and the
    // client gives up on the request there.
    gate.open(2);
    let (operator, filter) = (app.operator(), json!({"type": GATED_TYPE}));
    tokio::select! {
        answer = operator.bulk_retry(&filter, None) => {
            panic!("the bulk retry cannot finish while the gate is closed: {answer:?}")
        }
        () = wait_for("the third retry at the gate", Duration::from_secs(20), || async {
            (gate.arrived() == 3).then_some(())
        }) => {}
    }
    let bulk = app
        .query(
            "SELECT id, who, detail FROM admin_audit WHERE action = 'bulk_retried'",
            &[],
        )
        .await;
    assert_eq!(bulk.len(), 1, "the bulk request is audited before it runs");
    let (bulk_id, who, detail): (i64, String, Value) =
        (bulk[0].get(0), bulk[0].get(1), bulk[0].get(2));
    assert_eq!(who, "operator");
    assert_eq!(detail["matched"], 5);
    assert_eq!(detail["filter"]["type"], GATED_TYPE);
    assert!(
        detail.get("retried").is_none(),
        "it never finished: {detail}"
    );
    let retried = app
        .strings(
            "SELECT event_id FROM webhook_events WHERE attempts > 1 ORDER BY event_id",
            &[],
        )
        .await;
    assert_eq!(retried, ["evt_cut_0", "evt_cut_1"]);
    let audited = app
        .strings(
            "SELECT e.event_id FROM admin_audit a JOIN webhook_events e ON e.id = a.webhook_event_id
             WHERE a.action = 'retried' AND a.who = 'operator'
               AND a.detail->>'outcome' = 'processed' AND (a.detail->>'bulk')::bigint = $1
             ORDER BY e.event_id",
            &[&bulk_id],
        )
        .await;
    assert_eq!(audited, retried, "every retry it made has its row");
}

#[tokio::test]
async fn slow_a_stored_event_proves_its_origin_until_its_secret_is_retired() {
    let app = spawn_app().await;
    a_refunded_payment(&app).await;
    let id = app
        .count(
            "SELECT id FROM webhook_events WHERE event_id = 'evt_desk_1'",
            &[],
        )
        .await;
    let detail = app.viewer().event(id).await.json();
    assert_eq!(
        detail["origin"],
        json!({"status": "verified", "secret": 1, "id_signed": true, "type_signed": true})
    );
    let page = app
        .admin(Credential::Bearer(VIEWER.into()))
        .event_page(id)
        .await;
    assert!(String::from_utf8_lossy(&page.body).contains("verified"));
    let cli = run_hookd(
        &["events", "verify", &id.to_string()],
        Some(app.database_url()),
    )
    .await;
    assert!(
        cli.status.success(),
        "{}",
        String::from_utf8_lossy(&cli.stdout)
    );

    // Another instance whose Stripe secret was rotated away: no longer provable.
    let mut settings = shipped_settings();
    settings.sources[0].secrets = vec![hookd::signature::Secret::new("whsec_rotated_new_secret")];
    let rotated = spawn(Spawn {
        settings,
        db: app.db.clone(),
        ..Spawn::default()
    })
    .await;
    let detail = rotated.viewer().event(id).await.json();
    assert_eq!(detail["origin"]["status"], "unverified");
    // A changed record does not verify either.
    app.execute(
        "UPDATE webhook_events SET body = body || ' '::bytea WHERE id = $1",
        &[&id],
    )
    .await;
    assert_eq!(
        app.viewer().event(id).await.json()["origin"]["status"],
        "unverified"
    );
    let cli = run_hookd(
        &["events", "verify", &id.to_string()],
        Some(app.database_url()),
    )
    .await;
    assert!(!cli.status.success());
    app.execute(
        "UPDATE webhook_events SET body = NULL WHERE id = $1",
        &[&id],
    )
    .await;
    assert_eq!(
        app.viewer().event(id).await.json()["origin"]["status"],
        "unavailable"
    );
}

#[tokio::test]
async fn a_listing_whose_reader_went_away_ends_quietly() {
    let app = spawn_app().await;
    dead_events(&app, 3).await;
    // `hookd events list | head -0`: the reader is gone before the first line.
    let env = [("DATABASE_URL", app.database_url())];
    let listed = crate::support::run_hookd_unread(&["events", "list"], &env).await;
    let said = String::from_utf8_lossy(&listed.stderr);
    assert!(listed.status.success(), "{:?}: {said}", listed.status);
    assert!(said.is_empty(), "{said}");
}

#[tokio::test]
async fn the_dashboard_counts_the_day_and_says_which_secrets_are_in_use() {
    let app = spawn_app().await;
    dead_events(&app, 2).await;
    a_refunded_payment(&app).await;
    // One event signed with the second Stripe secret.
    let stripe = app.settings().source("stripe").expect("stripe").clone();
    let body = serde_json::to_vec(&stripe_event(
        "evt_second",
        "customer.created",
        json!({"id": "cus_2"}),
    ))
    .expect("json");
    let envelope = hookd::signature::Envelope {
        event_id: "evt_second",
        event_type: "customer.created",
        timestamp: chrono::Utc::now().timestamp(),
    };
    let headers = hookd::providers::sign(&stripe.scheme, &stripe.secrets[1], &body, &envelope)
        .expect("sign")
        .headers;
    assert_eq!(app.post("stripe", &headers, body).await.status, 200);
    // An old event, outside the day.
    app.execute(
        "UPDATE webhook_events SET received_at = now() - interval '3 days' WHERE event_id = 'evt_desk_1'",
        &[],
    )
    .await;
    let board = crate::support::dashboard(&app).await;
    assert_eq!(board.last_24h.total, 4);
    assert_eq!((board.dead, board.failed, board.retry_backlog), (2, 0, 0));
    let stripe_secrets = board
        .secrets
        .iter()
        .find(|s| s.source == "stripe")
        .expect("stripe");
    let used: Vec<(i32, bool)> = stripe_secrets
        .positions
        .iter()
        .map(|p| (p.position, p.used_in_7_days))
        .collect();
    assert_eq!(used, [(1, true), (2, true)]);
    let github = board
        .secrets
        .iter()
        .find(|s| s.source == "github")
        .expect("github");
    assert!(!github.positions[0].used_in_7_days && github.positions[0].last_used.is_none());

    let page = String::from_utf8_lossy(&app.viewer().get("/admin").await.body).into_owned();
    assert!(
        page.contains("href=\"/admin?status=dead\"") && page.contains("2 dead"),
        "{page}"
    );
    assert!(
        page.contains("can be retired"),
        "github's unused secret is pointed out"
    );
}

async fn at_the_gate(gate: &RetryGate, retries: usize) {
    wait_for(
        &format!("{retries} retries at the gate"),
        Duration::from_secs(30),
        || async { (gate.arrived() == retries).then_some(()) },
    )
    .await;
}

/// A retry through the desk — what `hookd events retry` runs — waits for a turn
/// among the retries running, as the API's do: with every turn taken (a quarter
/// of the pool, 4 of 16), it reaches its handler only once one of them ends.
#[tokio::test]
async fn a_retry_from_the_terminal_waits_its_turn_like_the_apis() {
    let gate = RetryGate::closed();
    let app = gate.spawn(shipped_settings(), None).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let id = format!("evt_turn_{i}");
        app.deliver_ok("stripe", &stripe_event(&id, GATED_TYPE, json!({})))
            .await;
        ids.push(
            app.count("SELECT id FROM webhook_events WHERE event_id = $1", &[&id])
                .await,
        );
    }
    let api = futures_util::future::join_all(ids[..4].iter().map(|id| {
        let app = &app;
        async move {
            app.admin(Credential::Bearer(OPERATOR.into()))
                .post(&format!("/admin/api/events/{id}/retry"), &[])
                .await
                .status
        }
    }));
    let terminal = async {
        at_the_gate(&gate, 4).await;
        app.app.desk.retry(ids[4], "cli:test").await.expect("retry")
    };
    let gatekeeper = async {
        at_the_gate(&gate, 4).await;
        // Were it not waiting for a turn, it would reach the gate well within this.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(gate.arrived(), 4, "the terminal's retry did not wait");
        gate.open(1);
        at_the_gate(&gate, 5).await;
        gate.open(4);
    };
    let (statuses, outcome, ()) = tokio::join!(api, terminal, gatekeeper);
    assert_eq!(statuses, [200; 4]);
    assert!(matches!(outcome, RetryOutcome::Applied(_)), "{outcome:?}");
}
