//! What operators watch: `X-Request-Id` on every answer of both listeners, log
//! lines as text or JSON from the real binary, and the metrics parsed from
//! `/metrics` as Prometheus would read them.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{
    Exposition, Sample, TestDb, cluster, connect, parse_exposition, shipped_settings,
    spawn_with_admin_listener, stripe_event, wait_for,
};

fn is_generated_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

#[tokio::test]
async fn every_answer_of_both_listeners_carries_a_request_id() {
    let app = spawn_with_admin_listener().await;
    let admin = app.admin_base.clone().expect("an admin listener");
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client");
    let requests = [
        ("GET", &app.base, "/healthz", 200),
        ("GET", &app.base, "/readyz", 200),
        ("POST", &app.base, "/webhooks/stripe", 401),
        ("POST", &app.base, "/webhooks/nope", 404),
        ("GET", &app.base, "/webhooks/stripe", 405),
        ("GET", &app.base, "/nowhere", 404),
        ("GET", &app.base, "/metrics", 404),
        ("GET", &admin, "/metrics", 200),
        ("GET", &admin, "/admin/api/events", 401),
        ("GET", &admin, "/admin", 303),
        ("GET", &admin, "/healthz", 200),
    ];
    let mut seen = Vec::new();
    for (method, base, path, status) in requests {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let answer = http
            .request(method, format!("{base}{path}"))
            .send()
            .await
            .expect("answer");
        assert_eq!(answer.status().as_u16(), status, "{path}");
        let id = answer
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_else(|| panic!("{base}{path}: no X-Request-Id"))
            .to_string();
        assert!(is_generated_id(&id), "{path}: {id}");
        seen.push(id);
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), requests.len(), "a fresh id per request");

    // A caller's (a proxy's) own id is kept when it is a sane token, else replaced.
    let long = "r".repeat(129);
    for (given, kept) in [
        ("req-7f3a_01:edge/2", true),
        (long.as_str(), false),
        ("two words", false),
        ("quote\"d", false),
    ] {
        for base in [&app.base, &admin] {
            let answer = http
                .get(format!("{base}/healthz"))
                .header("X-Request-Id", given)
                .send()
                .await
                .expect("answer");
            let id = answer
                .headers()
                .get("x-request-id")
                .and_then(|v| v.to_str().ok())
                .expect("X-Request-Id")
                .to_string();
            if kept {
                assert_eq!(id, given);
            } else {
                assert!(is_generated_id(&id), "{given:?} → {id}");
            }
        }
    }
}

/// `hookd serve` as a process with these variables, against a fresh test database.
pub(crate) struct Served {
    child: std::process::Child,
    pub(crate) base: String,
    /// Reads the server's log as it comes (a full pipe would stall it).
    log: Option<std::thread::JoinHandle<String>>,
    _db: TestDb,
}

impl Drop for Served {
    fn drop(&mut self) {
        // A test that failed half-way leaves no server behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    async fn start(env: &[(&str, &str)]) -> Served {
        Served::start_configured(concat!(env!("CARGO_MANIFEST_DIR"), "/hookd.toml"), env).await
    }

    /// With the configuration file `config`.
    pub(crate) async fn start_configured(config: &str, env: &[(&str, &str)]) -> Served {
        let db = TestDb::create().await;
        let port = hookd_kit::pooler::free_port();
        let mut child = crate::support::hookd_binary()
            .args(["serve", "--config", config])
            .env("DATABASE_URL", cluster().connection_string(&db.name))
            .env("HOOKD_LISTEN", format!("127.0.0.1:{port}"))
            .env("RUST_LOG", "info")
            .env_remove("HOOKD_LOG_FORMAT")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn hookd");
        let mut stderr = child.stderr.take().expect("stderr");
        let log = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
            text
        });
        let served = Served {
            child,
            base: format!("http://127.0.0.1:{port}"),
            log: Some(log),
            _db: db,
        };
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .expect("client");
        let ready = format!("{}/readyz", served.base);
        wait_for("hookd to become ready", Duration::from_secs(30), || async {
            let answer = http.get(&ready).send().await.ok()?;
            (answer.status() == 200).then_some(())
        })
        .await;
        served
    }

    /// Stops it (SIGTERM), fails unless it exits 0 within 30 s, and returns
    /// what it logged.
    pub(crate) async fn stop(mut self) -> String {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).expect("pid"));
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
        let child = &mut self.child;
        let status = wait_for(
            "hookd to exit after SIGTERM",
            Duration::from_secs(30),
            || std::future::ready(child.try_wait().expect("try_wait")),
        )
        .await;
        assert!(status.success(), "{status:?}");
        let log = self.log.take().expect("log reader");
        tokio::task::spawn_blocking(move || log.join().expect("log reader"))
            .await
            .expect("join")
    }
}

/// A Stripe payment event as the shipped `stripe` source expects it: its body
/// and signature headers.
pub(crate) fn signed_stripe_payment(
    event_id: &str,
    payment_id: &str,
    amount: u64,
) -> (Vec<u8>, Vec<(String, String)>) {
    let settings = shipped_settings();
    let stripe = settings.source("stripe").expect("stripe");
    let body = serde_json::to_vec(&stripe_event(
        event_id,
        "payment_intent.succeeded",
        json!({"id": payment_id, "object": "payment_intent", "amount": amount}),
    ))
    .expect("json");
    let headers = hookd::simulate::sign_delivery(
        stripe,
        &body,
        Default::default(),
        chrono::Utc::now().timestamp(),
    )
    .expect("sign")
    .headers;
    (body, headers)
}

/// Delivers one Stripe event and signs in, each with a request id of our own.
async fn deliver_and_sign_in(base: &str, tag: &str) {
    let (body, headers) =
        signed_stripe_payment(&format!("evt_log_{tag}"), &format!("pi_log_{tag}"), 500);
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client");
    let mut request = http
        .post(format!("{base}/webhooks/stripe"))
        .header("X-Request-Id", format!("req-delivery-{tag}"))
        .body(body);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    assert_eq!(request.send().await.expect("answer").status(), 200);
    let signed_in = http
        .post(format!("{base}/admin/login"))
        .header("X-Request-Id", format!("req-login-{tag}"))
        .json(&json!({"token": "dev-viewer-token-0123456789"}))
        .send()
        .await
        .expect("answer");
    assert_eq!(signed_in.status(), 303);
}

#[tokio::test]
async fn slow_json_logs_are_one_object_per_line_with_the_deliverys_fields_and_text_stays() {
    let (json_run, text_run) = tokio::join!(
        Served::start(&[("HOOKD_LOG_FORMAT", "json")]),
        Served::start(&[])
    );
    tokio::join!(
        deliver_and_sign_in(&json_run.base, "json"),
        deliver_and_sign_in(&text_run.base, "text")
    );
    let (json_log, text_log) = tokio::join!(json_run.stop(), text_run.stop());

    let lines: Vec<Value> = json_log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    assert!(lines.len() >= 4, "{json_log}");
    for line in &lines {
        for key in ["timestamp", "level", "target", "message"] {
            assert!(line[key].is_string(), "{key} in {line}");
        }
        let timestamp = line["timestamp"].as_str().unwrap_or_default();
        assert!(
            chrono::DateTime::parse_from_rfc3339(timestamp).is_ok(),
            "{timestamp}"
        );
    }
    let delivery = lines
        .iter()
        .find(|l| l["request_id"] == "req-delivery-json")
        .unwrap_or_else(|| panic!("no delivery line: {json_log}"));
    assert_eq!(delivery["level"], "info");
    assert_eq!(delivery["source"], "stripe");
    assert_eq!(delivery["event_id"], "evt_log_json");
    assert_eq!(delivery["kind"], "payment_succeeded");
    assert_eq!(delivery["outcome"], "processed");
    assert_eq!(delivery["status"], 200);
    assert!(delivery["latency_ms"].as_f64().is_some_and(|ms| ms >= 0.0));
    let sign_in = lines
        .iter()
        .find(|l| l["request_id"] == "req-login-json")
        .unwrap_or_else(|| panic!("no sign-in line: {json_log}"));
    assert_eq!(sign_in["token"], "viewer");
    assert!(lines.iter().any(|l| l["message"] == "hookd stopped"));

    // Text stays the default, with today's delivery line and the request id.
    assert!(!text_log.trim_start().starts_with('{'), "{text_log}");
    let delivery = text_log
        .lines()
        .find(|l| l.contains("request_id=req-delivery-text"))
        .unwrap_or_else(|| panic!("no delivery line: {text_log}"));
    assert!(
        delivery.contains(
            "delivery source=\"stripe\" event_id=\"evt_log_text\" kind=payment_succeeded \
             outcome=processed status=200 latency_ms="
        ),
        "{delivery}"
    );
    assert!(
        text_log
            .lines()
            .any(|l| l.contains("admin sign-in: viewer request_id=req-login-text")),
        "{text_log}"
    );
}

#[test]
fn slow_an_unknown_log_format_is_a_configuration_error() {
    let output = crate::support::hookd_binary()
        .args(["check-config", "--config"])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/hookd.toml"))
        .env("HOOKD_LOG_FORMAT", "yaml")
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(78));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        stderr.trim(),
        "hookd: HOOKD_LOG_FORMAT: \"yaml\" is not one of text, json"
    );
}

#[test]
fn the_exposition_parser_reads_labels_escapes_and_special_values() {
    let (types, _, samples) = parse_exposition(
        "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"q\\\"u,o}te\",le=\"+Inf\"} 3\nb 1.5e3\n",
    );
    assert_eq!(types, [("a_total".to_string(), "counter".to_string())]);
    assert_eq!(
        samples,
        [
            Sample {
                name: "a_total".into(),
                labels: vec![
                    ("x".into(), "q\"u,o}te".into()),
                    ("le".into(), "+Inf".into())
                ],
                value: 3.0
            },
            Sample {
                name: "b".into(),
                labels: vec![],
                value: 1500.0
            }
        ]
    );
}

#[tokio::test]
async fn metrics_expose_delivery_latency_dead_events_the_pool_the_process_and_the_build() {
    let app = crate::support::spawn_app().await;
    let processed = stripe_event(
        "evt_metrics_ok",
        "payment_intent.succeeded",
        json!({"id": "pi_metrics", "object": "payment_intent", "amount": 100}),
    );
    // A payment event without a payment id fails for good: dead.
    let dead = stripe_event(
        "evt_metrics_dead",
        "payment_intent.succeeded",
        json!({"object": "payment_intent", "amount": 100}),
    );
    assert_eq!(app.deliver("stripe", &processed).await.status, 200);
    assert_eq!(app.deliver("stripe", &dead).await.status, 200);
    assert_eq!(app.post("nope", &[], b"{}".to_vec()).await.status, 404);

    let exposition = app.metrics_showing("hookd_dead_events").await;
    let (types, helps, samples) = (&exposition.types, &exposition.helps, &exposition.samples);

    // Every metric is declared once, with its type and help, and every sample
    // belongs to a declared family.
    for metric in hookd::metrics::Metric::ALL {
        let declared: Vec<_> = types.iter().filter(|(n, _)| n == metric.name()).collect();
        assert_eq!(declared.len(), 1, "{}", metric.name());
        assert_eq!(declared[0].1, metric.kind(), "{}", metric.name());
        assert!(
            helps.iter().any(|n| n == metric.name()),
            "{}",
            metric.name()
        );
    }
    for sample in samples {
        let family = types.iter().find(|(name, kind)| {
            sample.name == *name
                || (kind == "histogram"
                    && ["_bucket", "_sum", "_count"]
                        .iter()
                        .any(|suffix| sample.name == format!("{name}{suffix}")))
        });
        assert!(family.is_some(), "undeclared sample {sample:?}");
    }
    let value = |name: &str, labels: &[(&str, &str)]| exposition.value(name, labels);

    // The delivery latency histogram, per configured source (others: unknown).
    let latency = "hookd_delivery_duration_seconds";
    for (source, count) in [("stripe", 2.0), ("unknown", 1.0)] {
        assert_eq!(
            value(&format!("{latency}_count"), &[("source", source)]),
            count
        );
        let buckets: Vec<(f64, f64)> = samples
            .iter()
            .filter(|s| {
                s.name == format!("{latency}_bucket")
                    && s.labels.iter().any(|(k, v)| k == "source" && v == source)
            })
            .map(|s| {
                let le = &s.labels.iter().find(|(k, _)| k == "le").expect("le").1;
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().expect("le")
                };
                (le, s.value)
            })
            .collect();
        let bounds: Vec<f64> = buckets.iter().map(|(le, _)| *le).collect();
        assert_eq!(bounds.first(), Some(&0.001));
        assert!(bounds.contains(&10.0) && bounds.last() == Some(&f64::INFINITY));
        assert!(bounds.windows(2).all(|w| w[0] < w[1]), "{bounds:?}");
        assert!(
            buckets.windows(2).all(|w| w[0].1 <= w[1].1),
            "cumulative: {buckets:?}"
        );
        assert_eq!(buckets.last().map(|b| b.1), Some(count));
        assert!(value(&format!("{latency}_sum"), &[("source", source)]) > 0.0);
    }

    assert_eq!(value("hookd_dead_events", &[]), 1.0);
    assert_eq!(value("hookd_ready", &[]), 1.0);
    assert_eq!(value("hookd_retry_backlog", &[]), 0.0);
    assert_eq!(
        value(
            "hookd_events_total",
            &[("kind", "payment_succeeded"), ("status", "dead")]
        ),
        1.0
    );

    let max = value("hookd_db_pool_max_size", &[]);
    let open = value("hookd_db_pool_size", &[]);
    let idle = value("hookd_db_pool_available", &[]);
    assert_eq!(max, 16.0);
    assert!(open >= 1.0 && open <= max, "{open}");
    assert!(idle >= 0.0 && idle <= open, "{idle} of {open}");
    assert_eq!(value("hookd_db_pool_waiting", &[]), 0.0);

    assert_eq!(
        value(
            "hookd_build_info",
            &[
                ("version", env!("CARGO_PKG_VERSION")),
                ("revision", hookd::version::REVISION)
            ]
        ),
        1.0
    );

    let rss = value("process_resident_memory_bytes", &[]);
    assert!(rss > 1_000_000.0, "{rss}");
    assert!(value("process_virtual_memory_bytes", &[]) >= rss);
    let fds = value("process_open_fds", &[]);
    assert!(fds >= 3.0 && fds <= value("process_max_fds", &[]), "{fds}");
    assert!(value("process_cpu_seconds_total", &[]) > 0.0);
    let now = chrono::Utc::now().timestamp() as f64;
    let start = value("process_start_time_seconds", &[]);
    assert!(start <= now + 1.0 && start > now - 86_400.0, "{start}");
}

#[tokio::test]
async fn scrapes_cost_the_database_one_count_a_second_whatever_their_number() {
    let app = crate::support::spawn_app().await;
    let dead = stripe_event(
        "evt_scraped_dead",
        "payment_intent.succeeded",
        json!({"object": "payment_intent", "amount": 100}),
    );
    assert_eq!(app.deliver("stripe", &dead).await.status, 200);
    let counted_before = app.app.metrics.backlog.reads();
    let started = std::time::Instant::now();
    // 500 scrapes at once, beside 50 deliveries.
    let url = format!("{}/metrics", app.base);
    let scrapes = (0..500).map(|_| {
        let request = app.http.get(&url);
        async move {
            let answer = request.send().await.expect("scrape");
            (answer.status(), answer.text().await.expect("body"))
        }
    });
    let app = &app;
    let deliveries = (0..50).map(|n| {
        let event = stripe_event(
            &format!("evt_scraped_{n}"),
            "payment_intent.succeeded",
            json!({"id": format!("pi_scraped_{n}"), "object": "payment_intent", "amount": 100}),
        );
        async move { app.deliver("stripe", &event).await.status }
    });
    let (scraped, delivered) = tokio::join!(
        futures_util::future::join_all(scrapes),
        futures_util::future::join_all(deliveries)
    );
    let elapsed = started.elapsed();
    let counts = app.app.metrics.backlog.reads() - counted_before;
    assert!(
        delivered.iter().all(|status| *status == 200),
        "{delivered:?}"
    );
    // A scrape whose database read missed its 2 s limit leaves the gauge out
    // (never a wrong value); on a loaded machine some may.
    let mut shown = 0;
    for (status, text) in &scraped {
        assert_eq!(*status, 200);
        if let Some(dead) = Exposition::parse(text).series("hookd_dead_events", &[]) {
            assert_eq!(dead, 1.0);
            shown += 1;
        }
    }
    assert!(shown > 0, "no scrape showed the backlog");
    // A count at most every second: the first, then one per second passed.
    assert!(
        counts >= 1 && counts <= elapsed.as_secs() + 1,
        "{counts} counts of the backlog in {elapsed:?} for 500 scrapes"
    );
}

#[tokio::test]
async fn a_metrics_token_closes_metrics_to_anyone_without_it() {
    const TOKEN: &str = "scrape-token-0123456789abcdef";
    let mut settings = shipped_settings();
    settings.metrics_token = Some(hookd::signature::Secret::new(TOKEN));
    let app = crate::support::spawn(crate::support::Spawn {
        settings,
        ..Default::default()
    })
    .await;
    let scrape = |token: Option<&str>| {
        let mut request = app.http.get(format!("{}/metrics", app.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move {
            let answer = request.send().await.expect("scrape");
            (answer.status().as_u16(), answer.text().await.expect("body"))
        }
    };
    for refused in [None, Some("scrape-token-0123456789abcdeX"), Some("")] {
        let (status, body) = scrape(refused).await;
        assert_eq!(status, 401, "{refused:?}");
        let body: Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(body, json!({"error": "unauthorized"}), "{refused:?}");
    }
    // An admin token is not the metrics token.
    let (status, _) = scrape(Some("dev-operator-token-0123456789")).await;
    assert_eq!(status, 401);
    let (status, body) = scrape(Some(TOKEN)).await;
    assert_eq!(status, 200);
    assert!(body.contains("hookd_build_info"), "{body}");

    // Unset, metrics are open.
    let open = crate::support::spawn_app().await;
    assert_eq!(open.get("/metrics").await.status, 200);
}

/// Every secret and token hookd knows in the logging test.
const ENV_TOKEN: &str = "an-operator-token-from-the-environment";
const ENV_SHOP_SECRET: &str = "a-shop-secret-from-the-environment";

#[tokio::test]
async fn slow_each_delivery_is_one_log_line_and_no_secret_or_payload_is_ever_logged() {
    // Every crate's lines down to debug, the database driver's included unless
    // hookd holds it back (its debug lines carry each statement's parameters).
    let served = Served::start(&[
        ("RUST_LOG", "debug"),
        ("HOOKD_ADMIN_TOKEN", ENV_TOKEN),
        ("HOOKD_SOURCE_SHOP_SECRETS", ENV_SHOP_SECRET),
    ])
    .await;
    let settings = shipped_settings();
    let stripe = settings.source("stripe").expect("stripe");
    let github = settings.source("github").expect("github");
    let now = chrono::Utc::now().timestamp();
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client");
    let send = |path: &str, request_id: String, headers: Vec<(String, String)>, body: Vec<u8>| {
        let mut request = http
            .post(format!("{}{path}", served.base))
            .header("X-Request-Id", request_id)
            .body(body);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        async move { request.send().await.expect("answer").status().as_u16() }
    };
    let marked = |id: &str, n: usize| {
        let mut event = stripe_event(
            id,
            "payment_intent.succeeded",
            json!({"id": format!("pi_{id}"), "object": "payment_intent", "amount": 500,
                   "customer": format!("cus_marker_{n}")}),
        );
        event["description"] = json!(format!("payload-marker-{n}"));
        serde_json::to_vec(&event).expect("json")
    };
    let signed = |body: &[u8]| {
        hookd::simulate::sign_delivery(stripe, body, Default::default(), now)
            .expect("sign")
            .headers
    };
    let new = marked("evt_logged", 1);
    // The same event id with another payload.
    let conflicting = marked("evt_logged", 2);
    let dead = {
        let mut event = stripe_event(
            "evt_logged_dead",
            "payment_intent.succeeded",
            json!({"id": "pi_logged_dead", "amount": "payload-marker-3"}),
        );
        event["description"] = json!("payload-marker-4");
        serde_json::to_vec(&event).expect("json")
    };
    let not_json = b"payload-marker-5 is not JSON".to_vec();
    let github_headers = hookd::providers::sign(
        &github.scheme,
        &github.secrets[0],
        &not_json,
        &hookd::signature::Envelope {
            event_id: "gh-logged",
            event_type: "push",
            timestamp: now,
        },
    )
    .expect("sign")
    .headers;
    let mut proxied = signed(&marked("evt_logged_proxied", 6));
    proxied.push(("X-Forwarded-For".into(), "198.51.100.7".into()));
    type Delivery<'a> = (&'a str, Vec<(String, String)>, Vec<u8>, u16);
    let deliveries: Vec<Delivery<'_>> = vec![
        ("/webhooks/stripe", signed(&new), new.clone(), 200),
        ("/webhooks/stripe", signed(&new), new.clone(), 200),
        (
            "/webhooks/stripe",
            signed(&conflicting),
            conflicting.clone(),
            422,
        ),
        ("/webhooks/stripe", signed(&dead), dead.clone(), 200),
        (
            "/webhooks/stripe",
            signed(&new),
            marked("evt_logged", 7),
            401,
        ),
        ("/webhooks/github", github_headers, not_json.clone(), 400),
        ("/webhooks/nope", vec![], marked("evt_nope", 8), 404),
        (
            "/webhooks/stripe",
            proxied,
            marked("evt_logged_proxied", 6),
            401,
        ),
    ];
    let count = deliveries.len();
    // Every signature sent, without its scheme's prefix.
    let signatures: Vec<String> = deliveries
        .iter()
        .flat_map(|(_, headers, _, _)| headers.iter())
        .filter(|(name, _)| name.to_ascii_lowercase().contains("signature"))
        .flat_map(|(_, value)| {
            value
                .split([',', '='])
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .filter(|part| part.len() >= 32)
        .collect();
    assert!(signatures.len() >= 2, "{signatures:?}");
    for (n, (path, headers, body, status)) in deliveries.into_iter().enumerate() {
        assert_eq!(
            send(path, format!("req-logged-{n}"), headers, body).await,
            status,
            "delivery {n}"
        );
    }
    // Sign-ins: a wrong token, and the environment's.
    for (n, token) in [(0, "a-wrong-token-guessed-here"), (1, ENV_TOKEN)] {
        let answer = http
            .post(format!("{}/admin/login", served.base))
            .header("X-Request-Id", format!("req-login-{n}"))
            .json(&json!({ "token": token }))
            .send()
            .await
            .expect("answer");
        assert_eq!(answer.status().as_u16(), [401, 303][n]);
    }
    // The sign-in made the server secret, which keys every session.
    let server_secret: Vec<u8> = connect(served._db.config())
        .await
        .query_one("SELECT secret FROM hookd_server_secret", &[])
        .await
        .expect("server secret")
        .get(0);
    let log = served.stop().await;
    assert!(
        log.contains(" DEBUG "),
        "the test must see debug lines:\n{log}"
    );
    assert!(
        !log.contains(" DEBUG tokio_postgres"),
        "the driver's debug lines:\n{log}"
    );

    let delivery_lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("delivery source="))
        .collect();
    assert_eq!(delivery_lines.len(), count, "{log}");
    for n in 0..count {
        let id = format!("request_id=req-logged-{n}");
        assert_eq!(
            delivery_lines.iter().filter(|l| l.ends_with(&id)).count(),
            1,
            "delivery {n}: {log}"
        );
    }
    let mut secrets: Vec<String> = settings
        .sources
        .iter()
        .flat_map(|s| s.secrets.iter().map(|x| x.expose().to_string()))
        .collect();
    secrets.extend(
        settings
            .admin_tokens
            .iter()
            .map(|t| t.token.expose().to_string()),
    );
    secrets.extend([ENV_TOKEN, ENV_SHOP_SECRET, "a-wrong-token-guessed-here"].map(String::from));
    for secret in &secrets {
        assert!(!log.contains(secret.as_str()), "{secret} logged:\n{log}");
    }
    // As bytes are printed ("[12, 34, …]") and as hex.
    let printed_secret = format!("{:?}", &server_secret[..8]);
    for shown in [
        printed_secret.trim_matches(['[', ']']).to_string(),
        hex::encode(&server_secret),
    ] {
        assert!(!log.contains(&shown), "the server secret logged:\n{log}");
    }
    for signature in &signatures {
        assert!(
            !log.contains(signature.as_str()),
            "{signature} logged:\n{log}"
        );
    }
    for marker in (1..=8).map(|n| format!("payload-marker-{n}")) {
        assert!(!log.contains(&marker), "{marker} logged:\n{log}");
    }
    assert!(
        !log.contains("cus_marker_"),
        "payload fields logged:\n{log}"
    );
}

#[tokio::test]
async fn slow_the_database_drivers_debug_lines_appear_only_when_named() {
    let served = Served::start(&[("RUST_LOG", "debug,tokio_postgres=debug")]).await;
    deliver_and_sign_in(&served.base, "driver").await;
    let log = served.stop().await;
    assert!(
        log.contains(" DEBUG tokio_postgres"),
        "the operator's explicit choice is honoured:\n{log}"
    );
}

#[tokio::test]
async fn slow_retries_from_the_terminal_are_logged_with_the_real_user_whatever_user_says() {
    let app = crate::support::spawn_app().await;
    let event = stripe_event(
        "evt_cli_log",
        "payment_intent.succeeded",
        json!({"id": "pi_cli_log", "object": "payment_intent", "amount": 100}),
    );
    app.deliver_ok("stripe", &event).await;
    let id = app
        .count(
            "SELECT id FROM webhook_events WHERE event_id = 'evt_cli_log'",
            &[],
        )
        .await
        .to_string();
    let env = [
        ("DATABASE_URL", app.database_url()),
        ("RUST_LOG", "info".to_string()),
        // Anyone can set $USER; the audit name is the real user's.
        ("USER", "mallory".to_string()),
        ("LOGNAME", "mallory".to_string()),
    ];
    let uid = nix::unistd::Uid::current();
    let real = nix::unistd::User::from_uid(uid)
        .expect("passwd")
        .map_or_else(|| uid.to_string(), |user| user.name);
    let single = crate::support::run_hookd_with(&["events", "retry", &id], &env).await;
    assert!(single.status.success(), "{single:?}");
    let log = String::from_utf8_lossy(&single.stderr);
    assert!(
        log.contains(&format!("admin retry of event {id} by cli:{real}")),
        "{log}"
    );
    assert!(!log.contains("mallory"), "{log}");
    let bulk = crate::support::run_hookd_with(&["events", "retry", "-q", "pi_cli_log"], &env).await;
    assert!(bulk.status.success(), "{bulk:?}");
    let log = String::from_utf8_lossy(&bulk.stderr);
    assert!(
        log.contains(&format!(
            "admin bulk retry by cli:{real}: 1 matched, 1 retried"
        )),
        "{log}"
    );
}
