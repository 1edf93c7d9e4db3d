//! `hookd reconcile` and `serve`'s own pass, through the real binary, against
//! a provider's list API served here over HTTPS (a CA made for the test, which
//! hookd trusts through `SSL_CERT_FILE`): the events a provider never
//! delivered are stored once and applied once, as `origin = 'api'`; a second
//! pass recovers nothing; a later signed delivery of a recovered event is a
//! duplicate of it; paging, 429s and refusals are the provider's documented ones.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::support::upstream::{Seen, read_request};
use crate::support::{TestApp, run_hookd_with, spawn_app, stripe_event, wait_for};

/// The key the test's provider accepts.
const KEY: &str = "rk_test_reconcile_0123456789abcdef";

/// An answer of the fake provider: status, extra headers, body.
pub type Answer = (u16, Vec<(String, String)>, String);
type Handler = dyn Fn(&Seen) -> Answer + Send + Sync;

/// A provider's API over HTTPS on loopback, answering with `handler`, keeping
/// each request it got.
pub struct ProviderApi {
    pub url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
    /// The CA file hookd is told to trust, and a folder that holds no roots.
    trust: Vec<(&'static str, String)>,
}

impl Drop for ProviderApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ProviderApi {
    pub async fn start(handler: impl Fn(&Seen) -> Answer + Send + Sync + 'static) -> ProviderApi {
        let pki = crate::tls::pki();
        let acceptor = crate::tls::acceptor(&pki);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let kept = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, kept, handler) = (acceptor.clone(), kept.clone(), handler.clone());
                tokio::spawn(async move {
                    if let Ok(tls) = acceptor.accept(tcp).await {
                        serve(tls, kept, handler).await;
                    }
                });
            }
        });
        let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let ca = dir.join(format!("reconcile-ca-{}-{port}.pem", std::process::id()));
        std::fs::write(&ca, &pki.ca).expect("CA file");
        let trust = vec![
            ("SSL_CERT_FILE", ca.display().to_string()),
            (
                "SSL_CERT_DIR",
                dir.join("no-such-dir").display().to_string(),
            ),
        ];
        ProviderApi {
            url: format!("https://localhost:{port}"),
            seen,
            task,
            trust,
        }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("seen").clone()
    }

    /// The environment making `source` ask this API with `key`, trusting its CA.
    pub fn env(&self, source: &str, key: &str, database: String) -> Vec<(&'static str, String)> {
        let upper = source.to_ascii_uppercase();
        let mut env = self.trust.clone();
        env.push(("DATABASE_URL", database));
        env.push((
            leak(format!("HOOKD_SOURCE_{upper}_API_KEY")),
            key.to_string(),
        ));
        env.push((
            leak(format!("HOOKD_SOURCE_{upper}_API_BASE")),
            self.url.clone(),
        ));
        env
    }
}

fn leak(text: String) -> &'static str {
    Box::leak(text.into_boxed_str())
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    seen: Arc<Mutex<Vec<Seen>>>,
    handler: Arc<Handler>,
) {
    let mut buffer = Vec::new();
    while let Some(request) = read_request(&mut stream, &mut buffer).await {
        let (status, headers, body) = handler(&request);
        seen.lock().expect("seen").push(request);
        // An answer that says `transfer-encoding: chunked` goes in chunks,
        // its length stated nowhere.
        let chunked = headers
            .iter()
            .any(|(name, value)| name == "transfer-encoding" && value == "chunked");
        let mut head = format!("HTTP/1.1 {status} Whatever\r\ncontent-type: application/json\r\n");
        if !chunked {
            head.push_str(&format!("content-length: {}\r\n", body.len()));
        }
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let mut wire = head.into_bytes();
        if chunked {
            for chunk in body.as_bytes().chunks(64 * 1024) {
                wire.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                wire.extend_from_slice(chunk);
                wire.extend_from_slice(b"\r\n");
            }
            wire.extend_from_slice(b"0\r\n\r\n");
        } else {
            wire.extend_from_slice(body.as_bytes());
        }
        if stream.write_all(&wire).await.is_err() || stream.flush().await.is_err() {
            return;
        }
    }
}

/// The query of a request's target, decoded.
pub fn query_of(seen: &Seen) -> Vec<(String, String)> {
    let query = seen.target.split_once('?').map_or("", |(_, q)| q);
    form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect()
}

/// The types a request to Stripe's list asked for (`types[]`).
fn types_asked(seen: &Seen) -> Vec<String> {
    query_of(seen)
        .into_iter()
        .filter(|(k, _)| k == "types[]")
        .map(|(_, v)| v)
        .collect()
}

pub fn param(seen: &Seen, name: &str) -> Option<String> {
    query_of(seen)
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

/// A paid Stripe event as the API lists it (`pending_webhooks` as it is now).
fn paid(id: &str, pending_webhooks: i64) -> Value {
    let mut event = stripe_event(
        id,
        "payment_intent.succeeded",
        json!({"id": format!("pi_{id}"), "object": "payment_intent", "amount": 1200,
               "amount_received": 1200, "currency": "eur", "status": "succeeded"}),
    );
    // An hour ago, the same for every copy of the event this test makes.
    static CREATED: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    event["created"] = json!(CREATED.get_or_init(|| chrono::Utc::now().timestamp() - 3600));
    event["pending_webhooks"] = json!(pending_webhooks);
    event["request"] = json!({"id": null, "idempotency_key": null});
    event
}

/// Stripe's `GET /v1/events`, newest first, `page` events a page, of the
/// `types[]` asked for if any, refusing any key but `KEY`.
fn stripe_list(events: Vec<Value>, page: usize) -> impl Fn(&Seen) -> Answer + Send + Sync {
    move |seen: &Seen| {
        if seen.header("authorization") != Some(&format!("Bearer {KEY}")) {
            let shown = seen.header("authorization").unwrap_or_default().to_string();
            let body = json!({"error": {"type": "invalid_request_error",
                "message": format!("Invalid API Key provided: {}", shown.trim_start_matches("Bearer "))}});
            return (401, vec![], body.to_string());
        }
        assert!(seen.target.starts_with("/v1/events?"), "{}", seen.target);
        let types = types_asked(seen);
        let events: Vec<&Value> = events
            .iter()
            .filter(|e| types.is_empty() || types.iter().any(|t| e["type"] == t.as_str()))
            .collect();
        let start = match param(seen, "starting_after") {
            Some(after) => {
                events
                    .iter()
                    .position(|e| e["id"] == after.as_str())
                    .expect("a listed id")
                    + 1
            }
            None => 0,
        };
        let data: Vec<&&Value> = events.iter().skip(start).take(page).collect();
        let has_more = start + data.len() < events.len();
        let body =
            json!({"object": "list", "url": "/v1/events", "has_more": has_more, "data": data});
        (200, vec![], body.to_string())
    }
}

/// 48 events of 256 KiB (12 MiB, more than a pass holds), `PREFIX48` to
/// `PREFIX01`: newest first, as Stripe lists them.
fn large_events(prefix: &str) -> Vec<Value> {
    let pad = "x".repeat(256 * 1024);
    (1..=48)
        .rev()
        .map(|i| {
            let mut event = paid(&format!("{prefix}{i:02}"), 0);
            event["data"]["object"]["metadata"] = json!({ "pad": pad });
            event
        })
        .collect()
}

async fn reconcile(
    api: &ProviderApi,
    app: &TestApp,
    key: &str,
    extra: &[&str],
) -> std::process::Output {
    let mut args = vec!["reconcile", "--source", "stripe"];
    args.extend(extra);
    run_hookd_with(&args, &api.env("stripe", key, app.database_url())).await
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test]
async fn what_stripe_never_delivered_is_recovered_once_and_a_later_delivery_is_a_duplicate() {
    let app = spawn_app().await;
    // Delivered: hookd holds it (the API lists it with another pending_webhooks).
    let mut delivered = paid("evt_rc_delivered", 2);
    app.deliver_ok("stripe", &delivered).await;
    delivered["pending_webhooks"] = json!(0);
    let mut listed: Vec<Value> = (1..=4)
        .rev()
        .map(|i| paid(&format!("evt_rc_{i}"), 0))
        .collect();
    listed.push(delivered);
    let api = ProviderApi::start(stripe_list(listed, 2)).await;

    let out = reconcile(&api, &app, KEY, &[]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "5 listed, 1 present, 4 recovered, 0 conflicts\n"
    );
    // Three pages of two, each after the last id of the one before.
    let seen = api.seen();
    assert_eq!(seen.len(), 3, "{seen:#?}");
    assert!(seen.iter().all(|s| s.method == "GET"));
    assert_eq!(param(&seen[0], "starting_after"), None);
    assert_eq!(
        param(&seen[1], "starting_after").as_deref(),
        Some("evt_rc_3")
    );
    assert_eq!(
        param(&seen[2], "starting_after").as_deref(),
        Some("evt_rc_1")
    );
    let since: i64 = param(&seen[0], "created[gte]")
        .expect("created[gte]")
        .parse()
        .expect("a timestamp");
    let window = chrono::Utc::now().timestamp() - since;
    assert!(
        (72 * 3600 - 60..=72 * 3600 + 60).contains(&window),
        "{window}"
    );

    // Stored once, as recovered, and applied once: a payment each.
    let recovered = "SELECT count(*) FROM webhook_events WHERE origin = 'api' \
                     AND status = 'processed' AND event_id LIKE 'evt_rc_%'";
    assert_eq!(app.count(recovered, &[]).await, 4);
    assert_eq!(
        app.count(
            "SELECT count(*) FROM webhook_events WHERE origin = 'delivery'",
            &[]
        )
        .await,
        1
    );
    assert_eq!(
        app.count(
            "SELECT count(*) FROM payments WHERE source = 'stripe' AND status = 'succeeded' \
             AND payment_id LIKE 'pi_evt_rc_%'",
            &[]
        )
        .await,
        5
    );

    // A second pass finds them all.
    let out = reconcile(&api, &app, KEY, &["--json"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let answer: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(answer["source"], "stripe");
    assert_eq!(
        (
            &answer["listed"],
            &answer["present"],
            &answer["recovered"],
            &answer["conflicts"]
        ),
        (&json!(5), &json!(5), &json!(0), &json!(0))
    );
    assert!(
        chrono::DateTime::parse_from_rfc3339(answer["since"].as_str().expect("since")).is_ok(),
        "{answer}"
    );

    // Stripe's late delivery of a recovered event: a duplicate, not a conflict.
    let late = paid("evt_rc_2", 1);
    let answer = app.deliver_ok("stripe", &late).await;
    assert_eq!(answer.header("Idempotent-Replayed"), Some("true"));
    let row = &app
        .query(
            "SELECT deliveries, origin FROM webhook_events WHERE event_id = 'evt_rc_2'",
            &[],
        )
        .await[0];
    assert_eq!(
        (row.get::<_, i32>(0), row.get::<_, String>(1)),
        (2, "api".into())
    );
    assert_eq!(
        app.count("SELECT count(*) FROM event_conflicts", &[]).await,
        0
    );
    assert_eq!(
        app.count(
            "SELECT count(*) FROM webhook_event_attempts a JOIN webhook_events e \
             ON e.id = a.webhook_event_id WHERE e.event_id = 'evt_rc_2'",
            &[]
        )
        .await,
        1
    );

    // The desk says where a recovered event's proof comes from.
    let id = app.event_row_id("evt_rc_2").await;
    let shown = crate::support::run_hookd(
        &["events", "verify", &id.to_string(), "--json"],
        Some(app.database_url()),
    )
    .await;
    let origin: Value = serde_json::from_slice(&shown.stdout).expect("json");
    assert_eq!(origin["status"], "provider_api", "{origin}");
    // Proven by the provider's own API over TLS: the command's verdict is 0.
    assert_eq!(shown.status.code(), Some(0), "{origin}");
    let page = app.viewer().get(&format!("/admin/events/{id}")).await;
    let page = String::from_utf8_lossy(&page.body).into_owned();
    assert!(
        page.contains("recovered from the provider&#39;s API")
            || page.contains("recovered from the provider's API"),
        "{page}"
    );
    let board = crate::support::dashboard(&app).await;
    assert_eq!(board.recovered_7_days, 4);
    let page = String::from_utf8_lossy(&app.viewer().get("/admin").await.body).into_owned();
    assert!(page.contains("(last 7 days)"), "{page}");
    assert!(page.contains(">4 events<"), "{page}");
}

#[tokio::test]
async fn a_pass_over_more_than_it_holds_stores_as_it_goes_and_recovers_each_once() {
    let app = spawn_app().await;
    // 48 events of 256 KiB, newest first: 12 MiB, more than a pass holds (8 MiB).
    let listed = large_events("evt_rc_big_");
    let api = ProviderApi::start(stripe_list(listed, 8)).await;

    let out = reconcile(&api, &app, KEY, &[]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "48 listed, 0 present, 48 recovered, 0 conflicts\n"
    );
    assert_eq!(
        app.count(
            "SELECT count(*) FROM webhook_events WHERE origin = 'api' AND status = 'processed'",
            &[]
        )
        .await,
        48
    );
    assert_eq!(
        app.count(
            "SELECT count(*) FROM payments WHERE payment_id LIKE 'pi_evt_rc_big_%'",
            &[]
        )
        .await,
        48
    );
    // Stored as the pass went: the newest 32 (8 MiB, four pages) once it held
    // that much, then the 16 older ones.
    let order = app
        .strings("SELECT event_id FROM webhook_events ORDER BY id", &[])
        .await;
    let (first, then) = order.split_at(32);
    let named = |range: std::ops::RangeInclusive<i32>| -> Vec<String> {
        range.map(|i| format!("evt_rc_big_{i:02}")).collect()
    };
    let sorted = |ids: &[String]| -> Vec<String> {
        let mut ids = ids.to_vec();
        ids.sort();
        ids
    };
    assert_eq!(sorted(first), named(17..=48));
    assert_eq!(sorted(then), named(1..=16));
}

#[tokio::test]
async fn an_event_listed_again_on_the_next_page_is_counted_and_stored_once() {
    let app = spawn_app().await;
    // A list that shifted while it was paged: evt_rc_shift_3 ends page one
    // and starts page two.
    let events: Vec<Value> = (1..=5)
        .rev()
        .map(|i| paid(&format!("evt_rc_shift_{i}"), 0))
        .collect();
    let api = ProviderApi::start(move |seen: &Seen| -> Answer {
        let page: Vec<&Value> = match param(seen, "starting_after") {
            None => events[..3].iter().collect(),
            Some(_) => events[2..].iter().collect(),
        };
        let more = param(seen, "starting_after").is_none();
        let body = json!({"object": "list", "url": "/v1/events", "has_more": more, "data": page});
        (200, vec![], body.to_string())
    })
    .await;

    let out = reconcile(&api, &app, KEY, &[]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "5 listed, 0 present, 5 recovered, 0 conflicts\n"
    );
    assert_eq!(
        app.count(
            "SELECT count(*) FROM webhook_events WHERE origin = 'api'",
            &[]
        )
        .await,
        5
    );
}

#[tokio::test]
async fn a_pass_the_api_fails_late_in_stores_what_it_found_and_says_so() {
    let app = spawn_app().await;
    // 48 events of 256 KiB, newest first, 8 a page; the sixth page (after 40
    // events, 10 MiB) is a 500 every time.
    let listed = large_events("evt_rc_late_");
    let list = stripe_list(listed, 8);
    let api = ProviderApi::start(move |seen: &Seen| -> Answer {
        if param(seen, "starting_after").as_deref() == Some("evt_rc_late_09") {
            let body = json!({"error": {"type": "api_error", "message": "Something went wrong"}});
            return (500, vec![], body.to_string());
        }
        list(seen)
    })
    .await;

    let out = reconcile(&api, &app, KEY, &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let said = stderr(&out);
    assert_eq!(said.trim().lines().count(), 1, "{said}");
    assert!(said.contains("500"), "{said}");
    // The 32 stored once it held 8 MiB, and the 8 it held when the API failed.
    assert!(
        said.contains("before it stopped: 40 listed, 0 present, 40 recovered, 0 conflicts"),
        "{said}"
    );
    assert_eq!(
        app.count(
            "SELECT count(*) FROM webhook_events WHERE origin = 'api' AND status = 'processed'",
            &[]
        )
        .await,
        40
    );
    // With --json the counts come on stdout too, the error beside them.
    let again = reconcile(&api, &app, KEY, &["--json"]).await;
    assert_eq!(again.status.code(), Some(1));
    let printed: Value = serde_json::from_str(&stdout(&again)).expect("one JSON object");
    assert_eq!(
        (
            &printed["listed"],
            &printed["present"],
            &printed["recovered"]
        ),
        (&json!(40), &json!(40), &json!(0)),
        "{printed}"
    );
    assert!(
        printed["error"].as_str().is_some_and(|e| e.contains("500")),
        "{printed}"
    );
}

#[tokio::test]
async fn a_dry_run_counts_and_stores_nothing() {
    let app = spawn_app().await;
    let api = ProviderApi::start(stripe_list(vec![paid("evt_rc_dry", 0)], 100)).await;
    let out = reconcile(&api, &app, KEY, &["--dry-run", "--since", "1h"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "1 listed, 0 present, 1 recovered, 0 conflicts\n"
    );
    assert_eq!(
        app.count("SELECT count(*) FROM webhook_events", &[]).await,
        0
    );
    let since: i64 = param(&api.seen()[0], "created[gte]")
        .expect("created[gte]")
        .parse()
        .expect("timestamp");
    let age = chrono::Utc::now().timestamp() - since;
    assert!((3540..=3660).contains(&age), "{age}");

    // Beyond what Stripe lists: refused before asking.
    let out = reconcile(&api, &app, KEY, &["--since", "45d"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("30d"), "{}", stderr(&out));
    assert_eq!(api.seen().len(), 1);
}

#[tokio::test]
async fn a_pass_never_reaches_back_past_the_keys_kept() {
    let app = spawn_app().await;
    let api = ProviderApi::start(stripe_list(vec![paid("evt_rc_keys", 0)], 100)).await;
    // Keys kept two days: an event from three days ago may have been received
    // and its key purged, so recovering it would apply it twice.
    let config = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "keys-{}-{}.toml",
        std::process::id(),
        rand::random::<u64>()
    ));
    let text = format!(
        "retention = \"1d\"\nkey_retention = \"2d\"\n{}",
        hookd_kit::settings::shipped_toml_anywhere()
            .replace("retention = \"30d\"", "")
            .replace("key_retention = \"365d\"", "")
    );
    std::fs::write(&config, text).expect("write");
    let run = |since: &'static str| {
        let mut command = crate::support::hookd_binary();
        command
            .args(["reconcile", "--source", "stripe", "--since", since])
            .arg("--config")
            .arg(&config)
            .env_remove("DATABASE_URL")
            .env_remove("HOOKD_CONFIG")
            .env("RUST_LOG", "warn")
            .envs(api.env("stripe", KEY, app.database_url()));
        tokio::task::spawn_blocking(move || command.output().expect("run hookd"))
    };
    let out = run("3d").await.expect("join");
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("key_retention 2d") && stderr(&out).lines().count() == 1,
        "{}",
        stderr(&out)
    );
    assert!(api.seen().is_empty(), "refused before asking the API");
    // Within the keys kept, the pass runs.
    let out = run("1d").await.expect("join");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(api.seen().len(), 1);
    let _ = std::fs::remove_file(&config);
}

#[tokio::test]
async fn a_pass_takes_only_the_types_the_source_is_sent() {
    let app = spawn_app().await;
    // The account's list holds every event; the endpoint is sent payment
    // intents' only.
    let of_type = |id: &str, event_type: &str| {
        let mut event = paid(id, 0);
        event["type"] = json!(event_type);
        event
    };
    let listed = vec![
        of_type("evt_rc_types_customer", "customer.created"),
        paid("evt_rc_types_paid", 0),
        of_type("evt_rc_types_invoice", "invoice.paid"),
        of_type("evt_rc_types_created", "payment_intent.created"),
    ];
    let api = ProviderApi::start(stripe_list(listed, 100)).await;
    let with_types = |types: &str| {
        let mut env = api.env("stripe", KEY, app.database_url());
        env.push(("HOOKD_SOURCE_STRIPE_RECONCILE_TYPES", types.to_string()));
        env
    };
    let env = with_types("payment_intent.*, charge.dispute.created");
    let args = ["reconcile", "--source", "stripe"];
    let out = run_hookd_with(&args, &env).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "2 listed, 0 present, 2 recovered, 0 conflicts\n"
    );
    let stored = app
        .count(
            "SELECT count(*) FROM webhook_events WHERE event_type LIKE 'payment_intent.%'",
            &[],
        )
        .await;
    assert_eq!(stored, 2);
    assert_eq!(
        app.count("SELECT count(*) FROM webhook_events", &[]).await,
        2,
        "the other types are not stored"
    );
    let out = run_hookd_with(&args, &env).await;
    assert_eq!(
        stdout(&out),
        "2 listed, 2 present, 0 recovered, 0 conflicts\n"
    );
    // With a `*`, Stripe is asked for every type (its wildcard is not
    // hookd's); with exact types only, for those alone (`types[]`).
    assert!(api.seen().iter().all(|seen| types_asked(seen).is_empty()));
    let exact = with_types("payment_intent.succeeded,invoice.paid");
    let out = run_hookd_with(&args, &exact).await;
    assert_eq!(
        stdout(&out),
        "2 listed, 1 present, 1 recovered, 0 conflicts\n"
    );
    let last = api.seen().pop().expect("asked");
    assert_eq!(
        types_asked(&last),
        ["payment_intent.succeeded", "invoice.paid"]
    );

    // Set but naming none: refused before asking, in one line naming the variable.
    let asked = api.seen().len();
    let out = run_hookd_with(&args, &with_types(" , ")).await;
    assert_ne!(out.status.code(), Some(0));
    let said = stderr(&out);
    assert!(
        said.contains("HOOKD_SOURCE_STRIPE_RECONCILE_TYPES")
            && said.contains("names no event type"),
        "{said}"
    );
    assert_eq!(said.trim().lines().count(), 1, "{said}");
    assert_eq!(api.seen().len(), asked);
}

#[tokio::test]
async fn a_wrong_key_or_an_unreachable_api_fails_in_one_line_without_the_key() {
    let app = spawn_app().await;
    let api = ProviderApi::start(stripe_list(vec![paid("evt_rc_never", 0)], 100)).await;
    let wrong = "rk_test_wrong_key_never_shown_42";
    let out = reconcile(&api, &app, wrong, &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let said = stderr(&out);
    let lines: Vec<&str> = said.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{said}");
    assert!(lines[0].contains("reconcile stripe"), "{said}");
    assert!(lines[0].contains("401"), "{said}");
    assert!(lines[0].contains("Invalid API Key provided"), "{said}");
    assert!(
        !said.contains(wrong) && !said.contains("wrong_key"),
        "{said}"
    );
    assert!(stdout(&out).is_empty());
    assert_eq!(
        app.count("SELECT count(*) FROM webhook_events", &[]).await,
        0
    );

    // Nothing listens there.
    let refusing = crate::support::upstream::refusing_url().replace("http://", "https://");
    let mut env = api.env("stripe", KEY, app.database_url());
    env.retain(|(k, _)| *k != "HOOKD_SOURCE_STRIPE_API_BASE");
    env.push(("HOOKD_SOURCE_STRIPE_API_BASE", refusing));
    let out = run_hookd_with(&["reconcile", "--source", "stripe"], &env).await;
    assert_eq!(out.status.code(), Some(1));
    let said = stderr(&out);
    assert_eq!(said.trim().lines().count(), 1, "{said}");
    assert!(
        said.contains("reconcile stripe") && said.contains("cannot reach"),
        "{said}"
    );
    assert!(!said.contains(KEY), "{said}");

    // A plain-HTTP API beyond loopback is refused with the configuration.
    env.retain(|(k, _)| *k != "HOOKD_SOURCE_STRIPE_API_BASE");
    env.push((
        "HOOKD_SOURCE_STRIPE_API_BASE",
        "http://api.example.com".into(),
    ));
    let out = run_hookd_with(&["reconcile", "--source", "stripe"], &env).await;
    assert_eq!(out.status.code(), Some(78));
    assert!(stderr(&out).contains("must be https"), "{}", stderr(&out));
}

#[tokio::test]
async fn a_redirect_is_not_followed_and_an_answer_past_its_bound_is_refused() {
    let app = spawn_app().await;
    // The list moved, says the API, to a page that would answer: hookd's key
    // goes to no address the source does not name, so it is never asked.
    let list = stripe_list(vec![paid("evt_rc_moved", 0)], 100);
    let api = ProviderApi::start(move |seen: &Seen| {
        if seen.target.contains("moved=1") {
            return list(seen);
        }
        let location = "/v1/events?moved=1".to_string();
        (302, vec![("Location".into(), location)], String::new())
    })
    .await;
    let out = reconcile(&api, &app, KEY, &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let said = stderr(&out);
    assert_eq!(said.trim().lines().count(), 1, "{said}");
    assert!(
        said.contains("reconcile stripe") && said.contains("302"),
        "{said}"
    );
    assert_eq!(api.seen().len(), 1, "the redirect was followed");
    assert!(!said.contains(KEY), "{said}");

    // A page past the 16 MiB one answer may weigh is refused, not read.
    let padding = "x".repeat(17 * 1024 * 1024);
    let huge = ProviderApi::start(move |_: &Seen| {
        let body = format!(r#"{{"object":"list","data":[],"has_more":false,"pad":"{padding}"}}"#);
        (200, vec![], body)
    })
    .await;
    let out = reconcile(&huge, &app, KEY, &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let said = stderr(&out);
    assert_eq!(said.trim().lines().count(), 1, "{said}");
    assert!(said.contains("larger than 16777216 bytes"), "{said}");
    // The same page in chunks, its length stated nowhere: cut off once past it.
    let padding = "x".repeat(17 * 1024 * 1024);
    let streamed = ProviderApi::start(move |_: &Seen| {
        let body = format!(r#"{{"object":"list","data":[],"has_more":false,"pad":"{padding}"}}"#);
        let chunked = ("transfer-encoding".to_string(), "chunked".to_string());
        (200, vec![chunked], body)
    })
    .await;
    let out = reconcile(&streamed, &app, KEY, &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let said = stderr(&out);
    assert!(said.contains("larger than 16777216 bytes"), "{said}");
    assert_eq!(
        app.count("SELECT count(*) FROM webhook_events", &[]).await,
        0
    );
}

#[tokio::test]
async fn a_429_is_waited_out_as_retry_after_asks() {
    let app = spawn_app().await;
    let calls = Arc::new(Mutex::new(0));
    let list = stripe_list(vec![paid("evt_rc_busy", 0)], 100);
    let counted = calls.clone();
    let api = ProviderApi::start(move |seen: &Seen| {
        let mut calls = counted.lock().expect("calls");
        *calls += 1;
        if *calls == 1 {
            let body = json!({"error": {"message": "Too many requests"}}).to_string();
            return (429, vec![("Retry-After".into(), "2".into())], body);
        }
        list(seen)
    })
    .await;
    let started = Instant::now();
    let out = reconcile(&api, &app, KEY, &[]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(started.elapsed() >= Duration::from_secs(2));
    assert_eq!(
        stdout(&out),
        "1 listed, 0 present, 1 recovered, 0 conflicts\n"
    );
    assert_eq!(api.seen().len(), 2);
}

#[tokio::test]
async fn serve_runs_the_pass_itself_under_its_lease() {
    let db = crate::support::TestDb::create().await;
    let database = crate::support::cluster().connection_string(&db.name);
    let api = ProviderApi::start(stripe_list(
        vec![paid("evt_rc_served_2", 0), paid("evt_rc_served_1", 0)],
        1,
    ))
    .await;
    let (hookd, config) =
        serve_reconciling(&api, database.clone(), "reconcile-serve", "info").await;
    let client = crate::support::connect(db.config()).await;
    let count = |sql: &'static str| {
        let client = &client;
        async move {
            client
                .query_one(sql, &[])
                .await
                .expect("count")
                .get::<_, i64>(0)
        }
    };
    wait_for(
        "serve's pass to recover both",
        Duration::from_secs(30),
        || async {
            (count("SELECT count(*) FROM webhook_events WHERE origin = 'api'").await == 2)
                .then_some(())
        },
    )
    .await;
    assert_eq!(
        count("SELECT count(*) FROM payments WHERE payment_id LIKE 'pi_evt_rc_served_%'").await,
        2
    );
    // Its lease, held for most of the interval.
    assert_eq!(
        count("SELECT count(*) FROM hookd_job_leases WHERE job = 'reconcile:stripe' AND expires_at > now()")
            .await,
        1
    );
    // The pass counts itself once its last page is stored, after the rows (its
    // runs and recoveries are shown from 0 at start, for an alert to see the
    // first failure as a rise).
    let ok = "hookd_reconcile_runs_total{source=\"stripe\",result=\"ok\"} 1";
    let text = scraped_with(&hookd.base, ok).await;
    assert!(
        text.contains("hookd_reconcile_runs_total{source=\"stripe\",result=\"error\"} 0"),
        "{text}"
    );
    assert!(
        text.contains("hookd_reconcile_recovered_total{source=\"stripe\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("hookd_reconcile_runs_total{source=\"stripe\",result=\"ok\"} 1"),
        "{text}"
    );
    // Paged one event at a time.
    assert_eq!(api.seen().len(), 2);
    drop(hookd);
    let log = std::fs::read_to_string(config.with_extension("log")).expect("log");
    assert!(
        log.contains("2 listed, 0 present, 2 recovered, 0 conflicts"),
        "{log}"
    );
    assert!(!log.contains(KEY));
}

#[tokio::test]
async fn a_pass_serve_cannot_make_is_counted_an_error_for_the_alert() {
    let db = crate::support::TestDb::create().await;
    let database = crate::support::cluster().connection_string(&db.name);
    // A key the provider refuses (revoked, or a typo in the secret).
    let api = ProviderApi::start(|_: &Seen| -> Answer {
        let body = json!({"error": {"type": "invalid_request_error", "message": "Invalid API Key provided"}});
        (401, vec![], body.to_string())
    })
    .await;
    let (hookd, config) = serve_reconciling(&api, database, "reconcile-serve-fails", "info").await;
    let error = "hookd_reconcile_runs_total{source=\"stripe\",result=\"error\"} 1";
    let text = scraped_with(&hookd.base, error).await;
    assert!(
        text.contains("hookd_reconcile_runs_total{source=\"stripe\",result=\"ok\"} 0"),
        "{text}"
    );
    assert!(
        text.contains("hookd_reconcile_recovered_total{source=\"stripe\"} 0"),
        "{text}"
    );
    drop(hookd);
    let log = std::fs::read_to_string(config.with_extension("log")).expect("log");
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("reconcile stripe:") && l.contains("401")),
        "{log}"
    );
    assert!(!log.contains(KEY));
}

#[tokio::test]
async fn serve_leaves_the_pass_to_the_instance_holding_its_lease() {
    let db = crate::support::TestDb::create().await;
    let database = crate::support::cluster().connection_string(&db.name);
    let api = ProviderApi::start(stripe_list(vec![paid("evt_rc_leased", 0)], 10)).await;
    // Another instance holds this source's pass for the next hour.
    crate::support::connect(db.config())
        .await
        .execute(
            "INSERT INTO hookd_job_leases (job, holder, expires_at)
             VALUES ('reconcile:stripe', '\\x0123', now() + interval '1 hour')",
            &[],
        )
        .await
        .expect("lease");
    let level = "info,hookd::reconcile=debug";
    let (hookd, config) = serve_reconciling(&api, database, "reconcile-leased", level).await;
    let skipped = "reconcile stripe: another instance holds the pass";
    crate::support::wait_for_log(&config.with_extension("log"), skipped, 1).await;
    assert!(api.seen().is_empty(), "the API was not asked");
    let (_, text) = metrics_text(&hookd.base).await;
    for result in ["ok", "error"] {
        let sample =
            format!("hookd_reconcile_runs_total{{source=\"stripe\",result=\"{result}\"}} 0");
        assert!(text.contains(&sample), "{text}");
    }
    let stored = crate::support::connect(db.config())
        .await
        .query_one("SELECT count(*) FROM webhook_events", &[])
        .await
        .expect("count")
        .get::<_, i64>(0);
    assert_eq!(stored, 0);
}

/// `hookd serve` on `database` whose Stripe source reconciles against `api`
/// every minute (its first pass within 6 s of start, the next a minute
/// later: the tests see one pass, however slow the machine); its
/// configuration's path (the log is beside it).
async fn serve_reconciling(
    api: &ProviderApi,
    database: String,
    name: &str,
    level: &str,
) -> (crate::process::Hookd, std::path::PathBuf) {
    let port = crate::process::free_port();
    let config = crate::process::write_config(port, name);
    let mut env = api.env("stripe", KEY, database);
    env.push(("HOOKD_SOURCE_STRIPE_RECONCILE", "true".into()));
    env.push(("HOOKD_SOURCE_STRIPE_RECONCILE_INTERVAL", "60s".into()));
    let hookd = crate::process::Hookd::start_with_env(&config, port, &env, level).await;
    (hookd, config)
}

/// The first scrape of `base` holding `sample` (30 s at most).
async fn scraped_with(base: &str, sample: &str) -> String {
    wait_for(
        &format!("a scrape with {sample}"),
        Duration::from_secs(30),
        || async {
            let (status, text) = metrics_text(base).await;
            (status == 200 && text.contains(sample)).then_some(text)
        },
    )
    .await
}

async fn metrics_text(base: &str) -> (u16, String) {
    let response = reqwest::get(format!("{base}/metrics"))
        .await
        .expect("metrics");
    let status = response.status().as_u16();
    (status, response.text().await.expect("text"))
}

/// `hookd reconcile --source NAME` with `env` on top of the API's trust.
async fn reconcile_source(
    api: &ProviderApi,
    app: &TestApp,
    source: &str,
    credentials: &[(&'static str, String)],
) -> std::process::Output {
    let mut env = api.trust.clone();
    env.push(("DATABASE_URL", app.database_url()));
    env.push((
        leak(format!(
            "HOOKD_SOURCE_{}_API_BASE",
            source.to_ascii_uppercase()
        )),
        api.url.clone(),
    ));
    env.extend(credentials.iter().cloned());
    run_hookd_with(&["reconcile", "--source", source], &env).await
}

/// A pass of `source` sent only `types` (its `…_RECONCILE_TYPES`), which
/// must succeed: its one line, and the requests it sent the provider.
async fn typed_pass(
    api: &ProviderApi,
    app: &TestApp,
    source: &str,
    credentials: &[(&'static str, String)],
    types: &str,
) -> (String, Vec<Seen>) {
    let before = api.seen().len();
    let mut typed = credentials.to_vec();
    typed.push((
        leak(format!(
            "HOOKD_SOURCE_{}_RECONCILE_TYPES",
            source.to_ascii_uppercase()
        )),
        types.to_string(),
    ));
    let out = reconcile_source(api, app, source, &typed).await;
    assert!(out.status.success(), "{types}: {}", stderr(&out));
    (stdout(&out), api.seen()[before..].to_vec())
}

fn an_hour_ago() -> String {
    (chrono::Utc::now() - chrono::Duration::hours(1)).to_rfc3339()
}

fn bearer(seen: &Seen, token: &str) -> bool {
    seen.header("authorization") == Some(&format!("Bearer {token}"))
}

const REFUSED: (u16, &str) = (401, r#"{"error":{"detail":"bad key"}}"#);

fn refused() -> Answer {
    (REFUSED.0, vec![], REFUSED.1.to_string())
}

async fn recovered_of(app: &TestApp, source: &str) -> i64 {
    app.count(
        "SELECT count(*) FROM webhook_events WHERE source = $1 AND origin = 'api' AND signed_with = -1",
        &[&source],
    )
    .await
}

#[tokio::test]
async fn paddle_is_paged_by_its_after_cursor_and_a_later_notification_is_a_duplicate() {
    let app = spawn_app().await;
    let event = |i: u32| {
        json!({"event_id": format!("evt_01rcpaddle{i}"), "event_type": "customer.created",
               "occurred_at": an_hour_ago(), "data": {"id": format!("ctm_{i}")}})
    };
    // Newest first; the last one is older than the window and ends the paging.
    let mut old = event(0);
    old["occurred_at"] = json!((chrono::Utc::now() - chrono::Duration::days(10)).to_rfc3339());
    let listed = vec![event(3), event(2), event(1), old];
    let served = listed.clone();
    let api = ProviderApi::start(move |seen: &Seen| {
        if !bearer(seen, "pdl_apikey_test") {
            return refused();
        }
        assert_eq!(param(seen, "order_by").as_deref(), Some("id[DESC]"));
        // `event_type`: Paddle's filter, a comma-separated list.
        let types = param(seen, "event_type");
        let served: Vec<&Value> = served
            .iter()
            .filter(|e| {
                types.as_deref().is_none_or(|types| {
                    types.split(',').any(|t| e["event_type"] == t)
                })
            })
            .collect();
        let start = match param(seen, "after") {
            Some(after) => served.iter().position(|e| e["event_id"] == after.as_str()).expect("id") + 1,
            None => 0,
        };
        let data: Vec<&Value> = served.iter().skip(start).take(2).copied().collect();
        let last = data.last().map(|e| e["event_id"].clone()).unwrap_or_default();
        let has_more = start + data.len() < served.len();
        let next = format!("https://api.paddle.com/events?after={}", last.as_str().unwrap_or(""));
        let body = json!({"data": data, "meta": {"request_id": "r",
            "pagination": {"per_page": 2, "next": next, "has_more": has_more, "estimated_total": 4}}});
        (200, vec![], body.to_string())
    })
    .await;
    let key = [("HOOKD_SOURCE_PADDLE_API_KEY", "pdl_apikey_test".to_string())];
    let out = reconcile_source(&api, &app, "paddle", &key).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "3 listed, 0 present, 3 recovered, 0 conflicts\n"
    );
    assert_eq!(api.seen().len(), 2);
    assert_eq!(
        param(&api.seen()[1], "after").as_deref(),
        Some("evt_01rcpaddle2")
    );
    assert_eq!(recovered_of(&app, "paddle").await, 3);

    // Paddle's notification of one of them: the same event, with its own id.
    let mut notified = listed[0].clone();
    notified["notification_id"] = json!("ntf_01rcpaddle3");
    let answer = app.deliver_ok("paddle", &notified).await;
    assert_eq!(answer.header("Idempotent-Replayed"), Some("true"));
    assert_eq!(
        app.count("SELECT count(*) FROM event_conflicts", &[]).await,
        0
    );
    let out = reconcile_source(&api, &app, "paddle", &key).await;
    assert_eq!(
        stdout(&out),
        "3 listed, 3 present, 0 recovered, 0 conflicts\n"
    );

    // A source sent only some exact types asks Paddle for those alone.
    let types = "transaction.completed,customer.created";
    let (said, sent) = typed_pass(&api, &app, "paddle", &key, types).await;
    assert_eq!(said, "3 listed, 3 present, 0 recovered, 0 conflicts\n");
    assert_eq!(param(&sent[0], "event_type").as_deref(), Some(types));
    let (said, _) = typed_pass(&api, &app, "paddle", &key, "transaction.completed").await;
    assert_eq!(said, "0 listed, 0 present, 0 recovered, 0 conflicts\n");
}

#[tokio::test]
async fn gocardless_is_paged_by_its_cursor_with_its_version_header() {
    let app = spawn_app().await;
    let event = |i: u32| {
        json!({"id": format!("EVRC{i}"), "created_at": an_hour_ago(),
               "resource_type": "payments", "action": "confirmed",
               "links": {"payment": format!("PMRC{i}")}, "details": {"origin": "gocardless",
               "cause": "payment_confirmed"}, "metadata": {}})
    };
    let listed = [event(3), event(2), event(1)];
    let api = ProviderApi::start(move |seen: &Seen| {
        if !bearer(seen, "live_gc_token") || seen.header("gocardless-version") != Some("2015-07-06") {
            return refused();
        }
        assert!(param(seen, "created_at[gte]").is_some(), "{}", seen.target);
        // GoCardless's own filters: one resource type, one action.
        let (resource, action) = (param(seen, "resource_type"), param(seen, "action"));
        let listed: Vec<&Value> = listed
            .iter()
            .filter(|e| resource.as_deref().is_none_or(|r| e["resource_type"] == r))
            .filter(|e| action.as_deref().is_none_or(|a| e["action"] == a))
            .collect();
        let start = match param(seen, "after") {
            Some(after) => listed.iter().position(|e| e["id"] == after.as_str()).expect("id") + 1,
            None => 0,
        };
        let events: Vec<&&Value> = listed.iter().skip(start).take(2).collect();
        let after = if start + events.len() < listed.len() {
            events.last().map(|e| e["id"].clone()).unwrap_or(Value::Null)
        } else {
            Value::Null
        };
        let body = json!({"events": events, "meta": {"cursors": {"before": null, "after": after}, "limit": 2}});
        (200, vec![], body.to_string())
    })
    .await;
    let key = [(
        "HOOKD_SOURCE_GOCARDLESS_API_KEY",
        "live_gc_token".to_string(),
    )];
    let out = reconcile_source(&api, &app, "gocardless", &key).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "3 listed, 0 present, 3 recovered, 0 conflicts\n"
    );
    assert_eq!(api.seen().len(), 2);
    assert_eq!(recovered_of(&app, "gocardless").await, 3);
    assert_eq!(
        app.count(
            "SELECT count(*) FROM payments WHERE source = 'gocardless' AND payment_id LIKE 'PMRC%'",
            &[]
        )
        .await,
        3
    );

    // A source sent only some exact types asks GoCardless for what they share.
    for (types, resource, action, counted) in [
        (
            "payments.confirmed",
            "payments",
            Some("confirmed"),
            "3 listed, 3 present",
        ),
        (
            "mandates.created,mandates.cancelled",
            "mandates",
            None,
            "0 listed, 0 present",
        ),
    ] {
        let (said, sent) = typed_pass(&api, &app, "gocardless", &key, types).await;
        assert_eq!(
            said,
            format!("{counted}, 0 recovered, 0 conflicts\n"),
            "{types}"
        );
        assert_eq!(param(&sent[0], "resource_type").as_deref(), Some(resource));
        assert_eq!(param(&sent[0], "action").as_deref(), action, "{types}");
    }
}

#[tokio::test]
async fn paypal_exchanges_its_client_credentials_and_follows_the_next_link() {
    let app = spawn_app().await;
    let event = |i: u32| {
        json!({"id": format!("WH-RC-{i}"), "event_version": "1.0", "create_time": an_hour_ago(),
               "resource_type": "capture", "event_type": "PAYMENT.CAPTURE.COMPLETED",
               "summary": "Payment completed",
               "resource": {"id": format!("CAPRC{i}"), "status": "COMPLETED",
                            "amount": {"currency_code": "USD", "value": "10.00"}},
               "links": []})
    };
    let listed = [event(2), event(1)];
    let api = ProviderApi::start(move |seen: &Seen| {
        if seen.target == "/v1/oauth2/token" {
            use base64::Engine;
            let basic = base64::engine::general_purpose::STANDARD.encode("pp-client:pp-secret");
            if seen.method != "POST" || seen.header("authorization") != Some(&format!("Basic {basic}"))
                || seen.body != b"grant_type=client_credentials"
            {
                return (401, vec![], r#"{"error":"invalid_client","error_description":"Client Authentication failed"}"#.into());
            }
            return (200, vec![], json!({"access_token": "A21-token", "token_type": "Bearer", "expires_in": 32400}).to_string());
        }
        if !bearer(seen, "A21-token") {
            return refused();
        }
        assert!(param(seen, "start_time").is_some() && param(seen, "end_time").is_some());
        // `event_type`: PayPal's filter, one type.
        let only = param(seen, "event_type");
        let listed: Vec<&Value> = listed
            .iter()
            .filter(|e| only.as_deref().is_none_or(|t| e["event_type"] == t))
            .collect();
        let page: usize = param(seen, "page").map_or(0, |p| p.parse().expect("page"));
        let mut links = vec![];
        if page + 1 < listed.len() {
            let next = format!(
                "https://api-m.paypal.com/v1/notifications/webhooks-events?page_size=1&start_time={}&end_time={}&page={}",
                param(seen, "start_time").unwrap_or_default(),
                param(seen, "end_time").unwrap_or_default(),
                page + 1
            );
            links.push(json!({"href": next, "rel": "next", "method": "GET"}));
        }
        let events: Vec<&&Value> = listed.get(page).into_iter().collect();
        let body = json!({"events": events, "count": events.len(), "links": links});
        (200, vec![], body.to_string())
    })
    .await;
    let credentials = [
        ("HOOKD_SOURCE_PAYPAL_CLIENT_ID", "pp-client".to_string()),
        ("HOOKD_SOURCE_PAYPAL_CLIENT_SECRET", "pp-secret".to_string()),
    ];
    let out = reconcile_source(&api, &app, "paypal", &credentials).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "2 listed, 0 present, 2 recovered, 0 conflicts\n"
    );
    // The token once, then two pages.
    assert_eq!(api.seen().len(), 3);
    assert_eq!(recovered_of(&app, "paypal").await, 2);

    // A source sent one exact type asks PayPal for it alone; two, for every type.
    for (types, asked_for, counted) in [
        (
            "PAYMENT.CAPTURE.DENIED",
            Some("PAYMENT.CAPTURE.DENIED"),
            "0 listed, 0 present",
        ),
        (
            "PAYMENT.CAPTURE.COMPLETED,PAYMENT.CAPTURE.DENIED",
            None,
            "2 listed, 2 present",
        ),
    ] {
        let (said, sent) = typed_pass(&api, &app, "paypal", &credentials, types).await;
        assert_eq!(
            said,
            format!("{counted}, 0 recovered, 0 conflicts\n"),
            "{types}"
        );
        // After the token, the first page.
        assert_eq!(
            param(&sent[1], "event_type").as_deref(),
            asked_for,
            "{types}"
        );
    }

    // A wrong secret: PayPal's answer, not the secret.
    let wrong = [
        ("HOOKD_SOURCE_PAYPAL_CLIENT_ID", "pp-client".to_string()),
        (
            "HOOKD_SOURCE_PAYPAL_CLIENT_SECRET",
            "pp-wrong-secret".to_string(),
        ),
    ];
    let out = reconcile_source(&api, &app, "paypal", &wrong).await;
    assert_eq!(out.status.code(), Some(1));
    let said = stderr(&out);
    assert!(said.contains("Client Authentication failed"), "{said}");
    assert!(!said.contains("pp-wrong-secret"), "{said}");
}

#[tokio::test]
async fn square_searches_with_its_cursor_and_the_same_query() {
    let app = spawn_app().await;
    let event = |i: u32| {
        json!({"merchant_id": "MRC", "location_id": "LRC", "type": "customer.created",
               "event_id": format!("rc-square-{i}"), "created_at": an_hour_ago(),
               "data": {"type": "customer", "id": format!("CUST{i}"), "object": {}}})
    };
    let listed = [event(1), event(2), event(3)];
    let api = ProviderApi::start(move |seen: &Seen| {
        if !bearer(seen, "EAAA-square-token")
            || seen.method != "POST"
            || seen.target != "/v2/events"
        {
            return refused();
        }
        let search: Value = serde_json::from_slice(&seen.body).expect("json");
        assert!(
            search["query"]["filter"]["created_at"]["start_at"].is_string(),
            "{search}"
        );
        // SearchEventsSort's members, as Square's API reference names them
        // (`field`, `order`); a field Square does not know is a 400.
        let sort = &search["query"]["sort"];
        if sort != &json!({"field": "DEFAULT", "order": "ASC"}) {
            let body = json!({"errors": [{"category": "INVALID_REQUEST_ERROR",
                "code": "BAD_REQUEST", "detail": format!("Unrecognized sort: {sort}")}]});
            return (400, vec![], body.to_string());
        }
        // `filter.event_types`: Square's own filter, as its API reference names it.
        let types = &search["query"]["filter"]["event_types"];
        let listed: Vec<&Value> = listed
            .iter()
            .filter(|e| {
                types
                    .as_array()
                    .is_none_or(|types| types.contains(&e["type"]))
            })
            .collect();
        let start: usize = search["cursor"]
            .as_str()
            .map_or(0, |c| c.parse().expect("cursor"));
        let events: Vec<&&Value> = listed.iter().skip(start).take(2).collect();
        let mut body = json!({"events": events, "metadata": []});
        if start + events.len() < listed.len() {
            body["cursor"] = json!((start + events.len()).to_string());
        }
        (200, vec![], body.to_string())
    })
    .await;
    let key = [(
        "HOOKD_SOURCE_SQUARE_API_KEY",
        "EAAA-square-token".to_string(),
    )];
    let out = reconcile_source(&api, &app, "square", &key).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "3 listed, 0 present, 3 recovered, 0 conflicts\n"
    );
    assert_eq!(api.seen().len(), 2);
    assert_eq!(recovered_of(&app, "square").await, 3);

    let event_types = |seen: &Seen| {
        let search: Value = serde_json::from_slice(&seen.body).expect("json");
        search["query"]["filter"]["event_types"].clone()
    };
    // Without reconcile_types, every type.
    assert!(api.seen().iter().all(|seen| event_types(seen).is_null()));

    // A source sent only some exact types asks Square for those alone, the
    // next page with the same query.
    let (said, sent) = typed_pass(&api, &app, "square", &key, "customer.created").await;
    assert_eq!(said, "3 listed, 3 present, 0 recovered, 0 conflicts\n");
    assert_eq!(sent.len(), 2);
    for seen in &sent {
        assert_eq!(event_types(seen), json!(["customer.created"]));
    }
    let (said, sent) = typed_pass(&api, &app, "square", &key, "payment.updated").await;
    assert_eq!(said, "0 listed, 0 present, 0 recovered, 0 conflicts\n");
    assert_eq!(sent.len(), 1, "one page, already empty");
}

#[tokio::test]
async fn reconcile_on_a_provider_without_a_list_of_past_events_stops_check_config() {
    for (source, offers) in [
        ("ADYEN", "Customer Area"),
        ("RAZORPAY", "Dashboard"),
        ("CHECKOUT", "by payment"),
        ("BRAINTREE", "transactions"),
    ] {
        let var = format!("HOOKD_SOURCE_{source}_RECONCILE");
        let out = crate::support::check_config("", &[(var.as_str(), "true")]).await;
        assert_eq!(out.status.code(), Some(78), "{source}");
        let said = stderr(&out);
        let lines: Vec<&str> = said.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{said}");
        assert!(
            lines[0].contains(&format!("{var}: ")) && lines[0].contains(offers),
            "{said}"
        );
    }
    // Where the provider lists its events, the same is accepted (with a key).
    let out = crate::support::check_config(
        "",
        &[
            ("HOOKD_SOURCE_STRIPE_RECONCILE", "true"),
            ("HOOKD_SOURCE_STRIPE_API_KEY", "rk_test_check"),
        ],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
}

#[tokio::test]
async fn an_event_the_api_lists_with_another_payload_is_a_conflict_recorded_once() {
    let app = spawn_app().await;
    let delivered = paid("evt_rc_conflict", 1);
    app.deliver_ok("stripe", &delivered).await;
    // The API lists the same id with another amount: not the event hookd holds.
    let mut listed = delivered.clone();
    listed["data"]["object"]["amount"] = json!(9900);
    let api = ProviderApi::start(stripe_list(vec![listed], 10)).await;

    let dry = reconcile(&api, &app, KEY, &["--dry-run"]).await;
    assert_eq!(
        stdout(&dry),
        "1 listed, 0 present, 0 recovered, 1 conflicts\n"
    );
    assert_eq!(
        app.count("SELECT count(*) FROM event_conflicts", &[]).await,
        0,
        "a dry run records nothing"
    );
    for _ in 0..2 {
        let out = reconcile(&api, &app, KEY, &[]).await;
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(
            stdout(&out),
            "1 listed, 0 present, 0 recovered, 1 conflicts\n"
        );
    }
    // Recorded as a delivery's conflict is, once for that payload; the stored
    // event is untouched.
    assert_eq!(
        app.count("SELECT count(*) FROM event_conflicts", &[]).await,
        1
    );
    let amount = &app
        .query(
            "SELECT (payload #>> '{data,object,amount}')::int FROM webhook_events \
             WHERE event_id = 'evt_rc_conflict'",
            &[],
        )
        .await[0];
    assert_eq!(amount.get::<_, i32>(0), 1200);
}
