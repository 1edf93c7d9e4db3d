//! Sources whose scheme signs only the body (GitHub; the generic HMAC with its id
//! or type in a header): a stored body resent under another id or type is the
//! first event again, not a new one — unless the source sets `dedupe_on_body =
//! false`. Schemes that sign the id keep deciding by id alone.

use hookd::simulate::Hints;
use serde_json::{Value, json};

use crate::support::{
    Answer, Credential, TestApp, VIEWER, run_hookd, shipped_settings, spawn_app,
    spawn_with_settings, stripe_event,
};

/// A shop payment event in the neutral shape (its topic travels in a header).
fn shop_payment(id: &str, payment: &str) -> Vec<u8> {
    serde_json::to_vec(
        &json!({"id": id, "type": "payments/succeeded", "created": 1_700_000_000,
        "data": {"payment_id": payment, "amount": 900, "currency": "eur", "customer_id": "c_u"}}),
    )
    .expect("json")
}

fn github_push(after: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({"ref": "refs/heads/main", "after": after,
        "repository": {"full_name": "acme/hookd"}}))
    .expect("json")
}

/// Signs `body` for `source` with the id and type given (headers for these
/// schemes, beside the signed body).
async fn send(app: &TestApp, source: &str, body: &[u8], id: &str, event_type: &str) -> Answer {
    let hints = Hints {
        event_type: Some(event_type),
        event_id: Some(id),
    };
    let headers = app.sign(source, body, hints);
    app.post(source, &headers, body.to_vec()).await
}

/// The source's rows: (event id, event type, deliveries, attempts).
async fn rows(app: &TestApp, source: &str) -> Vec<(String, String, i32, i32)> {
    app.query(
        "SELECT event_id, event_type, deliveries, attempts FROM webhook_events
         WHERE source = $1 ORDER BY id",
        &[&source],
    )
    .await
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect()
}

/// The payment's facts: (status, disputed).
async fn payment(app: &TestApp, payment_id: &str) -> (String, bool) {
    let row = &app
        .query(
            "SELECT status, disputed FROM payments WHERE source = 'shop' AND payment_id = $1",
            &[&payment_id],
        )
        .await[0];
    (row.get(0), row.get(1))
}

fn assert_replay_of(first: &Answer, again: &Answer, what: &str) {
    assert_eq!(again.status, 200, "{what}: {}", again.text());
    assert_eq!(
        again.body, first.body,
        "{what}: the first answer, byte for byte"
    );
    assert_eq!(again.header("Idempotent-Replayed"), Some("true"), "{what}");
}

#[tokio::test]
async fn a_github_body_resent_under_a_new_delivery_id_or_event_is_the_first_delivery() {
    let app = spawn_app().await;
    let body = github_push("c0ffee");
    let first = send(&app, "github", &body, "d-first", "push").await;
    assert_eq!(
        first.body,
        br#"{"status":"accepted","event_id":"d-first"}"#.to_vec()
    );
    assert_eq!(first.header("Idempotent-Replayed"), None);
    let new_id = send(&app, "github", &body, "d-forged", "push").await;
    assert_replay_of(&first, &new_id, "a new delivery id");
    let new_event = send(&app, "github", &body, "d-forged-2", "release").await;
    assert_replay_of(&first, &new_event, "a new delivery id and event");
    let same_id = send(&app, "github", &body, "d-first", "release").await;
    assert_replay_of(&first, &same_id, "the first id, another event");
    assert_eq!(
        rows(&app, "github").await,
        [("d-first".into(), "push".into(), 4, 0)],
        "one row, every delivery counted on it"
    );
    // Another body is another delivery.
    let other = send(&app, "github", &github_push("beef"), "d-other", "push").await;
    assert_eq!(other.header("Idempotent-Replayed"), None);
    assert_eq!(rows(&app, "github").await.len(), 2);
}

#[tokio::test]
async fn a_shop_body_resent_under_a_new_id_or_topic_is_not_applied_again() {
    let app = spawn_app().await;
    let body = shop_payment("shop_evt_u1", "pay_u1");
    let first = send(&app, "shop", &body, "w-1", "payments/succeeded").await;
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(payment(&app, "pay_u1").await, ("succeeded".into(), false));
    let new_id = send(&app, "shop", &body, "w-2", "payments/succeeded").await;
    assert_replay_of(&first, &new_id, "a new id");
    // The forgery that matters: a real payment's body under the dispute topic.
    let new_topic = send(&app, "shop", &body, "w-3", "disputes/create").await;
    assert_replay_of(&first, &new_topic, "a new id and topic");
    let same_id = send(&app, "shop", &body, "w-1", "disputes/create").await;
    assert_replay_of(&first, &same_id, "the first id, another topic");
    assert_eq!(
        rows(&app, "shop").await,
        [("w-1".into(), "payments/succeeded".into(), 4, 1)],
        "one row, applied once"
    );
    assert_eq!(
        payment(&app, "pay_u1").await,
        ("succeeded".into(), false),
        "never disputed"
    );
}

#[tokio::test]
async fn with_dedupe_on_body_off_a_new_id_is_a_new_event_as_before() {
    let mut settings = shipped_settings();
    for source in &mut settings.sources {
        if matches!(source.name.as_str(), "shop" | "github") {
            source.dedupe_on_body = false;
        }
    }
    let app = spawn_with_settings(settings).await;
    let body = shop_payment("shop_evt_off", "pay_off");
    let first = send(&app, "shop", &body, "w-1", "payments/succeeded").await;
    let again = send(&app, "shop", &body, "w-2", "disputes/create").await;
    assert_eq!(again.status, 200);
    assert_eq!(
        again.body,
        br#"{"status":"accepted","event_id":"w-2"}"#.to_vec()
    );
    assert_eq!(again.header("Idempotent-Replayed"), None);
    assert_ne!(again.body, first.body);
    assert_eq!(rows(&app, "shop").await.len(), 2);
    assert_eq!(payment(&app, "pay_off").await, ("disputed".into(), true));
    let push = github_push("off");
    send(&app, "github", &push, "d-1", "push").await;
    let copy = send(&app, "github", &push, "d-2", "push").await;
    assert_eq!(copy.header("Idempotent-Replayed"), None);
    assert_eq!(rows(&app, "github").await.len(), 2);
    // The id still dedupes.
    let resent = send(&app, "github", &push, "d-2", "push").await;
    assert_replay_of(&copy, &resent, "the same id");
}

#[tokio::test]
async fn concurrent_copies_under_different_ids_store_one_row_among_other_events() {
    let app = spawn_app().await;
    let copies = 24;
    let shop_body = shop_payment("shop_evt_race", "pay_race");
    let push = github_push("race");
    let mut deliveries = Vec::new();
    for n in 0..copies {
        let topic = if n % 2 == 0 {
            "payments/succeeded"
        } else {
            "disputes/create"
        };
        deliveries.push(("shop", shop_body.clone(), format!("w-race-{n}"), topic));
        deliveries.push(("github", push.clone(), format!("d-race-{n}"), "push"));
        // Distinct events beside them, so batches mix both rules.
        let other = shop_payment(&format!("shop_evt_other_{n}"), &format!("pay_other_{n}"));
        deliveries.push(("shop", other, format!("w-other-{n}"), "payments/succeeded"));
        let stripe = stripe_event(
            &format!("evt_other_{n}"),
            "payment_intent.succeeded",
            json!({"id": format!("pi_other_{n}"), "amount": 100, "currency": "usd"}),
        );
        let stripe = serde_json::to_vec(&stripe).expect("json");
        deliveries.push(("stripe", stripe, format!("evt_other_{n}"), ""));
    }
    let app = &app;
    let sent = deliveries
        .iter()
        .map(|(source, body, id, topic)| async move {
            let answer = if *source == "stripe" {
                let headers = app.sign(source, body, Hints::default());
                app.post(source, &headers, body.clone()).await
            } else {
                send(app, source, body, id, topic).await
            };
            (*source, id.clone(), answer)
        });
    let answers = futures_util::future::join_all(sent).await;
    assert!(
        answers.iter().all(|(_, _, a)| a.status == 200),
        "{:?}",
        answers
            .iter()
            .map(|(s, i, a)| (s, i, a.status, a.text()))
            .collect::<Vec<_>>()
    );
    for (source, prefix) in [("shop", "w-race-"), ("github", "d-race-")] {
        let group: Vec<&Answer> = answers
            .iter()
            .filter(|(s, id, _)| *s == source && id.starts_with(prefix))
            .map(|(_, _, a)| a)
            .collect();
        assert!(
            group.iter().all(|a| a.body == group[0].body),
            "{source}: one answer for all"
        );
        let fresh = group
            .iter()
            .filter(|a| a.header("Idempotent-Replayed").is_none())
            .count();
        assert_eq!(fresh, 1, "{source}: exactly one copy was the first");
        let stored = app
            .query(
                "SELECT deliveries FROM webhook_events WHERE source = $1 AND event_id LIKE $2",
                &[&source, &format!("{prefix}%")],
            )
            .await;
        assert_eq!(stored.len(), 1, "{source}: one row");
        assert_eq!(stored[0].get::<_, i32>(0), copies, "{source}");
        assert_eq!(
            group[0].json()["event_id"],
            app.strings(
                "SELECT event_id FROM webhook_events WHERE source = $1 AND event_id LIKE $2",
                &[&source, &format!("{prefix}%")],
            )
            .await[0]
        );
    }
    // Whichever copy came first is the event, applied once: its topic alone
    // decides the payment.
    let stored = rows(app, "shop").await;
    let first = stored
        .iter()
        .find(|(id, ..)| id.starts_with("w-race-"))
        .expect("the race's row");
    assert_eq!(first.3, 1, "applied once");
    let (_, disputed) = payment(app, "pay_race").await;
    assert_eq!(disputed, first.1 == "disputes/create", "{first:?}");
    app.assert_deliveries_shared_transactions().await;
    let others = app
        .count(
            "SELECT count(*) FROM webhook_events WHERE event_id LIKE 'w-other-%'
                OR event_id LIKE 'evt_other_%'",
            &[],
        )
        .await;
    assert_eq!(
        others,
        2 * i64::from(copies),
        "every other event stored once"
    );
}

#[tokio::test]
async fn an_id_already_stored_under_another_body_is_decided_by_id() {
    let app = spawn_app().await;
    let first = send(&app, "github", &github_push("one"), "d-1", "push").await;
    let conflict = send(&app, "github", &github_push("two"), "d-1", "push").await;
    assert_eq!(conflict.status, 422, "{}", conflict.text());
    assert_eq!(conflict.json()["error"], "event_id_conflict");
    // A row kept no body key (stored while the source did not dedupe on the
    // body): its resends are still replayed by id.
    app.execute("UPDATE webhook_events SET body_sha256 = NULL", &[])
        .await;
    let again = send(&app, "github", &github_push("one"), "d-1", "push").await;
    assert_replay_of(&first, &again, "a resend of a row without a body key");
    assert_eq!(
        rows(&app, "github").await,
        [("d-1".into(), "push".into(), 2, 0)]
    );
}

#[tokio::test]
async fn schemes_that_sign_the_id_keep_deciding_by_id() {
    let app = spawn_app().await;
    // Standard Webhooks signs webhook-id: one body under two ids is the
    // provider's doing, two events.
    let body = serde_json::to_vec(&json!({"type": "payment.succeeded",
        "data": {"payment_id": "p_std", "amount": 5, "currency": "eur"}}))
    .expect("json");
    for id in ["msg_a", "msg_b"] {
        let answer = send(&app, "standard", &body, id, "payment.succeeded").await;
        assert_eq!(answer.header("Idempotent-Replayed"), None, "{id}");
        assert_eq!(answer.json()["event_id"], id);
    }
    app.deliver_ok(
        "stripe",
        &stripe_event(
            "evt_std",
            "payment_intent.succeeded",
            json!({"id": "pi_std"}),
        ),
    )
    .await;
    assert_eq!(rows(&app, "standard").await.len(), 2);
    assert_eq!(
        app.count(
            "SELECT count(*) FROM webhook_events WHERE body_sha256 IS NOT NULL",
            &[]
        )
        .await,
        0,
        "no body keys for schemes that sign the id"
    );
}

#[tokio::test]
async fn slow_the_proof_of_origin_says_the_id_and_type_were_not_signed() {
    let app = spawn_app().await;
    send(&app, "github", &github_push("origin"), "d-origin", "push").await;
    app.deliver_ok(
        "stripe",
        &stripe_event(
            "evt_origin",
            "payment_intent.succeeded",
            json!({"id": "pi_o"}),
        ),
    )
    .await;
    let id_of = |source: &'static str| {
        let app = &app;
        async move {
            app.count(
                "SELECT id FROM webhook_events WHERE source = $1",
                &[&source],
            )
            .await
        }
    };
    let (github, stripe) = (id_of("github").await, id_of("stripe").await);
    let origin: Value = app.viewer().event(github).await.json()["origin"].clone();
    assert_eq!(
        origin,
        json!({"status": "verified", "secret": 1, "id_signed": false, "type_signed": false})
    );
    let line = "the event id and type were not signed (the scheme signs only the body)";
    let page = app
        .admin(Credential::Bearer(VIEWER.into()))
        .event_page(github)
        .await;
    assert!(page.text().contains(line), "{}", page.text());
    let cli = run_hookd(
        &["events", "verify", &github.to_string()],
        Some(app.database_url()),
    )
    .await;
    let out = String::from_utf8_lossy(&cli.stdout);
    assert!(cli.status.success(), "{out}");
    assert!(out.contains(line), "{out}");
    // Stripe signs both: no such line.
    let stripe_origin = app.viewer().event(stripe).await.json()["origin"].clone();
    assert_eq!(
        (&stripe_origin["id_signed"], &stripe_origin["type_signed"]),
        (&json!(true), &json!(true))
    );
    let page = app
        .admin(Credential::Bearer(VIEWER.into()))
        .event_page(stripe)
        .await;
    assert!(!page.text().contains("not signed"));
}

#[tokio::test]
async fn concurrent_bodies_under_one_id_store_one_and_refuse_the_others() {
    let app = spawn_app().await;
    let ids = ["d-contested-1", "d-contested-2", "d-contested-3"];
    let deliveries: Vec<(&str, Vec<u8>)> = ids
        .iter()
        .flat_map(|id| (0..16).map(move |n| (*id, github_push(&format!("{id}-{n}")))))
        .collect();
    let sent = deliveries
        .iter()
        .map(|(id, body)| send(&app, "github", body, id, "push"));
    let answers = futures_util::future::join_all(sent).await;
    for id in ids {
        let statuses: Vec<u16> = deliveries
            .iter()
            .zip(&answers)
            .filter(|((to, _), _)| *to == id)
            .map(|(_, a)| a.status)
            .collect();
        assert_eq!(
            statuses.iter().filter(|s| **s == 200).count(),
            1,
            "{id}: one body is the event: {statuses:?}"
        );
        assert_eq!(
            statuses.iter().filter(|s| **s == 422).count(),
            15,
            "{id}: the others conflict, never a 5xx: {statuses:?}"
        );
    }
    assert_eq!(rows(&app, "github").await.len(), ids.len());
}
