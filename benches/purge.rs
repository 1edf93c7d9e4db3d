//! `cargo bench --bench purge`: what one retention pass over a large backlog costs,
//! and what it does to deliveries arriving meanwhile.
//!
//! The database is filled with set-based SQL: 1,000,000 old finished events in
//! arrival order (850,000 received 40 days ago, so their payloads and attempts go;
//! the 150,000 oldest 400 days ago, so their keys go), `failed` events of both ages
//! and recent events, which must both stay, and attempt rows for every event that
//! ran a handler. Then, at a fixed open-loop delivery rate:
//! - phase 1: no purge, for the baseline p99;
//! - phase 2: one pass of hookd's `Purger` (shipped `purge_batch`) runs to
//!   completion, for the p99 during the pass, its duration and its rate.
//!
//! The figure that matters is p99 during / p99 baseline (same run, same cluster),
//! then what the pass removed, checked against the fill.

use hookd_kit::{bench, load};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hookd::duration::format as format_duration;
use hookd::purge::PurgeOutcome;
use hookd_kit::bench::BenchCluster;
use hookd_kit::load::{Summary, ms, open_loop};
use tokio::time::Instant;

/// Old finished events (`processed`, `ignored`, `dead`).
const OLD_EVENTS: i64 = 1_000_000;
/// The oldest of them, received about 400 days ago: past key retention. The rest
/// were received about 40 days ago: past retention only.
const PAST_KEY_RETENTION: i64 = 150_000;
/// `failed` events: half 40 days old, half 400 days old. No pass may touch them.
const FAILED_EVENTS: i64 = 1_000;
/// Finished events received yesterday: inside both windows, untouched.
const RECENT_EVENTS: i64 = 10_000;
/// The fill runs in this many parallel chunks (one per core).
const FILL_CHUNKS: i64 = 2;

/// Deliveries per second during both phases: well within what the machine sustains
/// (see the ingest benchmark), so the baseline is not queueing.
const RATE: f64 = 200.0;
const WARM_UP: Duration = Duration::from_secs(3);
const BASELINE: Duration = Duration::from_secs(12);
/// Load before the pass starts and after it ends, in phase 2.
const MARGIN: Duration = Duration::from_secs(1);
/// A pass still running after this is stopped (between batches) and the run fails.
const MAX_PASS: Duration = Duration::from_secs(420);

/// How the fill classifies old event number `g` (1-based, in order of arrival): its
/// status, whether it is past key retention (400 days old, else 40), and its
/// attempts.
fn classify(g: i64) -> (&'static str, bool, i64) {
    let status = match g % 20 {
        0..=13 => "processed",
        14..=18 => "ignored",
        _ => "dead",
    };
    let attempts = match status {
        "processed" if g % 10 == 3 => 2,
        "ignored" => 0,
        _ => 1,
    };
    (status, g <= PAST_KEY_RETENTION, attempts)
}

/// The same classification in SQL, for the set-based fill.
const STATUS_SQL: &str = "CASE WHEN g % 20 <= 13 THEN 'processed' \
     WHEN g % 20 <= 18 THEN 'ignored' ELSE 'dead' END";
/// Arrival times increase with `g`, as in a real table: the first
/// PAST_KEY_RETENTION spread over the day before 400 days ago, the rest over the
/// day before 40 days ago.
fn received_sql() -> String {
    let recent = OLD_EVENTS - PAST_KEY_RETENTION;
    format!(
        "CASE WHEN g <= {PAST_KEY_RETENTION} \
         THEN now() - interval '401 days' + g * (interval '1 day' / {PAST_KEY_RETENTION}) \
         ELSE now() - interval '41 days' + (g - {PAST_KEY_RETENTION}) * (interval '1 day' / {recent}) END"
    )
}
const ATTEMPTS_SQL: &str = "CASE WHEN g % 20 BETWEEN 14 AND 18 THEN 0 \
     WHEN g % 20 <= 13 AND g % 10 = 3 THEN 2 ELSE 1 END";

#[derive(Debug, Default)]
struct Expected {
    keys: BTreeMap<String, u64>,
    payloads: BTreeMap<String, u64>,
    /// Attempt rows the fill writes for the old events.
    old_attempts: i64,
}

fn expected() -> Expected {
    let mut expected = Expected::default();
    for g in 1..=OLD_EVENTS {
        let (status, past_key_retention, attempts) = classify(g);
        expected.old_attempts += attempts;
        let bucket = if past_key_retention {
            &mut expected.keys
        } else {
            &mut expected.payloads
        };
        *bucket.entry(status.to_string()).or_default() += 1;
    }
    expected
}

fn main() {
    bench::main("purge", "purge", run);
}

async fn run(setup: bench::Setup) {
    let (cluster, hookd, sender, db, started) = setup.into_parts();
    let batch = hookd.app.settings.now().purge_batch;
    println!(
        "hookd: in-process, pool of {} connections, shipped hookd.toml (retention {}, \
         key_retention {}, purge_batch {batch}); target {}\n",
        bench::POOL_SIZE,
        format_duration(hookd.app.settings.now().retention),
        format_duration(hookd.app.settings.now().key_retention),
        sender.url()
    );

    let clock = Instant::now();
    let stages = fill(&cluster).await;
    let (events, attempts, size): (i64, i64, i64) = {
        let row = db
            .query_one(
                "SELECT (SELECT count(*) FROM webhook_events), \
                        (SELECT count(*) FROM webhook_event_attempts), \
                        pg_total_relation_size('webhook_events') \
                        + pg_total_relation_size('webhook_event_attempts')",
                &[],
            )
            .await
            .expect("fill counts");
        (row.get(0), row.get(1), row.get(2))
    };
    let want_attempts = expected().old_attempts + 3 * FAILED_EVENTS + RECENT_EVENTS;
    assert_eq!(
        (events, attempts),
        (OLD_EVENTS + FAILED_EVENTS + RECENT_EVENTS, want_attempts),
        "the fill wrote other counts than planned"
    );
    println!(
        "fill: {events} events, {attempts} attempts, {:.0} MB with indexes, in {:.1} s \
         ({stages})",
        size as f64 / 1e6,
        clock.elapsed().as_secs_f64()
    );

    // An experiment knob, off by default: a larger max_wal_size for the measured
    // phases (ALTER SYSTEM overrides the hookd.conf the embedded cluster writes).
    if let Ok(size) = std::env::var("HOOKD_BENCH_MAX_WAL_SIZE") {
        let alter = format!(
            "ALTER SYSTEM SET max_wal_size = '{}'",
            size.replace('\'', "")
        );
        for sql in [alter.as_str(), "SELECT pg_reload_conf()"] {
            db.batch_execute(sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let max_wal_size: String = db
        .query_one("SHOW max_wal_size", &[])
        .await
        .expect("max_wal_size")
        .get(0);
    println!("cluster max_wal_size: {max_wal_size}");

    let warm = open_loop(sender.clone(), RATE, WARM_UP, None)
        .await
        .summary();
    println!("warm-up:  {}", warm.line());

    let before = db_stats(&db).await;
    let baseline = open_loop(sender.clone(), RATE, BASELINE, None)
        .await
        .summary();
    let after = db_stats(&db).await;
    println!(
        "phase 1 (no purge, {RATE:.0}/s open loop): {}",
        baseline.line()
    );
    println!("phase 1 cluster: {}", stats_line(before, after));

    // Phase 2: the same load; the pass starts after MARGIN and the load stops MARGIN
    // after it ends.
    let before = db_stats(&db).await;
    let stop = Arc::new(AtomicBool::new(false));
    let load_started = Instant::now();
    let load_started_at = chrono::Utc::now();
    let progress = tokio::spawn(watch_progress(cluster.connect().await, stop.clone()));
    let load = tokio::spawn(open_loop(
        sender.clone(),
        RATE,
        MAX_PASS + 3 * MARGIN,
        Some(stop.clone()),
    ));
    tokio::time::sleep(MARGIN).await;
    let (trigger, shutdown) = hookd::shutdown::channel();
    let pass_started = Instant::now();
    let deadline = tokio::spawn(async move {
        tokio::time::sleep(MAX_PASS).await;
        trigger.trigger();
    });
    let outcome = hookd
        .app
        .purger
        .run_once(Some(&shutdown))
        .await
        .expect("purge pass");
    let pass_ended = Instant::now();
    deadline.abort();
    tokio::time::sleep(MARGIN).await;
    stop.store(true, Ordering::Relaxed);
    let load = load.await.expect("load task");
    let progress = progress.await.expect("progress task");
    let after = db_stats(&db).await;
    let took = pass_ended - pass_started;
    let during = load
        .window(pass_started - load_started, pass_ended - load_started)
        .summary();
    let whole = load.summary();
    println!("phase 2 (whole, {RATE:.0}/s open loop): {}", whole.line());
    println!("phase 2 (during the pass only):       {}", during.line());
    println!("phase 2 cluster: {}", stats_line(before, after));
    println!(
        "phase 2 p99 per 5 s, ms (pass from {:.0} s to {:.0} s): {}",
        (pass_started - load_started).as_secs_f64(),
        (pass_ended - load_started).as_secs_f64(),
        load.p99_timeline(Duration::from_secs(5))
    );
    println!(
        "phase 2 checkpoints (s after the load started, reason → s completed): {}",
        cluster.checkpoints_since(load_started_at)
    );
    println!(
        "phase 2 rows/s per 5 s, keys deleted | rows updated (payloads dropped + ~{RATE:.0}/s \
         of the deliveries' own): {}",
        progress
    );

    let payloads = PurgeOutcome::total(&outcome.payloads_dropped);
    let keys = PurgeOutcome::total(&outcome.keys_deleted);
    println!(
        "pass: {:.1} s, {keys} keys deleted ({}) and {payloads} payloads dropped ({}) \
         = {:.0} rows/s{}",
        took.as_secs_f64(),
        hookd::purge::describe(&outcome.keys_deleted),
        hookd::purge::describe(&outcome.payloads_dropped),
        (keys + payloads) as f64 / took.as_secs_f64(),
        if outcome.interrupted {
            "; INTERRUPTED at the time limit"
        } else {
            ""
        }
    );

    let checks = verify(&db, &outcome).await;
    summarize(&baseline, &during, took, keys + payloads, &outcome);
    for line in &checks {
        println!("check: {line}");
    }
    let elapsed = chrono::Utc::now() - started;
    println!("total time {:.0} s", elapsed.as_seconds_f64());
    drop(db);
    hookd.stop().await;
}

fn summarize(
    baseline: &Summary,
    during: &Summary,
    took: Duration,
    rows: u64,
    outcome: &PurgeOutcome,
) {
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64().max(1e-9);
    println!("\nsummary");
    println!(
        "  deliveries at {RATE:.0}/s: p99 {} without purge, {} during the pass \
         (ratio {:.2}); p50 {} → {}; max {} → {}",
        ms(baseline.p99),
        ms(during.p99),
        ratio(during.p99, baseline.p99),
        ms(baseline.p50),
        ms(during.p50),
        ms(baseline.max),
        ms(during.max)
    );
    println!(
        "  non-200 answers or errors: {} without purge, {} during the pass",
        baseline.requests - baseline.ok,
        during.requests - during.ok
    );
    println!(
        "  purge pass: {:.1} s for {rows} rows = {:.0} rows/s ({} idempotency keys){}",
        took.as_secs_f64(),
        rows as f64 / took.as_secs_f64(),
        outcome.idempotency_keys_deleted,
        if outcome.interrupted {
            ", interrupted"
        } else {
            ""
        }
    );
}

/// Fills the database with set-based SQL, then VACUUM ANALYZE and a checkpoint so
/// the measured phases start from a settled cluster.
async fn fill(cluster: &BenchCluster) -> String {
    let clock = Instant::now();
    let db = cluster.connect().await;
    let indexes =
        bench::drop_secondary_indexes(&db, &["webhook_events", "webhook_event_attempts"]).await;
    // The payload hookd would have stored: with placeholders for the ids, replaced
    // per row where there are few rows; for the million, parsed once and the event
    // id set per row (parsing 1.4 KB of JSON per row would double the fill time).
    let template = load::stripe_payment_succeeded("@EVT@", "@PI@", 1_726_050_000);
    let payload = load::stripe_payment_succeeded("evt_old", "pi_old", 1_726_050_000);
    bench::fill_in_chunks(cluster, OLD_EVENTS, FILL_CHUNKS, |client, first, last| {
        let payload = payload.clone();
        async move { fill_old(&client, &payload, first, last).await }
    })
    .await;
    let mut stages = vec![format!("old events {:.1} s", clock.elapsed().as_secs_f64())];
    let event_row = |id: &str, status: &str, at: &str, attempts: &str, error: &str| {
        format!(
            "INSERT INTO webhook_events
                 (source, event_id, event_type, kind, status, payload, payload_sha256,
                  signed_with, payment_id, customer_id, attempts, last_error,
                  received_at, last_delivery_at, processed_at, next_attempt_at)
             SELECT 'stripe', {id}, 'payment_intent.succeeded', 'payment_succeeded',
                    '{status}',
                    replace(replace($1::text, '@EVT@', {id}), '@PI@', 'pi_' || {id})::jsonb,
                    sha256(convert_to({id}, 'UTF8')), 1, 'pi_' || {id}, 'cus_QhT4nW8xY2kLpR',
                    {attempts}, {error}, {at}, {at},
                    CASE WHEN '{status}' = 'processed' THEN {at} END,
                    CASE WHEN '{status}' = 'failed' THEN now() + interval '1 hour' END
             FROM generate_series(1, $2::bigint) g"
        )
    };
    let failed = event_row(
        "'evt_failed_' || g",
        "failed",
        "now() - CASE WHEN g % 2 = 0 THEN interval '400 days' ELSE interval '40 days' END",
        "3",
        "'handler timed out after 5s'",
    );
    let recent = event_row(
        "'evt_recent_' || g",
        "processed",
        "now() - interval '1 day' - g * interval '1 second'",
        "1",
        "NULL",
    );
    for (sql, n) in [(failed, FAILED_EVENTS), (recent, RECENT_EVENTS)] {
        db.execute(sql.as_str(), &[&template, &n])
            .await
            .expect("fill failed and recent events");
    }
    db.batch_execute(
        "INSERT INTO webhook_event_attempts
             (webhook_event_id, attempt, started_at, finished_at, outcome, error)
         SELECT e.id, a, e.received_at + (a - 1) * interval '2 s',
                e.received_at + (a - 1) * interval '2 s' + interval '4 ms',
                CASE WHEN e.status = 'failed' OR a < e.attempts THEN 'failed' ELSE e.status END,
                CASE WHEN e.status = 'failed' OR a < e.attempts THEN 'handler timed out after 5s'
                     WHEN e.status = 'dead' THEN e.last_error END
         FROM webhook_events e, generate_series(1, e.attempts) a
         WHERE e.event_id LIKE 'evt\\_failed\\_%' OR e.event_id LIKE 'evt\\_recent\\_%'",
    )
    .await
    .expect("fill attempts of failed and recent events");
    stages.push(bench::rebuild_indexes(&db, &indexes).await);
    stages.push(bench::settle(&db).await);
    stages.join(", ")
}

/// Cluster-wide counters, to see what else happened during a phase.
#[derive(Debug, Clone, Copy)]
struct DbStats {
    checkpoints: i64,
    wal_bytes: f64,
    full_page_images: i64,
    autovacuums: i64,
}

async fn db_stats(db: &tokio_postgres::Client) -> DbStats {
    let row = db
        .query_one(
            "SELECT (SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter), \
                    pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::float8, \
                    (SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0)::bigint \
                     FROM pg_stat_user_tables), \
                    (SELECT wal_fpi FROM pg_stat_wal)",
            &[],
        )
        .await
        .expect("cluster statistics");
    DbStats {
        checkpoints: row.get(0),
        wal_bytes: row.get(1),
        autovacuums: row.get(2),
        full_page_images: row.get(3),
    }
}

fn stats_line(before: DbStats, after: DbStats) -> String {
    format!(
        "{} checkpoints, {:.0} MB of WAL ({} full-page images), {} autovacuum/autoanalyze \
         runs",
        after.checkpoints - before.checkpoints,
        (after.wal_bytes - before.wal_bytes) / 1e6,
        after.full_page_images - before.full_page_images,
        after.autovacuums - before.autovacuums
    )
}

/// Until `stop`, samples every 5 s how many `webhook_events` rows were deleted and
/// updated (cheap cumulative counters), to see whether the pass slows down as it
/// goes. Returns the per-window rates.
async fn watch_progress(db: tokio_postgres::Client, stop: Arc<AtomicBool>) -> String {
    let step = Duration::from_secs(5);
    let sample = || async {
        let row = db
            .query_one(
                "SELECT n_tup_del, n_tup_upd FROM pg_stat_user_tables \
                 WHERE relname = 'webhook_events'",
                &[],
            )
            .await
            .expect("table statistics");
        (row.get::<_, i64>(0), row.get::<_, i64>(1))
    };
    let mut last = sample().await;
    let mut windows = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(step).await;
        let now = sample().await;
        let per_second = |a: i64, b: i64| (a - b) as f64 / step.as_secs_f64();
        windows.push(format!(
            "{:.0}|{:.0}",
            per_second(now.0, last.0),
            per_second(now.1, last.1)
        ));
        last = now;
    }
    windows.join(" ")
}

/// Old finished events `first..=last` and their attempts, in one statement.
async fn fill_old(client: &tokio_postgres::Client, payload: &str, first: i64, last: i64) {
    let received = received_sql();
    let sql = format!(
        "WITH events AS (
             INSERT INTO webhook_events
                 (source, event_id, event_type, kind, status, payload, payload_sha256,
                  signed_with, payment_id, customer_id, deliveries, attempts, last_error,
                  received_at, last_delivery_at, processed_at, next_attempt_at)
             SELECT 'stripe', 'evt_old_' || lpad(g::text, 7, '0'),
                    CASE WHEN status = 'ignored' THEN 'charge.succeeded'
                         ELSE 'payment_intent.succeeded' END,
                    CASE WHEN status = 'ignored' THEN NULL ELSE 'payment_succeeded' END,
                    status,
                    jsonb_set($1::text::jsonb,
                              ARRAY['id'], to_jsonb('evt_old_' || lpad(g::text, 7, '0'))),
                    sha256(convert_to('evt_old_' || g, 'UTF8')), 1,
                    'pi_old_' || lpad(g::text, 7, '0'),
                    'cus_QhT4nW8xY2kLpR', 1 + (g % 50 = 0)::int, attempts,
                    CASE WHEN status = 'dead' THEN 'amount is not a non-negative integer' END,
                    at, at, CASE WHEN status <> 'ignored' THEN at + interval '5 ms' END, NULL
             FROM (SELECT g, {STATUS_SQL} AS status, {ATTEMPTS_SQL} AS attempts,
                          {received} AS at
                   FROM generate_series($2::bigint, $3::bigint) g) x
             RETURNING id, status, attempts, last_error, received_at)
         INSERT INTO webhook_event_attempts
             (webhook_event_id, attempt, started_at, finished_at, outcome, error)
         SELECT e.id, a, e.received_at + (a - 1) * interval '2 s',
                e.received_at + (a - 1) * interval '2 s' + interval '4 ms',
                CASE WHEN a < e.attempts THEN 'failed' ELSE e.status END,
                CASE WHEN a < e.attempts THEN 'handler timed out after 5s' ELSE e.last_error END
         FROM events e, generate_series(1, e.attempts) a"
    );
    bench::execute_fill(client, &sql, &[&payload, &first, &last]).await;
}

/// Checks the pass against the fill; panics on any difference. Returns what it saw.
async fn verify(db: &tokio_postgres::Client, outcome: &PurgeOutcome) -> Vec<String> {
    let expected = expected();
    let mut lines = Vec::new();
    let mut problems = Vec::new();
    if outcome.interrupted {
        problems.push(format!("the pass did not finish within {MAX_PASS:?}"));
    }
    let mut compare = |what: &str, got: String, want: String| {
        lines.push(format!("{what}: {got} (expected {want})"));
        if got != want {
            problems.push(format!("{what}: {got}, expected {want}"));
        }
    };
    let show = |m: &BTreeMap<String, u64>| format!("{m:?}");
    compare(
        "keys deleted by status",
        show(&outcome.keys_deleted),
        show(&expected.keys),
    );
    compare(
        "payloads dropped by status",
        show(&outcome.payloads_dropped),
        show(&expected.payloads),
    );
    let want_slim = i64::try_from(expected.payloads.values().sum::<u64>()).expect("a count");
    // What is left, counted, against what should be.
    let counted = [
        (
            "old events past key retention left",
            "SELECT count(*) FROM webhook_events WHERE event_id LIKE 'evt\\_old\\_%' \
             AND received_at < now() - interval '365 days'",
            0,
        ),
        (
            "slim keys left",
            "SELECT count(*) FROM webhook_events WHERE event_id LIKE 'evt\\_old\\_%' \
             AND payload IS NULL AND last_error IS NULL AND purged_at IS NOT NULL",
            want_slim,
        ),
        (
            "attempts of old events left",
            "SELECT count(*) FROM webhook_event_attempts a JOIN webhook_events e \
             ON e.id = a.webhook_event_id WHERE e.event_id LIKE 'evt\\_old\\_%'",
            0,
        ),
        (
            "failed events intact",
            "SELECT count(*) FROM webhook_events WHERE event_id LIKE 'evt\\_failed\\_%' \
             AND status = 'failed' AND payload IS NOT NULL AND purged_at IS NULL",
            FAILED_EVENTS,
        ),
        (
            "attempts of failed events",
            "SELECT count(*) FROM webhook_event_attempts a JOIN webhook_events e \
             ON e.id = a.webhook_event_id WHERE e.event_id LIKE 'evt\\_failed\\_%'",
            FAILED_EVENTS * 3,
        ),
        (
            "recent events intact",
            "SELECT count(*) FROM webhook_events WHERE event_id LIKE 'evt\\_recent\\_%' \
             AND payload IS NOT NULL AND purged_at IS NULL",
            RECENT_EVENTS,
        ),
        (
            "deliveries during the run not processed or purged",
            "SELECT count(*) FROM webhook_events WHERE event_id LIKE 'evt\\_bench\\_%' \
             AND (status <> 'processed' OR payload IS NULL)",
            0,
        ),
    ];
    for (what, sql, want) in counted {
        let got: i64 = db
            .query_one(sql, &[])
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .get(0);
        compare(what, got.to_string(), want.to_string());
    }
    assert!(
        problems.is_empty(),
        "purge check failed:\n{}",
        problems.join("\n")
    );
    lines
}
