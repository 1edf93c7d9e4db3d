//! `cargo bench --bench ingest`: how fast hookd acknowledges new events, against
//! what the same PostgreSQL cluster does with hookd's own SQL and nothing else.
//!
//! For each concurrency (4, 16, 32 and 64 senders), in one run on one cluster:
//! - hookd: a closed loop of signed, unique Stripe `payment_intent.succeeded`
//!   deliveries over HTTP (signature check, parse, store, inline handler, commit);
//! - pgbench "insert": the dedupe statement (`store::events::RECORD_DELIVERY`)
//!   alone, one autocommitted transaction per event;
//! - pgbench "full": the whole transaction of a new event (BEGIN, the dedupe
//!   INSERT, SAVEPOINT, `store::payments::MERGE_PAYMENT`, RELEASE,
//!   `store::events::APPEND_ATTEMPTS`, COMMIT).
//!
//! Both pgbench scripts are the store's own statements with pgbench expressions
//! for their parameters (`hookd_kit::pgbench`), so they cannot drift from hookd.
//!
//! The machine is shared and noisy, so the figures that mean something are the
//! ratios hookd / pgbench, measured seconds apart in alternating rounds on the
//! same cluster, and the CPU each spends per event.

use std::path::Path;
use std::time::Duration;

use hookd_kit::bench::{self, Cpu};
use hookd_kit::load::{self, MAX_REQUESTS, Report, closed_loop, ms, open_loop, percentile};
use hookd_kit::pgbench::{Pgbench, PgbenchResult, Script};
use hookd_kit::stall;
use hookd_kit::waits::{WaitSampler, Waits};
use sha2::{Digest, Sha256};

const CONCURRENCIES: [usize; 4] = [4, 16, 32, 64];
/// pgbench's clients for the open-loop floor: enough that one client's
/// stall (a flush) does not hold the schedule of a quarter of the load, as
/// 4 would (it was `CONCURRENCIES[0]`, 16 until 4 senders were added, and
/// 4 from 2026-12-04 08:00 to 2026-12-05 08:30 UTC).
const FLOOR_CLIENTS: usize = 16;
const WARM_UP: Duration = Duration::from_secs(3);
/// Each contender runs ROUNDS slices of SLICE per concurrency, alternating order,
/// so a burst of outside load falls on all of them alike.
const ROUNDS: usize = 2;
const SLICE: Duration = Duration::from_secs(5);
const PGBENCH_WARM_UP: Duration = Duration::from_secs(2);
/// The open-loop run at half of hookd's peak rate.
const OPEN_LOOP: Duration = Duration::from_secs(30);
/// The start of the pgbench open loop that is not counted (fresh backends).
const FLOOR_SKIP: Duration = Duration::from_secs(1);

/// One contender's share of a concurrency level, over all rounds.
#[derive(Default)]
struct Totals {
    hookd: Report,
    insert: PgbenchResult,
    full: PgbenchResult,
    cpu_hookd: Cpu,
    cpu_insert: Cpu,
    cpu_full: Cpu,
    /// What the database's sessions waited for, during hookd's rounds and
    /// pgbench full's.
    waits_hookd: Waits,
    waits_full: Waits,
}

fn main() {
    bench::main("ingest", "ingest", run);
}

async fn run(setup: bench::Setup) {
    let (cluster, hookd, sender, db, started) = setup.into_parts();
    // The same body hookd receives, with placeholders for the two ids.
    let payload = load::stripe_payment_succeeded("@EVT@", "@PI@", 1_726_050_000);
    let sha = hex::encode(Sha256::digest(payload.as_bytes()));
    let mut pgbench = Pgbench::new(
        &cluster,
        "ingest",
        &[Script::Insert, Script::Full].map(|s| (s.name(), s.text())),
        vec![("payload".into(), payload.clone()), ("sha".into(), sha)],
    );
    println!("{}", pgbench.version().await);
    println!(
        "hookd: in-process, {} HTTP workers, pool of {} connections, shipped hookd.toml; \
         target {}",
        hookd.app.settings.now().http_workers,
        bench::POOL_SIZE,
        sender.url()
    );
    println!(
        "unique Stripe payment_intent.succeeded events of {} bytes; per concurrency {ROUNDS} \
         rounds of {} s per contender, order alternating (hookd, insert, full / full, \
         insert, hookd)\n",
        payload.len(),
        SLICE.as_secs(),
    );

    let warm = closed_loop(sender.clone(), CONCURRENCIES[0], WARM_UP, MAX_REQUESTS).await;
    println!("warm-up         hookd   {}", warm.summary().line());
    for script in [Script::Insert, Script::Full] {
        let r = pgbench
            .run(script.name(), CONCURRENCIES[0], PGBENCH_WARM_UP, None)
            .await;
        println!("warm-up         pgbench {:<6} {}", script.name(), r.line());
    }
    let mut accepted = warm.summary().ok;
    let mut levels = Vec::new();
    for concurrency in CONCURRENCIES {
        println!();
        let mut totals = Totals::default();
        for round in 0..ROUNDS {
            let mut order = [Contender::Hookd, Contender::Insert, Contender::Full];
            if round % 2 == 1 {
                order.reverse();
            }
            for contender in order {
                let sampler = WaitSampler::start(cluster.connect().await, cluster.database());
                let before = cluster.cpu();
                let label = format!("c={concurrency:<3} round {}", round + 1);
                match contender {
                    Contender::Hookd => {
                        let report =
                            closed_loop(sender.clone(), concurrency, SLICE, MAX_REQUESTS).await;
                        totals.cpu_hookd = totals.cpu_hookd + (cluster.cpu() - before);
                        totals.waits_hookd.add(sampler.finish().await);
                        println!("{label} hookd          {}", report.summary().line());
                        totals.hookd.samples.extend(report.samples);
                        totals.hookd.elapsed += report.elapsed;
                    }
                    Contender::Insert | Contender::Full => {
                        let script = if contender == Contender::Insert {
                            Script::Insert
                        } else {
                            Script::Full
                        };
                        let result = pgbench.run(script.name(), concurrency, SLICE, None).await;
                        let cpu = cluster.cpu() - before;
                        let waits = sampler.finish().await;
                        println!("{label} pgbench {:<6} {}", script.name(), result.line());
                        if script == Script::Insert {
                            totals.cpu_insert = totals.cpu_insert + cpu;
                            totals.insert.add(result);
                        } else {
                            totals.cpu_full = totals.cpu_full + cpu;
                            totals.waits_full.add(waits);
                            totals.full.add(result);
                        }
                    }
                }
            }
        }
        let summary = totals.hookd.summary();
        accepted += summary.ok;
        println!(
            "c={concurrency:<3} all      hookd          {}",
            summary.line()
        );
        println!(
            "c={concurrency:<3} all      pgbench insert {}",
            totals.insert.line()
        );
        println!(
            "c={concurrency:<3} all      pgbench full   {}",
            totals.full.line()
        );
        levels.push((concurrency, summary, totals));
    }

    println!("\nsummary: throughput (hookd: 200 answers/s; pgbench: transactions/s) and ratios");
    println!(
        "{:>11} {:>8} {:>10} {:>10} {:>12} {:>13} {:>12} {:>11}",
        "concurrency",
        "hookd/s",
        "hookd p50",
        "hookd p99",
        "pgbench ins",
        "hookd/insert",
        "pgbench full",
        "hookd/full"
    );
    for (concurrency, summary, totals) in &levels {
        let rate = summary.throughput();
        println!(
            "{:>11} {:>8.0} {:>10} {:>10} {:>12.0} {:>13.2} {:>12.0} {:>11.2}",
            concurrency,
            rate,
            ms(summary.p50),
            ms(summary.p99),
            totals.insert.tps(),
            rate / totals.insert.tps(),
            totals.full.tps(),
            rate / totals.full.tps()
        );
    }
    println!(
        "\nthe machine's busy share: CPU seconds of everything measured (hookd, the load \
         generator, pgbench, PostgreSQL) over the run's seconds × {} cores",
        bench::cores()
    );
    println!(
        "{:>11} {:>8} {:>15} {:>13}",
        "concurrency", "hookd", "pgbench insert", "pgbench full"
    );
    for (concurrency, _, totals) in &levels {
        println!(
            "{:>11} {:>7.0}% {:>14.0}% {:>12.0}%",
            concurrency,
            busy(totals.cpu_hookd, totals.hookd.elapsed.as_secs_f64()),
            busy(totals.cpu_insert, totals.insert.seconds),
            busy(totals.cpu_full, totals.full.seconds)
        );
    }
    println!(
        "\nwhat the database's sessions wait for (pg_stat_activity sampled every 5 ms; \
         `in transaction, waiting for its client`: between a transaction's statements)"
    );
    for (concurrency, _, totals) in &levels {
        println!(
            "c={concurrency:<3} hookd        {}",
            totals.waits_hookd.line()
        );
        println!(
            "c={concurrency:<3} pgbench full {}",
            totals.waits_full.line()
        );
    }
    println!("\nCPU per event in µs (steadier than rates on a shared machine)");
    println!(
        "{:>11} {:>28} {:>24} {:>24}",
        "concurrency",
        "hookd: http / loadgen / pg",
        "pgbench insert: pg / client",
        "pgbench full: pg / client"
    );
    for (concurrency, summary, totals) in &levels {
        let per = |seconds: f64, n: f64| seconds * 1e6 / n.max(1.0);
        let n = summary.ok as f64;
        let (ni, nf) = (
            totals.insert.transactions as f64,
            totals.full.transactions as f64,
        );
        println!(
            "{:>11} {:>28} {:>24} {:>24}",
            concurrency,
            format!(
                "{:.0} / {:.0} / {:.0}",
                per(totals.cpu_hookd.hookd, n),
                per(totals.cpu_hookd.rest, n),
                per(totals.cpu_hookd.postgres, n)
            ),
            format!(
                "{:.0} / {:.0}",
                per(totals.cpu_insert.postgres, ni),
                per(totals.cpu_insert.children, ni)
            ),
            format!(
                "{:.0} / {:.0}",
                per(totals.cpu_full.postgres, nf),
                per(totals.cpu_full.children, nf)
            ),
        );
    }

    // Latency a provider sees at half the peak rate, without coordinated omission.
    let peak = levels
        .iter()
        .map(|(_, summary, _)| summary.throughput())
        .fold(0.0, f64::max);
    // Two windows each, hookd's first and last, so that a stall of the
    // machine's own (a WAL flush held for tens of ms or more, which it has
    // now and then whoever writes) is as likely to fall on either contender.
    let rate = peak / 2.0;
    println!(
        "\nopen loops at half the peak ({rate:.0}/s of {peak:.0}/s), {} s each: hookd, \
         pgbench insert ({FLOOR_CLIENTS} clients), pgbench insert, hookd",
        OPEN_LOOP.as_secs()
    );
    let mut latencies = [Vec::new(), Vec::new()];
    for (round, contender) in [Open::Hookd, Open::Floor, Open::Floor, Open::Hookd]
        .into_iter()
        .enumerate()
    {
        // Each window starts from a vacuumed, checkpointed cluster, so all
        // meet the same autovacuum debt and WAL distance to the next
        // checkpoint: an autovacuum of the events table (the closed loops
        // leave a few hundred thousand new rows to it) or a checkpoint's sync
        // phase in one window and not another decides a p99 more than either
        // contender.
        settle(&db).await;
        let since = chrono::Utc::now();
        let wal_from = wal_position(&db).await;
        let sampler = WaitSampler::start(cluster.connect().await, cluster.database());
        let (label, line, p99s, points, written_by) = match contender {
            Open::Hookd => {
                let started = std::time::Instant::now();
                let report = open_loop(sender.clone(), rate, OPEN_LOOP, None).await;
                // Deliveries are due from the loop's start; looks from the sampler's.
                let shift = started - sampler.started();
                let summary = report.summary();
                accepted += summary.ok;
                let points: Vec<(Duration, Duration)> = report
                    .samples
                    .iter()
                    .map(|s| (s.due + shift, s.latency))
                    .collect();
                let p99s = report.p99_timeline(Duration::from_secs(1));
                let written_by = points.len();
                ("hookd", summary.line(), p99s, points, written_by)
            }
            Open::Floor => {
                // pgbench's first second is left out: its schedule starts as
                // its clients connect, and fresh backends take tens of ms over
                // their first transactions (hookd's pooled connections are
                // long warm). It stamps its transactions on the wall clock.
                let shift = sampler
                    .started_wall()
                    .duration_since(std::time::UNIX_EPOCH)
                    .expect("after 1970");
                let run = pgbench
                    .run(
                        Script::Insert.name(),
                        FLOOR_CLIENTS,
                        OPEN_LOOP + FLOOR_SKIP,
                        Some(rate),
                    )
                    .await;
                // The WAL counts the skipped second's transactions too.
                let written_by = run.transactions_at.len();
                let floor = run.after(FLOOR_SKIP);
                let points: Vec<(Duration, Duration)> = floor
                    .transactions_at
                    .iter()
                    .map(|&(due, latency)| (due.saturating_sub(shift), latency))
                    .collect();
                let p99s = floor.p99_timeline(Duration::from_secs(1));
                ("pgbench insert", floor.line(), p99s, points, written_by)
            }
        };
        let waits = sampler.finish().await;
        let wal = wal_written_since(&db, &wal_from).await;
        println!("\n{}. {label}: {line}", round + 1);
        // What each commit's flush has to write: more WAL a second, longer
        // flushes when the disk is slow.
        println!(
            "   WAL written: {:.1} MiB, {:.2} KiB per delivery",
            wal / 1_048_576.0,
            wal / 1024.0 / written_by.max(1) as f64
        );
        // A tail is a stall or a queue: when it happened, and what ran then.
        println!(
            "   p99 per second, ms: {p99s}; checkpoints (s after its start): {}",
            cluster.checkpoints_since(since)
        );
        println!("   what the sessions wait for: {}", waits.line());
        println!(
            "   background processes at work (s from its start): {}",
            stall::background(&waits.timeline).join("; ")
        );
        println!("   its worst moment:");
        for line in stall::trace(&points, &waits.timeline) {
            println!("   {line}");
        }
        latencies[usize::from(contender == Open::Floor)]
            .extend(points.into_iter().map(|(_, latency)| latency));
    }
    let [hookd_open, floor_open] = latencies.map(|mut l| {
        l.sort();
        (percentile(&l, 0.50), percentile(&l, 0.99))
    });
    println!(
        "\nopen loops, both windows together: hookd p50 {} p99 {}; pgbench insert p50 {} p99 {}",
        ms(hookd_open.0),
        ms(hookd_open.1),
        ms(floor_open.0),
        ms(floor_open.1)
    );
    println!(
        "open loop p99, hookd / pgbench insert at the same rate: {:.2}",
        hookd_open.1.as_secs_f64() / floor_open.1.as_secs_f64().max(1e-9)
    );

    // The real binary alone: its peak memory under the highest concurrency.
    let busiest = CONCURRENCIES[CONCURRENCIES.len() - 1];
    let (rss_kib, serve) = hookd
        .serve_peak_rss(
            Path::new(env!("CARGO_BIN_EXE_hookd")),
            &cluster,
            busiest,
            SLICE,
        )
        .await;
    println!(
        "hookd serve (release binary) under {busiest} senders: peak RSS {:.1} MiB; {}",
        rss_kib as f64 / 1024.0,
        serve.summary().line()
    );

    // Every 200 must be a stored, processed event with its payment.
    let prefix = format!("{}%", sender.event_id_prefix());
    let by_status = db
        .query(
            "SELECT status, count(*) FROM webhook_events WHERE event_id LIKE $1 \
             GROUP BY status ORDER BY status",
            &[&prefix],
        )
        .await
        .expect("count events");
    let statuses: Vec<String> = by_status
        .iter()
        .map(|r| format!("{} {}", r.get::<_, String>(0), r.get::<_, i64>(1)))
        .collect();
    let stored: i64 = by_status.iter().map(|r| r.get::<_, i64>(1)).sum();
    let payments: i64 = db
        .query_one(
            "SELECT count(*) FROM payments WHERE payment_id LIKE 'pi_bench_%' AND succeeded",
            &[],
        )
        .await
        .expect("count payments")
        .get(0);
    println!(
        "\ncheck: {accepted} deliveries answered 200; stored: {}; succeeded payments: {payments}",
        statuses.join(", ")
    );
    // A delivery that timed out on our side may still have been stored; a 200 for
    // an event that is not stored would break the contract.
    assert!(
        stored >= accepted as i64,
        "{accepted} deliveries were answered 200 but only {stored} events are stored"
    );
    let elapsed = chrono::Utc::now() - started;
    println!("total time {:.0} s", elapsed.as_seconds_f64());
    pgbench.remove();
    drop(db);
    hookd.stop().await;
}

/// Who runs an open-loop window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Hookd,
    /// pgbench's bare dedupe INSERT.
    Floor,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contender {
    Hookd,
    Insert,
    Full,
}

/// No autovacuum due and no dirty page left: `VACUUM ANALYZE` (not paced, as
/// a manual one is not) then `CHECKPOINT`.
async fn settle(db: &tokio_postgres::Client) {
    db.batch_execute("VACUUM ANALYZE")
        .await
        .expect("vacuum analyze");
    db.batch_execute("CHECKPOINT").await.expect("checkpoint");
}

/// Where the WAL is now.
async fn wal_position(db: &tokio_postgres::Client) -> String {
    db.query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .expect("wal position")
        .get(0)
}

/// Bytes of WAL written since `from` (`wal_position`).
async fn wal_written_since(db: &tokio_postgres::Client, from: &str) -> f64 {
    db.query_one(
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::text::pg_lsn)::float8",
        &[&from],
    )
    .await
    .expect("wal written")
    .get(0)
}

/// `cpu` over `seconds` of the whole machine, in percent.
fn busy(cpu: Cpu, seconds: f64) -> f64 {
    bench::busy(cpu.total(), seconds)
}
