//! hookd in-process for a test: one throwaway cluster per test run, a fresh
//! database per test cloned from a migrated template and dropped afterwards, and
//! an app on a random port with the handlers of the test's choosing.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use hookd::app::{Instance, Parts, Running};
use hookd::config::Settings;
use hookd::dispatch::DispatchStep;
use hookd::embedded_pg::{ClusterOptions, EmbeddedPostgres};
use hookd::handlers::Registry;
use hookd::simulate::{Hints, sign_delivery};
use hookd::store;
use serde_json::Value;
use tokio_postgres::types::ToSql;

use crate::cluster::connect;
use crate::metrics::Exposition;
use crate::settings::shipped_settings;

const TEMPLATE: &str = "hookd_template";

pub struct TestCluster {
    cluster: EmbeddedPostgres,
}

static CLUSTER: OnceLock<TestCluster> = OnceLock::new();
static NEXT_DB: AtomicUsize = AtomicUsize::new(0);

pub fn cluster() -> &'static TestCluster {
    CLUSTER.get_or_init(|| {
        let _ = env_logger::builder().is_test(true).try_init();
        hookd::outbound::install_crypto();
        let dir = crate::cluster::tmp_root().join(format!("pg-{}", std::process::id()));
        let cluster = crate::cluster::throwaway(&dir, ClusterOptions { durable: false });
        let admin = cluster.pg_config("postgres");
        let template = cluster.pg_config(TEMPLATE);
        // The template is built on a runtime of its own: callers may be inside one.
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                store::create_database_if_missing(&admin, TEMPLATE)
                    .await
                    .expect("template database");
                let pool = store::pool(template, store::DbConnector::Plain, 1);
                store::migrate(&pool).await.expect("migrations");
                pool.close();
            });
        })
        .join()
        .expect("template thread");
        TestCluster { cluster }
    })
}

impl TestCluster {
    pub fn config(&self, dbname: &str) -> tokio_postgres::Config {
        self.cluster.pg_config(dbname)
    }

    pub fn connection_string(&self, dbname: &str) -> String {
        self.cluster.connection_string(dbname)
    }

    pub fn postgres(&self) -> &EmbeddedPostgres {
        &self.cluster
    }
}

/// A database of one test's own, dropped when the test ends.
pub struct TestDb {
    pub name: String,
}

impl TestDb {
    pub async fn create() -> TestDb {
        Self::create_from(TEMPLATE).await
    }

    /// A database with nothing in it: no table, no migration applied.
    pub async fn empty() -> TestDb {
        Self::create_from("template0").await
    }

    async fn create_from(template: &str) -> TestDb {
        let cluster = cluster();
        let name = format!(
            "t_{}_{}",
            std::process::id(),
            NEXT_DB.fetch_add(1, Ordering::SeqCst)
        );
        let admin = connect(cluster.config("postgres")).await;
        admin
            .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE {template}"))
            .await
            .expect("create test database");
        TestDb { name }
    }

    pub fn config(&self) -> tokio_postgres::Config {
        cluster().config(&self.name)
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        let admin = cluster().config("postgres");
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                let client = connect(admin).await;
                let _ = client
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .await;
            });
        })
        .join();
    }
}

pub struct TestApp {
    pub base: String,
    /// The admin listener's base URL, when the settings give it one.
    pub admin_base: Option<String>,
    /// The Idempotency-Key gateway's base URL, when the settings turn it on.
    pub gateway_base: Option<String>,
    pub app: Instance,
    pub http: reqwest::Client,
    pub db: Option<std::sync::Arc<TestDb>>,
    db_config: tokio_postgres::Config,
    running: Option<Running>,
    /// The settings it started with (nothing reloads an app in the test process).
    settings: std::sync::Arc<Settings>,
}

pub struct Spawn {
    pub settings: Settings,
    pub registry: Registry,
    pub parts: Parts,
    /// Share another app's database (several instances side by side).
    pub db: Option<std::sync::Arc<TestDb>>,
    /// A database outside the test cluster (e.g. one the test stops and starts).
    pub database: Option<tokio_postgres::Config>,
    /// How the pool connects to `database` (plain, or its TLS).
    pub connector: store::DbConnector,
    /// Where signing certificates are fetched from (a stand-in for PayPal).
    pub certificates: Option<hookd::outbound::Certificates>,
}

impl Spawn {
    /// The retry loop and the forward lanes running as `serve` runs them (no purge).
    pub const LOOPS: Parts = Parts {
        dispatcher: true,
        purge: false,
        activity: true,
    };
}

impl Default for Spawn {
    fn default() -> Self {
        Spawn {
            settings: shipped_settings(),
            registry: Registry::builtin(),
            parts: Parts {
                dispatcher: false,
                purge: false,
                activity: true,
            },
            db: None,
            database: None,
            connector: store::DbConnector::Plain,
            certificates: None,
        }
    }
}

pub async fn spawn_app() -> TestApp {
    spawn(Spawn::default()).await
}

/// An app whose admin pages, API and metrics listen apart, on a port of their own
/// (`admin_base`).
pub async fn spawn_with_admin_listener() -> TestApp {
    let mut settings = shipped_settings();
    settings.admin_listen = Some("127.0.0.1:0".parse().expect("addr"));
    spawn(Spawn {
        settings,
        ..Spawn::default()
    })
    .await
}

pub async fn spawn(options: Spawn) -> TestApp {
    let (db, db_config) = match (options.database, options.db) {
        (Some(config), _) => (None, config),
        (None, Some(db)) => {
            let config = db.config();
            (Some(db), config)
        }
        (None, None) => {
            let db = std::sync::Arc::new(TestDb::create().await);
            let config = db.config();
            (Some(db), config)
        }
    };
    let mut settings = options.settings;
    // Two workers whatever the machine's cores: a request held in one (a slow
    // body, a handler waiting) never holds every other request of a test.
    settings.http_workers = 2;
    let mut app = Instance::new(
        settings,
        store::pool(db_config.clone(), options.connector.clone(), 16),
        options.connector,
        options.registry,
    );
    if let Some(certificates) = options.certificates {
        app = app.with_certificates(certificates);
    }
    let running = app.start(options.parts).expect("start app");
    TestApp {
        settings: app.settings.now(),
        base: format!("http://{}", running.addr),
        admin_base: running.admin_addr.map(|addr| format!("http://{addr}")),
        gateway_base: running.gateway_addr.map(|addr| format!("http://{addr}")),
        app,
        http: reqwest::Client::new(),
        db,
        db_config,
        running: Some(running),
    }
}

/// An HTTP answer, read whole.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Vec<u8>,
}

impl Answer {
    /// Reads a response whole.
    pub async fn read(response: reqwest::Response) -> Answer {
        Answer {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            body: response.bytes().await.expect("body").to_vec(),
        }
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    /// The body as text (a page).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

impl TestApp {
    /// A `DATABASE_URL` for this app's test database.
    pub fn database_url(&self) -> String {
        cluster().connection_string(&self.db.as_ref().expect("a test database").name)
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The public listener's address, for tests that speak raw TCP.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.base
            .trim_start_matches("http://")
            .parse()
            .expect("address")
    }

    /// The row id of the stored event `event_id`.
    pub async fn event_row_id(&self, event_id: &str) -> i64 {
        self.count(
            "SELECT id FROM webhook_events WHERE event_id = $1",
            &[&event_id],
        )
        .await
    }

    /// The status of the stored event `event_id`.
    pub async fn event_status(&self, event_id: &str) -> String {
        self.strings(
            "SELECT status FROM webhook_events WHERE event_id = $1",
            &[&event_id],
        )
        .await
        .remove(0)
    }

    pub async fn stop(&mut self) {
        if let Some(running) = self.running.take() {
            running.stop().await;
        }
    }

    pub async fn post(&self, source: &str, headers: &[(String, String)], body: Vec<u8>) -> Answer {
        let mut request = self.http.post(format!("{}/webhooks/{source}", self.base));
        for (name, value) in headers {
            request = request.header(name, value);
        }
        Answer::read(request.body(body).send().await.expect("request")).await
    }

    pub async fn get(&self, path: &str) -> Answer {
        let url = format!("{}{path}", self.base);
        Answer::read(self.http.get(url).send().await.expect("request")).await
    }

    /// Headers a source's provider would send with `body`, signed now.
    pub fn sign(&self, source: &str, body: &[u8], hints: Hints<'_>) -> Vec<(String, String)> {
        let source = self.settings().source(source).expect("source");
        sign_delivery(source, body, hints, chrono::Utc::now().timestamp())
            .expect("sign")
            .headers
    }

    /// Signs any bytes, with the envelope given (for bodies the signer would refuse).
    pub fn sign_raw(
        &self,
        source: &str,
        body: &[u8],
        event_id: &str,
        event_type: &str,
    ) -> Vec<(String, String)> {
        let source = self.settings().source(source).expect("source");
        let envelope = hookd::signature::Envelope {
            event_id,
            event_type,
            timestamp: chrono::Utc::now().timestamp(),
        };
        hookd::providers::sign(&source.scheme, &source.secrets[0], body, &envelope)
            .expect("sign")
            .headers
    }

    /// The headers and body a source's provider would send for `body`, signed
    /// now (the body changes where the provider signs inside it).
    pub fn sign_body(&self, source: &str, body: &[u8]) -> (Vec<(String, String)>, Vec<u8>) {
        let source = self.settings().source(source).expect("source");
        let signed = sign_delivery(
            source,
            body,
            Hints::default(),
            chrono::Utc::now().timestamp(),
        )
        .expect("sign");
        (signed.headers, signed.body)
    }

    /// Signs and delivers `body` as the source's provider would.
    pub async fn deliver(&self, source: &str, body: &Value) -> Answer {
        let bytes = serde_json::to_vec(body).expect("json");
        let (headers, signed) = self.sign_body(source, &bytes);
        self.post(source, &headers, signed).await
    }

    pub async fn db(&self) -> tokio_postgres::Client {
        connect(self.db_config.clone()).await
    }

    pub async fn query(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Vec<tokio_postgres::Row> {
        self.db().await.query(sql, params).await.expect("query")
    }

    /// Runs one statement (test setup: ageing rows, marking them due, …).
    pub async fn execute(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> u64 {
        self.db().await.execute(sql, params).await.expect("execute")
    }

    /// The first column of every row, as text.
    pub async fn strings(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Vec<String> {
        self.query(sql, params)
            .await
            .iter()
            .map(|r| r.get(0))
            .collect()
    }

    pub async fn count(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> i64 {
        self.db()
            .await
            .query_one(sql, params)
            .await
            .expect("query")
            .get(0)
    }

    /// Makes every failed event and every forward still to go due now, and runs
    /// the retry loop's and each forward lane's steps until nothing is due;
    /// returns how many runs and sends that took.
    pub async fn run_due_retries(&self) -> usize {
        let mut attempts = 0;
        loop {
            self.make_retries_due().await;
            let mut ran = 0;
            match self
                .app
                .dispatcher
                .try_dispatch_due()
                .await
                .expect("dispatch")
            {
                DispatchStep::Attempted { .. } | DispatchStep::StoodDown { .. } => ran += 1,
                DispatchStep::Idle => {}
            }
            ran += self.send_due_forwards().await;
            if ran == 0 {
                return attempts;
            }
            attempts += ran;
        }
    }

    /// Makes every failed event's handler and every forward still to go (not
    /// being sent right now) due now.
    pub async fn make_retries_due(&self) {
        self.execute(
            "UPDATE webhook_events SET next_attempt_at = now()
             WHERE status = 'failed' AND next_attempt_at IS NOT NULL",
            &[],
        )
        .await;
        self.execute(
            "UPDATE event_forwards SET next_attempt_at = now()
             WHERE state = 'pending' AND (lease_until IS NULL OR lease_until <= now())",
            &[],
        )
        .await;
    }

    /// One step of every configured forward's lane; how many sends it made.
    pub async fn send_due_forwards(&self) -> usize {
        let mut sent = 0;
        for forward in &self.app.settings.now().forwards {
            sent += self
                .app
                .dispatcher
                .forwarder()
                .try_send_due(&forward.name)
                .await
                .expect("forward lane");
        }
        sent
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        // Stop accepting at once; the test's runtime is ending anyway.
        if let Some(running) = self.running.take() {
            running.abort();
        }
    }
}

/// A Stripe event body of `type` about payment `pi`.
pub fn stripe_event(id: &str, event_type: &str, object: Value) -> Value {
    serde_json::json!({
        "id": id,
        "object": "event",
        "type": event_type,
        "created": 1_700_000_000,
        "livemode": false,
        "data": { "object": object },
    })
}

/// Polls `check` every 20 ms until it gives `Some`, and fails the test if that
/// takes longer than `within`: a wait on a condition, never a bare sleep.
pub async fn wait_for<T, F, Fut>(what: &str, within: std::time::Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still waiting after {within:?} for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

impl TestApp {
    /// `deliver`, and the answer must be a 200.
    pub async fn deliver_ok(&self, source: &str, body: &Value) -> Answer {
        let answer = self.deliver(source, body).await;
        assert_eq!(
            answer.status,
            200,
            "{source} {}: {}",
            body["id"],
            String::from_utf8_lossy(&answer.body)
        );
        answer
    }

    /// Waits until `sql` (a count) gives `expected`, failing after `within`.
    pub async fn wait_for_count(&self, sql: &str, expected: i64, within: std::time::Duration) {
        wait_for(
            &format!("{sql} to give {expected}"),
            within,
            || async move { (self.count(sql, &[]).await == expected).then_some(()) },
        )
        .await
    }

    /// `/metrics`, parsed as Prometheus reads it.
    pub async fn metrics(&self) -> Exposition {
        let answer = self.get("/metrics").await;
        assert_eq!(answer.status, 200, "/metrics");
        Exposition::parse(&String::from_utf8(answer.body).expect("utf-8 metrics"))
    }

    /// The first scrape (30 s at most) that shows a sample of `name`: the
    /// gauges read from the database are left out of a scrape whose read
    /// missed its limit, as a loaded machine's may.
    pub async fn metrics_showing(&self, name: &str) -> Exposition {
        wait_for(
            &format!("a scrape showing {name}"),
            std::time::Duration::from_secs(30),
            || async {
                let metrics = self.metrics().await;
                metrics
                    .samples
                    .iter()
                    .any(|s| s.name == name)
                    .then_some(metrics)
            },
        )
        .await
    }

    /// Fails unless some deliveries shared a transaction (group commit).
    pub async fn assert_deliveries_shared_transactions(&self) {
        let metrics = self.metrics().await;
        let batches = metrics.value("hookd_ingest_batches_total", &[]);
        let delivered = metrics.value("hookd_ingest_batched_deliveries_total", &[]);
        assert!(
            delivered > batches,
            "deliveries shared transactions: {delivered} in {batches}"
        );
    }
}
