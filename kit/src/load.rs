//! A load generator that signs every delivery with hookd's own signing code
//! (`hookd::simulate::sign_delivery`) and sends unique Stripe
//! `payment_intent.succeeded` events to a loopback address only.
//!
//! Two ways to load: a closed loop (N senders, each sends its next delivery when the
//! previous one is answered) measures the throughput hookd sustains; an open loop
//! (deliveries scheduled at a fixed rate whatever the answers, latency counted from
//! the *scheduled* send time) measures the latency a provider sees without the
//! coordinated omission of a closed loop, which stops sending exactly when the
//! server stalls.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use hookd::config::Source;
use hookd::simulate::{Hints, sign_delivery};
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
        let http = client()?;
        Ok(Sender {
            http,
            url: format!("{base}/webhooks/{}", source.name),
            source,
            tag: run_tag(),
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
        outcome_of(request).await
    }
}

/// The load generator's HTTP client: no proxy, no Nagle, a timeout per request.
fn client() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(REQUEST_TIMEOUT)
        .tcp_nodelay(true)
        .build()
        .map_err(|e| e.to_string())
}

/// The time and a random number: unique among runs against the same database.
fn run_tag() -> String {
    let random: u32 = rand::random();
    format!("{}{random:08x}", chrono::Utc::now().format("%H%M%S"))
}

/// Sends the request and reads the whole answer.
async fn outcome_of(request: reqwest::RequestBuilder) -> Outcome {
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
    closed_loop_by(concurrency, duration, max_requests, move |_, _| {
        let sender = sender.clone();
        async move { sender.send_one().await }
    })
    .await
}

/// A closed loop of `concurrency` clients, each making its next `call(client,
/// i)` (`i`: its own count, from 0) when the previous one is answered, for
/// `duration` or `max_requests` calls in all, whichever comes first.
pub async fn closed_loop_by<F, Fut>(
    concurrency: usize,
    duration: Duration,
    max_requests: u64,
    call: F,
) -> Report
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Outcome> + Send + 'static,
{
    let duration = duration.min(MAX_DURATION);
    let max_requests = max_requests.min(MAX_REQUESTS);
    let start = Instant::now();
    let deadline = start + duration;
    let issued = Arc::new(AtomicU64::new(0));
    let call = Arc::new(call);
    let mut tasks = JoinSet::new();
    for client in 0..concurrency.max(1) {
        let call = call.clone();
        let issued = issued.clone();
        tasks.spawn(async move {
            let mut samples = Vec::new();
            let mut i = 0;
            while Instant::now() < deadline && issued.fetch_add(1, Ordering::Relaxed) < max_requests
            {
                let sent = Instant::now();
                let outcome = call(client, i).await;
                samples.push(Sample {
                    due: sent - start,
                    latency: sent.elapsed(),
                    outcome,
                });
                i += 1;
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

/// Which Idempotency-Keys a `KeyedCaller`'s loop sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// No key (upstream called straight).
    None,
    /// A new key every request.
    New,
    /// A new key, then a copy of it (same key, same body) once it is answered,
    /// and so on: every other request repeats a key already answered.
    HalfCopies,
}

/// POSTs of a small JSON order, with an `Authorization` header and an
/// Idempotency-Key, to one loopback URL (the gateway, or its upstream straight).
pub struct KeyedCaller {
    http: reqwest::Client,
    url: String,
    authorization: String,
    /// Makes this caller's keys unique among runs against the same database.
    tag: String,
    runs: AtomicU64,
}

impl KeyedCaller {
    pub fn new(url: &str, authorization: &str) -> Result<Self, String> {
        let url = loopback_base(url)?;
        let http = client()?;
        Ok(KeyedCaller {
            http,
            url,
            authorization: authorization.to_string(),
            tag: run_tag(),
            runs: AtomicU64::new(0),
        })
    }

    /// A closed loop of `concurrency` callers (see `closed_loop_by`), with keys
    /// no earlier loop used.
    pub async fn closed_loop(
        self: &Arc<Self>,
        keys: Keys,
        concurrency: usize,
        duration: Duration,
        max_requests: u64,
    ) -> Report {
        let run = self.runs.fetch_add(1, Ordering::Relaxed);
        let caller = self.clone();
        closed_loop_by(concurrency, duration, max_requests, move |client, i| {
            let caller = caller.clone();
            async move { caller.call(keys, run, client, i).await }
        })
        .await
    }

    /// Request `i` of `client` in loop `run`; a copy (odd `i` with
    /// `HalfCopies`) repeats the key and body of request `i - 1`.
    async fn call(&self, keys: Keys, run: u64, client: usize, i: u64) -> Outcome {
        let n = if keys == Keys::HalfCopies {
            i - i % 2
        } else {
            i
        };
        let key = format!("{}_{run}_{client}_{n}", self.tag);
        let body = format!(r#"{{"amount": 1000, "currency": "EUR", "order": "{key}"}}"#);
        let mut request = self
            .http
            .post(&self.url)
            .header("Authorization", &self.authorization)
            .header("Content-Type", "application/json")
            .body(body);
        if keys != Keys::None {
            request = request.header("Idempotency-Key", key);
        }
        outcome_of(request).await
    }
}

/// Deliveries due at a fixed `rate` per second, sent whether or not earlier ones
/// were answered, for `duration` or until `stop` is set, whichever comes first.
/// Latency is counted from the time each delivery was due.
///
/// A thread of its own keeps the pace with the operating system's sleep (tens of
/// µs late at most on an idle core), not with Tokio's timer: that one wakes on
/// whole milliseconds, so deliveries would leave up to a millisecond after they
/// were due, several at once, and that wait would count as hookd's latency.
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
    let runtime = tokio::runtime::Handle::current();
    let (sent, mut deliveries) = tokio::sync::mpsc::unbounded_channel();
    let start = std::time::Instant::now();
    let pacer = std::thread::Builder::new()
        .name("loadgen-pacer".into())
        .spawn(move || {
            let stopped = || stop.as_ref().is_some_and(|s| s.load(Ordering::Relaxed));
            for i in 0..total {
                let due = start + interval.mul_f64(i as f64);
                if let Some(wait) = due.checked_duration_since(std::time::Instant::now()) {
                    std::thread::sleep(wait);
                }
                if stopped() {
                    break;
                }
                let sender = sender.clone();
                let slots = slots.clone();
                let delivery = runtime.spawn(async move {
                    let _slot = slots.acquire_owned().await.expect("semaphore open");
                    let outcome = sender.send_one().await;
                    Sample {
                        due: due - start,
                        latency: due.elapsed(),
                        outcome,
                    }
                });
                if sent.send(delivery).is_err() {
                    break;
                }
            }
        })
        .expect("pacer thread");
    let mut samples = Vec::new();
    while let Some(delivery) = deliveries.recv().await {
        samples.push(delivery.await.expect("delivery task"));
    }
    pacer.join().expect("pacer");
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
    /// Answers with `ok_status` (200 unless said otherwise).
    pub ok: usize,
    pub ok_status: u16,
    /// Answers other than `ok_status`, by status.
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

    /// p99 of each `step` of a report, to see when latency rose.
    pub fn p99_timeline(&self, step: Duration) -> String {
        p99_timeline(&self.points(), step)
    }

    /// The step (counted from the start, by when deliveries were due) whose
    /// p99 is the highest, and that p99.
    pub fn worst_step(&self, step: Duration) -> (usize, Duration) {
        p99_by_step(&self.points(), step)
            .into_iter()
            .enumerate()
            .max_by_key(|&(_, p99)| p99)
            .unwrap_or_default()
    }

    /// Each delivery's due time and latency.
    fn points(&self) -> Vec<(Duration, Duration)> {
        self.samples.iter().map(|s| (s.due, s.latency)).collect()
    }

    pub fn summary(&self) -> Summary {
        self.summary_ok(200)
    }

    /// The summary of calls whose success is `ok_status` (201 for a create).
    pub fn summary_ok(&self, ok_status: u16) -> Summary {
        let mut summary = Summary {
            requests: self.samples.len(),
            ok_status,
            elapsed: self.elapsed,
            ..Summary::default()
        };
        for sample in &self.samples {
            match &sample.outcome {
                Outcome::Status(status) if *status == ok_status => summary.ok += 1,
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
    /// `ok_status` answers per second.
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
            "{} deliveries in {:.1} s: {} × {} ({:.0}/s)",
            self.requests,
            self.elapsed.as_secs_f64(),
            self.ok,
            self.ok_status,
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

/// The p99 latency (ms) of each `step`, by when each was due: `(due, latency)`
/// pairs, `due` counted from the run's start. Every `step` up to the last due one
/// is listed, an empty one as 0.
pub fn p99_timeline(points: &[(Duration, Duration)], step: Duration) -> String {
    let parts: Vec<String> = p99_by_step(points, step)
        .into_iter()
        .map(|p99| format!("{:.0}", p99.as_secs_f64() * 1000.0))
        .collect();
    parts.join(" ")
}

/// The p99 latency of each `step` of `(due, latency)` points, in order.
fn p99_by_step(points: &[(Duration, Duration)], step: Duration) -> Vec<Duration> {
    let end = points.iter().map(|&(due, _)| due).max().unwrap_or_default();
    let mut p99s = Vec::new();
    let mut from = Duration::ZERO;
    while from <= end {
        let mut window: Vec<Duration> = points
            .iter()
            .filter(|&&(due, _)| due >= from && due < from + step)
            .map(|&(_, latency)| latency)
            .collect();
        window.sort();
        p99s.push(percentile(&window, 0.99));
        from += step;
    }
    p99s
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
