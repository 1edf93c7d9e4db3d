//! Retention: old payloads and keys go in batches, unfinished work never does, and
//! a resend of a purged event still gets its first answer without being applied again.

use std::collections::BTreeMap;

use hookd::purge::PurgeOutcome;
use serde_json::{Value, json};

use hookd_kit::gate::{GATED_TYPE, RetryGate};

use crate::support::{
    Spawn, TestApp, shipped_settings, spawn, spawn_app, spawn_with_settings, stripe_event, wait_for,
};

fn event(id: &str, kind: &str) -> Value {
    match kind {
        "processed" => stripe_event(
            id,
            "payment_intent.succeeded",
            json!({"id": format!("pi_{id}"), "object": "payment_intent", "amount": 100}),
        ),
        "ignored" => stripe_event(
            id,
            "customer.created",
            json!({"id": "cus_1", "object": "customer"}),
        ),
        // A payment event without a payment id is dead at once.
        "dead" => stripe_event(id, "payment_intent.succeeded", json!({"amount": 1})),
        // Made `failed` below; starts as a payment.
        _ => stripe_event(
            id,
            "payment_intent.succeeded",
            json!({"id": format!("pi_{id}"), "amount": 1}),
        ),
    }
}

const STATUSES: [&str; 4] = ["processed", "ignored", "dead", "failed"];

/// Two events per status at each age: fresh, past `retention`, past `key_retention`.
async fn aged_events(app: &TestApp) {
    for age in ["fresh", "old", "ancient"] {
        for status in STATUSES {
            for n in 0..2 {
                let id = format!("evt_{age}_{status}_{n}");
                assert_eq!(app.deliver("stripe", &event(&id, status)).await.status, 200);
            }
        }
    }
    let db = app.db().await;
    db.batch_execute(
        "UPDATE webhook_events SET status = 'failed', next_attempt_at = now() + interval '1 day',
                attempts = 1, last_error = 'still failing'
         WHERE event_id LIKE 'evt\\_%\\_failed\\_%';
         UPDATE webhook_events SET received_at = now() - interval '40 days' WHERE event_id LIKE 'evt\\_old\\_%';
         UPDATE webhook_events SET received_at = now() - interval '400 days' WHERE event_id LIKE 'evt\\_ancient\\_%';
         INSERT INTO admin_idempotency_keys (token_name, idempotency_key, request_sha256, created_at)
         VALUES ('t', 'old', '\\x00', now() - interval '2 days'), ('t', 'new', '\\x00', now());
         INSERT INTO admin_revoked_sessions (nonce, expires_at)
         VALUES ('expired', now() - interval '1 minute'), ('live', now() + interval '1 hour');
         INSERT INTO admin_audit (at, who, action)
         VALUES (now() - interval '40 days', 'operator', 'retried'), (now(), 'operator', 'retried');",
    )
    .await
    .expect("age rows");
}

fn counts(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

async fn small_batches() -> TestApp {
    let mut settings = shipped_settings();
    settings.purge_batch = 2;
    spawn_with_settings(settings).await
}

async fn snapshot(app: &TestApp) -> Vec<(String, String, bool, Option<bool>, i64)> {
    app.query(
        "SELECT e.event_id, e.status, e.payload IS NULL, e.purged_at IS NOT NULL,
                (SELECT count(*) FROM webhook_event_attempts a WHERE a.webhook_event_id = e.id)
         FROM webhook_events e ORDER BY e.event_id",
        &[],
    )
    .await
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), Some(r.get(3)), r.get(4)))
    .collect()
}

/// Everything a purge pass could change, as text: every row of every table it
/// touches (and of `payments`, which it must never touch), sorted.
async fn everything(app: &TestApp) -> BTreeMap<&'static str, String> {
    let mut all = BTreeMap::new();
    for table in [
        "webhook_events",
        "webhook_event_attempts",
        "payments",
        "admin_idempotency_keys",
        "admin_revoked_sessions",
        "admin_audit",
        "hookd_purge_watermark",
        "hookd_purge_pending",
    ] {
        let rows = app
            .strings(
                &format!(
                    "SELECT coalesce(string_agg(t::text, E'\\n' ORDER BY t::text), '') FROM {table} t"
                ),
                &[],
            )
            .await;
        all.insert(table, rows.into_iter().next().unwrap_or_default());
    }
    all
}

/// The aged events after one pass, with the purge's own state in place (a
/// watermark, pending events that have finished since) and more to do: three
/// events past `retention` beyond the watermark, and an expired Idempotency-Key.
async fn half_purged(app: &TestApp) {
    aged_events(app).await;
    app.app.purger.run_once(None).await.expect("first pass");
    // The failed events finish (the old ones wait in the pending list).
    app.run_due_retries().await;
    for (id, kind) in [
        ("evt_late_processed", "processed"),
        ("evt_late_dead", "dead"),
        ("evt_late_ignored", "ignored"),
    ] {
        app.deliver_ok("stripe", &event(id, kind)).await;
    }
    app.db()
        .await
        .batch_execute(
            "UPDATE webhook_events SET received_at = now() - interval '40 days'
             WHERE event_id LIKE 'evt\\_late\\_%';
             INSERT INTO admin_idempotency_keys (token_name, idempotency_key, request_sha256, created_at)
             VALUES ('t', 'older', '\\x00', now() - interval '3 days');
             INSERT INTO admin_revoked_sessions (nonce, expires_at)
             VALUES ('expired-too', now() - interval '1 minute');",
        )
        .await
        .expect("more to purge");
}

#[tokio::test]
async fn a_dry_run_counts_and_changes_nothing() {
    let app = small_batches().await;
    half_purged(&app).await;
    let before = everything(&app).await;
    for table in [
        "hookd_purge_watermark",
        "hookd_purge_pending",
        "admin_idempotency_keys",
    ] {
        assert!(!before[table].is_empty(), "{table} has rows to keep");
    }
    assert!(
        before["webhook_events"].contains("gave up")
            || before["webhook_events"].contains("neither"),
        "dead events keep their last_error"
    );
    let preview = app.app.purger.preview().await.expect("preview");
    assert_eq!(
        preview.keys,
        counts(&[("processed", 2)]),
        "the ancient failed ones, finished"
    );
    assert_eq!(
        preview.payloads,
        counts(&[("dead", 1), ("ignored", 1), ("processed", 3)]),
        "the three late ones and the two old ones that finished"
    );
    assert_eq!(preview.idempotency_keys, 1);
    assert_eq!(
        everything(&app).await,
        before,
        "the preview changed nothing"
    );

    // What it counted is what a pass then does.
    let outcome = app.app.purger.run_once(None).await.expect("pass");
    assert_eq!(outcome.keys_deleted, preview.keys);
    assert_eq!(outcome.payloads_dropped, preview.payloads);
    assert_eq!(outcome.idempotency_keys_deleted, preview.idempotency_keys);
}

#[tokio::test]
async fn a_pass_drops_old_payloads_and_older_keys_but_never_failed_events() {
    let app = small_batches().await;
    aged_events(&app).await;
    let payments_before = app.count("SELECT count(*) FROM payments", &[]).await;
    let outcome = app.app.purger.run_once(None).await.expect("purge");
    assert_eq!(
        outcome,
        PurgeOutcome {
            skipped: false,
            payloads_dropped: counts(&[("dead", 2), ("ignored", 2), ("processed", 2)]),
            keys_deleted: counts(&[("dead", 2), ("ignored", 2), ("processed", 2)]),
            idempotency_keys_deleted: 1,
            revoked_sessions_deleted: 1,
            audit_entries_deleted: 1,
            conflicts_deleted: 0,
            requests_dropped: 0,
            api_idempotency_keys_deleted: 0,
            interrupted: false,
        }
    );
    let rows = snapshot(&app).await;
    let find = |id: &str| rows.iter().find(|r| r.0 == id).cloned();
    for status in STATUSES {
        for n in 0..2 {
            let fresh = find(&format!("evt_fresh_{status}_{n}")).expect("fresh stays");
            assert!(!fresh.2, "fresh payload kept");
            let old = find(&format!("evt_old_{status}_{n}")).expect("old key stays");
            let ancient = find(&format!("evt_ancient_{status}_{n}"));
            if status == "failed" {
                assert!(
                    !old.2 && old.3 == Some(false),
                    "failed work is never purged"
                );
                assert!(ancient.is_some_and(|a| !a.2), "not even when ancient");
            } else {
                assert_eq!(
                    (old.2, old.3, old.4),
                    (true, Some(true), 0),
                    "{status}: slim key left"
                );
                assert!(
                    ancient.is_none(),
                    "{status}: key past key_retention deleted"
                );
            }
        }
    }
    assert_eq!(
        app.count("SELECT count(*) FROM payments", &[]).await,
        payments_before
    );
    assert_eq!(
        app.count("SELECT count(*) FROM admin_idempotency_keys", &[])
            .await,
        1,
        "only the expired idempotency key went"
    );
    assert_eq!(
        app.strings("SELECT nonce FROM admin_revoked_sessions", &[])
            .await,
        ["live"],
        "a sign-out is remembered until its session would have expired"
    );
    assert_eq!(
        app.count("SELECT count(*) FROM admin_audit", &[]).await,
        1,
        "the audit trail goes with the event records"
    );
    let again = app.app.purger.run_once(None).await.expect("purge");
    assert_eq!(
        PurgeOutcome::total(&again.payloads_dropped) + PurgeOutcome::total(&again.keys_deleted),
        0
    );
    let metrics = app.metrics().await;
    for (what, rows) in [
        ("payload", 6.0),
        ("key", 6.0),
        ("idempotency_key", 1.0),
        ("revoked_session", 1.0),
        ("audit_entry", 1.0),
    ] {
        assert_eq!(
            metrics.value("hookd_purged_rows_total", &[("what", what)]),
            rows,
            "{what}: both passes together"
        );
    }
}

#[tokio::test]
async fn an_old_event_still_failing_is_purged_once_it_finishes() {
    let app = small_batches().await;
    aged_events(&app).await;
    app.app.purger.run_once(None).await.expect("first pass");
    let still = "SELECT count(*) FROM webhook_events
                 WHERE event_id LIKE 'evt\\_old\\_failed\\_%' AND payload IS NOT NULL";
    assert_eq!(
        app.count(still, &[]).await,
        2,
        "failed work keeps its payload"
    );

    // The retries succeed; the next pass drops what the first one had to leave.
    app.run_due_retries().await;
    let outcome = app.app.purger.run_once(None).await.expect("second pass");
    assert_eq!(
        outcome.payloads_dropped,
        counts(&[("processed", 2)]),
        "the two old events that finished"
    );
    assert_eq!(
        outcome.keys_deleted,
        counts(&[("processed", 2)]),
        "and the two ancient ones"
    );
    assert_eq!(app.count(still, &[]).await, 0);
    assert_eq!(
        app.count("SELECT count(*) FROM hookd_purge_pending", &[])
            .await,
        0
    );
    let third = app.app.purger.run_once(None).await.expect("third pass");
    assert!(third.payloads_dropped.is_empty() && third.keys_deleted.is_empty());
}

#[tokio::test]
async fn a_resend_after_the_payload_purge_is_replayed_not_applied() {
    let app = spawn(Spawn::default()).await;
    let body = event("evt_resend", "processed");
    let first = app.deliver_ok("stripe", &body).await;
    let outcome = age_and_purge(&app, 31).await;
    assert_eq!(PurgeOutcome::total(&outcome.payloads_dropped), 1);
    app.execute(
        "UPDATE payments SET amount = 7 WHERE payment_id = 'pi_evt_resend'",
        &[],
    )
    .await;

    let again = app.deliver("stripe", &body).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.body, first.body);
    assert_eq!(again.header("Idempotent-Replayed"), Some("true"));
    let row = &app
        .query(
            "SELECT deliveries, attempts, payload IS NULL FROM webhook_events",
            &[],
        )
        .await[0];
    assert_eq!(
        (
            row.get::<_, i32>(0),
            row.get::<_, i32>(1),
            row.get::<_, bool>(2)
        ),
        (2, 1, true)
    );
    assert_eq!(
        app.count(
            "SELECT amount FROM payments WHERE payment_id = 'pi_evt_resend'",
            &[]
        )
        .await,
        7,
        "the handler did not run again"
    );
    // A different payload under the purged id is still a conflict.
    let changed = event("evt_resend", "ignored");
    assert_eq!(app.deliver("stripe", &changed).await.status, 422);
}

#[tokio::test]
async fn a_body_resent_under_a_new_id_after_the_payload_purge_is_still_the_first_event() {
    let app = spawn(Spawn::default()).await;
    let body = serde_json::to_vec(&json!({"id": "shop_evt_p", "type": "payments/succeeded",
        "data": {"payment_id": "pay_p", "amount": 300, "currency": "eur"}}))
    .expect("json");
    let app = &app;
    let send = |id: &'static str, topic: &'static str| {
        let headers = app.sign(
            "shop",
            &body,
            hookd::simulate::Hints {
                event_type: Some(topic),
                event_id: Some(id),
            },
        );
        let body = body.clone();
        async move { app.post("shop", &headers, body).await }
    };
    let first = send("w-p1", "payments/succeeded").await;
    assert_eq!(first.status, 200);
    let outcome = age_and_purge(app, 31).await;
    assert_eq!(PurgeOutcome::total(&outcome.payloads_dropped), 1);
    // The slim key keeps the body's key: a forged topic under a new id is the
    // purged event again.
    let again = send("w-p2", "disputes/create").await;
    assert_eq!(again.status, 200);
    assert_eq!(again.body, first.body);
    assert_eq!(again.header("Idempotent-Replayed"), Some("true"));
    let rows = app
        .query(
            "SELECT deliveries, payload IS NULL FROM webhook_events",
            &[],
        )
        .await;
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].get::<_, i32>(0), rows[0].get::<_, bool>(1)),
        (2, true)
    );
    assert_eq!(
        app.count(
            "SELECT count(*) FROM payments WHERE payment_id = 'pay_p' AND disputed",
            &[]
        )
        .await,
        0
    );
}

#[tokio::test]
async fn only_one_instance_purges_at_a_time() {
    let first = small_batches().await;
    aged_events(&first).await;
    let mut settings = shipped_settings();
    settings.purge_batch = 2;
    let second = spawn(Spawn {
        settings,
        db: first.db.clone(),
        ..Spawn::default()
    })
    .await;

    // Another instance's pass holds the lease: this one skips.
    let holder = first.db().await;
    holder
        .execute(
            "INSERT INTO hookd_job_leases (job, holder, expires_at)
             VALUES ('purge', 'another instance', now() + interval '1 minute')",
            &[],
        )
        .await
        .expect("lease");
    let skipped = second.app.purger.run_once(None).await.expect("purge");
    assert!(skipped.skipped);
    assert_eq!(PurgeOutcome::total(&skipped.payloads_dropped), 0);

    holder
        .execute("DELETE FROM hookd_job_leases", &[])
        .await
        .expect("give the lease back");

    // Both at once: the work is done exactly once between them.
    let (a, b) = tokio::join!(
        first.app.purger.run_once(None),
        second.app.purger.run_once(None)
    );
    let (a, b) = (a.expect("a"), b.expect("b"));
    let removed = |o: &PurgeOutcome| {
        PurgeOutcome::total(&o.payloads_dropped) + PurgeOutcome::total(&o.keys_deleted)
    };
    assert_eq!(removed(&a) + removed(&b), 12);
    assert!(a.skipped || b.skipped || removed(&a) == 0 || removed(&b) == 0);

    // A lease whose holder died runs out, and the next pass takes it.
    holder
        .execute(
            "INSERT INTO hookd_job_leases (job, holder, expires_at)
             VALUES ('purge', 'a dead instance', now() - interval '1 second')",
            &[],
        )
        .await
        .expect("an expired lease");
    let taken = second.app.purger.run_once(None).await.expect("purge");
    assert!(!taken.skipped);
    let left: i64 = holder
        .query_one("SELECT count(*) FROM hookd_job_leases", &[])
        .await
        .expect("leases")
        .get(0);
    assert_eq!(left, 0, "a finished pass gives its lease back");
}

#[tokio::test]
async fn serve_purges_on_its_schedule_and_stops_promptly() {
    let mut settings = shipped_settings();
    settings.purge_interval = std::time::Duration::from_millis(200);
    let mut app = spawn(Spawn {
        settings,
        parts: PURGING,
        ..Spawn::default()
    })
    .await;
    let passes = || async {
        app.metrics()
            .await
            .value("hookd_purge_runs_total", &[("result", "ok")])
    };
    // The pass at start has run; an event aged after it is purged by a
    // scheduled one.
    wait_for(
        "the pass at start",
        std::time::Duration::from_secs(10),
        || async { (passes().await >= 1.0).then_some(()) },
    )
    .await;
    app.deliver_ok("stripe", &event("evt_sched", "ignored"))
        .await;
    // Read before the event ages: whichever pass purges it finishes after
    // this read (a pass is counted once it has finished), so it is counted
    // beyond it however the schedule falls.
    let before = passes().await;
    app.execute(
        "UPDATE webhook_events SET received_at = now() - interval '31 days'",
        &[],
    )
    .await;
    app.wait_for_count(
        "SELECT count(*) FROM webhook_events WHERE purged_at IS NULL",
        0,
        std::time::Duration::from_secs(10),
    )
    .await;
    wait_for(
        "the scheduled pass that purged it is counted",
        std::time::Duration::from_secs(10),
        || async { (passes().await > before).then_some(()) },
    )
    .await;

    // An instance whose next pass is an hour away stops without waiting for
    // it. The first stops before: a pass of its own holding the lease would
    // make this one's pass at start a skip, which is not counted.
    app.stop().await;
    let mut idle = purging_beside(&app).await;
    wait_for(
        "its pass at start",
        std::time::Duration::from_secs(10),
        || async {
            let m = idle.metrics().await;
            (m.value("hookd_purge_runs_total", &[("result", "ok")]) >= 1.0).then_some(())
        },
    )
    .await;
    let stopped = tokio::time::timeout(std::time::Duration::from_secs(30), idle.stop()).await;
    assert!(stopped.is_ok(), "the schedule's sleep is interruptible");
}

#[tokio::test]
async fn slow_hookd_purge_dry_run_prints_counts_per_status() {
    let app = small_batches().await;
    half_purged(&app).await;
    let run =
        |args: &'static [&'static str]| crate::support::run_hookd(args, Some(app.database_url()));
    let before = everything(&app).await;
    let dry = run(&["purge", "--dry-run"]).await;
    assert!(
        dry.status.success(),
        "{}",
        String::from_utf8_lossy(&dry.stderr)
    );
    let text = String::from_utf8_lossy(&dry.stdout);
    for line in [
        "would drop payloads: dead 1, ignored 1, processed 3",
        "would delete keys:   processed 2",
        "would delete expired idempotency keys: 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line}: {text}");
    }
    assert_eq!(
        everything(&app).await,
        before,
        "the dry run changed nothing"
    );

    let real = run(&["purge"]).await;
    assert!(real.status.success());
    let text = String::from_utf8_lossy(&real.stdout);
    assert!(
        text.lines().any(|l| l == "deleted keys:     processed 2"),
        "{text}"
    );
    assert_eq!(
        app.count("SELECT count(*) FROM webhook_events", &[]).await,
        19
    );
}

/// `count` finished events received `days` ago.
async fn old_events(app: &TestApp, prefix: &str, count: usize, days: i32) {
    for i in 0..count {
        app.deliver_ok("stripe", &event(&format!("{prefix}_{i}"), "processed"))
            .await;
    }
    backdate(app, prefix, days).await;
}

/// The events whose ids start with `prefix`, received `days` ago.
async fn backdate(app: &TestApp, prefix: &str, days: i32) {
    app.execute(
        "UPDATE webhook_events SET received_at = now() - make_interval(days => $1)
         WHERE event_id LIKE $2",
        &[&days, &format!("{prefix}\\_%")],
    )
    .await;
}

async fn payloads_left(app: &TestApp, prefix: &str) -> i64 {
    app.count(
        "SELECT count(*) FROM webhook_events WHERE event_id LIKE $1 AND payload IS NOT NULL",
        &[&format!("{prefix}\\_%")],
    )
    .await
}

/// Another instance on `first`'s database running serve's purge loop: its
/// pass at start, the next an hour away.
async fn purging_beside(first: &TestApp) -> TestApp {
    let mut settings = shipped_settings();
    settings.purge_interval = std::time::Duration::from_secs(3600);
    spawn(Spawn {
        settings,
        db: first.db.clone(),
        parts: PURGING,
        ..Spawn::default()
    })
    .await
}

#[tokio::test]
async fn serve_runs_a_pass_as_it_starts() {
    let first = spawn_app().await;
    old_events(&first, "evt_boot", 3, 40).await;
    let second = purging_beside(&first).await;
    let app = &second;
    wait_for(
        "the pass at start",
        std::time::Duration::from_secs(20),
        || async move { (payloads_left(app, "evt_boot").await == 0).then_some(()) },
    )
    .await;
    // The rows are counted once the pass has finished, after its last step.
    wait_for(
        "the pass counted",
        std::time::Duration::from_secs(20),
        || async move {
            let m = app.metrics().await;
            (m.value("hookd_purge_runs_total", &[("result", "ok")]) >= 1.0).then_some(())
        },
    )
    .await;
    assert_eq!(
        app.metrics()
            .await
            .value("hookd_purged_rows_total", &[("what", "payload")]),
        3.0
    );
}

#[tokio::test]
async fn a_failing_pass_is_counted_an_error_with_what_it_removed_before() {
    let first = spawn_app().await;
    old_events(&first, "evt_fails", 3, 40).await;
    // The pass drops the payloads, then fails at the audit entries (a missing
    // grant, a lock timeout: here a trigger that refuses the delete).
    first
        .db()
        .await
        .batch_execute(
            "INSERT INTO admin_audit (at, who, action)
             VALUES (now() - interval '40 days', 'operator', 'retried');
             CREATE FUNCTION refuse_delete() RETURNS trigger LANGUAGE plpgsql AS
               $$ BEGIN RAISE EXCEPTION 'permission denied for table admin_audit'; END $$;
             CREATE TRIGGER refuse_delete BEFORE DELETE ON admin_audit
               FOR EACH ROW EXECUTE FUNCTION refuse_delete();",
        )
        .await
        .expect("trigger");
    let second = purging_beside(&first).await;
    let app = &second;
    let runs = |result: &'static str| async move {
        app.metrics()
            .await
            .value("hookd_purge_runs_total", &[("result", result)])
    };
    wait_for(
        "the failed pass",
        std::time::Duration::from_secs(20),
        || async move { (runs("error").await == 1.0).then_some(()) },
    )
    .await;
    assert_eq!(runs("ok").await, 0.0);
    assert_eq!(payloads_left(app, "evt_fails").await, 0);
    assert_eq!(
        app.metrics()
            .await
            .value("hookd_purged_rows_total", &[("what", "payload")]),
        3.0,
        "what the failed pass removed is counted"
    );
    // Mended, the next pass succeeds.
    app.execute("DROP TRIGGER refuse_delete ON admin_audit", &[])
        .await;
    let next = app.app.purger.run_once(None).await.expect("next pass");
    assert_eq!(next.audit_entries_deleted, 1);
    assert_eq!(runs("ok").await, 1.0);
    assert_eq!(runs("error").await, 1.0);
}

#[tokio::test]
async fn a_pass_stops_between_batches_when_shutdown_comes() {
    let app = small_batches().await;
    old_events(&app, "evt_stop", 6, 40).await;
    let (trigger, stop) = hookd::shutdown::channel();
    trigger.trigger();
    let outcome = app.app.purger.run_once(Some(&stop)).await.expect("pass");
    assert!(outcome.interrupted);
    // One whole batch, committed; nothing of the next.
    assert_eq!(outcome.payloads_dropped, counts(&[("processed", 2)]));
    assert_eq!(payloads_left(&app, "evt_stop").await, 4);
    let rest = app.app.purger.run_once(None).await.expect("next pass");
    assert!(!rest.interrupted);
    assert_eq!(rest.payloads_dropped, counts(&[("processed", 4)]));
    assert_eq!(payloads_left(&app, "evt_stop").await, 0);
}

#[tokio::test]
async fn a_pass_rests_twice_as_long_as_each_batch_took() {
    let app = small_batches().await;
    old_events(&app, "evt_pace", 8, 40).await;
    // The database times each statement that drops payloads (a trigger makes
    // each take at least 100 ms, and records its start, its end and its rows).
    app.db()
        .await
        .batch_execute(
            "CREATE TABLE pace (at timestamptz, what text, changed bigint);
             CREATE FUNCTION pace_start() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 INSERT INTO pace VALUES (clock_timestamp(), 'start', NULL);
                 PERFORM pg_sleep(0.1);
                 RETURN NULL;
             END $$;
             CREATE FUNCTION pace_end() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 INSERT INTO pace SELECT clock_timestamp(), 'end', count(*) FROM changed;
                 RETURN NULL;
             END $$;
             CREATE TRIGGER pace_start BEFORE UPDATE ON webhook_events
                 FOR EACH STATEMENT EXECUTE FUNCTION pace_start();
             CREATE TRIGGER pace_end AFTER UPDATE ON webhook_events
                 REFERENCING NEW TABLE AS changed
                 FOR EACH STATEMENT EXECUTE FUNCTION pace_end();",
        )
        .await
        .expect("triggers");
    let outcome = app.app.purger.run_once(None).await.expect("pass");
    assert_eq!(outcome.payloads_dropped, counts(&[("processed", 8)]));
    let marks: Vec<(f64, String, Option<i64>)> = app
        .query(
            "SELECT extract(epoch FROM at)::float8, what, changed FROM pace ORDER BY at",
            &[],
        )
        .await
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    // (start, end) of each statement that dropped payloads: the four batches.
    let batches: Vec<(f64, f64)> = marks
        .chunks(2)
        .filter(|pair| pair.len() == 2 && pair[1].2.unwrap_or(0) > 0)
        .map(|pair| {
            assert_eq!((pair[0].1.as_str(), pair[1].1.as_str()), ("start", "end"));
            (pair[0].0, pair[1].0)
        })
        .collect();
    assert_eq!(batches.len(), 4, "{marks:?}");
    for pair in batches.windows(2) {
        let (start, end) = pair[0];
        let busy = end - start;
        let rest = pair[1].0 - end;
        // The batch took at least `busy` (it ran this statement), so the rest
        // after it is at least twice that.
        assert!(
            rest >= 2.0 * busy - 0.002,
            "rested {rest:.3} s after a statement of {busy:.3} s: {marks:?}"
        );
    }
}

#[tokio::test]
async fn a_pass_skips_rows_others_hold_and_takes_them_next_time() {
    let gate = RetryGate::closed();
    let mut settings = shipped_settings();
    settings.purge_batch = 2;
    let app = gate.spawn(settings, None).await;
    for (prefix, days) in [("evt_keys", 400), ("evt_pays", 40)] {
        for i in 0..2 {
            let id = format!("{prefix}_{i}");
            app.deliver_ok("stripe", &stripe_event(&id, GATED_TYPE, json!({})))
                .await;
        }
        backdate(&app, prefix, days).await;
    }
    let held: Vec<i64> = app
        .query(
            "SELECT id FROM webhook_events WHERE event_id IN ('evt_keys_0', 'evt_pays_0')",
            &[],
        )
        .await
        .iter()
        .map(|r| r.get(0))
        .collect();
    let operator = app.admin(crate::support::Credential::Bearer(
        "dev-operator-token-0123456789".into(),
    ));
    // Operators retry one of each; their handlers are held at the gate, so their
    // transactions hold the rows while the pass runs.
    let paths: Vec<String> = held
        .iter()
        .map(|id| format!("/admin/api/events/{id}/retry"))
        .collect();
    let retries = futures_util::future::join_all(paths.iter().map(|p| operator.post(p, &[])));
    let pass = async {
        let gate = &gate;
        wait_for(
            "both retries at the gate",
            std::time::Duration::from_secs(20),
            || std::future::ready((gate.arrived() == 2).then_some(())),
        )
        .await;
        let outcome = tokio::time::timeout(
            std::time::Duration::from_secs(20),
            app.app.purger.run_once(None),
        )
        .await
        .expect("the pass does not wait for rows others hold")
        .expect("pass");
        gate.open(2);
        outcome
    };
    let (answers, outcome) = tokio::join!(retries, pass);
    assert!(answers.iter().all(|a| a.status == 200), "{answers:?}");
    assert_eq!(outcome.keys_deleted, counts(&[("processed", 1)]));
    assert_eq!(outcome.payloads_dropped, counts(&[("processed", 1)]));
    assert_eq!(
        app.strings(
            "SELECT event_id FROM webhook_events WHERE event_id LIKE 'evt\\_keys\\_%'",
            &[]
        )
        .await,
        ["evt_keys_0"]
    );
    assert_eq!(
        app.strings(
            "SELECT event_id FROM webhook_events WHERE event_id LIKE 'evt\\_pays\\_%' AND payload IS NOT NULL",
            &[]
        )
        .await,
        ["evt_pays_0"]
    );
    let next = app.app.purger.run_once(None).await.expect("next pass");
    assert_eq!(next.keys_deleted, counts(&[("processed", 1)]));
    assert_eq!(next.payloads_dropped, counts(&[("processed", 1)]));
    assert_eq!(payloads_left(&app, "evt_pays").await, 0);
    assert_eq!(
        app.count(
            "SELECT count(*) FROM webhook_events WHERE event_id LIKE 'evt\\_keys\\_%'",
            &[]
        )
        .await,
        0
    );
    assert_eq!(
        app.count("SELECT count(*) FROM hookd_purge_pending", &[])
            .await,
        0
    );
}

#[tokio::test]
async fn slow_a_pass_logs_one_line_of_what_it_removed() {
    let app = small_batches().await;
    aged_events(&app).await;
    let pass = crate::support::run_hookd_with(
        &["purge"],
        &[
            ("DATABASE_URL", app.database_url()),
            ("RUST_LOG", "info".to_string()),
        ],
    )
    .await;
    assert!(pass.status.success(), "{pass:?}");
    let log = String::from_utf8_lossy(&pass.stderr);
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("purge: ")).collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(
        lines[0].contains(
            "purge: dropped 6 payloads (dead 2, ignored 2, processed 2), deleted 6 keys \
             (dead 2, ignored 2, processed 2) and 1 idempotency keys in "
        ),
        "{}",
        lines[0]
    );
}

#[tokio::test]
async fn a_resend_after_key_retention_is_a_new_event() {
    let app = spawn_app().await;
    let body = event("evt_forgotten", "processed");
    let first = app.deliver_ok("stripe", &body).await;
    let outcome = age_and_purge(&app, 366).await;
    assert_eq!(outcome.keys_deleted, counts(&[("processed", 1)]));
    assert_eq!(
        app.count("SELECT count(*) FROM webhook_events", &[]).await,
        0
    );
    // Business tables are never purged; mark the payment to see the handler run.
    app.execute(
        "UPDATE payments SET amount = 7 WHERE payment_id = 'pi_evt_forgotten'",
        &[],
    )
    .await;

    let again = app.deliver_ok("stripe", &body).await;
    assert_eq!(again.header("Idempotent-Replayed"), None, "forgotten: new");
    assert_eq!(again.body, first.body);
    let row = &app
        .query(
            "SELECT deliveries, attempts, status, received_at > now() - interval '1 hour'
             FROM webhook_events WHERE event_id = 'evt_forgotten'",
            &[],
        )
        .await[0];
    assert_eq!(
        (
            row.get::<_, i32>(0),
            row.get::<_, i32>(1),
            row.get::<_, String>(2),
            row.get::<_, bool>(3)
        ),
        (1, 1, "processed".to_string(), true)
    );
    assert_eq!(
        app.count(
            "SELECT amount FROM payments WHERE payment_id = 'pi_evt_forgotten'",
            &[]
        )
        .await,
        100,
        "applied again"
    );
}

/// Every event received `days` ago, then one purge pass.
async fn age_and_purge(app: &TestApp, days: i32) -> PurgeOutcome {
    app.execute(
        "UPDATE webhook_events SET received_at = now() - make_interval(days => $1)",
        &[&days],
    )
    .await;
    app.app.purger.run_once(None).await.expect("purge")
}

/// An instance that runs the purge on its schedule (and no dispatcher).
const PURGING: hookd::app::Parts = hookd::app::Parts {
    dispatcher: false,
    purge: true,
    activity: true,
};
