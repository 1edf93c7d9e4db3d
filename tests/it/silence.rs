//! A source that expects events (`expect_events_within`) and gets none accepted
//! for that long is silent: `hookd_source_silent{source}` is 1 until a delivery
//! of it is accepted again, whichever instance accepts it; a refused delivery
//! does not count.

use std::time::Duration;

use crate::support::{
    Spawn, TestApp, shipped_settings, spawn, spawn_with_settings, stripe_event, wait_for,
};

async fn silent(app: &TestApp) -> Option<String> {
    let text = app.get("/metrics").await.text();
    text.lines()
        .find(|l| l.starts_with("hookd_source_silent{source=\"stripe\"}"))
        .map(|l| l.rsplit(' ').next().unwrap_or_default().to_string())
}

async fn until_silent_is(app: &TestApp, value: &str) {
    wait_for(
        &format!("hookd_source_silent to be {value}"),
        Duration::from_secs(15),
        || async { (silent(app).await.as_deref() == Some(value)).then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn slow_a_source_without_accepted_deliveries_for_its_window_is_silent_until_one_comes() {
    let mut settings = shipped_settings();
    for source in &mut settings.sources {
        if source.name == "stripe" {
            source.expect_events_within = Some(Duration::from_secs(60));
        }
    }
    let app = spawn_with_settings(settings.clone()).await;
    // Only watched sources are shown; a new one is not silent yet.
    until_silent_is(&app, "0").await;
    assert!(
        !app.get("/metrics")
            .await
            .text()
            .contains("hookd_source_silent{source=\"github\"}")
    );
    // Watched from its first flush; its last accepted delivery two minutes ago: silent.
    app.wait_for_count(
        "SELECT count(*) FROM source_activity WHERE source = 'stripe'",
        1,
        Duration::from_secs(15),
    )
    .await;
    app.execute(
        "UPDATE source_activity SET last_accepted_at = now() - interval '2 minutes'",
        &[],
    )
    .await;
    until_silent_is(&app, "1").await;
    // A delivery refused for its signature is no sign of life.
    let body = serde_json::to_vec(&stripe_event(
        "evt_forged",
        "payment_intent.succeeded",
        serde_json::json!({"id": "pi_1"}),
    ))
    .expect("json");
    let forged = vec![("Stripe-Signature".to_string(), "t=1,v1=00".to_string())];
    assert_eq!(app.post("stripe", &forged, body).await.status, 401);
    tokio::time::sleep(hookd::silence::FLUSH_EVERY * 2).await;
    assert_eq!(silent(&app).await.as_deref(), Some("1"));

    // Another instance on the same database accepts one: the first sees it.
    let other = spawn(Spawn {
        settings,
        db: app.db.clone(),
        ..Spawn::default()
    })
    .await;
    other
        .deliver_ok(
            "stripe",
            &stripe_event(
                "evt_alive",
                "customer.created",
                serde_json::json!({"id": "cus_1"}),
            ),
        )
        .await;
    until_silent_is(&app, "0").await;
}
