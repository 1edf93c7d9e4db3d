//! `cargo bench --bench desk`: the support desk at ten million events.
//!
//! The database is filled with set-based SQL: 10,000,000 events (or
//! `HOOKD_BENCH_DESK_EVENTS`, to develop with a smaller fill) over the last 12
//! days in arrival order, in a realistic mix (four sources; mostly payment
//! successes, some failures, refunds and disputes, and events hookd ignores; 0.5 %
//! dead, 0.1 % failed; a few signed with the previous secret), about 2.5 events per
//! payment and four payments per customer, their `payments` rows and the attempt
//! rows of every event that ran a handler. The secondary indexes are dropped for the
//! fill and rebuilt from their own definitions, then `VACUUM ANALYZE`. The fill
//! runs with triggers off, so the hourly rollups are then counted from the
//! events, as the migration counts an existing history.
//!
//! Then, one request at a time (a support agent does not hammer the desk), each
//! query the desk answers most often, on random payments:
//! - `GET /admin/api/events?q=<payment id>`: the search box;
//! - `GET /admin/api/events?status=dead`: the dead-letter list;
//! - `GET /admin/api/payments/{source}/{payment_id}`: the payment view;
//! - `GET /admin/api/payments?customer=<id>`: a customer's payments;
//! - `GET /admin/api/stats`: the last 24 hours, counted three ways, and the last 7 days;
//! - `GET /admin/api/stats/series`: the charts' hours and days;
//! - `GET /admin`: the page with its dashboard, charts and the first page of events;
//!
//! and `GET /readyz` (its database check cached for a second, so mostly HTTP) as
//! the floor to compare with. Twice: on an idle hookd, then while deliveries arrive at a steady rate.

use hookd_kit::{bench, load};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hookd_kit::bench::BenchCluster;
use hookd_kit::load::{ms, open_loop, percentile};
use tokio::time::Instant;

/// Events in the history by default, spread over the last `DAYS` days.
const EVENTS: i64 = 10_000_000;
const DAYS: i64 = 12;
/// The fill runs in this many parallel chunks (one per core).
const FILL_CHUNKS: i64 = 2;

/// Events in the history: `HOOKD_BENCH_DESK_EVENTS`, or `EVENTS`.
fn events() -> i64 {
    static EVENTS_NOW: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *EVENTS_NOW.get_or_init(|| {
        std::env::var("HOOKD_BENCH_DESK_EVENTS")
            .ok()
            .map(|n| {
                n.replace('_', "")
                    .parse()
                    .expect("HOOKD_BENCH_DESK_EVENTS: a number")
            })
            .unwrap_or(EVENTS)
    })
}

/// Payments: 2.5 events each, on average.
fn payments() -> i64 {
    events() * 2 / 5
}

/// Customers: four payments each.
fn customers() -> i64 {
    payments() / 4
}

/// Requests per query, after WARM_UP_REQUESTS unmeasured ones.
const REQUESTS: usize = 200;
const WARM_UP_REQUESTS: usize = 20;
/// Deliveries per second while the desk is queried in the second phase.
const DELIVERY_RATE: f64 = 200.0;
/// The targets for every query's p99, and the whole page's.
const TARGET_P99: Duration = Duration::from_millis(20);
const TARGET_PAGE_P99: Duration = Duration::from_millis(25);

fn main() {
    bench::main("desk", "support-desk", run);
}

/// One of the measured queries: a name, the path of its `i`-th request, and text
/// every answer must contain (so that an empty answer cannot pass for a fast one).
struct Query {
    name: &'static str,
    path: fn(u64) -> String,
    shows: &'static str,
}

/// A payment number in `0..payments()`, spread over the whole history.
fn payment(i: u64) -> i64 {
    // A multiplicative hash: consecutive requests hit distant payments, so the
    // cache does not answer them from the previous request's pages.
    (i.wrapping_mul(2_654_435_761).wrapping_add(12_345) % payments() as u64) as i64
}

fn payment_id(p: i64) -> String {
    format!("pi_3Q{p:08}")
}

fn customer_id(c: i64) -> String {
    format!("cus_R{c:07}")
}

const QUERIES: &[Query] = &[
    Query {
        name: "floor: GET /readyz",
        path: |_| "/readyz".into(),
        shows: "ready",
    },
    Query {
        name: "search: events?q=<payment id>",
        path: |i| format!("/admin/api/events?q={}", payment_id(payment(i))),
        shows: "\"event_id\":\"evt_1Q",
    },
    Query {
        name: "dead letters: events?status=dead",
        path: |_| "/admin/api/events?status=dead".into(),
        shows: "\"status\":\"dead\"",
    },
    Query {
        name: "payment view: payments/stripe/<id>",
        path: |i| {
            // Payment numbers 0 to 11 modulo 20 are Stripe's (SOURCE_SQL).
            let p = payment(i);
            format!("/admin/api/payments/stripe/{}", payment_id(p - p % 20))
        },
        shows: "\"amount_refunded\":",
    },
    Query {
        name: "customer: payments?customer=<id>",
        path: |i| {
            format!(
                "/admin/api/payments?customer={}",
                customer_id(payment(i) % customers())
            )
        },
        shows: "\"customer_id\":\"cus_R",
    },
    Query {
        name: "stats: last 24 h",
        path: |_| "/admin/api/stats".into(),
        shows: "\"github\":",
    },
    Query {
        name: "stats: last 7 days",
        path: |_| "/admin/api/stats?window=7d".into(),
        shows: "\"github\":",
    },
    Query {
        name: "series: stats/series (charts)",
        path: |_| "/admin/api/stats/series".into(),
        shows: "\"rejected_signatures\":",
    },
    Query {
        name: "page: GET /admin (dashboard + events)",
        path: |_| "/admin".into(),
        shows: "Waiting for a person",
    },
];

/// Which source payment number `p` belongs to, in SQL: 60 % Stripe, 15 % Standard
/// Webhooks, 15 % the shop's generic HMAC, 10 % GitHub.
const SOURCE_SQL: &str = "CASE WHEN p % 20 < 12 THEN 'stripe' \
     WHEN p % 20 < 15 THEN 'standard' WHEN p % 20 < 18 THEN 'shop' ELSE 'github' END";

async fn run(setup: bench::Setup) {
    let (cluster, hookd, sender, db, started) = setup.into_parts();
    println!(
        "hookd: in-process, pool of {} connections, shipped hookd.toml; {}\n",
        bench::POOL_SIZE,
        hookd.base_url()
    );

    let clock = Instant::now();
    let mut stages = fill(&cluster).await;
    let counting = Instant::now();
    hookd
        .app
        .rollups
        .recount()
        .await
        .expect("count the rollups");
    stages.push_str(&format!(
        ", rollups counted {:.1} s",
        counting.elapsed().as_secs_f64()
    ));
    let row = db
        .query_one(
            "SELECT (SELECT count(*) FROM webhook_events),
                    (SELECT count(*) FROM webhook_events WHERE status = 'dead'),
                    (SELECT count(*) FROM webhook_event_attempts),
                    (SELECT count(*) FROM payments),
                    (SELECT count(*) FROM webhook_events
                      WHERE received_at >= now() - interval '24 hours'),
                    pg_total_relation_size('webhook_events')
                    + pg_total_relation_size('webhook_event_attempts')
                    + pg_total_relation_size('payments')",
            &[],
        )
        .await
        .expect("fill counts");
    let (events, dead, attempts, payments, last_day, size): (i64, i64, i64, i64, i64, i64) = (
        row.get(0),
        row.get(1),
        row.get(2),
        row.get(3),
        row.get(4),
        row.get(5),
    );
    assert_eq!(
        events,
        self::events(),
        "the fill wrote another count than planned"
    );
    assert_eq!(
        payments,
        self::payments(),
        "the fill wrote another count than planned"
    );
    println!(
        "fill: {events} events ({dead} dead, {last_day} in the last 24 h), {attempts} attempts, \
         {payments} payments, {:.0} MB with indexes, in {:.1} s ({stages})",
        size as f64 / 1e6,
        clock.elapsed().as_secs_f64()
    );

    let token = hookd
        .app
        .settings
        .now()
        .admin_tokens
        .iter()
        .find(|t| t.role == hookd::config::Role::Viewer)
        .expect("a viewer token in hookd.toml")
        .token
        .expose()
        .to_string();
    let http = reqwest::Client::new();
    let base = hookd.base_url();

    println!("\nphase 1: idle, one request at a time, {REQUESTS} per query");
    let idle = measure_all(&http, &base, &token).await;

    println!("\nphase 2: the same while deliveries arrive at {DELIVERY_RATE:.0}/s (open loop)");
    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn(open_loop(
        sender.clone(),
        DELIVERY_RATE,
        load::MAX_DURATION,
        Some(stop.clone()),
    ));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let loaded = measure_all(&http, &base, &token).await;
    stop.store(true, Ordering::Relaxed);
    let deliveries = load.await.expect("load task").summary();
    println!("deliveries meanwhile: {}", deliveries.line());

    println!("\nsummary (p99; ratio to the /readyz floor in the same phase)");
    let floor = |r: &[(&str, Latencies)]| r[0].1.p99;
    let (idle_floor, loaded_floor) = (floor(&idle), floor(&loaded));
    let mut over = Vec::new();
    for ((name, a), (_, b)) in idle.iter().zip(&loaded) {
        println!(
            "  {name:<40} idle {:>9} ({:>4.1} ×)   under deliveries {:>9} ({:>4.1} ×)",
            ms(a.p99),
            a.p99.as_secs_f64() / idle_floor.as_secs_f64(),
            ms(b.p99),
            b.p99.as_secs_f64() / loaded_floor.as_secs_f64(),
        );
        let target = if name.starts_with("page:") {
            TARGET_PAGE_P99
        } else {
            TARGET_P99
        };
        for (phase, p99) in [("idle", a.p99), ("under deliveries", b.p99)] {
            if p99 > target {
                over.push(format!("{name} {phase} (target {})", ms(target)));
            }
        }
    }
    if over.is_empty() {
        println!(
            "  every query's p99 is within {} and the page's within {}, idle and under deliveries",
            ms(TARGET_P99),
            ms(TARGET_PAGE_P99)
        );
    } else {
        println!("  OVER: {}", over.join("; "));
    }
    let elapsed = chrono::Utc::now() - started;
    println!("total time {:.0} s", elapsed.as_seconds_f64());
    drop(db);
    hookd.stop().await;
}

#[derive(Debug, Clone, Copy)]
struct Latencies {
    p50: Duration,
    p99: Duration,
    max: Duration,
}

async fn measure_all(
    http: &reqwest::Client,
    base: &str,
    token: &str,
) -> Vec<(&'static str, Latencies)> {
    let mut results = Vec::new();
    for query in QUERIES {
        let latencies = measure(http, base, token, query).await;
        println!(
            "  {:<40} p50 {:>9}  p99 {:>9}  max {:>9}",
            query.name,
            ms(latencies.p50),
            ms(latencies.p99),
            ms(latencies.max)
        );
        results.push((query.name, latencies));
    }
    results
}

/// Sends the query's requests one after the other; every answer must be 200 and
/// show what the query is for, read whole.
async fn measure(http: &reqwest::Client, base: &str, token: &str, query: &Query) -> Latencies {
    let mut took = Vec::with_capacity(REQUESTS);
    for i in 0..(WARM_UP_REQUESTS + REQUESTS) as u64 {
        let url = format!("{base}{}", (query.path)(i));
        let sent = Instant::now();
        let response = http
            .get(&url)
            .bearer_auth(token)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {url}: {e}"));
        let status = response.status();
        let body = response
            .bytes()
            .await
            .unwrap_or_else(|e| panic!("GET {url}: {e}"));
        let elapsed = sent.elapsed();
        assert!(
            status == 200 && String::from_utf8_lossy(&body).contains(query.shows),
            "GET {url}: {status} {}",
            String::from_utf8_lossy(&body[..body.len().min(300)])
        );
        if i >= WARM_UP_REQUESTS as u64 {
            took.push(elapsed);
        }
    }
    took.sort();
    Latencies {
        p50: percentile(&took, 0.50),
        p99: percentile(&took, 0.99),
        max: took.last().copied().unwrap_or_default(),
    }
}

/// Fills the database with set-based SQL, then VACUUM ANALYZE and a checkpoint so
/// the measured phases start from a settled cluster.
async fn fill(cluster: &BenchCluster) -> String {
    let clock = Instant::now();
    let db = cluster.connect().await;
    let indexes = bench::drop_secondary_indexes(
        &db,
        &["webhook_events", "webhook_event_attempts", "payments"],
    )
    .await;
    bench::fill_in_chunks(
        cluster,
        events(),
        FILL_CHUNKS,
        |client, first, last| async move { fill_events(&client, first, last).await },
    )
    .await;
    let mut stages = vec![format!("events {:.1} s", clock.elapsed().as_secs_f64())];
    let started = Instant::now();
    fill_payments(&db).await;
    stages.push(format!("payments {:.1} s", started.elapsed().as_secs_f64()));
    stages.push(bench::rebuild_indexes(&db, &indexes).await);
    stages.push(bench::settle(&db).await);
    stages.join(", ")
}

/// Event number `g` (1-based, in order of arrival) is about payment
/// `(g - 1) * 2 / 5`, so a payment's two or three events arrive together.
const PAYMENT_OF_G: &str = "((g - 1) * 2 / 5)";

/// Events `first..=last` and their attempts, in one statement.
async fn fill_events(client: &tokio_postgres::Client, first: i64, last: i64) {
    let (events, customers) = (events(), customers());
    let sql = format!(
        "WITH x AS (
             SELECT g, p, {SOURCE_SQL} AS source,
                    'pi_3Q' || lpad(p::text, 8, '0') AS payment,
                    'cus_R' || lpad((p % {customers})::text, 7, '0') AS customer,
                    -- the payment's first event succeeded, failed or was ignored; later
                    -- ones refund or dispute it, or are ignored
                    CASE WHEN g % 1000 < 5 THEN 'dead'
                         WHEN g % 1000 = 5 THEN 'failed'
                         WHEN g % 7 = 3 THEN 'ignored'
                         ELSE 'processed' END AS status,
                    CASE WHEN g = 1 OR p <> (g - 2) * 2 / 5 THEN
                             CASE WHEN p % 11 = 0 THEN 'payment_failed' ELSE 'payment_succeeded' END
                         WHEN g % 13 = 0 THEN 'dispute_opened'
                         ELSE 'payment_refunded' END AS kind,
                    now() - interval '{DAYS} days'
                        + g * (interval '{DAYS} days' / {events}) AS at
             FROM (SELECT g, {PAYMENT_OF_G} AS p
                   FROM generate_series($1::bigint, $2::bigint) g) n),
         events AS (
             INSERT INTO webhook_events
                 (source, event_id, event_type, kind, status, payload, payload_sha256,
                  signed_with, payment_id, customer_id, deliveries, attempts, last_error,
                  received_at, last_delivery_at, processed_at, next_attempt_at)
             SELECT source, 'evt_1Q' || lpad(g::text, 8, '0'),
                    CASE WHEN status = 'ignored' THEN 'charge.updated' ELSE kind END,
                    CASE WHEN status = 'ignored' THEN NULL ELSE kind END,
                    status,
                    jsonb_build_object(
                        'id', 'evt_1Q' || lpad(g::text, 8, '0'), 'object', 'event',
                        'type', kind, 'created', extract(epoch FROM at)::bigint,
                        'data', jsonb_build_object('object', jsonb_build_object(
                            'id', payment, 'object', 'payment_intent',
                            'amount', 1000 + p % 9000, 'currency', 'eur',
                            'customer', customer, 'status', 'succeeded'))),
                    sha256(convert_to('evt_1Q' || g, 'UTF8')),
                    CASE WHEN g % 50 = 0 THEN 2 ELSE 1 END,
                    payment, customer, 1 + (g % 40 = 0)::int,
                    CASE status WHEN 'dead' THEN 10 WHEN 'failed' THEN 3
                                WHEN 'ignored' THEN 0 ELSE 1 + (g % 10 = 3)::int END,
                    CASE WHEN status IN ('dead', 'failed')
                         THEN 'amount is not a non-negative integer' END,
                    at, at + (g % 40 = 0)::int * interval '3 s',
                    CASE WHEN status = 'processed' THEN at + interval '5 ms' END,
                    CASE WHEN status = 'failed' THEN now() + interval '1 hour' END
             FROM x
             RETURNING id, status, kind, attempts, last_error, received_at)
         INSERT INTO webhook_event_attempts
             (webhook_event_id, attempt, started_at, finished_at, outcome, error, handler)
         SELECT e.id, a, e.received_at + (a - 1) * interval '2 s',
                e.received_at + (a - 1) * interval '2 s' + interval '4 ms',
                CASE WHEN a < e.attempts OR e.status = 'failed' THEN 'failed'
                     ELSE e.status END,
                CASE WHEN a < e.attempts OR e.status <> 'processed'
                     THEN coalesce(e.last_error, 'handler timed out after 5s') END,
                e.kind
         FROM events e, generate_series(1, e.attempts) a"
    );
    bench::execute_fill(client, &sql, &[&first, &last]).await;
}

/// One `payments` row per payment, as the handlers would have merged it.
async fn fill_payments(db: &tokio_postgres::Client) {
    let (events, payments, customers) = (events(), payments(), customers());
    let sql = format!(
        "INSERT INTO payments (source, payment_id, succeeded, failed, disputed, amount,
                               amount_refunded, currency, customer_id, created_at, updated_at)
         SELECT {SOURCE_SQL}, 'pi_3Q' || lpad(p::text, 8, '0'),
                p % 11 <> 0, p % 11 = 0, p % 31 = 0, 1000 + p % 9000,
                CASE WHEN p % 11 <> 0 AND p % 3 = 0 THEN 1000 + p % 9000 ELSE 0 END,
                'eur', 'cus_R' || lpad((p % {customers})::text, 7, '0'),
                now() - interval '{DAYS} days' + (p * 5 / 2 + 1) * (interval '{DAYS} days' / {events}),
                now() - interval '{DAYS} days' + (p * 5 / 2 + 3) * (interval '{DAYS} days' / {events})
         FROM generate_series(0, {payments} - 1) p"
    );
    db.batch_execute(&sql).await.expect("fill payments");
}
