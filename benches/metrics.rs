//! `cargo bench --bench metrics`: what one delivery's metrics cost (its answer,
//! its latency, its event's status, its handler's time and its batch), counted
//! by one thread and then by two at once on the same series, as the HTTP workers
//! and committers of one instance do. Before the atomics, every one of these calls
//! took the same mutex and allocated its label strings.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hookd::metrics::Metrics;
use hookd::store::events::EventStatus;

const RUN: Duration = Duration::from_secs(2);

/// The calls one processed Stripe delivery makes.
fn count_one_delivery(metrics: &Metrics) {
    let took = black_box(Duration::from_micros(1200));
    metrics.delivery(black_box("stripe"), "processed");
    metrics.delivery_duration(black_box("stripe"), took);
    metrics.event(black_box(Some("payment_succeeded")), EventStatus::Processed);
    metrics.handler_duration(black_box("payment_succeeded"), took);
    metrics.ingest_batch(1);
}

fn main() {
    let metrics = Arc::new(Metrics::new(&hookd_kit::settings::shipped_settings()));
    for threads in [1, 2] {
        let started = Instant::now();
        let counters: Vec<_> = (0..threads)
            .map(|_| {
                let metrics = metrics.clone();
                std::thread::spawn(move || {
                    let mut done: u64 = 0;
                    while started.elapsed() < RUN {
                        for _ in 0..1000 {
                            count_one_delivery(&metrics);
                        }
                        done += 1000;
                    }
                    done
                })
            })
            .collect();
        let done: u64 = counters
            .into_iter()
            .map(|t| t.join().expect("counting thread"))
            .sum();
        let per_second = done as f64 / started.elapsed().as_secs_f64();
        println!(
            "{threads} thread(s): {per_second:>11.0} deliveries' metrics/s ({:.0} ns each per thread)",
            1e9 * f64::from(threads) / per_second
        );
    }
}
