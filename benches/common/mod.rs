//! Shared by the benchmarks and `examples/loadgen.rs`: a private, durable PostgreSQL
//! cluster with hookd running in-process on it, and a load generator that signs every
//! delivery with hookd's own signing code and sends unique Stripe
//! `payment_intent.succeeded` events to a loopback address only.
//!
//! Two ways to load: a closed loop (N senders, each sends its next delivery when the
//! previous one is answered) measures the throughput hookd sustains; an open loop
//! (deliveries scheduled at a fixed rate whatever the answers, latency counted from
//! the *scheduled* send time) measures the latency a provider sees without the
//! coordinated omission of a closed loop, which stops sending exactly when the
//! server stalls.
// Each benchmark and the example use a different part of this module.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use hookd::app::{App, Parts, Running};
use hookd::cli::sign::{Hints, sign_delivery};
use hookd::config::{Settings, Source};
use hookd::embedded_pg::{self, ClusterOptions, EmbeddedPostgres};
use hookd::handlers::Registry;
use hookd::store;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// No run of the load generator may last longer than this…
pub const MAX_DURATION: Duration = Duration::from_secs(300);
/// …or send more deliveries than this.
pub const MAX_REQUESTS: u64 = 1_000_000;
/// An answer slower than this counts as an error.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Open loop: deliveries in flight at once (each its own connection); beyond that a
/// scheduled delivery waits for a free slot, and the wait counts in its latency.
const OPEN_LOOP_MAX_IN_FLIGHT: usize = 512;
/// Pool size hookd uses in production (`store::DEFAULT_POOL_SIZE`).
pub const POOL_SIZE: usize = store::DEFAULT_POOL_SIZE;

// ---------------------------------------------------------------------------
// The cluster and hookd in-process

/// A private cluster for one benchmark run, under the target folder, with the
/// production settings of hookd's embedded cluster (fsync and synchronous commit on).
/// A watcher process stops it and deletes its folder when this process exits.
pub struct BenchCluster {
    pg: EmbeddedPostgres,
}

impl BenchCluster {
    pub fn start(name: &str) -> Self {
        let root = option_env!("CARGO_TARGET_TMPDIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tmp"));
        let dir = root.join(format!("bench-{name}-{}", std::process::id()));
        let mut pg = EmbeddedPostgres::start(&dir, ClusterOptions { durable: true })
            .unwrap_or_else(|e| panic!("benchmark cluster in {}: {e}", dir.display()));
        pg.remove_when_process_exits(std::process::id())
            .expect("cluster watcher");
        BenchCluster { pg }
    }

    /// The folder holding the cluster's Unix socket (`-h` for libpq tools).
    /// A `DATABASE_URL` for hookd's database on this cluster.
    pub fn connection_string(&self) -> String {
        self.pg.connection_string(embedded_pg::DATABASE)
    }

    pub fn socket_dir(&self) -> &Path {
        self.pg.dir()
    }

    pub fn config(&self, dbname: &str) -> tokio_postgres::Config {
        self.pg.pg_config(dbname)
    }

    pub fn database(&self) -> &'static str {
        embedded_pg::DATABASE
    }

    pub fn user(&self) -> &'static str {
        embedded_pg::USER
    }

    /// A plain connection to hookd's database (for filling and checking).
    pub async fn connect(&self) -> tokio_postgres::Client {
        let (client, connection) = self
            .config(embedded_pg::DATABASE)
            .connect(tokio_postgres::NoTls)
            .await
            .expect("connect to the benchmark database");
        tokio::spawn(connection);
        client
    }
}

/// The shipped `hookd.toml` (without environment overrides), listening on a free
/// loopback port.
pub fn shipped_settings() -> Settings {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("hookd.toml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut settings = Settings::from_toml("hookd.toml", &text, &Default::default())
        .unwrap_or_else(|e| panic!("shipped hookd.toml: {e}"));
    settings.listen = "127.0.0.1:0".parse().expect("loopback address");
    settings
}

/// hookd running in this process against the bench cluster: HTTP only (no
/// dispatcher, no purge loop), one HTTP worker per core as in production.
pub struct Hookd {
    pub app: App,
    pub addr: SocketAddr,
    running: Option<Running>,
    /// hookd's own Tokio runtime (threads `hookd-rt`), apart from the load
    /// generator's, as in `hookd serve`: its committers and loops never wait
    /// behind senders, and its CPU is counted as hookd's.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Hookd {
    /// Creates and migrates the database, then starts the server.
    pub async fn start(cluster: &BenchCluster) -> Self {
        store::create_database_if_missing(&cluster.config("postgres"), cluster.database())
            .await
            .expect("create the benchmark database");
        let pool = store::pool(
            cluster.config(cluster.database()),
            store::DbConnector::Plain,
            POOL_SIZE,
        );
        store::migrate(&pool).await.expect("migrations");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("hookd-rt")
            .enable_all()
            .build()
            .expect("hookd's runtime");
        let (app, running) = runtime
            .spawn(async move {
                let app = App::new(shipped_settings(), pool, Registry::builtin());
                let running = app
                    .start(Parts {
                        dispatcher: false,
                        purge: false,
                        http_workers: None,
                    })
                    .expect("start hookd");
                (app, running)
            })
            .await
            .expect("hookd started");
        Hookd {
            app,
            addr: running.addr,
            running: Some(running),
            runtime: Some(runtime),
        }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Runs the real `hookd serve` binary (release) on the same cluster, loads it
    /// with `concurrency` senders for `duration`, and reports its peak resident
    /// memory (VmHWM, in KiB) with the load's report.
    pub async fn serve_peak_rss(
        &self,
        binary: &Path,
        cluster: &BenchCluster,
        concurrency: usize,
        duration: Duration,
    ) -> (u64, Report) {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let config = cluster.socket_dir().with_extension("serve.toml");
        let shipped =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("hookd.toml"))
                .expect("hookd.toml");
        std::fs::write(
            &config,
            shipped.replace(
                "listen = \"127.0.0.1:8080\"",
                &format!("listen = \"127.0.0.1:{port}\""),
            ),
        )
        .expect("config");
        let mut child = tokio::process::Command::new(binary)
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .env("DATABASE_URL", cluster.connection_string())
            .env("RUST_LOG", "warn")
            .kill_on_drop(true)
            .spawn()
            .expect("hookd serve");
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !matches!(http.get(format!("{base}/readyz")).send().await, Ok(r) if r.status() == 200)
        {
            assert!(
                Instant::now() < deadline,
                "hookd serve did not become ready"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let source = self.app.settings.source("stripe").expect("stripe").clone();
        let sender = Arc::new(Sender::new(&base, source).expect("sender"));
        let report = closed_loop(sender, concurrency, duration, MAX_REQUESTS).await;
        let pid = child.id().expect("pid");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        let peak = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM");
        let _ = child.kill().await;
        let _ = std::fs::remove_file(&config);
        (peak, report)
    }

    /// A load generator for one of hookd's configured sources.
    pub fn sender(&self, source: &str) -> Sender {
        let source = self
            .app
            .settings
            .source(source)
            .unwrap_or_else(|| panic!("no source {source:?} in hookd.toml"))
            .clone();
        Sender::new(&self.base_url(), source).expect("sender")
    }

    pub async fn stop(mut self) {
        if let Some(running) = self.running.take() {
            running.stop().await;
        }
        self.app.pool.close();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for Hookd {
    fn drop(&mut self) {
        // A runtime may not be dropped (blocking) inside the benchmark's own.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

// ---------------------------------------------------------------------------
// Deliveries

/// A realistic Stripe `payment_intent.succeeded` event, compact: the shape of
/// `fixtures/stripe/01_payment_intent.succeeded.json`, with placeholders `@EVT@` (event
/// id), `@PI@` (payment intent id) and `@CREATED@` (Unix time).
pub const STRIPE_PAYMENT_SUCCEEDED: &str = concat!(
    r#"{"id":"@EVT@","object":"event","api_version":"2024-06-20","created":@CREATED@,"#,
    r#""data":{"object":{"id":"@PI@","object":"payment_intent","amount":2000,"#,
    r#""amount_capturable":0,"amount_details":{"tip":{}},"amount_received":2000,"#,
    r#""application":null,"application_fee_amount":null,"#,
    r#""automatic_payment_methods":null,"canceled_at":null,"cancellation_reason":null,"#,
    r#""capture_method":"automatic_async","#,
    r#""client_secret":"@PI@_secret_b9Rq0aNz4xLmVd8sQ2kWm1","#,
    r#""confirmation_method":"automatic","created":@CREATED@,"currency":"usd","#,
    r#""customer":"cus_QhT4nW8xY2kLpR","description":"Order ord_1001","invoice":null,"#,
    r#""last_payment_error":null,"latest_charge":"ch_3PqA1cHkD4oWb9Rq0aT7vB2s","#,
    r#""livemode":false,"metadata":{"order_id":"ord_1001"},"next_action":null,"#,
    r#""on_behalf_of":null,"payment_method":"pm_1PqA1bHkD4oWb9RqXy3Zt8Km","#,
    r#""payment_method_configuration_details":null,"#,
    r#""payment_method_options":{"card":{"installments":null,"mandate_options":null,"#,
    r#""network":null,"request_three_d_secure":"automatic"}},"#,
    r#""payment_method_types":["card"],"processing":null,"receipt_email":null,"#,
    r#""review":null,"setup_future_usage":null,"shipping":null,"source":null,"#,
    r#""statement_descriptor":null,"statement_descriptor_suffix":null,"#,
    r#""status":"succeeded","transfer_data":null,"transfer_group":null}},"#,
    r#""livemode":false,"pending_webhooks":1,"request":{"id":"req_Zb3kT9qLm2VxWp","#,
    r#""idempotency_key":null},"type":"payment_intent.succeeded"}"#,
);

/// The template above with its ids and time filled in. Ids must be plain
/// identifiers (letters, digits, `_`): they are spliced into JSON strings.
pub fn stripe_payment_succeeded(event_id: &str, payment_id: &str, created: i64) -> String {
    STRIPE_PAYMENT_SUCCEEDED
        .replace("@EVT@", event_id)
        .replace("@PI@", payment_id)
        .replace("@CREATED@", &created.to_string())
}

/// Accepts `http://` URLs whose host is a loopback address (or `localhost`) only.
pub fn loopback_base(url: &str) -> Result<String, String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("{url}: {e}"))?;
    if parsed.scheme() != "http" {
        return Err(format!("{url}: only http:// is supported"));
    }
    let host = parsed.host_str().unwrap_or_default();
    let ip = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = match ip.parse::<IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => host.eq_ignore_ascii_case("localhost"),
    };
    if !loopback {
        return Err(format!(
            "{url}: refusing to send load anywhere but this machine (127.0.0.0/8, [::1], localhost)"
        ));
    }
    Ok(url.trim_end_matches('/').to_string())
}

/// How one delivery ended: the HTTP status, or why there was none.
#[derive(Debug, Clone)]
pub enum Outcome {
    Status(u16),
    Error(String),
}

/// Sends unique, signed deliveries to `/webhooks/{source}` of one hookd.
pub struct Sender {
    http: reqwest::Client,
    url: String,
    source: Source,
    /// Makes this run's event ids unique among runs against the same database.
    tag: String,
    next: AtomicU64,
}

impl Sender {
    pub fn new(base: &str, source: Source) -> Result<Self, String> {
        let base = loopback_base(base)?;
        hookd::outbound::install_crypto();
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(REQUEST_TIMEOUT)
            .tcp_nodelay(true)
            .build()
            .map_err(|e| e.to_string())?;
        let random: u32 = rand::random();
        Ok(Sender {
            http,
            url: format!("{base}/webhooks/{}", source.name),
            source,
            tag: format!("{}{random:08x}", chrono::Utc::now().format("%H%M%S")),
            next: AtomicU64::new(0),
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The prefix of every event id this sender uses (for checking the database).
    pub fn event_id_prefix(&self) -> String {
        format!("evt_bench_{}_", self.tag)
    }

    /// Builds the next unique event, signs it as Stripe would now, sends it and
    /// reads the whole answer.
    pub async fn send_one(&self) -> Outcome {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let now = chrono::Utc::now().timestamp();
        let event_id = format!("{}{n}", self.event_id_prefix());
        let payment_id = format!("pi_bench_{}_{n}", self.tag);
        let body = stripe_payment_succeeded(&event_id, &payment_id, now).into_bytes();
        let signed = match sign_delivery(&self.source, &body, Hints::default(), now) {
            Ok(signed) => signed,
            Err(e) => return Outcome::Error(format!("signing: {e}")),
        };
        let mut request = self.http.post(&self.url).body(body);
        for (name, value) in &signed.headers {
            request = request.header(name, value);
        }
        match request.send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                match response.bytes().await {
                    Ok(_) => Outcome::Status(status),
                    Err(e) => Outcome::Error(describe_error(&e)),
                }
            }
            Err(e) => Outcome::Error(describe_error(&e)),
        }
    }
}

fn describe_error(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        "timeout".into()
    } else if error.is_connect() {
        "connect".into()
    } else {
        let mut text = error.to_string();
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            text = format!("{text}: {cause}");
            source = cause.source();
        }
        text
    }
}

// ---------------------------------------------------------------------------
// Load

/// One delivery: when it was due (from the run's start), how long it took from then
/// until the whole answer was read, and how it ended.
#[derive(Debug, Clone)]
pub struct Sample {
    pub due: Duration,
    pub latency: Duration,
    pub outcome: Outcome,
}

/// N senders, each sending its next delivery when the previous one is answered,
/// for `duration` or `max_requests` deliveries, whichever comes first.
pub async fn closed_loop(
    sender: Arc<Sender>,
    concurrency: usize,
    duration: Duration,
    max_requests: u64,
) -> Report {
    let duration = duration.min(MAX_DURATION);
    let max_requests = max_requests.min(MAX_REQUESTS);
    let start = Instant::now();
    let deadline = start + duration;
    let issued = Arc::new(AtomicU64::new(0));
    let mut tasks = JoinSet::new();
    for _ in 0..concurrency.max(1) {
        let sender = sender.clone();
        let issued = issued.clone();
        tasks.spawn(async move {
            let mut samples = Vec::new();
            while Instant::now() < deadline && issued.fetch_add(1, Ordering::Relaxed) < max_requests
            {
                let sent = Instant::now();
                let outcome = sender.send_one().await;
                samples.push(Sample {
                    due: sent - start,
                    latency: sent.elapsed(),
                    outcome,
                });
            }
            samples
        });
    }
    let mut samples = Vec::new();
    while let Some(done) = tasks.join_next().await {
        samples.extend(done.expect("sender task"));
    }
    Report::new(samples, start.elapsed())
}

/// Deliveries due at a fixed `rate` per second, sent whether or not earlier ones
/// were answered, for `duration` or until `stop` is set, whichever comes first.
/// Latency is counted from the time each delivery was due.
pub async fn open_loop(
    sender: Arc<Sender>,
    rate: f64,
    duration: Duration,
    stop: Option<Arc<AtomicBool>>,
) -> Report {
    assert!(rate > 0.0 && rate.is_finite(), "rate must be positive");
    let duration = duration.min(MAX_DURATION);
    let total = ((rate * duration.as_secs_f64()).ceil() as u64).min(MAX_REQUESTS);
    let interval = Duration::from_secs_f64(1.0 / rate);
    let slots = Arc::new(Semaphore::new(OPEN_LOOP_MAX_IN_FLIGHT));
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    let mut samples = Vec::new();
    for i in 0..total {
        if stop.as_ref().is_some_and(|s| s.load(Ordering::Relaxed)) {
            break;
        }
        let due = start + interval.mul_f64(i as f64);
        tokio::time::sleep_until(due).await;
        let sender = sender.clone();
        let slots = slots.clone();
        tasks.spawn(async move {
            let _slot = slots.acquire_owned().await.expect("semaphore open");
            let outcome = sender.send_one().await;
            Sample {
                due: due - start,
                latency: due.elapsed(),
                outcome,
            }
        });
        // Gather finished deliveries as we go so the set stays small.
        while let Some(done) = tasks.try_join_next() {
            samples.push(done.expect("delivery task"));
        }
    }
    while let Some(done) = tasks.join_next().await {
        samples.push(done.expect("delivery task"));
    }
    Report::new(samples, start.elapsed())
}

/// What a load run measured.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub samples: Vec<Sample>,
    pub elapsed: Duration,
}

/// Percentiles and counts of a report.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub requests: usize,
    pub ok: usize,
    /// Answers other than 200, by status.
    pub other_statuses: BTreeMap<u16, usize>,
    /// Deliveries without an answer, by reason.
    pub errors: BTreeMap<String, usize>,
    pub elapsed: Duration,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

impl Report {
    fn new(mut samples: Vec<Sample>, elapsed: Duration) -> Self {
        samples.sort_by_key(|s| s.due);
        Report { samples, elapsed }
    }

    /// The deliveries due within `[from, to)` of the run's start.
    pub fn window(&self, from: Duration, to: Duration) -> Report {
        Report {
            samples: self
                .samples
                .iter()
                .filter(|s| s.due >= from && s.due < to)
                .cloned()
                .collect(),
            elapsed: to.saturating_sub(from),
        }
    }

    pub fn summary(&self) -> Summary {
        let mut summary = Summary {
            requests: self.samples.len(),
            elapsed: self.elapsed,
            ..Summary::default()
        };
        for sample in &self.samples {
            match &sample.outcome {
                Outcome::Status(200) => summary.ok += 1,
                Outcome::Status(status) => *summary.other_statuses.entry(*status).or_default() += 1,
                Outcome::Error(reason) => *summary.errors.entry(reason.clone()).or_default() += 1,
            }
        }
        // Every delivery counts, answered or not: leaving out the failures would
        // flatter the tail.
        let mut latencies: Vec<Duration> = self.samples.iter().map(|s| s.latency).collect();
        latencies.sort();
        summary.p50 = percentile(&latencies, 0.50);
        summary.p99 = percentile(&latencies, 0.99);
        summary.max = latencies.last().copied().unwrap_or_default();
        summary
    }
}

impl Summary {
    /// 200 answers per second.
    pub fn throughput(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.ok as f64 / secs
        } else {
            0.0
        }
    }

    pub fn all_ok(&self) -> bool {
        self.ok == self.requests
    }

    /// One line: counts, rate, latency.
    pub fn line(&self) -> String {
        let mut text = format!(
            "{} deliveries in {:.1} s: {} × 200 ({:.0}/s)",
            self.requests,
            self.elapsed.as_secs_f64(),
            self.ok,
            self.throughput()
        );
        for (status, n) in &self.other_statuses {
            text.push_str(&format!(", {n} × {status}"));
        }
        for (reason, n) in &self.errors {
            text.push_str(&format!(", {n} × error ({reason})"));
        }
        text.push_str(&format!(
            "; latency p50 {} p99 {} max {}",
            ms(self.p50),
            ms(self.p99),
            ms(self.max)
        ));
        text
    }
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// A multi-threaded runtime for a benchmark's `main`. Two worker threads: hookd's
/// HTTP workers and PostgreSQL share the same two cores.
/// What every benchmark starts with: its cluster, hookd on it, a Stripe sender,
/// a database connection and the server's version.
pub struct Setup {
    pub cluster: BenchCluster,
    pub hookd: Hookd,
    pub sender: std::sync::Arc<Sender>,
    pub db: tokio_postgres::Client,
    pub server_version: String,
}

pub async fn setup(name: &'static str) -> Setup {
    let cluster = tokio::task::spawn_blocking(move || BenchCluster::start(name))
        .await
        .expect("cluster thread");
    let hookd = Hookd::start(&cluster).await;
    let sender = std::sync::Arc::new(hookd.sender("stripe"));
    let db = cluster.connect().await;
    let server_version: String = db
        .query_one("SHOW server_version", &[])
        .await
        .expect("server version")
        .get(0);
    Setup {
        cluster,
        hookd,
        sender,
        db,
        server_version,
    }
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Where the PostgreSQL client programs are: next to `initdb` on PATH (symlinks
/// resolved), else the newest `/usr/lib/postgresql/*/bin` — as hookd finds them.
pub fn postgres_bin(program: &str) -> PathBuf {
    embedded_pg::binaries::program(program)
        .unwrap_or_else(|| panic!("no {program} next to initdb (PATH or /usr/lib/postgresql)"))
}

/// A short description of the machine for the printed header.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cores} cores ({cpu})")
}

// ---------------------------------------------------------------------------
// CPU accounting

/// Linux reports CPU time in clock ticks of 1/100 s (USER_HZ) on every platform
/// hookd runs on.
const TICKS_PER_SECOND: f64 = 100.0;

/// Cumulative CPU seconds, by who spent them. On a shared machine the CPU a
/// delivery costs is steadier than the rate of deliveries.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cpu {
    /// hookd's HTTP worker threads (request handling, signature, JSON, the
    /// PostgreSQL client protocol of its pool).
    pub hookd: f64,
    /// The rest of this process: the load generator and the main runtime.
    pub rest: f64,
    /// Child processes that have been waited for (pgbench).
    pub children: f64,
    /// The benchmark cluster: postmaster, its backends and background workers.
    pub postgres: f64,
}

impl std::ops::Add for Cpu {
    type Output = Cpu;
    fn add(self, o: Cpu) -> Cpu {
        Cpu {
            hookd: self.hookd + o.hookd,
            rest: self.rest + o.rest,
            children: self.children + o.children,
            postgres: self.postgres + o.postgres,
        }
    }
}

impl std::ops::Sub for Cpu {
    type Output = Cpu;
    fn sub(self, o: Cpu) -> Cpu {
        Cpu {
            hookd: self.hookd - o.hookd,
            rest: self.rest - o.rest,
            children: self.children - o.children,
            postgres: self.postgres - o.postgres,
        }
    }
}

/// `(comm, fields after the comm)` of a `/proc/.../stat` file.
fn proc_stat(path: &Path) -> Option<(String, Vec<u64>)> {
    let text = std::fs::read_to_string(path).ok()?;
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    // Fields from the 3rd (state) on; the state itself is not a number.
    let fields = text
        .get(close + 1..)?
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    Some((comm, fields))
}

/// utime + stime (own), cutime + cstime (waited-for children), in seconds. Indexes
/// are `man 5 proc` field numbers minus 4.
fn own_and_children(fields: &[u64]) -> (f64, f64) {
    let at = |i: usize| fields.get(i).copied().unwrap_or(0) as f64 / TICKS_PER_SECOND;
    (at(10) + at(11), at(12) + at(13))
}

impl BenchCluster {
    /// CPU seconds spent so far by this process (split by thread name) and by the
    /// cluster.
    pub fn cpu(&self) -> Cpu {
        let mut cpu = Cpu::default();
        if let Some((_, fields)) = proc_stat(Path::new("/proc/self/stat")) {
            let (own, children) = own_and_children(&fields);
            cpu.rest = own;
            cpu.children = children;
        }
        for task in std::fs::read_dir("/proc/self/task").into_iter().flatten() {
            let Ok(task) = task else { continue };
            if let Some((comm, fields)) = proc_stat(&task.path().join("stat"))
                && (comm.starts_with("actix") || comm.starts_with("hookd-rt"))
            {
                cpu.hookd += own_and_children(&fields).0;
            }
        }
        cpu.rest -= cpu.hookd;
        let pid_file = self.pg.dir().join("data/postmaster.pid");
        let postmaster: Option<u64> = std::fs::read_to_string(pid_file)
            .ok()
            .and_then(|t| t.lines().next().and_then(|l| l.trim().parse().ok()));
        if let Some(postmaster) = postmaster {
            if let Some((_, fields)) = proc_stat(&PathBuf::from(format!("/proc/{postmaster}/stat")))
            {
                let (own, children) = own_and_children(&fields);
                cpu.postgres += own + children;
            }
            for entry in std::fs::read_dir("/proc").into_iter().flatten() {
                let Ok(entry) = entry else { continue };
                if let Some((_, fields)) = proc_stat(&entry.path().join("stat"))
                    && fields.first() == Some(&postmaster)
                {
                    cpu.postgres += own_and_children(&fields).0;
                }
            }
        }
        cpu
    }

    /// Names of this process's threads, for checking what `Cpu::hookd` counts.
    pub fn thread_names() -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir("/proc/self/task")
            .into_iter()
            .flatten()
            .filter_map(|t| proc_stat(&t.ok()?.path().join("stat")).map(|(comm, _)| comm))
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

// ---------------------------------------------------------------------------
// Bulk fills

/// The secondary indexes of `tables` (name, definition), dropped: bulk loading as
/// PostgreSQL's manual advises. `rebuild_indexes` puts them back from their own
/// definitions, the migrations'.
pub async fn drop_secondary_indexes(
    db: &tokio_postgres::Client,
    tables: &[&str],
) -> Vec<(String, String)> {
    let tables: Vec<String> = tables.iter().map(|t| t.to_string()).collect();
    let indexes: Vec<(String, String)> = db
        .query(
            "SELECT indexname, indexdef FROM pg_indexes \
             WHERE schemaname = 'public' AND tablename = ANY($1) \
               AND indexname NOT IN (SELECT conname FROM pg_constraint)",
            &[&tables],
        )
        .await
        .expect("list indexes")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    for (name, _) in &indexes {
        db.batch_execute(&format!(
            "DROP INDEX {}",
            hookd::store::quote_identifier(name)
        ))
        .await
        .expect("drop index for the fill");
    }
    indexes
}

/// Recreates the indexes `drop_secondary_indexes` dropped; says how long it took.
pub async fn rebuild_indexes(db: &tokio_postgres::Client, indexes: &[(String, String)]) -> String {
    let started = Instant::now();
    db.batch_execute("SET maintenance_work_mem = '256MB'")
        .await
        .expect("maintenance_work_mem");
    for (_, definition) in indexes {
        db.batch_execute(definition)
            .await
            .unwrap_or_else(|e| panic!("{definition}: {e}"));
    }
    format!(
        "{} indexes rebuilt {:.1} s",
        indexes.len(),
        started.elapsed().as_secs_f64()
    )
}

/// VACUUM ANALYZE and a checkpoint, so measurements start from a settled cluster;
/// says how long each took.
pub async fn settle(db: &tokio_postgres::Client) -> String {
    let mut stages = Vec::new();
    for command in ["VACUUM ANALYZE", "CHECKPOINT"] {
        let started = Instant::now();
        db.batch_execute(command)
            .await
            .unwrap_or_else(|e| panic!("{command}: {e}"));
        stages.push(format!(
            "{command} {:.1} s",
            started.elapsed().as_secs_f64()
        ));
    }
    stages.join(", ")
}

/// Runs `fill` over rows `1..=total` in `chunks` parallel ranges (one connection
/// each), for set-based fills that keep both cores busy.
pub async fn fill_in_chunks<F, Fut>(cluster: &BenchCluster, total: i64, chunks: i64, fill: F)
where
    F: Fn(tokio_postgres::Client, i64, i64) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let chunk = total / chunks;
    let mut tasks = Vec::new();
    for i in 0..chunks {
        let first = i * chunk + 1;
        let last = if i + 1 == chunks {
            total
        } else {
            first + chunk - 1
        };
        tasks.push(tokio::spawn(fill(cluster.connect().await, first, last)));
    }
    for task in tasks {
        task.await.expect("fill task");
    }
}
