//! `cargo bench --bench gateway`: keyed POSTs through hookd's Idempotency-Key
//! gateway, against what the same PostgreSQL cluster does with the gateway's own
//! statements and nothing else, and against the same upstream called straight.
//!
//! - upstream: a trivial actix-web server in this process (one worker, a
//!   System of its own), answering every POST 201 `{"id":"pay"}`;
//! - hookd: the real `hookd serve` (release) with the shipped `hookd.toml` and a
//!   `[gateway]` with one route to that upstream, loaded by closed loops of
//!   keyed POSTs: all new keys, then half copies (every other request repeats a
//!   key already answered, and gets its stored answer);
//! - pgbench: `store::api_idempotency::CLAIM_KEY` then `COMPLETE_KEY` per
//!   request, each autocommitted as hookd runs them (and, for half copies, every
//!   other transaction a copy's claim and `READ_KEY`), from the store's own
//!   statement text (`hookd_kit::pgbench::KeyScript`);
//! - direct: the same callers to upstream without hookd, for hookd's added p50.
//!
//! The machine is shared and noisy, so the figures that mean something are the
//! ratios hookd / pgbench, measured seconds apart in alternating rounds on the
//! same cluster.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hookd_kit::bench::{self, Cpu, Serve};
use hookd_kit::load::{KeyedCaller, Keys, MAX_REQUESTS, Report, Summary, ms};
use hookd_kit::pgbench::{KEY_CALLER, KEY_ROUTE, KeyScript, Pgbench, PgbenchResult};
use hookd_kit::waits::{WaitSampler, Waits};

const CONCURRENCIES: [usize; 2] = [16, 64];
/// The direct calls to upstream, for hookd's added p50.
const DIRECT_CONCURRENCY: usize = 16;
const WARM_UP: Duration = Duration::from_secs(3);
const PGBENCH_WARM_UP: Duration = Duration::from_secs(2);
/// Each contender runs ROUNDS slices of SLICE per concurrency and key mix,
/// alternating order, so a burst of outside load falls on both alike.
const ROUNDS: usize = 2;
const SLICE: Duration = Duration::from_secs(5);
/// What upstream answers (and the gateway passes on and stores).
const CREATED: u16 = 201;
const ANSWER: &str = r#"{"id":"pay"}"#;
/// hookd's added p50 at 16 clients, at most.
const ADDED_P50_TARGET: Duration = Duration::from_millis(2);

fn main() {
    bench::main("gateway", "gateway", run);
}

/// The trivial upstream: one actix-web worker on a thread and System of its own,
/// reading each request's body and answering `201 {"id":"pay"}`.
fn start_upstream() -> (String, actix_web::dev::ServerHandle) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("upstream port");
    let addr = listener.local_addr().expect("upstream address");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("upstream".into())
        .spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                let server = actix_web::HttpServer::new(|| {
                    // The body is read, as a real endpoint reads it: an answer
                    // that leaves a request's body unread closes the connection,
                    // so every caller would pay for a new one each time.
                    actix_web::App::new().default_service(actix_web::web::to(
                        |_body: actix_web::web::Bytes| async {
                            actix_web::HttpResponse::Created()
                                .content_type("application/json")
                                .body(ANSWER)
                        },
                    ))
                })
                .workers(1)
                .disable_signals()
                .listen(listener)
                .expect("upstream listens")
                .run();
                tx.send(server.handle()).expect("upstream handle");
                server.await.expect("upstream runs");
            });
        })
        .expect("upstream thread");
    let handle = rx.recv().expect("upstream started");
    (format!("http://{addr}"), handle)
}

/// The `[gateway]` section: one route, the defaults (the caller's
/// `Authorization` as scope, key required, 24 h retention, 30 s timeout).
fn gateway_toml(port: u16, upstream: &str) -> String {
    format!(
        "[gateway]\nlisten = \"127.0.0.1:{port}\"\n\n[[gateway.routes]]\nname = \"{KEY_ROUTE}\"\n\
         method = \"POST\"\npath = \"/payments\"\nupstream = \"{upstream}\"\n\
         scope = \"header:Authorization\"\n"
    )
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// Waits until the gateway's listener answers (anything: `GET /` has no route).
async fn wait_for(base: &str) {
    let http = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while http.get(base).send().await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the gateway did not listen"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One key mix's share of a concurrency level, over all rounds.
#[derive(Default)]
struct Totals {
    hookd: Report,
    pgbench: PgbenchResult,
    waits_hookd: Waits,
    waits_pgbench: Waits,
    spent: Spent,
}

/// CPU seconds spent during a level's rounds, by contender.
#[derive(Default, Clone, Copy)]
struct Spent {
    /// `hookd serve`'s own, during hookd's rounds.
    serve: f64,
    /// This process (the callers and the upstream) and the cluster, during
    /// hookd's rounds.
    beside_hookd: Cpu,
    /// The cluster and pgbench, during pgbench's rounds.
    pgbench: Cpu,
}

struct Level {
    concurrency: usize,
    keys: Keys,
    hookd: Summary,
    pgbench: PgbenchResult,
    waits_hookd: Waits,
    waits_pgbench: Waits,
    spent: Spent,
}

fn mix(keys: Keys) -> &'static str {
    match keys {
        Keys::New => "new keys",
        Keys::HalfCopies => "half copies",
        Keys::None => "no key",
    }
}

fn script_of(keys: Keys) -> KeyScript {
    if keys == Keys::HalfCopies {
        KeyScript::HalfCopies
    } else {
        KeyScript::New
    }
}

async fn run(setup: bench::Setup) {
    let (cluster, hookd, _sender, db, started) = setup.into_parts();
    let mut pgbench = Pgbench::new(
        &cluster,
        "gateway",
        &[KeyScript::New, KeyScript::HalfCopies].map(|s| (s.name(), s.text())),
        Vec::new(),
    );
    let (upstream, upstream_handle) = start_upstream();
    let gateway_port = free_port();
    let serve = Serve::start_with(
        Path::new(env!("CARGO_BIN_EXE_hookd")),
        &cluster,
        &cluster.connection_string(),
        "gateway",
        &gateway_toml(gateway_port, &upstream),
    )
    .await;
    let gateway = format!("http://127.0.0.1:{gateway_port}");
    wait_for(&gateway).await;
    println!("{}", pgbench.version().await);
    println!(
        "hookd serve (release binary), shipped hookd.toml, pool of {} connections; gateway \
         {gateway}/payments → upstream {upstream} (actix-web, 1 worker, answers {CREATED} \
         {ANSWER}); route defaults (scope: the caller's Authorization, retention 24h)",
        bench::POOL_SIZE
    );
    println!(
        "per concurrency and key mix {ROUNDS} rounds of {} s per contender, order alternating \
         (hookd, pgbench / pgbench, hookd); direct calls {DIRECT_CONCURRENCY} clients\n",
        SLICE.as_secs()
    );
    let through = Arc::new(
        KeyedCaller::new(&format!("{gateway}/payments"), KEY_CALLER).expect("gateway caller"),
    );
    let direct = Arc::new(
        KeyedCaller::new(&format!("{upstream}/payments"), KEY_CALLER).expect("direct caller"),
    );

    let warm = direct
        .closed_loop(Keys::None, DIRECT_CONCURRENCY, WARM_UP, MAX_REQUESTS)
        .await;
    println!("warm-up        direct  {}", warm.summary_ok(CREATED).line());
    let warm = through
        .closed_loop(Keys::New, CONCURRENCIES[0], WARM_UP, MAX_REQUESTS)
        .await;
    println!("warm-up        hookd   {}", warm.summary_ok(CREATED).line());
    for script in [KeyScript::New, KeyScript::HalfCopies] {
        let r = pgbench
            .run(script.name(), CONCURRENCIES[0], PGBENCH_WARM_UP, None)
            .await;
        println!("warm-up        pgbench {:<16} {}", script.name(), r.line());
    }

    let mut levels = Vec::new();
    let mut direct_total = Report::default();
    for keys in [Keys::New, Keys::HalfCopies] {
        for concurrency in CONCURRENCIES {
            println!();
            let mut totals = Totals::default();
            let script = script_of(keys);
            for round in 0..ROUNDS {
                let label = format!("c={concurrency:<3} round {}", round + 1);
                let mut order = [true, false];
                if round % 2 == 1 {
                    order.reverse();
                }
                for is_hookd in order {
                    let sampler = WaitSampler::start(cluster.connect().await, cluster.database());
                    let (cpu_before, serve_before) = (cluster.cpu(), serve.cpu_seconds());
                    if is_hookd {
                        let report = through
                            .closed_loop(keys, concurrency, SLICE, MAX_REQUESTS)
                            .await;
                        totals.spent.serve += serve.cpu_seconds() - serve_before;
                        totals.spent.beside_hookd =
                            totals.spent.beside_hookd + (cluster.cpu() - cpu_before);
                        println!(
                            "{label} hookd   {:<16} {}",
                            mix(keys),
                            report.summary_ok(CREATED).line()
                        );
                        totals.hookd.samples.extend(report.samples);
                        totals.hookd.elapsed += report.elapsed;
                        totals.waits_hookd.add(sampler.finish().await);
                    } else {
                        let result = pgbench.run(script.name(), concurrency, SLICE, None).await;
                        totals.spent.pgbench = totals.spent.pgbench + (cluster.cpu() - cpu_before);
                        println!("{label} pgbench {:<16} {}", script.name(), result.line());
                        totals.pgbench.add(result);
                        totals.waits_pgbench.add(sampler.finish().await);
                    }
                }
                // The direct calls beside the first level's rounds, under the
                // same outside load.
                if keys == Keys::New && concurrency == DIRECT_CONCURRENCY {
                    let report = direct
                        .closed_loop(Keys::None, DIRECT_CONCURRENCY, SLICE, MAX_REQUESTS)
                        .await;
                    println!(
                        "{label} direct  {:<16} {}",
                        mix(Keys::None),
                        report.summary_ok(CREATED).line()
                    );
                    direct_total.samples.extend(report.samples);
                    direct_total.elapsed += report.elapsed;
                }
            }
            let summary = totals.hookd.summary_ok(CREATED);
            println!(
                "c={concurrency:<3} all      hookd   {:<16} {}",
                mix(keys),
                summary.line()
            );
            println!(
                "c={concurrency:<3} all      pgbench {:<16} {}",
                script.name(),
                totals.pgbench.line()
            );
            levels.push(Level {
                concurrency,
                keys,
                hookd: summary,
                pgbench: totals.pgbench,
                waits_hookd: totals.waits_hookd,
                waits_pgbench: totals.waits_pgbench,
                spent: totals.spent,
            });
        }
    }
    let direct_summary = direct_total.summary_ok(CREATED);
    println!(
        "\nc={DIRECT_CONCURRENCY:<3} all      direct  {:<16} {}",
        mix(Keys::None),
        direct_summary.line()
    );

    println!(
        "\nsummary: throughput (hookd: {CREATED} answers/s; pgbench: transactions/s, one per \
         request) and ratios"
    );
    println!(
        "{:>11} {:>12} {:>8} {:>10} {:>10} {:>10} {:>12} {:>14}",
        "concurrency",
        "keys",
        "hookd/s",
        "hookd p50",
        "hookd p99",
        "pgbench/s",
        "pgbench p50",
        "hookd/pgbench"
    );
    for level in &levels {
        let rate = level.hookd.throughput();
        let sorted = level.pgbench.sorted_latencies();
        println!(
            "{:>11} {:>12} {:>8.0} {:>10} {:>10} {:>10.0} {:>12} {:>14.2}",
            level.concurrency,
            mix(level.keys),
            rate,
            ms(level.hookd.p50),
            ms(level.hookd.p99),
            level.pgbench.tps(),
            ms(hookd_kit::load::percentile(&sorted, 0.50)),
            rate / level.pgbench.tps().max(1e-9)
        );
    }
    println!(
        "\nwhat the database's sessions wait for (pg_stat_activity sampled every 5 ms; \
         `in transaction, waiting for its client`: between a transaction's statements)"
    );
    for level in &levels {
        let at = format!("c={:<3} {:<12}", level.concurrency, mix(level.keys));
        println!("{at} hookd   {}", level.waits_hookd.line());
        println!("{at} pgbench {}", level.waits_pgbench.line());
    }
    println!(
        "\nthe machine's busy share (CPU seconds of everything measured over the rounds' seconds \
         × {} cores) and CPU per request in µs: for hookd, `hookd serve` / this process (the \
         callers and the upstream) / PostgreSQL; for pgbench, PostgreSQL / pgbench",
        bench::cores()
    );
    println!(
        "{:>11} {:>12} {:>6} {:>24} {:>8} {:>18}",
        "concurrency", "keys", "hookd", "serve / callers / pg", "pgbench", "pg / client"
    );
    for level in &levels {
        let per = |seconds: f64, n: f64| seconds * 1e6 / n.max(1.0);
        let spent = level.spent;
        let (n, np) = (level.hookd.ok as f64, level.pgbench.transactions as f64);
        let beside = spent.beside_hookd;
        println!(
            "{:>11} {:>12} {:>5.0}% {:>24} {:>7.0}% {:>18}",
            level.concurrency,
            mix(level.keys),
            bench::busy(
                spent.serve + beside.total(),
                level.hookd.elapsed.as_secs_f64()
            ),
            format!(
                "{:.0} / {:.0} / {:.0}",
                per(spent.serve, n),
                per(beside.hookd + beside.rest, n),
                per(beside.postgres, n)
            ),
            bench::busy(spent.pgbench.total(), level.pgbench.seconds),
            format!(
                "{:.0} / {:.0}",
                per(spent.pgbench.postgres, np),
                per(spent.pgbench.children, np)
            ),
        );
    }
    let new_16 = levels
        .iter()
        .find(|l| l.keys == Keys::New && l.concurrency == DIRECT_CONCURRENCY)
        .expect("the 16-client level");
    let added = new_16.hookd.p50.saturating_sub(direct_summary.p50);
    println!(
        "\ndirect to upstream ({DIRECT_CONCURRENCY} clients): {:.0}/s, p50 {} p99 {}; \
         through hookd, new keys: p50 {}: hookd adds {} at p50 (target ≤ {})",
        direct_summary.throughput(),
        ms(direct_summary.p50),
        ms(direct_summary.p99),
        ms(new_16.hookd.p50),
        ms(added),
        ms(ADDED_P50_TARGET)
    );
    for level in levels.iter().filter(|l| l.keys == Keys::New) {
        let ratio = level.hookd.throughput() / level.pgbench.tps().max(1e-9);
        println!(
            "c={:<3} hookd / pgbench (new keys) = {ratio:.2} (target ≥ 1.00): {}",
            level.concurrency,
            if ratio >= 1.0 { "met" } else { "NOT met" }
        );
    }
    println!(
        "hookd's added p50 at {DIRECT_CONCURRENCY} clients: {}",
        if added <= ADDED_P50_TARGET {
            "met"
        } else {
            "NOT met"
        }
    );

    // Every 201 of a new key is a completed key; a copy adds none.
    let completed: i64 = db
        .query_one(
            "SELECT count(*) FROM api_idempotency_keys \
             WHERE route = $1 AND state = 'completed' AND idempotency_key NOT LIKE 'key_pgb_%'",
            &[&KEY_ROUTE],
        )
        .await
        .expect("count keys")
        .get(0);
    let not_completed: i64 = db
        .query_one(
            "SELECT count(*) FROM api_idempotency_keys WHERE state <> 'completed'",
            &[],
        )
        .await
        .expect("count keys")
        .get(0);
    println!(
        "\ncheck: {completed} keys completed through the gateway, {not_completed} keys not \
         completed (expected 0)"
    );
    assert_eq!(not_completed, 0, "every key claimed must be completed");
    let elapsed = chrono::Utc::now() - started;
    println!("total time {:.0} s", elapsed.as_seconds_f64());
    pgbench.remove();
    drop(serve);
    upstream_handle.stop(false).await;
    drop(db);
    hookd.stop().await;
}
