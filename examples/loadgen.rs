//! A signing load generator against a running hookd on this machine:
//!
//! ```sh
//! cargo run --release -- serve &                                       # hookd on 127.0.0.1:8080
//! cargo run --release --example loadgen -- --concurrency 16 --duration 10
//! cargo run --release --example loadgen -- --rate 200 --duration 30
//! ```
//!
//! Every delivery is a new Stripe `payment_intent.succeeded` event (unique event and
//! payment ids), signed with the source's first secret by hookd's own signing code
//! (`hookd::simulate::sign_delivery`), from the same configuration file hookd reads
//! (environment overrides included). `--concurrency N` is a closed loop (N senders,
//! each waits for its answer); `--rate R` an open loop (R deliveries a second
//! whatever the answers, latency counted from when each was due). Loopback targets
//! only, at most 5 minutes and 1,000,000 deliveries; the exit code is non-zero if
//! any delivery was not answered 200.

use hookd_kit::load;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use hookd::config::Settings;
use hookd::providers::Scheme;

#[derive(Debug, Parser)]
#[command(about = "Sends signed, unique Stripe deliveries to a hookd on this machine")]
struct Args {
    /// hookd's base URL; loopback addresses only.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// A source of scheme `stripe` in the configuration.
    #[arg(long, default_value = "stripe")]
    source: String,
    /// The configuration file hookd runs with (for the source's secret).
    #[arg(long, default_value = "hookd.toml")]
    config: PathBuf,
    /// Closed loop: this many senders, each sending when its previous delivery was
    /// answered (the default, with 8).
    #[arg(long, conflicts_with = "rate")]
    concurrency: Option<usize>,
    /// Open loop: this many deliveries per second, whatever the answers.
    #[arg(long)]
    rate: Option<f64>,
    /// Seconds to run (at most 300).
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Stop after this many deliveries (at most 1,000,000).
    #[arg(long, default_value_t = load::MAX_REQUESTS)]
    max_requests: u64,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(message) => {
            eprintln!("loadgen: {message}");
            ExitCode::from(2)
        }
    }
}

/// `Ok(true)` when every delivery was answered 200.
async fn run(args: Args) -> Result<bool, String> {
    let limit = load::MAX_DURATION.as_secs_f64();
    if !(args.duration > 0.0 && args.duration <= limit) {
        return Err(format!(
            "--duration must be more than 0 and at most {limit} seconds"
        ));
    }
    if args.max_requests == 0 || args.max_requests > load::MAX_REQUESTS {
        return Err(format!(
            "--max-requests must be between 1 and {}",
            load::MAX_REQUESTS
        ));
    }
    if let Some(rate) = args.rate
        && !(rate > 0.0 && rate.is_finite() && rate * args.duration <= load::MAX_REQUESTS as f64)
    {
        return Err(format!(
            "--rate must be positive, and rate × duration at most {}",
            load::MAX_REQUESTS
        ));
    }
    let concurrency = args.concurrency.unwrap_or(8);
    if concurrency == 0 || concurrency > 1024 {
        return Err("--concurrency must be between 1 and 1024".into());
    }
    let base = load::loopback_base(&args.url)?;
    let settings = Settings::load(&args.config).map_err(|e| e.to_string())?;
    let source = settings
        .source(&args.source)
        .ok_or_else(|| format!("no source {:?} in {}", args.source, args.config.display()))?;
    if !matches!(source.scheme, Scheme::Stripe) {
        return Err(format!(
            "source {:?} is not of scheme stripe: loadgen sends Stripe events only",
            source.name
        ));
    }
    let sender = Arc::new(load::Sender::new(&base, source.clone())?);
    let duration = Duration::from_secs_f64(args.duration);
    let report = match args.rate {
        Some(rate) => {
            println!(
                "open loop: {rate} deliveries/s for {:.0} s to {}",
                args.duration,
                sender.url()
            );
            let capped = duration.min(Duration::from_secs_f64(args.max_requests as f64 / rate));
            load::open_loop(sender, rate, capped, None).await
        }
        None => {
            println!(
                "closed loop: {concurrency} senders for {:.0} s to {}",
                args.duration,
                sender.url()
            );
            load::closed_loop(sender, concurrency, duration, args.max_requests).await
        }
    };
    let summary = report.summary();
    println!("{}", summary.line());
    if args.rate.is_some() {
        // A tail is a stall or a queue: this says when it happened.
        println!(
            "p99 per second, ms: {}",
            report.p99_timeline(Duration::from_secs(1))
        );
    }
    if summary.requests > 0 && summary.ok == 0 && !summary.errors.is_empty() {
        eprintln!("loadgen: no delivery succeeded; is hookd running at {base}?");
    }
    Ok(summary.all_ok() && summary.requests > 0)
}
