//! `cargo bench --bench pooler`: hookd's ingest rate through PgBouncer in
//! transaction mode (`pgbouncer=true`: statements sent unnamed, parsed and
//! planned at each run) against the same binary connected straight to the same
//! cluster (statements prepared once per connection), in alternating rounds.
//!
//! Both are the real `hookd serve` (release) with the shipped `hookd.toml`,
//! loaded by a closed loop of unique signed Stripe deliveries. The figure that
//! means something on a noisy machine is the ratio pooled / direct.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hookd_kit::bench::{self, Serve};
use hookd_kit::load::{MAX_REQUESTS, Report, closed_loop};
use hookd_kit::pooler::{self, PgBouncer};

const CONCURRENCIES: [usize; 2] = [16, 64];
const WARM_UP: Duration = Duration::from_secs(3);
const ROUNDS: usize = 2;
const SLICE: Duration = Duration::from_secs(5);

fn main() {
    bench::main("pooler", "pooler", run);
}

async fn run(setup: bench::Setup) {
    let (cluster, hookd, _sender, _db, _started) = setup.into_parts();
    if pooler::program().is_none() {
        println!("pgbouncer is not installed (Debian package pgbouncer): nothing to measure");
        return;
    }
    let binary = Path::new(env!("CARGO_BIN_EXE_hookd"));
    let bouncer = PgBouncer::start(cluster.postgres(), "bench");
    let pooled_url = bouncer.url(cluster.database(), true);
    let direct = Serve::start(binary, &cluster, &cluster.connection_string(), "direct").await;
    let pooled = Serve::start(binary, &cluster, &pooled_url, "pooled").await;
    println!(
        "PgBouncer 1.x, pool_mode = transaction, default_pool_size = {}; hookd's pool of \
         {} connections on each side; {ROUNDS} rounds of {} s per side and concurrency, \
         order alternating\n",
        pooler::SERVER_CONNECTIONS,
        hookd::store::DEFAULT_POOL_SIZE,
        SLICE.as_secs()
    );
    let senders = [
        ("direct", Arc::new(hookd.sender_to(&direct.base, "stripe"))),
        (
            "pgbouncer",
            Arc::new(hookd.sender_to(&pooled.base, "stripe")),
        ),
    ];
    for (name, sender) in &senders {
        let warm = closed_loop(sender.clone(), CONCURRENCIES[0], WARM_UP, MAX_REQUESTS).await;
        println!("warm-up   {name:<9} {}", warm.summary().line());
    }
    for concurrency in CONCURRENCIES {
        println!();
        let mut totals = [Report::default(), Report::default()];
        for round in 0..ROUNDS {
            let mut order = [0, 1];
            if round % 2 == 1 {
                order.reverse();
            }
            for side in order {
                let (name, sender) = &senders[side];
                let report = closed_loop(sender.clone(), concurrency, SLICE, MAX_REQUESTS).await;
                println!(
                    "c={concurrency:<3} round {} {name:<9} {}",
                    round + 1,
                    report.summary().line()
                );
                totals[side].samples.extend(report.samples);
                totals[side].elapsed += report.elapsed;
            }
        }
        let rate = |r: &Report| r.summary().ok as f64 / r.elapsed.as_secs_f64().max(1e-9);
        let (direct_rate, pooled_rate) = (rate(&totals[0]), rate(&totals[1]));
        println!(
            "c={concurrency:<3} direct {direct_rate:.0}/s, through pgbouncer {pooled_rate:.0}/s: \
             pooled / direct = {:.2}",
            pooled_rate / direct_rate.max(1e-9)
        );
    }
    drop((direct, pooled, bouncer));
    hookd.stop().await;
}
