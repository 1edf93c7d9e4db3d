//! What only the integration tests need on top of the kit they share with the
//! benchmarks (`hookd_kit`): the real binary and a receiver for forwards.

pub use hookd_kit::admin::{
    AdminClient, Credential, OPERATOR_TOKEN as OPERATOR, VIEWER_TOKEN as VIEWER, csrf_of,
};
pub use hookd_kit::app::{
    Answer, Spawn, TestApp, TestDb, cluster, spawn, spawn_app, spawn_with_admin_listener,
    stripe_event, wait_for,
};
pub use hookd_kit::cluster::{ClusterGuard, connect, pg_ctl_as_cluster_user};
pub use hookd_kit::metrics::{Exposition, Sample, parse_exposition};
pub use hookd_kit::settings::shipped_settings;

/// An app with these settings, and the rest as by default.
pub async fn spawn_with_settings(settings: hookd::config::Settings) -> TestApp {
    spawn(Spawn {
        settings,
        ..Spawn::default()
    })
    .await
}

/// An app with these settings and handlers whose retry loops and forward
/// lanes run on their own, as `hookd serve` runs them.
pub async fn spawn_looping(
    settings: hookd::config::Settings,
    registry: hookd::handlers::Registry,
) -> TestApp {
    spawn(Spawn {
        settings,
        registry,
        parts: Spawn::LOOPS,
        ..Spawn::default()
    })
    .await
}

/// The desk's dashboard as of now.
pub async fn dashboard(app: &TestApp) -> hookd::desk::Dashboard {
    (app.app.desk)
        .dashboard(chrono::Utc::now())
        .await
        .expect("dashboard")
}

pub mod provider;
pub mod relay;
pub mod upstream;

/// `holder`, made to hold the payment row `payment_id` (inserted for it)
/// `FOR UPDATE` until it ends its transaction.
pub async fn hold_payment_row(
    holder: tokio_postgres::Client,
    payment_id: &str,
) -> tokio_postgres::Client {
    holder
        .execute(
            "INSERT INTO payments (source, payment_id) VALUES ('stripe', $1)",
            &[&payment_id],
        )
        .await
        .expect("a payment row");
    holder.batch_execute("BEGIN").await.expect("begin");
    holder
        .execute(
            "SELECT 1 FROM payments WHERE payment_id = $1 FOR UPDATE",
            &[&payment_id],
        )
        .await
        .expect("hold the payment row");
    holder
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

/// `run_hookd` with `--json` output against `database`: it must succeed, and
/// its output is the JSON value.
pub async fn run_hookd_json(args: &[&str], database: String) -> serde_json::Value {
    let out = run_hookd(args, Some(database)).await;
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

/// The real binary, clear of what the test runner's own environment could
/// change in it: hookd's settings (`HOOKD_*`, `DATABASE_URL`, systemd's
/// `CREDENTIALS_DIRECTORY`), the log's level, a trace collector (`OTEL_*`), a
/// proxy for its outgoing calls. Each test sets what it means to.
pub fn hookd_binary() -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_hookd"));
    for (name, _) in std::env::vars_os() {
        let text = name.to_string_lossy().to_ascii_uppercase();
        if text.starts_with("HOOKD_")
            || text.starts_with("OTEL_")
            || text.ends_with("_PROXY")
            || text == "DATABASE_URL"
            || text == "CREDENTIALS_DIRECTORY"
            || text == "RUST_LOG"
        {
            command.env_remove(&name);
        }
    }
    command
}

/// The real binary with `args`, the shipped configuration, in the checkout,
/// without the caller's `DATABASE_URL`, with `env` on top.
fn hookd_command(args: &[&str], env: &[(&str, String)]) -> std::process::Command {
    let mut command = crate::support::hookd_binary();
    command
        .args(args)
        .args([
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/hookd.toml"),
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("DATABASE_URL")
        .env("RUST_LOG", "warn")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    command
}

/// `run_hookd` with environment variables of the test's choosing.
pub async fn run_hookd_with(args: &[&str], env: &[(&str, String)]) -> std::process::Output {
    let mut command = hookd_command(args, env);
    tokio::task::spawn_blocking(move || command.output().expect("run hookd"))
        .await
        .expect("join")
}

/// `run_hookd_with`, its stdout closed before it writes a line (`| head -0`).
pub async fn run_hookd_unread(args: &[&str], env: &[(&str, String)]) -> std::process::Output {
    let mut command = hookd_command(args, env);
    tokio::task::spawn_blocking(move || {
        let mut child = command
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn hookd");
        drop(child.stdout.take());
        child.wait_with_output().expect("wait")
    })
    .await
    .expect("join")
}

/// `hookd check-config` on the shipped configuration with `extra` appended,
/// written where the binary can read it, under `env`.
pub async fn check_config(extra: &str, env: &[(&str, &str)]) -> std::process::Output {
    let path = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "check-{}-{}.toml",
        std::process::id(),
        rand::random::<u64>()
    ));
    let text = format!("{}\n{extra}", hookd_kit::settings::shipped_toml_anywhere());
    std::fs::write(&path, text).expect("write");
    let mut command = crate::support::hookd_binary();
    command
        .arg("check-config")
        .arg("--config")
        .arg(&path)
        .env_remove("DATABASE_URL")
        .env_remove("HOOKD_CONFIG")
        .env_remove("HOOKD_GATEWAY_LISTEN")
        .envs(env.iter().copied());
    tokio::task::spawn_blocking(move || command.output().expect("run hookd"))
        .await
        .expect("join")
}

/// Waits (30 s at most) until the log at `path` holds `needle` `times` times:
/// a process's own word that it reached a point (a debug line), rather than a
/// sleep that hopes it did.
pub async fn wait_for_log(path: &std::path::Path, needle: &str, times: usize) {
    let what = format!("{times} × {needle:?} in {}", path.display());
    wait_for(&what, std::time::Duration::from_secs(30), || async move {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        (text.matches(needle).count() >= times).then_some(())
    })
    .await;
}

/// One request a `Receiver` got.
#[derive(Debug, Clone)]
pub struct Received {
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
/// statuses it is given (then 200) — at once, or as a slow or flooding consumer.
pub struct Receiver {
    pub url: String,
    got: std::sync::Arc<std::sync::Mutex<Vec<Received>>>,
    streamed: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    handle: actix_web::dev::ServerHandle,
}

/// How a receiver answers, beyond its statuses.
#[derive(Debug, Clone, Copy, Default)]
struct Manner {
    /// Each answer comes this long after the request arrived.
    delay: std::time::Duration,
    /// The first answer's body is this many bytes, streamed (later ones are short).
    flood: Option<usize>,
    /// Each answer's body made from the request's, as a receiver quoting what it got.
    echo: Option<fn(&[u8]) -> String>,
}

/// What a flooding receiver streams, a chunk at a time.
static FLOOD_CHUNK: [u8; 64 * 1024] = [b'x'; 64 * 1024];

/// A Standard Webhooks secret for tests' forwards.
pub const FORWARD_SECRET: &str = "whsec_Zm9yd2FyZC10ZXN0LXNlY3JldC0zMi1ieXRlcy1sb25nISE=";

impl Receiver {
    pub async fn start(answers: &[u16]) -> Receiver {
        Receiver::start_with(answers, Manner::default()).await
    }

    /// A consumer that takes `delay` over each answer.
    pub async fn slow(delay: std::time::Duration, answers: &[u16]) -> Receiver {
        let manner = Manner {
            delay,
            ..Manner::default()
        };
        Receiver::start_with(answers, manner).await
    }

    /// A consumer whose first answer streams a body of `bytes` bytes (`streamed`
    /// counts how much of it was produced before the connection went).
    pub async fn flooding(answers: &[u16], bytes: usize) -> Receiver {
        let manner = Manner {
            flood: Some(bytes),
            ..Manner::default()
        };
        Receiver::start_with(answers, manner).await
    }

    /// A consumer whose answers quote the request: `echo` makes each body.
    pub async fn echoing(answers: &[u16], echo: fn(&[u8]) -> String) -> Receiver {
        let manner = Manner {
            echo: Some(echo),
            ..Manner::default()
        };
        Receiver::start_with(answers, manner).await
    }

    /// Bytes of flooding answers produced so far.
    pub fn streamed(&self) -> usize {
        self.streamed.load(std::sync::atomic::Ordering::SeqCst)
    }

    async fn start_with(answers: &[u16], manner: Manner) -> Receiver {
        use actix_web::{HttpRequest, HttpResponse, web};
        let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let streamed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let flood = std::sync::Arc::new(std::sync::Mutex::new(manner.flood));
        let answers = std::sync::Arc::new(std::sync::Mutex::new(
            answers
                .iter()
                .copied()
                .collect::<std::collections::VecDeque<u16>>(),
        ));
        let (got2, answers2, streamed2) = (got.clone(), answers, streamed.clone());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}/hooks", listener.local_addr().expect("addr"));
        let server = actix_web::HttpServer::new(move || {
            let (got, answers) = (got2.clone(), answers2.clone());
            let (streamed, flood) = (streamed2.clone(), flood.clone());
            actix_web::App::new().route(
                "/hooks",
                web::post().to(move |request: HttpRequest, body: web::Bytes| {
                    let (got, answers) = (got.clone(), answers.clone());
                    let (streamed, flood) = (streamed.clone(), flood.clone());
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
                            webhook_id,
                            headers,
                            body: body.to_vec(),
                            verified,
                        });
                        // The consumer's own slowness (not a wait for a condition).
                        tokio::time::sleep(manner.delay).await;
                        let status = answers.lock().expect("lock").pop_front().unwrap_or(200);
                        let mut answer = HttpResponse::build(
                            actix_web::http::StatusCode::from_u16(status).expect("status"),
                        );
                        if let Some(echo) = manner.echo {
                            return answer.body(echo(&body));
                        }
                        let Some(total) = flood.lock().expect("lock").take() else {
                            return answer.body(format!("answer {status}"));
                        };
                        let chunks = futures_util::stream::unfold(0, move |sent| {
                            let streamed = streamed.clone();
                            async move {
                                (sent < total).then(|| {
                                    let n = FLOOD_CHUNK.len().min(total - sent);
                                    streamed.fetch_add(n, std::sync::atomic::Ordering::SeqCst);
                                    let chunk = web::Bytes::from_static(&FLOOD_CHUNK[..n]);
                                    (Ok::<_, std::io::Error>(chunk), sent + n)
                                })
                            }
                        });
                        answer.streaming(chunks)
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
            streamed,
            handle,
        }
    }

    pub fn received(&self) -> Vec<Received> {
        self.got.lock().expect("lock").clone()
    }

    /// Waits (up to 30 s: a lane's poll, a send, perhaps a process's start on
    /// a loaded machine) until `count` requests have arrived.
    pub async fn wait_for(&self, count: usize) -> Vec<Received> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
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
            concurrency: 4,
            retry_for: std::time::Duration::ZERO,
            open_after: 10,
            paused: false,
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        drop(self.handle.stop(false));
    }
}

/// A step of the retry loop that ran an event's handler, which failed.
pub fn assert_retry_failed(step: Result<hookd::dispatch::DispatchStep, hookd::store::StoreError>) {
    assert!(
        matches!(
            step.expect("dispatch"),
            hookd::dispatch::DispatchStep::Attempted {
                status: hookd::store::events::EventStatus::Failed,
                ..
            }
        ),
        "the retry failed"
    );
}
