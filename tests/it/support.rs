//! Test harness: one throwaway PostgreSQL cluster per test run (the same embedded
//! mechanism `hookd serve` uses), a fresh database per test cloned from a migrated
//! template and dropped afterwards, and an app on a random port.
// Shared helpers: not every test module uses every one.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use hookd::app::{App, Parts, Running};
use hookd::cli::sign::{Hints, sign_delivery};
use hookd::config::Settings;
use hookd::dispatch::DispatchStep;
use hookd::embedded_pg::{ClusterOptions, EmbeddedPostgres};
use hookd::handlers::Registry;
use hookd::store;
use serde_json::Value;
use tokio_postgres::NoTls;
use tokio_postgres::types::ToSql;

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
        let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let dir = root.join(format!("pg-{}", std::process::id()));
        let mut cluster = EmbeddedPostgres::start(&dir, ClusterOptions { durable: false })
            .unwrap_or_else(|e| panic!("test cluster: {e}"));
        cluster
            .remove_when_process_exits(std::process::id())
            .expect("cluster watcher");
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
}

/// A database of one test's own, dropped when the test ends.
pub struct TestDb {
    pub name: String,
}

impl TestDb {
    pub async fn create() -> TestDb {
        let cluster = cluster();
        let name = format!(
            "t_{}_{}",
            std::process::id(),
            NEXT_DB.fetch_add(1, Ordering::SeqCst)
        );
        let admin = connect(cluster.config("postgres")).await;
        admin
            .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE {TEMPLATE}"))
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

pub async fn connect(config: tokio_postgres::Config) -> tokio_postgres::Client {
    let (client, connection) = config.connect(NoTls).await.expect("connect");
    tokio::spawn(connection);
    client
}

/// Runs the real `hookd` binary from the repository folder with the shipped
/// configuration, against `database` (a `DATABASE_URL`), or none.
pub async fn run_hookd(args: &[&str], database: Option<String>) -> std::process::Output {
    let env: Vec<(&str, String)> = database
        .into_iter()
        .map(|url| ("DATABASE_URL", url))
        .collect();
    run_hookd_with(args, &env).await
}

/// `run_hookd` with environment variables of the test's choosing.
pub async fn run_hookd_with(args: &[&str], env: &[(&str, String)]) -> std::process::Output {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    tokio::task::spawn_blocking(move || {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_hookd"));
        command
            .args(&args)
            .args([
                "--config",
                concat!(env!("CARGO_MANIFEST_DIR"), "/hookd.toml"),
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env_remove("DATABASE_URL")
            .env("RUST_LOG", "warn")
            .envs(env);
        command.output().expect("run hookd")
    })
    .await
    .expect("join")
}

/// The shipped hookd.toml, listening on a random port.
pub fn test_settings() -> Settings {
    let text = include_str!("../../hookd.toml");
    let mut settings =
        Settings::from_toml("hookd.toml", text, &Default::default()).expect("shipped hookd.toml");
    settings.listen = "127.0.0.1:0".parse().expect("addr");
    settings
}

pub struct TestApp {
    pub base: String,
    /// The admin listener's base URL, when the settings give it one.
    pub admin_base: Option<String>,
    pub app: App,
    pub http: reqwest::Client,
    pub db: Option<std::sync::Arc<TestDb>>,
    db_config: tokio_postgres::Config,
    running: Option<Running>,
}

pub struct Spawn {
    pub settings: Settings,
    pub registry: Registry,
    pub parts: Parts,
    /// Share another app's database (several instances side by side).
    pub db: Option<std::sync::Arc<TestDb>>,
    /// A database outside the test cluster (e.g. one the test stops and starts).
    pub database: Option<tokio_postgres::Config>,
}

impl Default for Spawn {
    fn default() -> Self {
        Spawn {
            settings: test_settings(),
            registry: Registry::builtin(),
            parts: Parts {
                dispatcher: false,
                purge: false,
                http_workers: Some(2),
            },
            db: None,
            database: None,
        }
    }
}

pub async fn spawn_app() -> TestApp {
    spawn(Spawn::default()).await
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
    let app = App::new(
        options.settings,
        store::pool(db_config.clone(), store::DbConnector::Plain, 16),
        options.registry,
    );
    let running = app.start(options.parts).expect("start app");
    TestApp {
        base: format!("http://{}", running.addr),
        admin_base: running.admin_addr.map(|addr| format!("http://{addr}")),
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
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
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
        &self.app.settings
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
        let response = request.body(body).send().await.expect("request");
        Answer {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            body: response.bytes().await.expect("body").to_vec(),
        }
    }

    pub async fn get(&self, path: &str) -> Answer {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("request");
        Answer {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            body: response.bytes().await.expect("body").to_vec(),
        }
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
        hookd::signature::sign(&source.scheme, &source.secrets[0], body, &envelope).expect("sign")
    }

    /// Signs and delivers `body` as the source's provider would.
    pub async fn deliver(&self, source: &str, body: &Value) -> Answer {
        let bytes = serde_json::to_vec(body).expect("json");
        let headers = self.sign(source, &bytes, Hints::default());
        self.post(source, &headers, bytes).await
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

    /// Makes every failed event due now and runs the dispatcher until nothing is due.
    pub async fn run_due_retries(&self) -> usize {
        let mut attempts = 0;
        loop {
            self.execute(
                "UPDATE webhook_events SET next_attempt_at = now() WHERE status = 'failed'",
                &[],
            )
            .await;
            match self
                .app
                .dispatcher
                .try_dispatch_due()
                .await
                .expect("dispatch")
            {
                DispatchStep::Attempted { .. } => attempts += 1,
                DispatchStep::Idle => return attempts,
            }
        }
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

/// How an admin request proves who sends it.
#[derive(Debug, Clone)]
pub enum Credential {
    None,
    Bearer(String),
    /// A `hookd_session=…` cookie pair, as a browser would send it.
    Cookie(String),
}

/// Admin requests to one app, without following redirects (so a test sees them).
pub struct AdminClient<'a> {
    pub app: &'a TestApp,
    pub credential: Credential,
    http: reqwest::Client,
}

impl TestApp {
    pub fn admin(&self, credential: Credential) -> AdminClient<'_> {
        AdminClient {
            app: self,
            credential,
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("client"),
        }
    }

    /// Signs in through the page's form; returns the session cookie pair.
    pub async fn sign_in(&self, token: &str) -> String {
        let answer = self
            .admin(Credential::None)
            .send(
                "POST",
                "/admin/login",
                &[("Content-Type", "application/x-www-form-urlencoded")],
                format!("token={token}").into_bytes(),
            )
            .await;
        assert_eq!(answer.status, 303, "sign-in");
        answer
            .header("set-cookie")
            .and_then(|c| c.split(';').next())
            .expect("session cookie")
            .to_string()
    }
}

impl AdminClient<'_> {
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Answer {
        let url = format!("{}{path}", self.app.base);
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut request = self.http.request(method, url).body(body);
        request = match &self.credential {
            Credential::None => request,
            Credential::Bearer(token) => request.bearer_auth(token),
            Credential::Cookie(cookie) => request.header("Cookie", cookie),
        };
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.expect("request");
        Answer {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            body: response.bytes().await.expect("body").to_vec(),
        }
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.send("GET", path, &[], Vec::new()).await
    }

    pub async fn post(&self, path: &str, headers: &[(&str, &str)]) -> Answer {
        self.send("POST", path, headers, Vec::new()).await
    }

    /// A page form post, with its fields url-encoded.
    pub async fn post_form(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        fields: &[(&str, &str)],
    ) -> Answer {
        let body = fields
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&");
        let mut all = vec![("Content-Type", "application/x-www-form-urlencoded")];
        all.extend_from_slice(headers);
        self.send("POST", path, &all, body.into_bytes()).await
    }
}

/// The form token of a page (`name=csrf value="…"`).
pub fn csrf_of(html: &str) -> String {
    let field = html.find("name=\"csrf\"").expect("csrf field");
    let value = html[field..].find("value=\"").expect("csrf value") + field + "value=\"".len();
    html[value..].split('"').next().expect("value").to_string()
}

/// A handler that holds every retry (not the first run) for `0`, so a second
/// request can arrive while one runs.
pub struct SlowRetries(pub std::time::Duration);

#[async_trait::async_trait]
impl hookd::handlers::Handler for SlowRetries {
    async fn apply(
        &self,
        _tx: &deadpool_postgres::Transaction<'_>,
        event: &hookd::handlers::Event<'_>,
    ) -> Result<(), hookd::handlers::HandlerError> {
        if event.attempt > 1 {
            tokio::time::sleep(self.0).await;
        }
        Ok(())
    }
}

/// One request a `Receiver` got.
#[derive(Debug, Clone)]
pub struct Received {
    pub at: std::time::Instant,
    pub webhook_id: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Whether the Standard Webhooks library accepted its signature.
    pub verified: bool,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A forward's receiver in another stack: verifies each request with the
/// Standard Webhooks reference library, keeps what it got, and answers with the
/// statuses it is given (then 200).
pub struct Receiver {
    pub url: String,
    got: std::sync::Arc<std::sync::Mutex<Vec<Received>>>,
    answers: std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<u16>>>,
    handle: actix_web::dev::ServerHandle,
}

/// A Standard Webhooks secret for tests' forwards.
pub const FORWARD_SECRET: &str = "whsec_Zm9yd2FyZC10ZXN0LXNlY3JldC0zMi1ieXRlcy1sb25nISE=";

impl Receiver {
    pub async fn start(answers: &[u16]) -> Receiver {
        use actix_web::{HttpRequest, HttpResponse, web};
        let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let answers = std::sync::Arc::new(std::sync::Mutex::new(
            answers
                .iter()
                .copied()
                .collect::<std::collections::VecDeque<u16>>(),
        ));
        let (got2, answers2) = (got.clone(), answers.clone());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}/hooks", listener.local_addr().expect("addr"));
        let server = actix_web::HttpServer::new(move || {
            let (got, answers) = (got2.clone(), answers2.clone());
            actix_web::App::new().route(
                "/hooks",
                web::post().to(move |request: HttpRequest, body: web::Bytes| {
                    let (got, answers) = (got.clone(), answers.clone());
                    async move {
                        let mut map = http::HeaderMap::new();
                        let mut headers = Vec::new();
                        for (name, value) in request.headers() {
                            if let (Ok(n), Ok(v)) = (
                                http::HeaderName::from_bytes(name.as_str().as_bytes()),
                                http::HeaderValue::from_bytes(value.as_bytes()),
                            ) {
                                map.append(n, v);
                            }
                            headers.push((
                                name.to_string(),
                                value.to_str().unwrap_or_default().to_string(),
                            ));
                        }
                        let verified = standardwebhooks::Webhook::new(FORWARD_SECRET)
                            .expect("secret")
                            .verify(&body, &map)
                            .is_ok();
                        let webhook_id = request
                            .headers()
                            .get("webhook-id")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_string();
                        got.lock().expect("lock").push(Received {
                            at: std::time::Instant::now(),
                            webhook_id,
                            headers,
                            body: body.to_vec(),
                            verified,
                        });
                        let status = answers.lock().expect("lock").pop_front().unwrap_or(200);
                        HttpResponse::build(
                            actix_web::http::StatusCode::from_u16(status).expect("status"),
                        )
                        .body(format!("answer {status}"))
                    }
                }),
            )
        })
        .workers(1)
        .disable_signals()
        .listen(listener)
        .expect("listen")
        .run();
        let handle = server.handle();
        tokio::spawn(server);
        Receiver {
            url,
            got,
            answers,
            handle,
        }
    }

    pub fn received(&self) -> Vec<Received> {
        self.got.lock().expect("lock").clone()
    }

    /// Waits (up to 10 s) until `count` requests have arrived.
    pub async fn wait_for(&self, count: usize) -> Vec<Received> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let got = self.received();
            if got.len() >= count {
                return got;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "only {} of {count} forwarded requests arrived",
                got.len()
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// A `[[forwards]]` entry sending to this receiver.
    pub fn forward(&self, name: &str, kinds: &[&str], types: &[&str]) -> hookd::config::Forward {
        hookd::config::Forward {
            name: name.into(),
            url: self.url.parse().expect("url"),
            secret: hookd::signature::Secret::new(FORWARD_SECRET),
            kinds: kinds.iter().map(|k| k.to_string()).collect(),
            types: types.iter().map(|t| t.to_string()).collect(),
            sources: Vec::new(),
            timeout: std::time::Duration::from_secs(5),
        }
    }

    pub fn answer_next(&self, statuses: &[u16]) {
        self.answers.lock().expect("lock").extend(statuses);
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        drop(self.handle.stop(false));
    }
}

// --- Helpers added for issue #14 (tests that would catch the bug). ---

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

    /// `/metrics`, parsed as Prometheus reads it.
    pub async fn metrics(&self) -> Exposition {
        let answer = self.get("/metrics").await;
        assert_eq!(answer.status, 200, "/metrics");
        Exposition::parse(&String::from_utf8(answer.body).expect("utf-8 metrics"))
    }
}

/// One sample of the text exposition format.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

/// The text exposition format as Prometheus reads it: `# TYPE` and `# HELP`
/// lines per family, then `name{label="value",…} value` samples (label values
/// with `\\`, `\"` and `\n` escapes). Panics on anything else.
pub fn parse_exposition(text: &str) -> (Vec<(String, String)>, Vec<String>, Vec<Sample>) {
    let (mut types, mut helps, mut samples) = (Vec::new(), Vec::new(), Vec::new());
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            types.push((name.to_string(), kind.to_string()));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("HELP name text");
            assert!(!help.trim().is_empty(), "{line}");
            helps.push(name.to_string());
            continue;
        }
        assert!(!line.starts_with('#'), "unexpected comment: {line}");
        let name_end = line.find(['{', ' ']).expect("a value");
        let name = &line[..name_end];
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "{line}"
        );
        let mut rest = &line[name_end..];
        let mut labels = Vec::new();
        if let Some(inner) = rest.strip_prefix('{') {
            let mut chars = inner.char_indices().peekable();
            loop {
                let (start, c) = chars.next().expect("label or }");
                if c == '}' {
                    rest = &inner[start + 1..];
                    break;
                }
                if c == ',' {
                    continue;
                }
                let eq = inner[start..].find("=\"").expect("label=\"") + start;
                let key = inner[start..eq].to_string();
                while chars.peek().is_some_and(|(i, _)| *i <= eq + 1) {
                    chars.next();
                }
                let mut value = String::new();
                loop {
                    match chars.next().expect("closing quote") {
                        (_, '"') => break,
                        (_, '\\') => match chars.next().expect("escape") {
                            (_, 'n') => value.push('\n'),
                            (_, other) => value.push(other),
                        },
                        (_, other) => value.push(other),
                    }
                }
                labels.push((key, value));
            }
        }
        let value_text = rest.trim();
        let value = match value_text {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            other => other
                .parse()
                .unwrap_or_else(|_| panic!("bad value in {line}")),
        };
        samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    (types, helps, samples)
}

/// A parsed `/metrics` page: values are looked up by name and exact label set,
/// so `…} 1` can never be read off `…} 10`.
#[derive(Debug, Clone)]
pub struct Exposition {
    pub text: String,
    pub types: Vec<(String, String)>,
    pub helps: Vec<String>,
    pub samples: Vec<Sample>,
}

impl Exposition {
    pub fn parse(text: &str) -> Exposition {
        let (types, helps, samples) = parse_exposition(text);
        Exposition {
            text: text.to_string(),
            types,
            helps,
            samples,
        }
    }

    /// The value of the series with exactly these labels, if it is exposed.
    pub fn series(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let found: Vec<&Sample> = self
            .samples
            .iter()
            .filter(|s| {
                s.name == name
                    && s.labels.len() == labels.len()
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.iter().any(|(k2, v2)| k2 == k && v2 == v))
            })
            .collect();
        assert!(
            found.len() <= 1,
            "{name}{labels:?} twice in:\n{}",
            self.text
        );
        found.first().map(|s| s.value)
    }

    /// The value of the series with exactly these labels; it must be exposed.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.series(name, labels)
            .unwrap_or_else(|| panic!("no {name}{labels:?} in:\n{}", self.text))
    }
}

/// Stops the PostgreSQL cluster in `dir` (as the cluster's user) and removes the
/// folder when dropped: a test that starts a cluster and then fails leaves no
/// postmaster behind.
pub struct ClusterGuard {
    pub dir: std::path::PathBuf,
}

impl ClusterGuard {
    pub fn new(dir: &std::path::Path) -> ClusterGuard {
        ClusterGuard {
            dir: dir.to_path_buf(),
        }
    }

    /// Whether the postmaster in `dir` is alive (`pg_ctl status`).
    pub fn running(&self) -> bool {
        pg_ctl_as_cluster_user(&self.dir, &["status"])
    }
}

impl Drop for ClusterGuard {
    fn drop(&mut self) {
        if self.running() {
            pg_ctl_as_cluster_user(&self.dir, &["stop", "-m", "immediate", "-w"]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `pg_ctl ARGS -D DIR/data` as the user that runs the cluster (`postgres` when
/// this process is root); whether it succeeded.
pub fn pg_ctl_as_cluster_user(dir: &std::path::Path, args: &[&str]) -> bool {
    use std::os::unix::process::CommandExt;
    let pg_ctl = hookd::embedded_pg::binaries::program("pg_ctl").expect("pg_ctl");
    let mut command = std::process::Command::new(pg_ctl);
    command
        .args(args)
        .arg("-s")
        .arg("-D")
        .arg(dir.join("data"))
        .current_dir("/")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    if nix::unistd::Uid::effective().is_root() {
        let postgres = nix::unistd::User::from_name("postgres")
            .expect("lookup")
            .expect("postgres user");
        command
            .uid(postgres.uid.as_raw())
            .gid(postgres.gid.as_raw());
    }
    command.status().is_ok_and(|s| s.success())
}
