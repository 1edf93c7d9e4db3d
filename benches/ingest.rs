//! `cargo bench --bench ingest`: how fast hookd acknowledges new events, against
//! what the same PostgreSQL cluster does with hookd's own SQL and nothing else.
//!
//! For each concurrency (16, 32 and 64 senders), in one run on one cluster:
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

use std::path::{Path, PathBuf};
use std::time::Duration;

use hookd_kit::bench::{BenchCluster, Cpu};
use hookd_kit::load::{MAX_REQUESTS, Report, closed_loop, ms, open_loop, percentile};
use hookd_kit::pgbench::Script;
use hookd_kit::{bench, cluster, load};
use sha2::{Digest, Sha256};

const CONCURRENCIES: [usize; 4] = [4, 16, 32, 64];
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

/// What one or more pgbench runs measured.
#[derive(Debug, Clone, Default)]
struct PgbenchResult {
    transactions: u64,
    failed: u64,
    /// Seconds of measurement (transactions / tps, connection time excluded).
    seconds: f64,
    /// Per transaction: when it was due (since the Unix epoch) and its latency
    /// from then. Closed loop, it was due when it started.
    transactions_at: Vec<(Duration, Duration)>,
}

impl PgbenchResult {
    fn tps(&self) -> f64 {
        self.transactions as f64 / self.seconds.max(1e-9)
    }

    fn add(&mut self, other: PgbenchResult) {
        self.transactions += other.transactions;
        self.failed += other.failed;
        self.seconds += other.seconds;
        self.transactions_at.extend(other.transactions_at);
    }

    fn line(&self) -> String {
        let sorted = self.sorted_latencies();
        format!(
            "{} transactions ({} failed) in {:.1} s, {:.0} tps; latency p50 {} p99 {} max {}",
            self.transactions,
            self.failed,
            self.seconds,
            self.tps(),
            ms(percentile(&sorted, 0.50)),
            ms(percentile(&sorted, 0.99)),
            ms(sorted.last().copied().unwrap_or_default())
        )
    }

    fn sorted_latencies(&self) -> Vec<Duration> {
        let mut sorted: Vec<Duration> = self.transactions_at.iter().map(|&(_, l)| l).collect();
        sorted.sort();
        sorted
    }

    /// Only the transactions due `skip` or more after the first one, as if the
    /// run had started then.
    fn after(&self, skip: Duration) -> PgbenchResult {
        let first = self.transactions_at.iter().map(|&(due, _)| due).min();
        let transactions_at: Vec<(Duration, Duration)> = self
            .transactions_at
            .iter()
            .filter(|&&(due, _)| first.is_some_and(|first| due >= first + skip))
            .copied()
            .collect();
        PgbenchResult {
            transactions: transactions_at.len() as u64,
            failed: self.failed,
            seconds: (self.seconds - skip.as_secs_f64()).max(0.0),
            transactions_at,
        }
    }

    /// p99 per `step`, by when each transaction was due.
    fn p99_timeline(&self, step: Duration) -> String {
        let first = self.transactions_at.iter().map(|&(due, _)| due).min();
        let points: Vec<(Duration, Duration)> = self
            .transactions_at
            .iter()
            .map(|&(due, latency)| (due - first.unwrap_or(due), latency))
            .collect();
        load::p99_timeline(&points, step)
    }
}

struct Pgbench<'a> {
    bin: PathBuf,
    cluster: &'a BenchCluster,
    /// Scripts and per-transaction logs; deleted at the end.
    work: PathBuf,
    payload: String,
    sha: String,
    runs: usize,
}

impl<'a> Pgbench<'a> {
    fn new(cluster: &'a BenchCluster) -> Self {
        let work = cluster
            .socket_dir()
            .with_file_name(format!("bench-ingest-pgbench-{}", std::process::id()));
        std::fs::create_dir_all(&work).expect("pgbench work folder");
        for script in [Script::Insert, Script::Full] {
            std::fs::write(work.join(format!("{}.sql", script.name())), script.text())
                .expect("write pgbench script");
        }
        // The same body hookd receives, with placeholders for the two ids.
        let payload = load::stripe_payment_succeeded("@EVT@", "@PI@", 1_726_050_000);
        let sha = hex::encode(Sha256::digest(payload.as_bytes()));
        Pgbench {
            bin: cluster::postgres_bin("pgbench"),
            cluster,
            work,
            payload,
            sha,
            runs: 0,
        }
    }

    async fn version(&self) -> String {
        let out = tokio::process::Command::new(&self.bin)
            .arg("--version")
            .output()
            .await
            .expect("pgbench --version");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// A closed loop of `clients`, or an open loop at `rate` transactions per
    /// second spread over them.
    async fn run(
        &mut self,
        script: Script,
        clients: usize,
        duration: Duration,
        rate: Option<f64>,
    ) -> PgbenchResult {
        self.runs += 1;
        let prefix = format!("log{}", self.runs);
        let mut command = tokio::process::Command::new(&self.bin);
        if let Some(rate) = rate {
            command.arg(format!("--rate={rate:.0}"));
        }
        let out = command
            .current_dir(&self.work)
            .env_remove("PGSERVICE")
            .args(["-n", "-M", "prepared", "--no-vacuum"])
            .arg("-h")
            .arg(self.cluster.socket_dir())
            .args(["-p", "5432", "-U", self.cluster.user()])
            .arg(format!("--client={clients}"))
            .arg(format!("--jobs={}", clients.min(2)))
            .arg(format!("--time={}", duration.as_secs().max(1)))
            .arg(format!("--file={}.sql", script.name()))
            .arg("--log")
            .arg(format!("--log-prefix={prefix}"))
            .arg("-D")
            .arg("n=0")
            .arg("-D")
            .arg(format!("run=r{}{}", std::process::id(), self.runs))
            .arg("-D")
            .arg(format!("payload={}", self.payload))
            .arg("-D")
            .arg(format!("sha={}", self.sha))
            .arg(self.cluster.database())
            .output()
            .await
            .expect("run pgbench");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "pgbench {} failed ({}):\n{stdout}\n{stderr}",
            script.name(),
            out.status
        );
        let value = |label: &str| -> Option<String> {
            stdout
                .lines()
                .find_map(|l| l.strip_prefix(label))
                .map(|rest| rest.trim().to_string())
        };
        let first_number = |text: String| -> Option<f64> {
            text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
                .find(|s| !s.is_empty())
                .and_then(|s| s.parse().ok())
        };
        let tps = value("tps = ")
            .and_then(first_number)
            .unwrap_or_else(|| panic!("no tps in pgbench output:\n{stdout}"));
        let transactions = value("number of transactions actually processed: ")
            .and_then(first_number)
            .unwrap_or_default() as u64;
        PgbenchResult {
            transactions,
            failed: value("number of failed transactions: ")
                .and_then(first_number)
                .unwrap_or_default() as u64,
            seconds: transactions as f64 / tps.max(1e-9),
            transactions_at: self.logged_transactions(&prefix),
        }
    }

    /// Each transaction's due time and latency from pgbench's `--log` files:
    /// `client transaction time script epoch_s epoch_us [schedule_lag]`, times in
    /// µs, the epoch when it ended. The latency counts from when it was due: its
    /// own time plus, in an open loop, how late it started (`schedule_lag`).
    fn logged_transactions(&self, prefix: &str) -> Vec<(Duration, Duration)> {
        let mut transactions = Vec::new();
        for entry in std::fs::read_dir(&self.work).expect("pgbench logs") {
            let path = entry.expect("pgbench log").path();
            let is_log = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{prefix}.")));
            if !is_log {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read pgbench log");
            transactions.extend(text.lines().filter_map(|line| {
                let fields: Vec<u64> = line
                    .split_whitespace()
                    .map(|f| f.parse().ok())
                    .collect::<Option<_>>()?;
                let (time, epoch_s, epoch_us) = (*fields.get(2)?, *fields.get(4)?, *fields.get(5)?);
                let latency = Duration::from_micros(time + fields.get(6).copied().unwrap_or(0));
                let ended = Duration::from_secs(epoch_s) + Duration::from_micros(epoch_us);
                Some((ended.checked_sub(latency)?, latency))
            }));
            std::fs::remove_file(&path).expect("remove pgbench log");
        }
        transactions
    }

    fn remove(self) {
        let _ = std::fs::remove_dir_all(&self.work);
    }
}

/// One contender's share of a concurrency level, over all rounds.
#[derive(Default)]
struct Totals {
    hookd: Report,
    insert: PgbenchResult,
    full: PgbenchResult,
    cpu_hookd: Cpu,
    cpu_insert: Cpu,
    cpu_full: Cpu,
}

fn main() {
    bench::main("ingest", "ingest", run);
}

async fn run(setup: bench::Setup) {
    let (cluster, hookd, sender, db, started) = setup.into_parts();
    let mut pgbench = Pgbench::new(&cluster);
    println!("{}", pgbench.version().await);
    println!(
        "hookd: in-process, {} HTTP workers, pool of {} connections, shipped hookd.toml; \
         target {}",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        bench::POOL_SIZE,
        sender.url()
    );
    println!(
        "unique Stripe payment_intent.succeeded events of {} bytes; per concurrency {ROUNDS} \
         rounds of {} s per contender, order alternating (hookd, insert, full / full, \
         insert, hookd)\n",
        pgbench.payload.len(),
        SLICE.as_secs(),
    );

    let warm = closed_loop(sender.clone(), CONCURRENCIES[0], WARM_UP, MAX_REQUESTS).await;
    println!("warm-up         hookd   {}", warm.summary().line());
    for script in [Script::Insert, Script::Full] {
        let r = pgbench
            .run(script, CONCURRENCIES[0], PGBENCH_WARM_UP, None)
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
                let before = cluster.cpu();
                let label = format!("c={concurrency:<3} round {}", round + 1);
                match contender {
                    Contender::Hookd => {
                        let report =
                            closed_loop(sender.clone(), concurrency, SLICE, MAX_REQUESTS).await;
                        totals.cpu_hookd = totals.cpu_hookd + (cluster.cpu() - before);
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
                        let result = pgbench.run(script, concurrency, SLICE, None).await;
                        let cpu = cluster.cpu() - before;
                        println!("{label} pgbench {:<6} {}", script.name(), result.line());
                        if script == Script::Insert {
                            totals.cpu_insert = totals.cpu_insert + cpu;
                            totals.insert.add(result);
                        } else {
                            totals.cpu_full = totals.cpu_full + cpu;
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
        cores()
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
    let open_started_at = chrono::Utc::now();
    let half = open_loop(sender.clone(), peak / 2.0, OPEN_LOOP, None).await;
    let half_summary = half.summary();
    accepted += half_summary.ok;
    println!(
        "\nopen loop at half the peak ({:.0}/s of {peak:.0}/s) for {} s: {}",
        peak / 2.0,
        OPEN_LOOP.as_secs(),
        half_summary.line()
    );
    // A tail is a stall or a queue: when it happened, and whether a checkpoint ran.
    println!(
        "open loop p99 per second, ms: {}; checkpoints (s after its start): {}",
        half.p99_timeline(Duration::from_secs(1)),
        cluster.checkpoints_since(open_started_at)
    );
    // The same rate for the database alone, doing the least a receiver that
    // commits each event on its own must: one durable dedupe INSERT per event,
    // each its own transaction, with pgbench's light client. How far hookd's tail is from what this machine's PostgreSQL
    // gives at that rate.
    let floor_started_at = chrono::Utc::now();
    // pgbench's first second is left out: its schedule starts as its clients
    // connect, and fresh backends take tens of ms over their first transactions
    // (hookd's pooled connections are long warm).
    let floor = pgbench
        .run(
            Script::Insert,
            CONCURRENCIES[0],
            OPEN_LOOP + FLOOR_SKIP,
            Some(peak / 2.0),
        )
        .await
        .after(FLOOR_SKIP);
    println!(
        "pgbench insert, open loop at the same rate ({} clients) for {} s: {}",
        CONCURRENCIES[0],
        OPEN_LOOP.as_secs(),
        floor.line()
    );
    println!(
        "pgbench insert p99 per second, ms: {}; checkpoints (s after its start): {}",
        floor.p99_timeline(Duration::from_secs(1)),
        cluster.checkpoints_since(floor_started_at)
    );
    println!(
        "open loop p99, hookd / pgbench insert at the same rate: {:.2}",
        half_summary.p99.as_secs_f64()
            / percentile(&floor.sorted_latencies(), 0.99)
                .as_secs_f64()
                .max(1e-9)
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contender {
    Hookd,
    Insert,
    Full,
}

/// The cores of this machine.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `cpu` over `seconds` of the whole machine, in percent.
fn busy(cpu: Cpu, seconds: f64) -> f64 {
    let spent = cpu.hookd + cpu.rest + cpu.children + cpu.postgres;
    100.0 * spent / (seconds * cores() as f64).max(1e-9)
}
