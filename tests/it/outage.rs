//! A database outage: deliveries get 503 with Retry-After (never 200), readiness
//! says 503, and both recover on their own when the database returns.

use std::path::PathBuf;

use hookd::embedded_pg::{ClusterOptions, EmbeddedPostgres};
use hookd::store;
use serde_json::json;

use crate::support::{ClusterGuard, Spawn, TestApp, spawn, stripe_event, wait_for};

async fn start_cluster(dir: PathBuf) -> EmbeddedPostgres {
    tokio::task::spawn_blocking(move || {
        EmbeddedPostgres::start(&dir, ClusterOptions { durable: false }).expect("cluster")
    })
    .await
    .expect("join")
}

#[tokio::test]
async fn a_stopped_database_gives_503_then_recovers_by_itself() {
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("outage-{}", std::process::id()));
    let mut cluster = start_cluster(dir.clone()).await;
    // Stopped and removed when the test ends, also when an assertion fails.
    let _stop_it = ClusterGuard::new(cluster.dir());
    store::create_database_if_missing(&cluster.pg_config("postgres"), "hookd")
        .await
        .expect("db");
    let pool = store::pool(cluster.pg_config("hookd"), store::DbConnector::Plain, 2);
    store::migrate(&pool).await.expect("migrate");
    let app = spawn(Spawn {
        database: Some(cluster.pg_config("hookd")),
        ..Spawn::default()
    })
    .await;
    let event = |id: &str| {
        stripe_event(
            id,
            "customer.created",
            json!({"id": "cus_1", "object": "customer"}),
        )
    };

    assert_eq!(
        app.deliver("stripe", &event("evt_before")).await.status,
        200
    );

    tokio::task::spawn_blocking(move || cluster.stop().expect("stop"))
        .await
        .expect("join");
    for id in ["evt_during", "evt_before"] {
        let answer = app.deliver("stripe", &event(id)).await;
        assert_eq!(answer.status, 503, "{id}");
        assert_eq!(answer.json()["error"], "unavailable");
        assert_eq!(answer.header("Retry-After"), Some("5"), "{id}");
    }
    // Readiness is checked at most once a second.
    readyz_becomes(&app, 503).await;
    assert_eq!(
        app.get("/healthz").await.status,
        200,
        "the process itself is up"
    );
    assert_eq!(app.metrics().await.value("hookd_ready", &[]), 0.0);

    let _restarted = start_cluster(dir).await;
    readyz_becomes(&app, 200).await;
    assert_eq!(app.metrics().await.value("hookd_ready", &[]), 1.0);
    let retried = app.deliver("stripe", &event("evt_during")).await;
    assert_eq!(retried.status, 200);
    assert_eq!(
        retried.header("Idempotent-Replayed"),
        None,
        "it was never stored"
    );
    let again = app.deliver("stripe", &event("evt_before")).await;
    assert_eq!(again.header("Idempotent-Replayed"), Some("true"));
}

/// Waits (3 s at most: readiness is cached for a second) until `/readyz`
/// answers `status`.
async fn readyz_becomes(app: &TestApp, status: u16) {
    let what = format!("/readyz to answer {status}");
    wait_for(&what, std::time::Duration::from_secs(3), || async {
        (app.get("/readyz").await.status == status).then_some(())
    })
    .await;
}
