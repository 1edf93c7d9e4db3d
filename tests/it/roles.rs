//! Database roles and schemas: once the schema's owner has applied the
//! migrations, hookd serves everything with a role that may only read and write
//! rows — no DDL, no ownership, no superuser — as a platform team gives a
//! service; and it lives in a schema of its own when `search_path` names one.

use serde_json::json;

use crate::support::{Spawn, TestApp, TestDb, connect, spawn, spawn_app, stripe_event};

/// What the serving role is granted: rows and sequences, nothing else.
const GRANTS: &str = "GRANT USAGE ON SCHEMA public TO {role};
     GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role};
     GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO {role};";

/// `owner`'s database, served by a new login role with only `GRANTS`.
async fn served_by_a_row_only_role(owner: &TestApp) -> TestApp {
    let database = &owner.db.as_ref().expect("a test database").name;
    let role = format!("rows_{database}");
    let admin = owner.db().await;
    admin
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE;
             GRANT CONNECT ON DATABASE {database} TO {role};
             {}",
            GRANTS.replace("{role}", &role)
        ))
        .await
        .expect("role");
    let mut config = owner.db.as_ref().expect("a test database").config();
    config.user(&role);
    let served = spawn(Spawn {
        database: Some(config),
        ..Spawn::default()
    })
    .await;
    let session = served.app.pool.get().await.expect("a pooled session");
    let who: String = session
        .query_one("SELECT current_user::text", &[])
        .await
        .expect("current_user")
        .get(0);
    assert_eq!(who, role, "hookd's own sessions use the role");
    drop(session);
    served
}

fn payment(id: &str, customer: &str) -> serde_json::Value {
    stripe_event(
        id,
        "payment_intent.succeeded",
        json!({"id": format!("pi_{id}"), "object": "payment_intent", "amount": 700,
               "currency": "usd", "customer": customer}),
    )
}

#[tokio::test]
async fn a_role_that_may_only_read_and_write_rows_serves_everything_once_migrated() {
    let owner = spawn_app().await;
    let served = served_by_a_row_only_role(&owner).await;

    // What serve does at start: nothing is pending, so only reads.
    assert_eq!(
        hookd::store::migrate(&served.app.pool)
            .await
            .expect("migrate"),
        0
    );
    hookd::store::is_ready(&served.app.pool, &[], false)
        .await
        .expect("ready");

    // Deliveries: new (the payment and the rollup triggers' counts), then a copy.
    let first = served
        .deliver("stripe", &payment("evt_role_1", "cus_role"))
        .await;
    assert_eq!(first.status, 200, "{}", first.text());
    let copy = served
        .deliver("stripe", &payment("evt_role_1", "cus_role"))
        .await;
    assert_eq!((copy.status, &copy.body), (200, &first.body));
    assert_eq!(copy.header("idempotent-replayed"), Some("true"));
    assert_eq!(
        served
            .count(
                "SELECT amount FROM payments WHERE payment_id = 'pi_evt_role_1'",
                &[]
            )
            .await,
        700
    );
    let stats = served.operator().stats("window=24h").await;
    assert_eq!(stats.status, 200);
    assert_eq!(stats.json()["total"], 1);

    // The support desk: a retry, a revealed payload, a bulk retry, forgetting a
    // customer, each audited.
    let id = served.event_row_id("evt_role_1").await;
    assert_eq!(served.operator().retry(id, None).await.status, 200);
    let revealed = served
        .operator()
        .get(&format!("/admin/api/events/{id}?reveal=true"))
        .await;
    assert_eq!(revealed.status, 200, "{}", revealed.text());
    let bulk = served
        .operator()
        .bulk_retry(&json!({"status": "processed"}), None)
        .await;
    assert_eq!(bulk.status, 200, "{}", bulk.text());
    let forget = served
        .operator()
        .send(
            "POST",
            "/admin/api/customers/cus_role/forget",
            &[("Content-Type", "application/json")],
            b"{}".to_vec(),
        )
        .await;
    assert_eq!(forget.status, 200, "{}", forget.text());
    assert_eq!(
        served
            .strings("SELECT DISTINCT action FROM admin_audit ORDER BY 1", &[])
            .await,
        [
            "bulk_retried",
            "forgot_customer",
            "retried",
            "revealed_payload"
        ]
    );

    // The purge: a key older than key_retention deleted, and the counts the
    // triggers keep still equal to the events left.
    served
        .deliver_ok("stripe", &payment("evt_role_2", "cus_2"))
        .await;
    owner
        .execute(
            "UPDATE webhook_events SET received_at = now() - interval '400 days'
             WHERE event_id = 'evt_role_2'",
            &[],
        )
        .await;
    let outcome = served.app.purger.run_once(None).await.expect("purge");
    assert_eq!(
        hookd::purge::PurgeOutcome::total(&outcome.keys_deleted),
        1,
        "{outcome:?}"
    );
    assert_eq!(
        served
            .count("SELECT count(*) FROM webhook_events", &[])
            .await,
        1
    );
    assert_eq!(
        served
            .count("SELECT sum(events)::bigint FROM event_status_totals", &[])
            .await,
        1
    );
}

#[tokio::test]
async fn applying_a_migration_needs_the_owner_and_says_so() {
    let owner = spawn_app().await;
    let served = served_by_a_row_only_role(&owner).await;
    // A migration still to apply: the ledger forgets the newest one.
    let newest = hookd::store::MIGRATIONS.last().expect("migrations");
    owner
        .execute(
            "DELETE FROM hookd_schema_migrations WHERE version = $1",
            &[&newest.version],
        )
        .await;
    let error = hookd::store::migrate(&served.app.pool)
        .await
        .expect_err("a row-only role cannot change the schema");
    let text = error.to_string();
    // Altering a table needs its owner; creating one, the schema's.
    let refused = ["must be owner of table", "permission denied for schema"]
        .iter()
        .any(|why| text.contains(&format!("hookd migration {}: {why}", newest.name)));
    assert!(
        refused && text.contains("run `hookd migrate` with that role's DATABASE_URL"),
        "{text}"
    );
    assert!(
        hookd::store::is_ready(&served.app.pool, &[], false)
            .await
            .is_err(),
        "not ready while a migration is pending"
    );
}

#[tokio::test]
async fn a_schema_of_its_own_named_by_search_path_holds_everything() {
    let db = TestDb::empty().await;
    connect(db.config())
        .await
        .batch_execute("CREATE SCHEMA payment_hooks")
        .await
        .expect("schema");
    let mut config = db.config();
    config.options("-c search_path=payment_hooks");
    let pool = hookd::store::pool(config.clone(), hookd::store::DbConnector::Plain, 2);
    assert_eq!(
        hookd::store::migrate(&pool).await.expect("migrate"),
        hookd::store::MIGRATIONS.len()
    );
    let app = spawn(Spawn {
        database: Some(config),
        ..Spawn::default()
    })
    .await;
    app.deliver_ok("stripe", &payment("evt_schema_1", "cus_schema"))
        .await;
    app.execute(
        "UPDATE webhook_events SET received_at = now() - interval '400 days'",
        &[],
    )
    .await;
    let outcome = app.app.purger.run_once(None).await.expect("purge");
    assert_eq!(hookd::purge::PurgeOutcome::total(&outcome.keys_deleted), 1);
    assert_eq!(
        app.count("SELECT count(*) FROM payment_hooks.payments", &[])
            .await,
        1
    );
    let outside = app
        .strings(
            "SELECT n.nspname || '.' || c.relname FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname NOT IN ('payment_hooks', 'pg_catalog', 'information_schema', 'pg_toast')
             UNION ALL
             SELECT n.nspname || '.' || p.proname || '()' FROM pg_proc p
             JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname NOT IN ('payment_hooks', 'pg_catalog', 'information_schema')
             ORDER BY 1",
            &[],
        )
        .await;
    assert!(outside.is_empty(), "outside the schema: {outside:?}");
}
