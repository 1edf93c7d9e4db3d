//! The Idempotency-Key gateway through real HTTP, a real PostgreSQL and a real
//! upstream that counts what it gets: every case of the rules' table (a new
//! key, a copy, one in flight, another request under the key, no key, a bad
//! key, 5xx/408/429, a refused connection, no answer), and what surrounds them
//! (scopes, hop-by-hop headers, answers over 1 MiB, expiry, routes).

use std::time::Duration;

use hookd::config::Settings;
use hookd_kit::settings::SHIPPED_TOML;
use serde_json::{Value, json};

use crate::support::upstream::{Reply, Upstream, refusing_url};
use crate::support::{Answer, Spawn, TestApp, check_config, spawn, spawn_with_settings};

const AUTH: &str = "Bearer sk_test_alice";

/// A `[[gateway.routes]]` table.
pub fn route(name: &str, path: &str, upstream: &str, extra: &str) -> String {
    format!(
        "[[gateway.routes]]\nname = \"{name}\"\npath = \"{path}\"\nupstream = \"{upstream}\"\n{extra}\n"
    )
}

/// The shipped settings with the gateway on (a free port) and these routes.
pub fn settings_with(routes: &str) -> Settings {
    let text = format!("{SHIPPED_TOML}\n[gateway]\nlisten = \"127.0.0.1:0\"\n{routes}");
    let mut settings = Settings::from_toml("hookd.toml", &text, &Default::default())
        .unwrap_or_else(|e| panic!("{e}"));
    settings.listen = "127.0.0.1:0".parse().expect("addr");
    settings
}

/// An app whose gateway has these routes.
pub async fn gateway(routes: &str) -> TestApp {
    spawn_with_settings(settings_with(routes)).await
}

/// An app whose gateway has one route, `payments` at `/payments`, to `upstream`.
pub async fn payments_gateway(upstream: &str, extra: &str) -> TestApp {
    gateway(&route("payments", "/payments", upstream, extra)).await
}

/// An upstream that cuts the first request and then answers 201 with `answer`,
/// behind a `payments` route that does not resend an unknown outcome.
pub async fn cut_once_without_resend(answer: &str) -> (Upstream, TestApp) {
    let upstream = Upstream::start(vec![Reply::Cut], Reply::json(201, answer)).await;
    let app = payments_gateway(&upstream.url, "resend_unknown = false").await;
    (upstream, app)
}

/// A request through the gateway.
pub struct Call<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub key: Option<&'a str>,
    pub auth: Option<&'a str>,
    pub body: &'a str,
    pub headers: Vec<(&'a str, &'a str)>,
}

impl<'a> Call<'a> {
    pub fn post(path: &'a str, key: &'a str, body: &'a str) -> Self {
        Call {
            method: "POST",
            path,
            key: Some(key),
            auth: Some(AUTH),
            body,
            headers: Vec::new(),
        }
    }

    pub fn header(mut self, name: &'a str, value: &'a str) -> Self {
        self.headers.push((name, value));
        self
    }

    pub async fn send(&self, app: &TestApp) -> Answer {
        let base = app.gateway_base.as_ref().expect("the gateway listens");
        let method = reqwest::Method::from_bytes(self.method.as_bytes()).expect("method");
        let mut request = app
            .http
            .request(method, format!("{base}{}", self.path))
            .body(self.body.to_string());
        if let Some(key) = self.key {
            request = request.header("Idempotency-Key", key);
        }
        if let Some(auth) = self.auth {
            request = request.header("Authorization", auth);
        }
        for (name, value) in &self.headers {
            request = request.header(*name, *value);
        }
        Answer::read(request.send().await.expect("request")).await
    }
}

/// The state of the row of `key`.
pub async fn state_of(app: &TestApp, key: &str) -> String {
    app.strings(
        "SELECT state FROM api_idempotency_keys WHERE idempotency_key = $1",
        &[&key],
    )
    .await
    .pop()
    .unwrap_or_else(|| "none".into())
}

fn error_of(answer: &Answer) -> Value {
    answer.json()
}

const ORDER: &str = r#"{"amount": 1000, "currency": "EUR", "order": "ord_1"}"#;

#[tokio::test]
async fn a_new_key_reaches_upstream_once_and_a_copy_gets_its_answer_byte_for_byte() {
    let upstream = Upstream::start(
        vec![],
        Reply::json(201, r#"{"id":"pay_1","status":"succeeded"}"#)
            .with_header("Location", "/payments/pay_1")
            .with_header("X-Request-Cost", "3")
            .with_header("X-Not-Kept", "1"),
    )
    .await;
    let app = payments_gateway(&upstream.url, "replay_headers = [\"X-Request-Cost\"]").await;
    let first = Call::post("/payments", "key-1", ORDER).send(&app).await;
    assert_eq!(first.status, 201);
    assert_eq!(first.body, br#"{"id":"pay_1","status":"succeeded"}"#);
    assert_eq!(first.header("location"), Some("/payments/pay_1"));
    assert_eq!(first.header("x-not-kept"), Some("1"));
    assert_eq!(first.header("idempotent-replayed"), None);
    let operation = first
        .header("idempotency-operation")
        .expect("an operation")
        .to_string();
    assert!(operation.starts_with("op_"), "{operation}");
    assert_eq!(upstream.calls(), 1);
    // Upstream got the client's key and hookd's operation, the body unchanged.
    let seen = &upstream.seen()[0];
    assert_eq!(
        (seen.method.as_str(), seen.target.as_str()),
        ("POST", "/payments")
    );
    assert_eq!(seen.header("idempotency-key"), Some("key-1"));
    assert_eq!(
        seen.header("idempotency-operation"),
        Some(operation.as_str())
    );
    assert_eq!(seen.header("authorization"), Some(AUTH));
    assert_eq!(seen.body, ORDER.as_bytes());
    assert_eq!(state_of(&app, "key-1").await, "completed");

    // The same request again, keys reordered and spaced otherwise: the same answer.
    let copy = Call::post(
        "/payments",
        "key-1",
        r#"{"order":"ord_1","currency":"EUR","amount":1000}"#,
    )
    .send(&app)
    .await;
    assert_eq!(copy.status, 201);
    assert_eq!(copy.body, first.body);
    assert_eq!(copy.header("content-type"), Some("application/json"));
    assert_eq!(copy.header("location"), Some("/payments/pay_1"));
    assert_eq!(copy.header("x-request-cost"), Some("3"));
    assert_eq!(copy.header("x-not-kept"), None);
    assert_eq!(copy.header("idempotent-replayed"), Some("true"));
    // Upstream's stored answer, as it wrote it: no request id of hookd's.
    assert_eq!(first.header("x-request-id"), None);
    assert_eq!(copy.header("x-request-id"), None);
    assert_eq!(
        copy.header("idempotency-operation"),
        Some(operation.as_str())
    );
    assert_eq!(upstream.calls(), 1, "a copy never reaches upstream");
}

#[tokio::test]
async fn a_compressed_answer_is_replayed_with_its_encoding() {
    // `{"id":"pay_gz","status":"succeeded"}`, gzipped as an upstream does for
    // a client that accepts gzip (the gateway passes bytes on, never decodes).
    const GZIPPED: [u8; 55] = [
        31, 139, 8, 0, 0, 0, 0, 0, 2, 3, 171, 86, 202, 76, 81, 178, 82, 42, 72, 172, 140, 79, 175,
        82, 210, 81, 42, 46, 73, 44, 41, 45, 6, 138, 20, 151, 38, 39, 167, 166, 166, 164, 166, 40,
        213, 2, 0, 217, 132, 167, 43, 36, 0, 0, 0,
    ];
    let upstream = Upstream::start(
        vec![],
        Reply::Answer {
            status: 201,
            headers: vec![
                ("Content-Type".into(), "application/json".into()),
                ("Content-Encoding".into(), "gzip".into()),
            ],
            body: GZIPPED.to_vec(),
            delay: Duration::ZERO,
        },
    )
    .await;
    let app = payments_gateway(&upstream.url, "").await;
    let first = Call::post("/payments", "gz", ORDER).send(&app).await;
    assert_eq!(
        (first.status, first.header("content-encoding")),
        (201, Some("gzip"))
    );
    assert_eq!(first.body, GZIPPED);
    let copy = Call::post("/payments", "gz", ORDER).send(&app).await;
    assert_eq!(copy.header("idempotent-replayed"), Some("true"));
    assert_eq!(copy.body, GZIPPED);
    assert_eq!(
        copy.header("content-encoding"),
        Some("gzip"),
        "the stored bytes are gzip: a copy must be told so"
    );
    assert_eq!(upstream.calls(), 1);
}

#[tokio::test]
async fn without_a_key_a_route_that_requires_one_answers_400_and_one_that_does_not_passes_it_on() {
    let upstream = Upstream::created().await;
    let routes = route("payments", "/payments", &upstream.url, "")
        + &route("quotes", "/quotes", &upstream.url, "required = false");
    let app = gateway(&routes).await;
    let mut call = Call::post("/payments", "unused", ORDER);
    call.key = None;
    let refused = call.send(&app).await;
    assert_eq!(refused.status, 400);
    assert_eq!(
        error_of(&refused),
        json!({"error": "idempotency_key_missing"})
    );
    assert_eq!(upstream.calls(), 0);
    // A refusal is hookd's own answer: it carries a request id, the caller's
    // when it sent a sane one.
    let fresh = refused.header("x-request-id").expect("a request id");
    assert_eq!(fresh.len(), 32, "{fresh}");
    let mut traced = Call::post("/payments", "unused", ORDER).header("X-Request-Id", "req-7");
    traced.key = None;
    assert_eq!(
        traced.send(&app).await.header("x-request-id"),
        Some("req-7")
    );

    call.path = "/quotes";
    for _ in 0..2 {
        let passed = call.send(&app).await;
        assert_eq!(passed.status, 201);
        assert_eq!(passed.header("idempotency-operation"), None);
    }
    assert_eq!(upstream.calls(), 2, "unkeyed requests are not deduplicated");
    assert_eq!(
        app.count("SELECT count(*) FROM api_idempotency_keys", &[])
            .await,
        0
    );
}

#[tokio::test]
async fn a_key_that_is_not_1_to_255_visible_characters_is_400_and_a_quoted_one_is_its_content() {
    let upstream = Upstream::created().await;
    let app = payments_gateway(&upstream.url, "").await;
    let long = "k".repeat(256);
    for bad in [
        "",
        "two words",
        long.as_str(),
        "\"unclosed",
        "\"bad\\escape\"",
    ] {
        let answer = Call::post("/payments", bad, ORDER).send(&app).await;
        assert_eq!(answer.status, 400, "{bad:?}");
        assert_eq!(
            error_of(&answer),
            json!({"error": "idempotency_key_invalid"})
        );
    }
    // Bytes beyond ASCII, and two keys at once.
    let base = app.gateway_base.as_ref().expect("gateway");
    for request in [
        app.http.post(format!("{base}/payments")).header(
            "Idempotency-Key",
            reqwest::header::HeaderValue::from_bytes(b"caf\xe9").expect("obs-text"),
        ),
        app.http
            .post(format!("{base}/payments"))
            .header("Idempotency-Key", "a")
            .header("Idempotency-Key", "b"),
    ] {
        let answer = Answer::read(
            request
                .header("Authorization", AUTH)
                .body(ORDER)
                .send()
                .await
                .expect("request"),
        )
        .await;
        assert_eq!(answer.status, 400);
        assert_eq!(
            error_of(&answer),
            json!({"error": "idempotency_key_invalid"})
        );
    }
    assert_eq!(upstream.calls(), 0);
    let at_most = "k".repeat(255);
    assert_eq!(
        Call::post("/payments", &at_most, ORDER)
            .send(&app)
            .await
            .status,
        201
    );
    // "abc" as the draft writes it is the key abc.
    assert_eq!(
        Call::post("/payments", "\"abc\"", ORDER)
            .send(&app)
            .await
            .status,
        201
    );
    let copy = Call::post("/payments", "abc", ORDER).send(&app).await;
    assert_eq!(copy.header("idempotent-replayed"), Some("true"));
    assert_eq!(upstream.calls(), 2);
}

#[tokio::test]
async fn the_same_key_for_another_request_is_422_whatever_its_state() {
    let upstream = Upstream::start(
        vec![Reply::json(503, r#"{"error":"busy"}"#)],
        Reply::json(201, r#"{"id":"pay_1"}"#),
    )
    .await;
    let app = gateway(&route(
        "orders",
        "/orders/*",
        &upstream.url,
        "fingerprint_ignore = [\"/client_time\"]",
    ))
    .await;
    let order = r#"{"amount": 1000, "client_time": 1}"#;
    // Released (upstream said 503): another request under the key is refused.
    assert_eq!(
        Call::post("/orders/1", "k", order).send(&app).await.status,
        503
    );
    assert_eq!(state_of(&app, "k").await, "released");
    for (path, body) in [
        ("/orders/1", r#"{"amount": 1001, "client_time": 1}"#),
        ("/orders/2", order),
        ("/orders/1?dry_run=1", order),
    ] {
        let reused = Call::post(path, "k", body).send(&app).await;
        assert_eq!(reused.status, 422, "{path} {body}");
        assert_eq!(
            error_of(&reused),
            json!({"error": "idempotency_key_reused"})
        );
    }
    // A field the route leaves out of the fingerprint may change.
    let retried = Call::post("/orders/1", "k", r#"{"amount": 1000, "client_time": 2}"#)
        .send(&app)
        .await;
    assert_eq!(retried.status, 201);
    // Completed: the same, and the answer names the key's operation.
    let reused = Call::post("/orders/1", "k", r#"{"amount": 5}"#)
        .send(&app)
        .await;
    assert_eq!(reused.status, 422);
    assert_eq!(
        reused.header("idempotency-operation"),
        retried.header("idempotency-operation")
    );
    assert!(reused.header("idempotency-operation").is_some());
    assert_eq!(upstream.calls(), 2);
}

#[tokio::test]
async fn a_body_an_upstream_may_read_otherwise_is_never_anothers_copy() {
    let upstream = Upstream::start(vec![], Reply::json(201, r#"{"id":"pay_1"}"#)).await;
    let app = payments_gateway(&upstream.url, "").await;
    // A member named twice: some parsers keep the first, some the last.
    let twice = r#"{"amount": 1, "amount": 100000}"#;
    assert_eq!(
        Call::post("/payments", "k", twice).send(&app).await.status,
        201
    );
    for other in [r#"{"amount": 100000}"#, r#"{"amount": 1}"#] {
        let reused = Call::post("/payments", "k", other).send(&app).await;
        assert_eq!(reused.status, 422, "{other}");
        assert_eq!(
            error_of(&reused),
            json!({"error": "idempotency_key_reused"})
        );
    }
    // A number beyond what a double holds, against its neighbour.
    let big = r#"{"amount": 100000000000000000001}"#;
    assert_eq!(
        Call::post("/payments", "b", big).send(&app).await.status,
        201
    );
    let neighbour = Call::post("/payments", "b", r#"{"amount": 100000000000000000000}"#)
        .send(&app)
        .await;
    assert_eq!(neighbour.status, 422);
    // The same bytes again are the copy they are.
    let copy = Call::post("/payments", "k", twice).send(&app).await;
    assert_eq!(copy.header("idempotent-replayed"), Some("true"));
    // Nesting far deeper than any parser takes (20,000 levels in 40 KB) is
    // fingerprinted as bytes, and passed on like any body.
    let deep = format!("{}{}", "[".repeat(20_000), "]".repeat(20_000));
    assert_eq!(
        Call::post("/payments", "d", &deep).send(&app).await.status,
        201
    );
    let copy = Call::post("/payments", "d", &deep).send(&app).await;
    assert_eq!(copy.header("idempotent-replayed"), Some("true"));
    assert_eq!(upstream.calls(), 3);
}

#[tokio::test]
async fn a_copy_while_the_first_is_in_flight_gets_409_with_retry_after_then_the_answer() {
    let upstream = Upstream::start(vec![], Reply::json(201, r#"{"id":"pay_slow"}"#)).await;
    upstream.hold();
    let app = std::sync::Arc::new(payments_gateway(&upstream.url, "").await);
    let first = {
        let app = app.clone();
        tokio::spawn(async move { Call::post("/payments", "slow", ORDER).send(&app).await })
    };
    upstream.wait_for_calls(1).await;
    let copy = Call::post("/payments", "slow", ORDER).send(&app).await;
    assert_eq!(copy.status, 409);
    assert_eq!(error_of(&copy), json!({"error": "request_in_progress"}));
    assert_eq!(copy.header("retry-after"), Some("1"));
    // Every answer to a request with a key carries the key's operation back.
    let operation = upstream.seen()[0]
        .header("idempotency-operation")
        .map(str::to_string);
    assert!(operation.is_some());
    assert_eq!(copy.header("idempotency-operation"), operation.as_deref());
    upstream.let_go();
    let first = first.await.expect("first");
    assert_eq!(first.status, 201);
    let later = Call::post("/payments", "slow", ORDER).send(&app).await;
    assert_eq!((later.status, later.body), (201, first.body));
    assert_eq!(upstream.calls(), 1);
}

#[tokio::test]
async fn a_failing_side_effect_is_passed_on_and_released_so_a_retry_succeeds_once() {
    let upstream = Upstream::start(
        vec![
            Reply::json(500, r#"{"error":"bank down"}"#),
            Reply::json(408, "{}"),
            Reply::json(429, "{}").with_header("Retry-After", "7"),
        ],
        Reply::json(201, r#"{"id":"pay_1"}"#),
    )
    .await;
    let app = payments_gateway(&upstream.url, "").await;
    let failed = Call::post("/payments", "k", ORDER).send(&app).await;
    assert_eq!(failed.status, 500);
    assert_eq!(
        failed.body, br#"{"error":"bank down"}"#,
        "passed on as it came"
    );
    assert_eq!(state_of(&app, "k").await, "released");
    let operation = failed
        .header("idempotency-operation")
        .expect("op")
        .to_string();
    assert_eq!(
        Call::post("/payments", "k", ORDER).send(&app).await.status,
        408
    );
    let limited = Call::post("/payments", "k", ORDER).send(&app).await;
    assert_eq!(
        (limited.status, limited.header("retry-after")),
        (429, Some("7"))
    );
    let done = Call::post("/payments", "k", ORDER).send(&app).await;
    assert_eq!(done.status, 201);
    assert_eq!(
        done.header("idempotency-operation"),
        Some(operation.as_str())
    );
    let again = Call::post("/payments", "k", ORDER).send(&app).await;
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(upstream.calls(), 4, "three failures, one success, no more");
    let operations: Vec<String> = upstream
        .seen()
        .iter()
        .map(|s| {
            s.header("idempotency-operation")
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert!(operations.iter().all(|o| *o == operation), "{operations:?}");
}

#[tokio::test]
async fn a_refused_connection_is_502_upstream_unavailable_and_the_key_is_released() {
    let app = gateway(&route("payments", "/payments", &refusing_url(), "")).await;
    for _ in 0..2 {
        let answer = Call::post("/payments", "k", ORDER).send(&app).await;
        assert_eq!(answer.status, 502);
        assert_eq!(error_of(&answer), json!({"error": "upstream_unavailable"}));
        assert_eq!(state_of(&app, "k").await, "released");
    }
}

#[tokio::test]
async fn sent_without_an_answer_is_502_unknown_and_a_copy_is_sent_again_with_the_same_operation() {
    let upstream = Upstream::start(
        vec![
            Reply::Cut,
            Reply::json(201, "{}").after(Duration::from_secs(3)),
        ],
        Reply::json(201, r#"{"id":"pay_1"}"#),
    )
    .await;
    let app = payments_gateway(&upstream.url, "timeout = \"1s\"").await;
    // Upstream read the request (and did its work), then the connection went.
    let cut = Call::post("/payments", "k", ORDER).send(&app).await;
    assert_eq!(cut.status, 502);
    assert_eq!(error_of(&cut), json!({"error": "upstream_outcome_unknown"}));
    assert_eq!(state_of(&app, "k").await, "unknown");
    // Resent with the same operation; this time no answer within the timeout.
    let late = Call::post("/payments", "k", ORDER).send(&app).await;
    assert_eq!(
        error_of(&late),
        json!({"error": "upstream_outcome_unknown"})
    );
    assert_eq!(state_of(&app, "k").await, "unknown");
    let done = Call::post("/payments", "k", ORDER).send(&app).await;
    assert_eq!(done.status, 201);
    assert_eq!(state_of(&app, "k").await, "completed");
    let seen = upstream.seen();
    assert_eq!(seen.len(), 3);
    let first = seen[0].header("idempotency-operation").expect("op");
    assert!(
        seen.iter()
            .all(|s| s.header("idempotency-operation") == Some(first))
    );
    assert_eq!(done.header("idempotency-operation"), Some(first));
    // The client was told the operation each time: what it quotes to support.
    for answer in [&cut, &late] {
        assert_eq!(answer.header("idempotency-operation"), Some(first));
    }
}

#[tokio::test]
async fn a_copy_of_an_unknown_key_is_409_outcome_unknown_where_the_route_does_not_resend() {
    let (upstream, app) = cut_once_without_resend("{}").await;
    let cut = Call::post("/payments", "k", ORDER).send(&app).await;
    assert_eq!(cut.status, 502);
    let operation = cut
        .header("idempotency-operation")
        .expect("the key's operation");
    for _ in 0..2 {
        let copy = Call::post("/payments", "k", ORDER).send(&app).await;
        assert_eq!(copy.status, 409);
        assert_eq!(error_of(&copy), json!({"error": "outcome_unknown"}));
        assert_eq!(copy.header("idempotency-operation"), Some(operation));
    }
    assert_eq!(upstream.calls(), 1);
}

#[tokio::test]
async fn a_claim_abandoned_past_its_lock_is_taken_over_as_unknown_never_as_new() {
    let upstream = Upstream::created().await;
    let routes = route("resending", "/a", &upstream.url, "")
        + &route("careful", "/b", &upstream.url, "resend_unknown = false");
    let app = gateway(&routes).await;
    // Claims whose instance died: in progress, their lock over.
    let print_of = |path: &str| {
        hookd::idempotency::fingerprint("POST", path, "", ORDER.as_bytes(), &[]).to_vec()
    };
    let scope = {
        use sha2::Digest;
        sha2::Sha256::digest(AUTH.as_bytes()).to_vec()
    };
    for (route, path) in [("resending", "/a"), ("careful", "/b")] {
        app.execute(
            "INSERT INTO api_idempotency_keys (route, scope, idempotency_key, fingerprint, state,
                 operation_id, claim_id, request_method, request_target, locked_until, retention)
             VALUES ($1, $2, 'dead', $3, 'in_progress', 'op_dead', '\\x00', 'POST', $4,
                     now() - interval '1 second', interval '1 day')",
            &[&route, &scope, &print_of(path), &path],
        )
        .await;
    }
    let resent = Call::post("/a", "dead", ORDER).send(&app).await;
    assert_eq!(resent.status, 201);
    assert_eq!(resent.header("idempotency-operation"), Some("op_dead"));
    assert_eq!(
        upstream.seen()[0].header("idempotency-operation"),
        Some("op_dead")
    );
    let refused = Call::post("/b", "dead", ORDER).send(&app).await;
    assert_eq!(error_of(&refused), json!({"error": "outcome_unknown"}));
    assert_eq!(refused.header("idempotency-operation"), Some("op_dead"));
    assert_eq!(
        app.strings(
            "SELECT state FROM api_idempotency_keys WHERE route = 'careful'",
            &[]
        )
        .await,
        ["unknown"]
    );
    assert_eq!(upstream.calls(), 1);
}

/// A transaction holding `api_idempotency_keys` so that claims wait behind it.
async fn claims_held(holder: &mut tokio_postgres::Client) -> tokio_postgres::Transaction<'_> {
    let lock = holder.transaction().await.expect("begin");
    lock.batch_execute("LOCK TABLE api_idempotency_keys IN SHARE ROW EXCLUSIVE MODE")
        .await
        .expect("lock");
    lock
}

/// Waits (10 s at most) until a claim's statement waits behind `claims_held`.
async fn claim_waits_for_its_lock(app: &TestApp) {
    crate::support::wait_for("the claim to wait", Duration::from_secs(10), || async {
        let waiting = app
            .count(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND wait_event_type = 'Lock' AND application_name = 'hookd'",
                &[],
            )
            .await;
        (waiting > 0).then_some(())
    })
    .await;
}

/// Key `key`'s state once it is no longer claimed (10 s at most).
async fn settled(app: &TestApp, key: &str) -> String {
    crate::support::wait_for("the key settled", Duration::from_secs(10), || async {
        let state = state_of(app, key).await;
        (state != "in_progress" && state != "none").then_some(state)
    })
    .await
}

#[tokio::test]
async fn a_client_that_hangs_up_while_its_claim_commits_still_gets_its_request_run_once() {
    let upstream = Upstream::created().await;
    let app = payments_gateway(&upstream.url, "").await;
    // The claim's statement waits behind this lock; the client gives up first.
    let mut holder = app.db().await;
    let lock = claims_held(&mut holder).await;
    let base = app.gateway_base.clone().expect("the gateway listens");
    let client = tokio::spawn(async move {
        reqwest::Client::new()
            .post(format!("{base}/payments"))
            .header("Idempotency-Key", "left")
            .header("Authorization", AUTH)
            .body(ORDER)
            .send()
            .await
    });
    claim_waits_for_its_lock(&app).await;
    // The client gives up: its request and its connection are dropped.
    client.abort();
    assert!(
        client.await.is_err_and(|e| e.is_cancelled()),
        "the client hung up"
    );
    lock.rollback().await.expect("unlock");
    // The request goes on without its client: claimed, sent once, its answer
    // stored — never a key left claimed with nobody to run it.
    assert_eq!(settled(&app, "left").await, "completed");
    assert_eq!(upstream.calls(), 1);
    // The client's retry gets that answer, and upstream is not called again.
    let retry = Call::post("/payments", "left", ORDER).send(&app).await;
    assert_eq!(
        (retry.status, retry.header("idempotent-replayed")),
        (201, Some("true"))
    );
    assert_eq!(upstream.calls(), 1);
}

#[tokio::test]
async fn a_client_that_resets_its_connection_while_its_claim_commits_still_gets_its_request_run_once()
 {
    let upstream = Upstream::created().await;
    let app = payments_gateway(&upstream.url, "").await;
    let mut holder = app.db().await;
    let lock = claims_held(&mut holder).await;
    // The request whole, then a reset (RST, not a close) while its claim waits.
    let addr = app.gateway_base.clone().expect("the gateway listens");
    let addr = addr.trim_start_matches("http://");
    let socket = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!(
        "POST /payments HTTP/1.1\r\nHost: {addr}\r\nIdempotency-Key: reset\r\n\
         Authorization: {AUTH}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{ORDER}",
        ORDER.len()
    );
    let mut socket = socket;
    tokio::io::AsyncWriteExt::write_all(&mut socket, request.as_bytes())
        .await
        .expect("send");
    claim_waits_for_its_lock(&app).await;
    socket.set_zero_linger().expect("linger");
    drop(socket);
    tokio::time::sleep(Duration::from_millis(300)).await;
    lock.rollback().await.expect("unlock");
    assert_eq!(settled(&app, "reset").await, "completed");
    assert_eq!(upstream.calls(), 1);
}

#[tokio::test]
async fn a_claim_sent_again_takes_its_own_key_once_and_no_other_claim_does() {
    // A batch of key writes whose COMMIT committed but whose answer was lost
    // is sent again write by write: its claims must still be theirs to run.
    let app = crate::support::spawn_app().await;
    let client = app.app.pool.get().await.expect("connection");
    let attempt = |claim_id: &[u8]| hookd::store::api_idempotency::ClaimAttempt {
        route: "payments".into(),
        scope: vec![1; 32],
        key: "again".into(),
        fingerprint: vec![2; 32],
        operation_id: format!("op_{}", claim_id[0]),
        claim_id: claim_id.to_vec(),
        lock: Duration::from_secs(60),
        retention: Duration::from_secs(3600),
        resend_unknown: true,
        method: "POST".into(),
        target: "/payments".into(),
    };
    let first = attempt(&[1; 16]);
    let taken = hookd::store::api_idempotency::try_claim(&client, &first)
        .await
        .expect("claim")
        .expect("a new key is taken");
    let again = hookd::store::api_idempotency::try_claim(&client, &first)
        .await
        .expect("claim");
    assert_eq!(again, Some(taken.clone()), "the same claim, counted once");
    let other = hookd::store::api_idempotency::try_claim(&client, &attempt(&[9; 16]))
        .await
        .expect("claim");
    assert_eq!(other, None, "another claim of a key in flight");
}

/// A gateway to `upstream` whose request bodies share a 256 KiB budget.
async fn with_body_budget(upstream: &str) -> TestApp {
    let mut settings = settings_with(&route("payments", "/payments", upstream, ""));
    settings.max_body_memory = 256 * 1024;
    spawn_with_settings(settings).await
}

/// A keyed POST to `/payments` on a socket of its own, announcing `length`
/// bytes of body and sending `sent` of them.
async fn keyed_body_on_a_socket(
    app: &TestApp,
    key: &str,
    length: usize,
    sent: usize,
) -> tokio::net::TcpStream {
    let base = app.gateway_base.clone().expect("the gateway listens");
    let addr = base.trim_start_matches("http://");
    let mut socket = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let head = format!(
        "POST /payments HTTP/1.1\r\nHost: {addr}\r\nIdempotency-Key: {key}\r\n\
         Authorization: {AUTH}\r\nContent-Length: {length}\r\n\r\n"
    );
    tokio::io::AsyncWriteExt::write_all(&mut socket, head.as_bytes())
        .await
        .expect("head");
    tokio::io::AsyncWriteExt::write_all(&mut socket, &vec![b'x'; sent])
        .await
        .expect("body");
    socket
}

#[tokio::test]
async fn large_request_bodies_that_stall_share_a_memory_budget() {
    let upstream = Upstream::created().await;
    let app = with_body_budget(&upstream.url).await;
    let base = app.gateway_base.clone().expect("the gateway listens");
    // 300 KiB of a 512 KiB body, then a stall: 236 KiB of the budget held.
    let mut stalled = keyed_body_on_a_socket(&app, "stalled", 512 * 1024, 300 * 1024).await;
    // Still being read, unanswered (which also gives hookd the time to read
    // what was sent).
    let mut buf = [0u8; 64];
    let answer = tokio::time::timeout(
        Duration::from_secs(2),
        tokio::io::AsyncReadExt::read(&mut stalled, &mut buf),
    )
    .await;
    assert!(
        answer.is_err(),
        "the stalled request was answered: {answer:?}"
    );
    let large = |key: &'static str| {
        let (http, url) = (app.http.clone(), format!("{base}/payments"));
        async move {
            let response = http
                .post(url)
                .header("Idempotency-Key", key)
                .header("Authorization", AUTH)
                .body(vec![b'y'; 200 * 1024])
                .send()
                .await
                .expect("send");
            response.status().as_u16()
        }
    };
    // Another 136 KiB does not fit: refused at once, upstream never called.
    assert_eq!(large("refused").await, 503);
    assert_eq!(upstream.calls(), 0);
    // Once the stalled body is gone, it fits again.
    drop(stalled);
    crate::support::wait_for(
        "a large request to be taken",
        Duration::from_secs(10),
        || async { (large("taken").await == 201).then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn a_large_body_whose_client_left_holds_its_budget_until_its_request_ends() {
    let upstream = Upstream::created().await;
    upstream.hold();
    let app = with_body_budget(&upstream.url).await;
    // A whole 200 KiB request (136 KiB of the budget), then a reset while
    // upstream takes its time: the request goes on without its client, and
    // so does its body's share.
    let gone = keyed_body_on_a_socket(&app, "gone", 200 * 1024, 200 * 1024).await;
    upstream.wait_for_calls(1).await;
    gone.set_zero_linger().expect("linger");
    drop(gone);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let body = "y".repeat(200 * 1024);
    let large = Call::post("/payments", "another", &body);
    assert_eq!(
        large.send(&app).await.status,
        503,
        "a client that left gave back a share its request still holds"
    );
    upstream.let_go();
    assert_eq!(settled(&app, "gone").await, "completed");
    assert_eq!(large.send(&app).await.status, 201);
}

#[tokio::test]
async fn the_same_key_in_two_scopes_is_two_keys_and_a_route_without_scope_shares_them() {
    let upstream = Upstream::created().await;
    let routes = route("payments", "/payments", &upstream.url, "")
        + &route("public", "/public", &upstream.url, "scope = \"none\"");
    let app = gateway(&routes).await;
    let mut alice = Call::post("/payments", "same", ORDER);
    let mut bob = Call::post("/payments", "same", ORDER);
    bob.auth = Some("Bearer sk_test_bob");
    for call in [&alice, &bob] {
        let answer = call.send(&app).await;
        assert_eq!(answer.status, 201);
        assert_eq!(answer.header("idempotent-replayed"), None);
    }
    assert_eq!(upstream.calls(), 2);
    // The scope header's value is never stored, only its hash.
    let stored = app
        .count(
            "SELECT count(*) FROM api_idempotency_keys WHERE position($1::bytea IN scope) > 0",
            &[&AUTH.as_bytes()],
        )
        .await;
    assert_eq!(stored, 0);
    alice.auth = None;
    let missing = alice.send(&app).await;
    assert_eq!(missing.status, 400);
    assert_eq!(error_of(&missing), json!({"error": "scope_missing"}));
    alice.path = "/public";
    bob.path = "/public";
    assert_eq!(alice.send(&app).await.status, 201);
    let shared = bob.send(&app).await;
    assert_eq!(shared.header("idempotent-replayed"), Some("true"));
    assert_eq!(upstream.calls(), 3);
}

#[tokio::test]
async fn requests_no_route_takes_are_404_no_route() {
    let upstream = Upstream::created().await;
    let app = gateway(&route(
        "orders",
        "/orders/*",
        &upstream.url,
        "method = \"PUT\"",
    ))
    .await;
    for (method, path) in [
        ("POST", "/orders/1"),
        ("GET", "/orders/1"),
        ("PUT", "/orders"),
        ("PUT", "/refunds/1"),
    ] {
        let mut call = Call::post(path, "k", ORDER);
        call.method = method;
        let answer = call.send(&app).await;
        assert_eq!(answer.status, 404, "{method} {path}");
        assert_eq!(error_of(&answer), json!({"error": "no_route"}));
        assert!(answer.header("x-request-id").is_some(), "{method} {path}");
    }
    let mut call = Call::post("/orders/7?expand=lines", "k", ORDER);
    call.method = "PUT";
    assert_eq!(call.send(&app).await.status, 201);
    let seen = &upstream.seen()[0];
    assert_eq!(
        (seen.method.as_str(), seen.target.as_str()),
        ("PUT", "/orders/7?expand=lines")
    );
}

/// `target` sent as written (an HTTP client would resolve its dot segments
/// first): the answer's status line and body.
async fn raw_post(app: &TestApp, target: &str) -> (String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let base = app.gateway_base.as_ref().expect("the gateway listens");
    let addr = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!(
        "POST {target} HTTP/1.1\r\nHost: {addr}\r\nIdempotency-Key: dots\r\n\
         Authorization: {AUTH}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{ORDER}",
        ORDER.len()
    );
    stream.write_all(request.as_bytes()).await.expect("request");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.expect("answer");
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer.lines().next().unwrap_or_default().to_string();
    let body = answer
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    (status, body)
}

#[tokio::test]
async fn a_path_whose_dot_segments_leave_the_route_is_404_and_never_sent() {
    let upstream = Upstream::created().await;
    let app = gateway(&route("orders", "/orders/*", &upstream.url, "")).await;
    for target in [
        "/orders/../admin/refund",
        "/orders/%2e%2e/admin/refund",
        "/orders/a%2F..%2Fadmin",
        "/orders/./1",
        "/orders/..;/admin/refund",
        "/orders/%2e%2e%3bx=1/admin/refund",
    ] {
        let (status, body) = raw_post(&app, target).await;
        assert!(status.contains(" 404 "), "{target}: {status}");
        assert!(body.contains("no_route"), "{target}: {body}");
    }
    assert_eq!(upstream.calls(), 0);
    // The same request on a plain path goes through.
    let (status, _) = raw_post(&app, "/orders/7").await;
    assert!(status.contains(" 201 "), "{status}");
    assert_eq!(upstream.seen()[0].target, "/orders/7");
}

#[tokio::test]
async fn hop_by_hop_headers_pass_neither_way_and_the_rest_pass_unchanged() {
    let upstream = Upstream::start(
        vec![],
        Reply::json(201, "{}")
            .with_header("Connection", "X-Upstream-Hop")
            .with_header("X-Upstream-Hop", "1")
            .with_header("Keep-Alive", "timeout=5")
            .with_header("Set-Cookie", "a=1")
            .with_header("X-Upstream-End", "2"),
    )
    .await;
    let app = payments_gateway(&upstream.url, "").await;
    let answer = Call::post("/payments", "k", ORDER)
        .header("Connection", "X-Client-Hop")
        .header("X-Client-Hop", "1")
        .header("Proxy-Authorization", "Basic eDp5")
        .header("X-Client-End", "2")
        .header("Idempotency-Operation", "op_forged")
        .send(&app)
        .await;
    assert_eq!(answer.status, 201);
    let seen = &upstream.seen()[0];
    for gone in ["x-client-hop", "proxy-authorization"] {
        assert_eq!(seen.header(gone), None, "{gone}");
    }
    assert_eq!(seen.header("x-client-end"), Some("2"));
    assert_ne!(seen.header("idempotency-operation"), Some("op_forged"));
    assert_eq!(
        seen.header("host"),
        Some(upstream.url.trim_start_matches("http://"))
    );
    for gone in ["x-upstream-hop", "keep-alive"] {
        assert_eq!(answer.header(gone), None, "{gone}");
    }
    assert_eq!(answer.header("x-upstream-end"), Some("2"));
    assert_eq!(answer.header("set-cookie"), Some("a=1"));
    // The gateway's answer is upstream's: no request id of hookd's is added.
    assert_eq!(answer.header("x-request-id"), None);
}

#[tokio::test]
async fn upstream_is_told_who_the_client_was_as_a_reverse_proxy_tells_it() {
    let upstream = Upstream::start(vec![], Reply::json(201, "{}")).await;
    let forwarded = |call: Call<'static>| {
        call.header("X-Forwarded-For", "198.51.100.7, 203.0.113.9")
            .header("X-Forwarded-Proto", "https")
            .header("X-Forwarded-Host", "pay.example")
            .header("X-Forwarded-Ssl", "on")
            .header("X-Real-IP", "198.51.100.7")
            .header("True-Client-IP", "198.51.100.7")
            .header("Forwarded", "for=198.51.100.7;proto=https")
    };
    let with_trusted = |blocks: Vec<&str>| {
        let mut settings = settings_with(&route("payments", "/payments", &upstream.url, ""));
        settings.gateway.trusted_proxies =
            Some(blocks.iter().map(|b| b.parse().expect("cidr")).collect());
        settings
    };
    // Without [gateway] trusted_proxies the caller's headers go as they came,
    // and hookd adds none of its own.
    let app = payments_gateway(&upstream.url, "").await;
    let answer = forwarded(Call::post("/payments", "as-is", ORDER))
        .send(&app)
        .await;
    assert_eq!(answer.status, 201);
    let seen = &upstream.seen()[0];
    for (name, value) in [
        ("x-forwarded-for", "198.51.100.7, 203.0.113.9"),
        ("x-forwarded-proto", "https"),
        ("x-forwarded-host", "pay.example"),
        ("x-forwarded-ssl", "on"),
        ("x-real-ip", "198.51.100.7"),
        ("true-client-ip", "198.51.100.7"),
    ] {
        assert_eq!(seen.header(name), Some(value), "{name}");
    }
    // Set (here to none): a caller that is no trusted proxy cannot choose what
    // upstream is told of it, whatever it writes.
    let app = spawn_with_settings(with_trusted(vec![])).await;
    let answer = forwarded(Call::post("/payments", "direct", ORDER))
        .send(&app)
        .await;
    assert_eq!(answer.status, 201);
    let seen = &upstream.seen()[1];
    assert_eq!(seen.header("x-forwarded-for"), Some("127.0.0.1"));
    assert_eq!(seen.header("x-real-ip"), Some("127.0.0.1"));
    assert_eq!(seen.header("x-forwarded-proto"), Some("http"));
    let base = app.gateway_base.as_deref().expect("the gateway listens");
    assert_eq!(
        seen.header("x-forwarded-host"),
        Some(base.trim_start_matches("http://"))
    );
    for gone in ["x-forwarded-ssl", "true-client-ip", "forwarded"] {
        assert_eq!(seen.header(gone), None, "{gone}");
    }
    // Behind a proxy it lists: the proxy's chain goes on with its address
    // added, the client found past it, its other headers as it wrote them.
    let app = spawn_with_settings(with_trusted(vec!["127.0.0.0/8"])).await;
    let answer = forwarded(Call::post("/payments", "behind", ORDER))
        .send(&app)
        .await;
    assert_eq!(answer.status, 201);
    let seen = &upstream.seen()[2];
    assert_eq!(
        seen.header("x-forwarded-for"),
        Some("198.51.100.7, 203.0.113.9, 127.0.0.1")
    );
    assert_eq!(seen.header("x-real-ip"), Some("203.0.113.9"));
    assert_eq!(seen.header("x-forwarded-proto"), Some("https"));
    assert_eq!(seen.header("x-forwarded-host"), Some("pay.example"));
    assert_eq!(seen.header("x-forwarded-ssl"), Some("on"));
    assert_eq!(
        seen.header("forwarded"),
        Some("for=198.51.100.7;proto=https")
    );
}

#[test]
fn a_route_cannot_scope_its_keys_by_a_header_proxies_set() {
    for header in [
        "X-Forwarded-For",
        "X-Real-IP",
        "Forwarded",
        "Proxy-Authorization",
    ] {
        let text = format!(
            "{SHIPPED_TOML}\n[gateway]\nlisten = \"127.0.0.1:0\"\n{}",
            route(
                "p",
                "/p",
                "http://127.0.0.1:9",
                &format!("scope = \"header:{header}\"")
            )
        );
        let error = Settings::from_toml("hookd.toml", &text, &Default::default())
            .expect_err(header)
            .to_string();
        assert!(error.contains("cannot tell callers apart"), "{error}");
    }
}

#[tokio::test]
async fn an_answer_over_1_mib_goes_whole_to_the_first_caller_and_copies_get_its_status_and_headers()
{
    let large: String = "x".repeat(1024 * 1024 + 512 * 1024);
    let upstream = Upstream::start(
        vec![],
        Reply::Answer {
            status: 200,
            headers: vec![("Content-Type".into(), "text/csv".into())],
            body: large.as_bytes().to_vec(),
            delay: Duration::ZERO,
        },
    )
    .await;
    let app = gateway(&route("exports", "/exports", &upstream.url, "")).await;
    let first = Call::post("/exports", "big", "{}").send(&app).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.body.len(), large.len());
    assert_eq!(first.header("idempotent-body-omitted"), None);
    let copy = Call::post("/exports", "big", "{}").send(&app).await;
    assert_eq!(copy.status, 200);
    assert_eq!(copy.header("content-type"), Some("text/csv"));
    assert!(copy.body.is_empty());
    assert_eq!(copy.header("idempotent-replayed"), Some("true"));
    assert_eq!(copy.header("idempotent-body-omitted"), Some("true"));
    assert_eq!(upstream.calls(), 1);
    // Exactly 1 MiB is kept whole.
    let just = Upstream::start(vec![], Reply::json(200, &"y".repeat(1024 * 1024))).await;
    let app = gateway(&route("exports", "/exports", &just.url, "")).await;
    Call::post("/exports", "mib", "{}").send(&app).await;
    let copy = Call::post("/exports", "mib", "{}").send(&app).await;
    assert_eq!(copy.body.len(), 1024 * 1024);
    assert_eq!(copy.header("idempotent-body-omitted"), None);
}

#[tokio::test]
async fn a_finished_key_expires_through_the_purge_and_a_copy_after_is_a_new_request() {
    let upstream = Upstream::created().await;
    let app = payments_gateway(&upstream.url, "retention = \"1h\"").await;
    let first = Call::post("/payments", "k", ORDER).send(&app).await;
    Call::post("/payments", "k2", ORDER).send(&app).await;
    // An hour passes for both; the purge removes finished keys past it only.
    let expires = app
        .strings(
            "SELECT (expires_at - finished_at)::text FROM api_idempotency_keys WHERE idempotency_key = 'k'",
            &[],
        )
        .await;
    assert_eq!(expires, ["01:00:00"]);
    app.execute(
        "UPDATE api_idempotency_keys SET expires_at = now() - interval '1 second'
         WHERE idempotency_key = 'k'",
        &[],
    )
    .await;
    app.execute(
        "UPDATE api_idempotency_keys SET state = 'unknown', expires_at = NULL
         WHERE idempotency_key = 'k2'",
        &[],
    )
    .await;
    // `hookd purge`, as cron runs it: first what it would remove, then a pass.
    let purge =
        |args: &'static [&'static str]| crate::support::run_hookd(args, Some(app.database_url()));
    let dry = purge(&["purge", "--dry-run"]).await;
    let said = String::from_utf8_lossy(&dry.stdout);
    assert!(
        said.lines()
            .any(|l| l == "would delete expired gateway keys: 1"),
        "{said}"
    );
    assert_eq!(
        state_of(&app, "k").await,
        "completed",
        "a dry run removes nothing"
    );
    let pass = purge(&["purge"]).await;
    let said = String::from_utf8_lossy(&pass.stdout);
    assert!(
        pass.status.success() && said.lines().any(|l| l == "deleted expired gateway keys: 1"),
        "{said}{}",
        String::from_utf8_lossy(&pass.stderr)
    );
    assert_eq!(state_of(&app, "k").await, "none");
    assert_eq!(
        state_of(&app, "k2").await,
        "unknown",
        "an unknown key never expires"
    );
    let after = Call::post("/payments", "k", ORDER).send(&app).await;
    assert_eq!(after.status, 201);
    assert_eq!(after.header("idempotent-replayed"), None);
    assert_ne!(
        after.header("idempotency-operation"),
        first.header("idempotency-operation")
    );
    assert_eq!(upstream.calls(), 3);

    // A purge whose clock runs ahead of the database's (an hour here) still
    // keeps a key until the database's clock, which set its expiry, says so.
    app.execute(
        "UPDATE api_idempotency_keys SET expires_at = now() + interval '10 minutes'
         WHERE idempotency_key = 'k'",
        &[],
    )
    .await;
    let mut client = app.app.pool.get().await.expect("connection");
    let ahead = chrono::Utc::now() + chrono::Duration::hours(1);
    let purged = hookd::store::purge::delete_expired_batch(
        &mut client,
        hookd::store::purge::Expiring::ApiIdempotencyKeys,
        ahead,
        100,
    )
    .await
    .expect("purge");
    assert_eq!(purged, 0);
    assert_eq!(state_of(&app, "k").await, "completed");
}

#[tokio::test]
async fn slow_check_config_refuses_a_bad_gateway_key_in_one_line_naming_it_with_exit_78() {
    let good = format!(
        "[gateway]\nlisten = \"127.0.0.1:8090\"\n{}",
        route("payments", "/payments", "http://127.0.0.1:9000", "")
    );
    let checked = check_config(&good, &[]).await;
    assert_eq!(checked.status.code(), Some(0));
    let said = String::from_utf8_lossy(&checked.stdout);
    assert!(
        said.contains(", the gateway on 127.0.0.1:8090 (1 route(s)); database:"),
        "{said}"
    );
    assert!(checked.stderr.is_empty(), "{checked:?}");
    // A route that may wait on upstream past a stop's grace (30s): said, not refused.
    let patient = check_config(&(good.clone() + "timeout = \"2m\"\n"), &[]).await;
    assert_eq!(patient.status.code(), Some(0));
    let warned = String::from_utf8_lossy(&patient.stderr);
    assert!(
        warned.contains(
            "gateway route payments: timeout 2m is longer than shutdown_grace 30s: a request \
             still waiting for upstream when a stop's grace ends is cut, and its key becomes unknown"
        ),
        "{warned}"
    );
    for (gateway, key, says) in [
        (
            good.replace("/payments\"", "payments\""),
            "gateway.routes[0].path",
            "must start with /",
        ),
        (
            good.clone() + "timeout = \"10m\"\n",
            "gateway.routes[0].timeout",
            "between 1s and 5m",
        ),
        (
            good.clone() + "retention = \"10m\"\n",
            "gateway.routes[0].retention",
            "1h minimum",
        ),
        (
            good.clone() + "colour = \"blue\"\n",
            "gateway.routes[0]",
            "unknown field `colour`",
        ),
        (good.replace("8090", "8080"), "gateway.listen", "its own"),
    ] {
        let refused = check_config(&gateway, &[]).await;
        assert_eq!(refused.status.code(), Some(78), "{gateway}");
        let line = String::from_utf8_lossy(&refused.stderr).trim().to_string();
        assert_eq!(line.lines().count(), 1, "{line}");
        assert!(line.contains(key) && line.contains(says), "{line}");
    }
    // HOOKD_GATEWAY_LISTEN stands for `listen`, checked the same way.
    let refused = check_config(&good, &[("HOOKD_GATEWAY_LISTEN", "nowhere")]).await;
    assert_eq!(refused.status.code(), Some(78));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("gateway.listen"));
}

/// Two instances with `routes` on one database.
async fn two_gateways(routes: &str) -> [TestApp; 2] {
    let first = gateway(routes).await;
    let second = spawn(Spawn {
        settings: settings_with(routes),
        db: first.db.clone(),
        ..Spawn::default()
    })
    .await;
    [first, second]
}

#[tokio::test]
async fn of_100_concurrent_copies_through_two_instances_upstream_runs_once() {
    let upstream = Upstream::start(
        vec![],
        Reply::json(201, r#"{"id":"pay_once"}"#).after(Duration::from_millis(300)),
    )
    .await;
    let routes = route("payments", "/payments", &upstream.url, "");
    let apps = std::sync::Arc::new(two_gateways(&routes).await);
    let copies: Vec<_> = (0..100)
        .map(|i| {
            let apps = apps.clone();
            tokio::spawn(async move {
                Call::post("/payments", "one-charge", ORDER)
                    .send(&apps[i % 2])
                    .await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for copy in copies {
        answers.push(copy.await.expect("copy"));
    }
    assert_eq!(upstream.calls(), 1, "exactly one copy reaches upstream");
    let operation = upstream.seen()[0]
        .header("idempotency-operation")
        .expect("op")
        .to_string();
    let (mut stored, mut in_progress) = (0, 0);
    for answer in &answers {
        match answer.status {
            201 => {
                assert_eq!(answer.body, br#"{"id":"pay_once"}"#);
                assert_eq!(
                    answer.header("idempotency-operation"),
                    Some(operation.as_str())
                );
                stored += 1;
            }
            409 => {
                assert_eq!(error_of(answer), json!({"error": "request_in_progress"}));
                in_progress += 1;
            }
            other => panic!("answered {other}: {}", answer.text()),
        }
    }
    assert_eq!(stored + in_progress, 100);
    assert!(stored >= 1, "the first caller gets the answer");
    // Afterwards, through either instance: the stored answer.
    for app in apps.iter() {
        let copy = Call::post("/payments", "one-charge", ORDER).send(app).await;
        assert_eq!(
            (copy.status, copy.header("idempotent-replayed")),
            (201, Some("true"))
        );
    }
    assert_eq!(upstream.calls(), 1);
}

#[tokio::test]
async fn many_keys_with_copies_at_once_through_two_instances_reach_upstream_once_each() {
    // Claims and stored answers of concurrent requests share commits: copies of
    // one key may fall in one batch, new keys beside keys being completed.
    let upstream = Upstream::created().await;
    let routes = route("payments", "/payments", &upstream.url, "");
    let apps = std::sync::Arc::new(two_gateways(&routes).await);
    let keys: Vec<String> = (0..40).map(|k| format!("charge-{k}")).collect();
    let calls: Vec<_> = (0..120)
        .map(|i| {
            let (apps, key) = (apps.clone(), keys[i % 40].clone());
            tokio::spawn(async move {
                let answer = Call::post("/payments", &key, ORDER)
                    .send(&apps[i % 2])
                    .await;
                (key, answer)
            })
        })
        .collect();
    for call in calls {
        let (key, answer) = call.await.expect("call");
        match answer.status {
            201 => assert!(answer.header("idempotency-operation").is_some(), "{key}"),
            409 => assert_eq!(error_of(&answer), json!({"error": "request_in_progress"})),
            other => panic!("{key} answered {other}: {}", answer.text()),
        }
    }
    let mut seen: Vec<String> = upstream
        .seen()
        .iter()
        .map(|s| s.header("idempotency-key").expect("key").to_string())
        .collect();
    seen.sort();
    let mut expected = keys.clone();
    expected.sort();
    assert_eq!(seen, expected, "each key reaches upstream exactly once");
    for key in &keys {
        assert_eq!(state_of(&apps[0], key).await, "completed", "{key}");
    }
}

#[tokio::test]
async fn slow_a_claim_of_a_killed_hookd_is_locked_for_its_timeout_and_30_s_then_taken_over_as_unknown()
 {
    use nix::sys::signal::Signal;

    use crate::process::{Hookd, free_port};

    // The first request is held by upstream until hookd is gone; copies are
    // answered at once.
    let upstream = Upstream::start(
        vec![Reply::json(201, "{}").after(Duration::from_secs(120))],
        Reply::json(201, r#"{"id":"pay_after"}"#),
    )
    .await;
    let db = crate::support::TestDb::create().await;
    let database_url = crate::support::cluster().connection_string(&db.name);
    let serve = |name: &str| {
        let (port, gateway_port) = (free_port(), free_port());
        let text = format!(
            "{}\n[gateway]\nlisten = \"127.0.0.1:{gateway_port}\"\n{}",
            hookd_kit::settings::shipped_toml_on_port(port),
            route("payments", "/payments", &upstream.url, "timeout = \"1s\"")
        );
        let path = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("{name}-{}.toml", std::process::id()));
        std::fs::write(&path, text).expect("config");
        (path, port, format!("http://127.0.0.1:{gateway_port}"))
    };
    let http = reqwest::Client::new();
    let send = |base: String| {
        let http = http.clone();
        async move {
            let request = http
                .post(format!("{base}/payments"))
                .header("Idempotency-Key", "killed")
                .header("Authorization", AUTH)
                .body(ORDER);
            Answer::read(request.send().await.expect("request")).await
        }
    };

    let (config, port, gateway_base) = serve("gateway-killed");
    let doomed = Hookd::start_against(&config, port, &database_url, "warn").await;
    let in_flight = tokio::spawn(
        http.post(format!("{gateway_base}/payments"))
            .header("Idempotency-Key", "killed")
            .header("Authorization", AUTH)
            .body(ORDER)
            .send(),
    );
    upstream.wait_for_calls(1).await;
    doomed.signal(Signal::SIGKILL);
    let _ = doomed.wait().await;
    assert!(
        in_flight.await.expect("join").is_err(),
        "the client saw no answer"
    );
    // The claim is locked for the route's timeout and 30 s, by the database's clock.
    let client = crate::support::connect(db.config()).await;
    let locked: f64 = client
        .query_one(
            "SELECT extract(epoch FROM locked_until - claimed_at)::float8
             FROM api_idempotency_keys WHERE idempotency_key = 'killed'",
            &[],
        )
        .await
        .expect("lock")
        .get(0);
    assert!((31.0..32.0).contains(&locked), "locked for {locked} s");

    let (config, port, gateway_base) = serve("gateway-after");
    let _survivor = Hookd::start_against(&config, port, &database_url, "warn").await;
    // The claim's lock is not over: the instance may still be working.
    let early = send(gateway_base.clone()).await;
    assert_eq!(
        (early.status, early.json()),
        (409, json!({"error": "request_in_progress"}))
    );
    assert_eq!(upstream.calls(), 1);
    // Once it is over (brought forward here rather than waited out), the next
    // copy takes the claim over as unknown: sent again with the same operation.
    client
        .execute(
            "UPDATE api_idempotency_keys SET locked_until = now() - interval '1 second'
             WHERE idempotency_key = 'killed'",
            &[],
        )
        .await
        .expect("lock over");
    let taken = send(gateway_base.clone()).await;
    assert_eq!(
        (taken.status, taken.body.as_slice()),
        (201, &br#"{"id":"pay_after"}"#[..])
    );
    let seen = upstream.seen();
    assert_eq!(seen.len(), 2);
    let operation = seen[0].header("idempotency-operation").expect("op");
    assert_eq!(seen[1].header("idempotency-operation"), Some(operation));
    assert_eq!(taken.header("idempotency-operation"), Some(operation));
    let row = client
        .query_one(
            "SELECT state, runs FROM api_idempotency_keys WHERE idempotency_key = 'killed'",
            &[],
        )
        .await
        .expect("row");
    assert_eq!(
        (row.get::<_, String>(0), row.get::<_, i32>(1)),
        ("completed".into(), 2)
    );
}

/// The row id of `key`'s row.
async fn row_of(app: &TestApp, key: &str) -> i64 {
    app.count(
        "SELECT id FROM api_idempotency_keys WHERE idempotency_key = $1",
        &[&key],
    )
    .await
}

#[tokio::test]
async fn an_operator_releases_an_unknown_key_from_the_desk_audited_and_the_next_copy_reaches_upstream()
 {
    let (upstream, app) = cut_once_without_resend(r#"{"id":"pay_1"}"#).await;
    assert_eq!(
        Call::post("/payments", "lost", ORDER)
            .send(&app)
            .await
            .status,
        502
    );
    assert_eq!(
        Call::post("/payments", "fine", "{}")
            .send(&app)
            .await
            .status,
        201
    );
    let id = row_of(&app, "lost").await;

    // The list, newest first, by state, by route, by key or operation.
    let all = app.viewer().idempotency_keys("").await.json();
    let keys: Vec<&str> = all["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .map(|k| k["key"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(keys, ["fine", "lost"]);
    let unknown = app.viewer().idempotency_keys("state=unknown").await.json();
    assert_eq!(unknown["keys"].as_array().map(Vec::len), Some(1));
    let key = &unknown["keys"][0];
    assert_eq!(
        (key["id"].as_i64(), key["route"].as_str()),
        (Some(id), Some("payments"))
    );
    assert_eq!(key["scope"].as_str().map(str::len), Some(8));
    let operation = key["operation"].as_str().expect("op").to_string();
    let by_operation = app
        .viewer()
        .idempotency_keys(&format!("q={operation}"))
        .await
        .json();
    assert_eq!(by_operation["keys"][0]["id"].as_i64(), Some(id));
    assert_eq!(
        app.viewer().idempotency_keys("route=other").await.json()["keys"],
        json!([])
    );
    let paged = app.viewer().idempotency_keys("limit=1").await.json();
    let cursor = paged["next_cursor"]
        .as_str()
        .expect("a next page")
        .to_string();
    let rest = app
        .viewer()
        .idempotency_keys(&format!("limit=1&cursor={cursor}"))
        .await
        .json();
    assert_eq!(rest["keys"][0]["key"], "lost");
    assert_eq!(
        app.viewer().idempotency_keys("state=gone").await.status,
        400
    );

    // Viewers may not release; an operator may, once.
    assert_eq!(app.viewer().release_idempotency_key(id).await.status, 403);
    let released = app.operator().release_idempotency_key(id).await;
    assert_eq!(released.status, 200, "{}", released.text());
    assert_eq!(released.json()["state"], "released");
    let again = app.operator().release_idempotency_key(id).await;
    assert_eq!(
        (again.status, again.json()["error"].as_str()),
        (409, Some("not_unknown"))
    );
    assert_eq!(
        app.operator().release_idempotency_key(987_654).await.status,
        404
    );
    let audit = app.operator().audit("").await.json();
    let entry = audit["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .find(|e| e["action"] == "released_idempotency_key")
        .expect("the release is audited")
        .clone();
    assert_eq!(entry["who"], "operator");
    assert_eq!(entry["detail"]["operation"], operation.as_str());

    let copy = Call::post("/payments", "lost", ORDER).send(&app).await;
    assert_eq!(copy.status, 201);
    assert_eq!(
        copy.header("idempotency-operation"),
        Some(operation.as_str())
    );
    assert_eq!(upstream.calls(), 3);
}

#[tokio::test]
async fn stored_bodies_are_masked_for_viewers_and_revealed_to_operators_audited() {
    let answer =
        r#"{"id":"pay_1","card":{"last4":"4242","brand":"visa"},"email":"ann@example.com"}"#;
    let upstream = Upstream::start(
        vec![],
        Reply::json(201, answer)
            .with_header("Set-Cookie", "session=s3cret")
            .with_header("Location", "/payments/pay_1?receipt=rct_s3cret"),
    )
    .await;
    let routes = route(
        "payments",
        "/payments",
        &upstream.url,
        "mask = [\"/card/last4\", \"/email\"]\nreplay_headers = [\"Set-Cookie\"]",
    ) + &route("refunds", "/refunds", &upstream.url, "");
    let app = gateway(&routes).await;
    // A query may carry a token or an address: its values are masked too.
    let target = "/payments?token=tok_s3cret&email=ann%40example.com&expand=";
    let sent = Call::post(target, "masked", ORDER).send(&app).await;
    assert_eq!(sent.status, 201);
    assert_eq!(upstream.seen()[0].target, target);
    Call::post("/refunds", "all-masked", ORDER).send(&app).await;
    let id = row_of(&app, "masked").await;
    let covered = "/payments?token=•••&email=•••&expand=";
    let listed = app.viewer().idempotency_keys("q=masked").await.json();
    assert_eq!(listed["keys"][0]["target"], covered, "{listed}");
    let cookie = app.sign_in(crate::support::VIEWER).await;
    let page = app
        .admin(crate::support::Credential::Cookie(cookie))
        .get("/admin/idempotency")
        .await
        .text();
    let escaped = covered.replace('&', "&amp;");
    assert!(
        page.contains(&escaped) && !page.contains("s3cret"),
        "{page}"
    );
    let viewed = app.viewer().idempotency_key(id, "").await.json();
    assert_eq!(viewed["masked"], true);
    assert_eq!(viewed["target"], covered);
    // The fingerprint is the request's SHA-256, whole, for viewers too.
    let fingerprint = viewed["fingerprint"].as_str().expect("fingerprint");
    assert_eq!(fingerprint.len(), 64, "{fingerprint}");
    assert_eq!(listed["keys"][0]["fingerprint"], fingerprint);
    assert_eq!(viewed["upstream_status"], 201);
    assert_eq!(
        viewed["body"],
        json!({"id": "pay_1", "card": {"last4": "•••", "brand": "visa"}, "email": "•••@example.com"})
    );
    // A header a route keeps may be a secret: masked too.
    let headers = viewed["headers"].as_array().expect("headers");
    assert!(
        headers.contains(&json!(["content-type", "application/json"])),
        "{headers:?}"
    );
    assert!(
        headers.contains(&json!(["set-cookie", "•••"])),
        "{headers:?}"
    );
    assert!(
        headers.contains(&json!(["location", "/payments/pay_1?receipt=•••"])),
        "{headers:?}"
    );
    // A route that names no mask: all of it.
    let other = app
        .viewer()
        .idempotency_key(row_of(&app, "all-masked").await, "")
        .await
        .json();
    assert_eq!(other["body"]["id"], "•••");
    assert_eq!(
        app.viewer().idempotency_key(id, "reveal=true").await.status,
        403
    );
    let revealed = app
        .operator()
        .idempotency_key(id, "reveal=true")
        .await
        .json();
    assert_eq!(revealed["masked"], false);
    assert_eq!(revealed["target"], target);
    assert_eq!(revealed["fingerprint"], fingerprint);
    let headers = revealed["headers"].as_array().expect("headers");
    assert!(
        headers.contains(&json!(["set-cookie", "session=s3cret"])),
        "{headers:?}"
    );
    assert!(
        headers.contains(&json!(["location", "/payments/pay_1?receipt=rct_s3cret"])),
        "{headers:?}"
    );
    assert_eq!(
        revealed["body"],
        serde_json::from_str::<Value>(answer).expect("json")
    );
    let audit = app.operator().audit("").await.json();
    let actions: Vec<&str> = audit["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    assert!(actions.contains(&"viewed_idempotency_key"), "{actions:?}");
    assert!(actions.contains(&"revealed_idempotency_key"), "{actions:?}");
}

#[tokio::test]
async fn the_keys_page_shows_unknown_and_long_running_keys_first_and_releases_by_form() {
    let (_upstream, app) = cut_once_without_resend("{}").await;
    Call::post("/payments", "lost-key", ORDER).send(&app).await;
    Call::post("/payments", "done-key", "{}").send(&app).await;
    let id = row_of(&app, "lost-key").await;
    let cookie = app.sign_in(crate::support::OPERATOR).await;
    let operator = app.admin(crate::support::Credential::Cookie(cookie));
    let page = operator.get("/admin/idempotency").await.text();
    let (attention, all) = page.split_once("All keys").expect("two sections");
    assert!(
        attention.contains("lost-key") && !attention.contains("done-key"),
        "{attention}"
    );
    assert!(all.contains("done-key") && all.contains("lost-key"));
    let detail = operator
        .get(&format!("/admin/idempotency/{id}"))
        .await
        .text();
    assert!(detail.contains("Release the key"), "{detail}");
    let csrf = crate::support::csrf_of(&detail);
    // Without the form token: refused, nothing released.
    let forged = operator
        .post_form(
            &format!("/admin/idempotency/{id}/release"),
            &[],
            &[("csrf", "forged")],
        )
        .await;
    assert_eq!(forged.status, 403);
    assert_eq!(state_of(&app, "lost-key").await, "unknown");
    let released = operator
        .post_form(
            &format!("/admin/idempotency/{id}/release"),
            &[],
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(released.status, 303);
    assert_eq!(state_of(&app, "lost-key").await, "released");
    let viewer_page = app
        .admin(crate::support::Credential::Cookie(
            app.sign_in(crate::support::VIEWER).await,
        ))
        .get(&format!("/admin/idempotency/{id}"))
        .await
        .text();
    assert!(!viewer_page.contains("Release the key"));
}

#[tokio::test]
async fn gateway_requests_are_counted_by_route_and_outcome_and_unknown_keys_are_a_gauge() {
    let upstream = Upstream::start(
        vec![Reply::Cut, Reply::json(503, "{}")],
        Reply::json(201, "{}").after(Duration::from_millis(20)),
    )
    .await;
    let app = payments_gateway(&upstream.url, "resend_unknown = false").await;
    Call::post("/payments", "cut", ORDER).send(&app).await; // unknown
    Call::post("/payments", "cut", ORDER).send(&app).await; // unknown (outcome_unknown)
    Call::post("/payments", "busy", ORDER).send(&app).await; // upstream_error
    Call::post("/payments", "busy", ORDER).send(&app).await; // sent
    Call::post("/payments", "busy", ORDER).send(&app).await; // replayed
    Call::post("/payments", "busy", "{}").send(&app).await; // reused
    Call::post("/payments", "bad key", ORDER).send(&app).await; // invalid_key
    let mut missing = Call::post("/payments", "x", ORDER);
    missing.key = None;
    missing.send(&app).await; // missing_key
    let metrics = app.metrics_showing("hookd_gateway_unknown_keys").await;
    for (outcome, n) in [
        ("unknown", 2.0),
        ("upstream_error", 1.0),
        ("sent", 1.0),
        ("replayed", 1.0),
        ("reused", 1.0),
        ("invalid_key", 1.0),
        ("missing_key", 1.0),
    ] {
        assert_eq!(
            metrics.value(
                "hookd_gateway_requests_total",
                &[("route", "payments"), ("outcome", outcome)]
            ),
            n,
            "{outcome}"
        );
    }
    assert_eq!(
        metrics.value(
            "hookd_gateway_upstream_seconds_count",
            &[("route", "payments")]
        ),
        3.0
    );
    assert_eq!(metrics.value("hookd_gateway_unknown_keys", &[]), 1.0);
    // An upstream 500 is upstream's, not hookd's.
    assert_eq!(metrics.value("hookd_internal_errors_total", &[]), 0.0);
}

#[tokio::test]
async fn an_answer_the_database_cannot_store_still_reaches_its_client_and_the_key_goes_unknown() {
    let upstream = Upstream::created().await;
    let app = payments_gateway(&upstream.url, "").await;
    // Storing an answer fails (a disk full, a lost primary): here a trigger
    // refusing the write that completes a key.
    app.db()
        .await
        .batch_execute(
            "CREATE FUNCTION refuse_completion() RETURNS trigger LANGUAGE plpgsql AS
               $$ BEGIN RAISE EXCEPTION 'could not extend file: No space left on device'; END $$;
             CREATE TRIGGER refuse_completion BEFORE UPDATE ON api_idempotency_keys
               FOR EACH ROW WHEN (NEW.state = 'completed') EXECUTE FUNCTION refuse_completion();",
        )
        .await
        .expect("trigger");
    let first = Call::post("/payments", "unstored", ORDER).send(&app).await;
    // Upstream did the work: its answer is the client's, stored or not.
    assert_eq!(first.status, 201);
    assert_eq!(first.body, br#"{"id":"pay_1"}"#);
    let operation = first
        .header("idempotency-operation")
        .expect("operation")
        .to_string();
    assert_eq!(upstream.calls(), 1);
    assert_eq!(state_of(&app, "unstored").await, "in_progress");
    // A copy meanwhile is told the request is in progress, not sent again.
    let copy = Call::post("/payments", "unstored", ORDER).send(&app).await;
    assert_eq!(copy.status, 409);
    assert_eq!(upstream.calls(), 1);

    // The database mended and the claim's lock over: the outcome is unknown,
    // so the next copy is sent again with the same operation (this route
    // resends an unknown outcome), and its answer is stored.
    app.execute(
        "DROP TRIGGER refuse_completion ON api_idempotency_keys",
        &[],
    )
    .await;
    app.execute(
        "UPDATE api_idempotency_keys SET locked_until = now() - interval '1 second'
         WHERE idempotency_key = 'unstored'",
        &[],
    )
    .await;
    let again = Call::post("/payments", "unstored", ORDER).send(&app).await;
    assert_eq!(again.status, 201);
    assert_eq!(
        again.header("idempotency-operation"),
        Some(operation.as_str())
    );
    let seen = upstream.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[1].header("idempotency-operation"),
        Some(operation.as_str())
    );
    assert_eq!(state_of(&app, "unstored").await, "completed");
}
