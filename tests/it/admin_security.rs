//! The admin surface facing the open internet: sessions keyed by a server secret
//! and revoked at sign-out, guessing limited per client, cross-site requests
//! refused, Idempotency-Key claims owned, connections left for deliveries, and
//! nothing internal on the page.

use std::sync::Arc;
use std::time::Duration;

use hookd::handlers::Registry;
use serde_json::json;
use sha2::{Digest, Sha256};

use hookd_kit::gate::{GATED_TYPE, RetryGate};

use crate::support::{
    AdminClient, Credential, OPERATOR, Spawn, TestApp, VIEWER, csrf_of, shipped_settings, spawn,
    spawn_app, spawn_with_settings, stripe_event, wait_for,
};

const SUPPORT: &str = "support-team-token-0123456789";

/// A dead payment event (its amount is not a number); returns its row id.
async fn dead_event(app: &TestApp, event_id: &str) -> i64 {
    let event = stripe_event(
        event_id,
        "payment_intent.succeeded",
        json!({"id": "pi_x", "amount": "bad"}),
    );
    assert_eq!(app.deliver("stripe", &event).await.status, 200);
    app.event_row_id(event_id).await
}

async fn attempts(app: &TestApp, id: i64) -> i64 {
    app.count(
        "SELECT attempts::bigint FROM webhook_events WHERE id = $1",
        &[&id],
    )
    .await
}

/// The status of the API's event list for a session cookie.
async fn api_status(app: &TestApp, cookie: &str) -> u16 {
    cookie_client(app, cookie).events("").await.status
}

fn cookie_client<'a>(app: &'a TestApp, cookie: &str) -> AdminClient<'a> {
    app.admin(Credential::Cookie(cookie.to_string()))
}

/// The `Set-Cookie` of a sign-in with these request headers.
async fn session_cookie_of(app: &TestApp, headers: &[(&str, &str)]) -> String {
    let answer = app
        .admin(Credential::None)
        .post_form("/admin/login", headers, &[("token", VIEWER)])
        .await;
    assert_eq!(answer.status, 303, "{}", answer.text());
    answer.header("set-cookie").expect("cookie").to_string()
}

/// Spawns the shipped settings with `development` and `cookie_secure` as given.
async fn spawn_cookie(development: bool, cookie_secure: Option<bool>) -> TestApp {
    let mut settings = shipped_settings();
    settings.development = development;
    settings.cookie_secure = cookie_secure;
    spawn_with_settings(settings).await
}

#[tokio::test]
async fn the_session_cookie_is_secure_unless_development_or_a_proxy_says_plain_http() {
    let plain = [("X-Forwarded-Proto", "http")];
    // The shipped file says development = true: plain HTTP on this machine.
    let development = spawn_app().await;
    let cookie = session_cookie_of(&development, &[]).await;
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(!cookie.contains("Secure"), "development: {cookie}");

    // Without it, Secure even on loopback (a TCP proxy may carry it anywhere)...
    let server = spawn_cookie(false, None).await;
    let cookie = session_cookie_of(&server, &[]).await;
    assert!(cookie.contains("Secure"), "no development: {cookie}");
    let cookie = session_cookie_of(&server, &[("X-Forwarded-Proto", "https")]).await;
    assert!(cookie.contains("Secure"), "over https: {cookie}");
    // ...unless the proxy on this machine says its client spoke plain HTTP.
    let cookie = session_cookie_of(&server, &plain).await;
    assert!(!cookie.contains("Secure"), "proxy says http: {cookie}");

    // cookie_secure overrides both ways.
    let forced = spawn_cookie(true, Some(true)).await;
    assert!(session_cookie_of(&forced, &plain).await.contains("Secure"));
    let off = spawn_cookie(false, Some(false)).await;
    assert!(!session_cookie_of(&off, &[]).await.contains("Secure"));
}

#[tokio::test]
async fn the_event_page_shows_fixed_retry_notes_and_never_echoes_the_address() {
    let app = spawn_app().await;
    let id = dead_event(&app, "evt_retried_echo").await;
    let cookie = app.sign_in(VIEWER).await;
    let page = |query: &'static str| {
        let client = cookie_client(&app, &cookie);
        async move {
            let answer = client
                .get(&format!("/admin/events/{id}?retried={query}"))
                .await;
            assert_eq!(answer.status, 200);
            answer.text()
        }
    };
    let injected = page("%3Cscript%3Ealert(1)%3C%2Fscript%3E").await;
    assert!(
        !injected.contains("alert(1)") && !injected.contains("Retried"),
        "{injected}"
    );
    let made_up = page("Your%20account%20is%20locked%2C%20call%20us").await;
    assert!(!made_up.contains("account is locked"), "{made_up}");
    assert!(page("processed").await.contains("Retried: processed"));
    assert!(
        page("gone")
            .await
            .contains("Not applied: the payload was purged.")
    );
}

#[tokio::test]
async fn a_cookie_keyed_with_the_token_alone_is_refused() {
    let app = spawn_app().await;
    let real = app.sign_in(VIEWER).await;
    assert_eq!(api_status(&app, &real).await, 200);
    // What a thief who guessed the token could forge without the server secret.
    let name = base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, "viewer");
    let expires = chrono::Utc::now().timestamp() + 3600;
    let nonce = "00112233445566778899aabbccddeeff";
    let message = format!("session:{name}.{expires}.{nonce}");
    let mac = hex::encode(hookd::signature::hmac_sha256(
        VIEWER.as_bytes(),
        &[message.as_bytes()],
    ));
    let forged = format!("hookd_session={name}.{expires}.{nonce}.{mac}");
    assert_eq!(api_status(&app, &forged).await, 401);
    // A real cookie whose expiry was pushed out no longer matches its MAC.
    let value = real.trim_start_matches("hookd_session=");
    let parts: Vec<&str> = value.split('.').collect();
    let stretched = format!(
        "hookd_session={}.{}.{}.{}",
        parts[0],
        parts[1].parse::<i64>().expect("expiry") + 86_400,
        parts[2],
        parts[3]
    );
    assert_eq!(api_status(&app, &stretched).await, 401);
}

#[tokio::test]
async fn rotating_the_token_or_the_server_secret_ends_sessions() {
    let app = spawn_app().await;
    let cookie = app.sign_in(OPERATOR).await;
    assert_eq!(api_status(&app, &cookie).await, 200);

    // Another instance where the operator's token was rotated.
    let mut settings = shipped_settings();
    let operator = settings
        .admin_tokens
        .iter_mut()
        .find(|t| t.name == "operator")
        .expect("operator");
    operator.token = hookd::signature::Secret::new("rotated-operator-token-0123");
    let rotated = spawn(Spawn {
        settings,
        db: app.db.clone(),
        ..Spawn::default()
    })
    .await;
    assert_eq!(api_status(&rotated, &cookie).await, 401);

    // A new server secret (the row deleted, instances restarted) ends them too.
    app.execute("DELETE FROM hookd_server_secret", &[]).await;
    let restarted = spawn(Spawn {
        db: app.db.clone(),
        ..Spawn::default()
    })
    .await;
    assert_eq!(api_status(&restarted, &cookie).await, 401);
    let fresh = restarted.sign_in(OPERATOR).await;
    assert_eq!(api_status(&restarted, &fresh).await, 200);
}

#[tokio::test]
async fn signing_out_ends_the_session_on_every_instance() {
    let app = spawn_app().await;
    let other = spawn(Spawn {
        db: app.db.clone(),
        ..Spawn::default()
    })
    .await;
    let cookie = app.sign_in(VIEWER).await;
    let page = cookie_client(&app, &cookie).get("/admin").await;
    assert_eq!(page.status, 200);
    let csrf = csrf_of(&String::from_utf8_lossy(&page.body));
    assert_eq!(api_status(&other, &cookie).await, 200);

    let out = cookie_client(&app, &cookie)
        .post_form("/admin/logout", &[], &[("csrf", &csrf)])
        .await;
    assert_eq!(out.status, 303);
    // A copy of the cookie kept elsewhere is worth nothing now.
    for instance in [&app, &other] {
        assert_eq!(api_status(instance, &cookie).await, 401);
        let page = cookie_client(instance, &cookie).get("/admin").await;
        assert_eq!(
            (page.status, page.header("location")),
            (303, Some("/admin/login"))
        );
    }
    assert_eq!(
        app.count("SELECT count(*) FROM admin_revoked_sessions", &[])
            .await,
        1
    );
}

#[tokio::test]
async fn failed_sign_ins_and_bearer_guesses_are_limited_per_client() {
    // A token of the team's own (the shipped ones are refused behind a proxy).
    let app = app_behind(None).await;
    let anonymous = app.admin(Credential::None);
    for _ in 0..10 {
        let wrong = anonymous
            .post_form("/admin/login", &[], &[("token", "not-a-token-at-all")])
            .await;
        assert_eq!(wrong.status, 401);
    }
    // Past the limit a wrong token is refused...
    let refused = anonymous
        .post_form("/admin/login", &[], &[("token", "not-a-token-either")])
        .await;
    assert_eq!(refused.status, 429);
    let wait: u64 = refused
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("seconds");
    assert!((1..=60).contains(&wait), "{wait}");
    let api = app
        .admin(Credential::Bearer("guess-guess-guess-guess".into()))
        .get("/admin/api/events")
        .await;
    assert_eq!(api.status, 429);
    assert_eq!(api.json()["error"], "too_many_requests");
    // ...the right one never: staff behind the same address still get in.
    let right = anonymous
        .post_form("/admin/login", &[], &[("token", SUPPORT)])
        .await;
    assert_eq!(right.status, 303);
    let api = app
        .admin(Credential::Bearer(SUPPORT.into()))
        .get("/admin/api/events")
        .await;
    assert_eq!(api.status, 200);
    // Another client (behind the same local proxy) is not held back.
    let elsewhere = anonymous
        .post_form(
            "/admin/login",
            &[("X-Forwarded-For", "203.0.113.9")],
            &[("token", SUPPORT)],
        )
        .await;
    assert_eq!(elsewhere.status, 303);

    let app = spawn_app().await;
    let guess = app.admin(Credential::Bearer("guess-guess-guess-guess".into()));
    for _ in 0..10 {
        assert_eq!(guess.get("/admin/api/events").await.status, 401);
    }
    assert_eq!(guess.get("/admin/api/events").await.status, 429);
    let right = app.admin(Credential::Bearer(OPERATOR.into()));
    assert_eq!(right.get("/admin/api/events").await.status, 200);
}

/// Guessing rotated over more addresses than the limiter remembers, past the
/// busy rate: every newcomer's wrong token is refused, yet a right token and a
/// valid session get in, from a new address and from a guesser's own.
#[tokio::test]
async fn a_right_token_or_a_valid_session_is_never_refused_whatever_the_guessing() {
    use futures_util::StreamExt;
    let app = app_behind(None).await;
    let staff = "198.51.100.20";
    let cookie = session_via(&app, staff, SUPPORT).await;

    // One wrong token from each of 10,050 addresses (the table holds 10,000),
    // all within the limiter's minute.
    let http = reqwest::Client::new();
    let url = format!("{}/admin/api/events", app.base);
    let guesses = futures_util::stream::iter(0..10_050u32).map(|i| {
        let [_, _, hi, lo] = i.to_be_bytes();
        let request = http
            .get(&url)
            .bearer_auth("guess-guess-guess-guess")
            .header("X-Forwarded-For", format!("198.18.{hi}.{lo}"));
        async move { request.send().await.expect("guess").status().as_u16() }
    });
    let statuses: Vec<u16> = guesses.buffer_unordered(16).collect().await;
    assert!(
        statuses.iter().all(|s| [401, 429].contains(s)),
        "{statuses:?}"
    );
    assert!(
        statuses.contains(&429),
        "the full table refuses newcomers' guesses"
    );
    // A guesser's own address, far past its limit.
    let guesser = "198.18.0.7";
    for _ in 0..10 {
        let answer = http
            .get(&url)
            .bearer_auth("guess-guess-guess-guess")
            .header("X-Forwarded-For", guesser)
            .send()
            .await
            .expect("guess");
        assert!([401, 429].contains(&answer.status().as_u16()));
    }

    let newcomer = "203.0.113.50";
    let bearer = |token: &str, from: &str| {
        http.get(&url)
            .bearer_auth(token)
            .header("X-Forwarded-For", from)
            .send()
    };
    for from in [newcomer, guesser] {
        let wrong = bearer("guess-guess-guess-guess", from)
            .await
            .expect("guess");
        assert_eq!(wrong.status(), 429, "a wrong token from {from}");
        let right = bearer(SUPPORT, from).await.expect("right token");
        assert_eq!(right.status(), 200, "the right token from {from}");
        let session = cookie_client(&app, &cookie)
            .send(
                "GET",
                "/admin/api/events",
                &[("X-Forwarded-For", from)],
                vec![],
            )
            .await;
        assert_eq!(session.status, 200, "the session from {from}");
        assert_eq!(
            sign_in_via(&app, from, SUPPORT).await,
            303,
            "signing in from {from}"
        );
        assert_eq!(
            sign_in_via(&app, from, "not-a-token-at-all").await,
            429,
            "a wrong sign-in from {from}"
        );
    }
}

/// The shipped settings plus a token of the team's own (the shipped ones are
/// refused on forwarded requests), with these trusted proxies.
async fn app_behind(trusted_proxies: Option<&[&str]>) -> TestApp {
    let mut settings = shipped_settings();
    settings.admin_tokens.push(hookd::config::AdminToken {
        name: "support".into(),
        token: hookd::signature::Secret::new(SUPPORT),
        role: hookd::config::Role::Viewer,
        key: "admin.tokens[2].token".into(),
    });
    if let Some(blocks) = trusted_proxies {
        settings.trusted_proxies = blocks.iter().map(|b| b.parse().expect("cidr")).collect();
    }
    spawn_with_settings(settings).await
}

/// The session cookie (`name=value`) of a sign-in with `token` through proxies
/// that forward `X-Forwarded-For: chain`.
async fn session_via(app: &TestApp, chain: &str, token: &str) -> String {
    let signed_in = app
        .admin(Credential::None)
        .post_form(
            "/admin/login",
            &[("X-Forwarded-For", chain)],
            &[("token", token)],
        )
        .await;
    assert_eq!(signed_in.status, 303);
    signed_in
        .header("set-cookie")
        .and_then(|c| c.split(';').next())
        .expect("session cookie")
        .to_string()
}

/// A sign-in through proxies that forward `X-Forwarded-For: chain`.
async fn sign_in_via(app: &TestApp, chain: &str, token: &str) -> u16 {
    app.admin(Credential::None)
        .post_form(
            "/admin/login",
            &[("X-Forwarded-For", chain)],
            &[("token", token)],
        )
        .await
        .status
}

#[tokio::test]
async fn behind_a_balancer_on_a_private_address_each_client_has_its_own_limit() {
    // Modelled: clients → a load balancer at 10.0.0.5 (private) → the proxy on
    // this machine, which appends the balancer's address → hookd. The test's
    // requests come from 127.0.0.1 (that proxy) carrying the chain the balancer
    // and proxy would write; the operator trusts the balancer's network.
    let app = app_behind(Some(&["127.0.0.0/8", "::1/128", "10.0.0.0/8"])).await;
    let guesser = "203.0.113.66, 10.0.0.5";
    let staff = "198.51.100.20, 10.0.0.5";
    // Someone at the guesser's address (one office's NAT) signed in before.
    let cookie = session_via(&app, guesser, SUPPORT).await;
    for _ in 0..10 {
        assert_eq!(sign_in_via(&app, guesser, "not-a-token-at-all").await, 401);
    }
    assert_eq!(
        sign_in_via(&app, guesser, "not-a-token-at-all").await,
        429,
        "the guesser is held"
    );
    // The other client behind the same balancer is not held back...
    assert_eq!(sign_in_via(&app, staff, "not-a-token-at-all").await, 401);
    assert_eq!(sign_in_via(&app, staff, SUPPORT).await, 303);
    // ...and the session at the guesser's address, counted under its token, goes on.
    let session = cookie_client(&app, &cookie)
        .send(
            "GET",
            "/admin/api/events",
            &[("X-Forwarded-For", guesser)],
            vec![],
        )
        .await;
    assert_eq!(session.status, 200);

    // Without trusting the balancer, both are the balancer: one limit for all.
    let app = app_behind(None).await;
    for _ in 0..10 {
        assert_eq!(sign_in_via(&app, guesser, "not-a-token-at-all").await, 401);
    }
    assert_eq!(sign_in_via(&app, staff, "not-a-token-at-all").await, 429);
}

#[tokio::test]
async fn a_forged_forwarded_for_cannot_choose_the_limit_it_counts_against() {
    // Modelled: the attacker at 198.51.100.66 sends its own X-Forwarded-For, and
    // the proxy on this machine (the default trusted_proxies: loopback) passes it
    // on with the attacker's real address appended.
    let app = app_behind(None).await;
    let victim = "192.0.2.10";
    for n in 0..10 {
        // A fresh spoofed address each time, and one posing as a trusted hop.
        let chain = if n % 2 == 0 {
            format!("192.0.2.{}, 198.51.100.66", 100 + n)
        } else {
            format!("{victim}, 127.0.0.1, 198.51.100.66")
        };
        assert_eq!(sign_in_via(&app, &chain, "not-a-token-at-all").await, 401);
    }
    // Every guess counted against the attacker's real address...
    let spoofed = "192.0.2.200, 198.51.100.66";
    assert_eq!(sign_in_via(&app, spoofed, "not-a-token-at-all").await, 429);
    // ...and none against the addresses it named.
    assert_eq!(sign_in_via(&app, victim, "not-a-token-at-all").await, 401);
    assert_eq!(
        sign_in_via(&app, "192.0.2.100", "not-a-token-at-all").await,
        401
    );
}

#[tokio::test]
async fn cookie_requests_that_change_state_need_a_same_host_origin_or_the_form_token() {
    let app = spawn_app().await;
    let dead = dead_event(&app, "evt_csrf").await;
    let cookie = app.sign_in(OPERATOR).await;
    let client = cookie_client(&app, &cookie);
    let detail = client.get(&format!("/admin/events/{dead}")).await;
    let csrf = csrf_of(&String::from_utf8_lossy(&detail.body));
    let api = format!("/admin/api/events/{dead}/retry");
    let same_host = format!("http://{}", app.base.trim_start_matches("http://"));

    // Neither Origin nor Referer nor the token: refused.
    assert_eq!(client.post(&api, &[]).await.status, 403);
    assert_eq!(
        client
            .post(&api, &[("Referer", "https://evil.example/page")])
            .await
            .status,
        403
    );
    assert_eq!(attempts(&app, dead).await, 1, "nothing ran");
    assert_eq!(
        client.post(&api, &[("Origin", &same_host)]).await.status,
        200
    );
    assert_eq!(
        client.post(&api, &[("X-CSRF-Token", &csrf)]).await.status,
        200
    );
    assert_eq!(
        client
            .post(&api, &[("Referer", &format!("{same_host}/admin"))])
            .await
            .status,
        200
    );
    assert_eq!(attempts(&app, dead).await, 4);

    let page = format!("/admin/events/{dead}/retry");
    let cross = client
        .post_form(
            &page,
            &[("Referer", "https://evil.example/")],
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(cross.status, 403);
    let same = client
        .post_form(&page, &[("Origin", &same_host)], &[("csrf", &csrf)])
        .await;
    assert_eq!(same.status, 303);
    assert_eq!(attempts(&app, dead).await, 5);
}

#[tokio::test]
async fn an_abandoned_idempotency_claim_is_taken_over_only_by_the_same_request() {
    let app = spawn_app().await;
    let dead = dead_event(&app, "evt_claim").await;
    let path = format!("/admin/api/events/{dead}/retry");
    let hash = Sha256::digest(format!("{path}\n").as_bytes()).to_vec();
    let other_hash = Sha256::digest(b"another request").to_vec();
    app.execute(
        "INSERT INTO admin_idempotency_keys
             (token_name, idempotency_key, request_sha256, claim_id, created_at)
         VALUES ('operator', 'crashed', $1, '\\x01', now() - interval '6 minutes'),
                ('operator', 'crashed-other', $2, '\\x02', now() - interval '6 minutes'),
                ('operator', 'running', $1, '\\x03', now() - interval '1 minute')",
        &[&hash, &other_hash],
    )
    .await;
    let operator = app.admin(Credential::Bearer(OPERATOR.into()));

    let taken = operator
        .post(&path, &[("Idempotency-Key", "crashed")])
        .await;
    assert_eq!(taken.status, 200);
    assert_eq!(taken.header("Idempotent-Replayed"), None);
    let reused = operator
        .post(&path, &[("Idempotency-Key", "crashed-other")])
        .await;
    assert_eq!(
        (reused.status, reused.json()["error"].clone()),
        (422, json!("idempotency_key_reused"))
    );
    let running = operator
        .post(&path, &[("Idempotency-Key", "running")])
        .await;
    assert_eq!(running.status, 409);
    assert_eq!(attempts(&app, dead).await, 2, "only the takeover ran");

    // The crashed request's owner coming back cannot overwrite the new answer.
    let db = app.app.pool.get().await.expect("connection");
    hookd::store::idempotency::complete(&db, "operator", "crashed", &[1], 500, b"late")
        .await
        .expect("complete");
    let stored = app
        .query(
            "SELECT response_status, request_sha256 FROM admin_idempotency_keys
             WHERE idempotency_key = 'crashed'",
            &[],
        )
        .await;
    assert_eq!(stored[0].get::<_, Option<i16>>(0), Some(200));
    assert_eq!(
        stored[0].get::<_, Vec<u8>>(1),
        hash,
        "the request hash never changes"
    );
    let replay = operator
        .post(&path, &[("Idempotency-Key", "crashed")])
        .await;
    assert_eq!(replay.body, taken.body);
    assert_eq!(replay.header("Idempotent-Replayed"), Some("true"));
}

#[tokio::test]
async fn keyed_retries_of_a_slow_handler_leave_connections_for_deliveries() {
    // The retries stay in their handler until the deliveries are done: a
    // delivery that needed one of their connections would never be answered.
    let gate = RetryGate::closed();
    let app = gate.spawn(shipped_settings(), None).await;
    let mut ids = Vec::new();
    // More retries than the pool has connections.
    for i in 0..20 {
        let id = format!("evt_slow_{i}");
        app.deliver_ok("stripe", &stripe_event(&id, GATED_TYPE, json!({})))
            .await;
        ids.push(app.event_row_id(&id).await);
    }
    let retries = ids.iter().map(|id| {
        let app = &app;
        async move {
            let key = format!("slow-{id}");
            app.admin(Credential::Bearer(OPERATOR.into()))
                .post(
                    &format!("/admin/api/events/{id}/retry"),
                    &[("Idempotency-Key", &key)],
                )
                .await
                .status
        }
    });
    let deliveries = async {
        // Once a retry is in its slow handler, the retries hold their connections.
        wait_for(
            "a retry in its handler",
            Duration::from_secs(10),
            || async { (gate.arrived() > 0).then_some(()) },
        )
        .await;
        for i in 0..10 {
            let event = stripe_event(
                &format!("evt_meanwhile_{i}"),
                "payment_intent.succeeded",
                json!({"id": format!("pi_m_{i}"), "amount": 100, "currency": "usd"}),
            );
            let answered =
                tokio::time::timeout(Duration::from_secs(20), app.deliver("stripe", &event)).await;
            assert_eq!(
                answered.map(|a| a.status).ok(),
                Some(200),
                "a delivery waited for a retry's connection"
            );
        }
        gate.open(20);
    };
    let (statuses, ()) = tokio::join!(futures_util::future::join_all(retries), deliveries);
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
}

#[tokio::test]
async fn database_trouble_shows_a_plain_message_on_the_page() {
    let mut missing = crate::support::cluster().config("no_such_database");
    missing.connect_timeout(Duration::from_secs(2));
    let app = spawn(Spawn {
        database: Some(missing),
        ..Spawn::default()
    })
    .await;
    let answer = app
        .admin(Credential::None)
        .post_form("/admin/login", &[], &[("token", VIEWER)])
        .await;
    assert!(answer.status >= 500, "{}", answer.status);
    let page = String::from_utf8_lossy(&answer.body);
    assert!(
        !page.contains("no_such_database") && !page.contains("3D000"),
        "{page}"
    );
    assert!(
        page.contains("went wrong") || page.contains("unavailable"),
        "{page}"
    );
}

#[tokio::test]
async fn every_session_has_a_statement_timeout() {
    let app = spawn_app().await;
    let client = app.app.pool.get().await.expect("connection");
    let show = |name: &'static str| {
        let client = &client;
        async move {
            client
                .query_one(&format!("SHOW {name}"), &[])
                .await
                .expect("show")
                .get::<_, String>(0)
        }
    };
    assert_eq!(show("statement_timeout").await, "30s");
    assert_eq!(show("idle_in_transaction_session_timeout").await, "1min");
    assert_eq!(show("client_connection_check_interval").await, "1s");
}

#[tokio::test]
async fn the_shipped_credentials_are_refused_on_requests_a_proxy_forwarded() {
    let app = spawn_app().await;
    let via_proxy = [("X-Forwarded-For", "198.51.100.4")];
    let bearer = app
        .admin(Credential::Bearer(OPERATOR.into()))
        .send("GET", "/admin/api/events", &via_proxy, Vec::new())
        .await;
    assert_eq!(bearer.status, 401);
    let sign_in = app
        .admin(Credential::None)
        .post_form(
            "/admin/login",
            &[("X-Real-IP", "198.51.100.4")],
            &[("token", OPERATOR)],
        )
        .await;
    assert_eq!(sign_in.status, 401);
    // A delivery signed with the shipped Stripe secret, through a proxy.
    let event = stripe_event(
        "evt_forged",
        "payment_intent.succeeded",
        json!({"id": "pi_forged", "amount": 100, "currency": "usd"}),
    );
    let body = serde_json::to_vec(&event).expect("json");
    let mut headers = app.sign("stripe", &body, Default::default());
    headers.push(("Forwarded".into(), "for=198.51.100.4".into()));
    let answer = app.post("stripe", &headers, body).await;
    assert_eq!(answer.status, 401);
    assert_eq!(app.count("SELECT count(*) FROM payments", &[]).await, 0);
    // The same, straight from this machine (development), still works.
    assert_eq!(app.deliver("stripe", &event).await.status, 200);
}

/// A session cookie made as hookd makes them, keyed with the server secret the
/// test reads from the database: `name.expiry.nonce.MAC`.
async fn cookie_for(app: &TestApp, name: &str, token: &str, expires: i64) -> String {
    let secret: Vec<u8> = app
        .query("SELECT secret FROM hookd_server_secret", &[])
        .await[0]
        .get(0);
    let key = hookd::signature::hmac_sha256(&secret, &[b"hookd-session:", token.as_bytes()]);
    let name = base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, name);
    let nonce = hex::encode(rand::random::<[u8; 16]>());
    let message = format!("session:{name}.{expires}.{nonce}");
    let mac = hex::encode(hookd::signature::hmac_sha256(&key, &[message.as_bytes()]));
    format!("hookd_session={name}.{expires}.{nonce}.{mac}")
}

/// What a browser holding `cookie` gets: the API, the page, and a state change.
async fn refused_everywhere(app: &TestApp, cookie: &str, dead: i64, why: &str) {
    let client = cookie_client(app, cookie);
    let api = client.get("/admin/api/events").await;
    assert_eq!(
        (api.status, api.json()["error"].clone()),
        (401, json!("unauthorized")),
        "{why}: the API"
    );
    let page = client.get("/admin").await;
    assert_eq!(
        (page.status, page.header("location")),
        (303, Some("/admin/login")),
        "{why}: the page sends them to sign in"
    );
    let same_host = app.base.clone();
    let retry = client
        .post(
            &format!("/admin/api/events/{dead}/retry"),
            &[("Origin", &same_host)],
        )
        .await;
    assert_eq!(retry.status, 401, "{why}: a retry");
}

#[tokio::test]
async fn forged_expired_and_rotated_cookies_are_sent_to_sign_in() {
    let app = spawn_app().await;
    let dead = dead_event(&app, "evt_cookies").await;
    let real = app.sign_in(OPERATOR).await;
    let now = chrono::Utc::now().timestamp();

    // The control: a cookie made by the test this way, still valid, is accepted,
    // so each refusal below is for the one thing changed.
    let made = cookie_for(&app, "operator", OPERATOR, now + 3600).await;
    assert_eq!(api_status(&app, &made).await, 200);
    let expired = cookie_for(&app, "operator", OPERATOR, now - 60).await;
    refused_everywhere(&app, &expired, dead, "expired a minute ago").await;

    let mut forged = real.clone();
    let last = forged.pop().expect("a MAC");
    forged.push(if last == '0' { '1' } else { '0' });
    refused_everywhere(&app, &forged, dead, "a MAC changed").await;

    let stranger = cookie_for(&app, "nobody", OPERATOR, now + 3600).await;
    refused_everywhere(&app, &stranger, dead, "a token name hookd does not have").await;
    refused_everywhere(&app, "hookd_session=not-a-session", dead, "garbage").await;
    assert_eq!(attempts(&app, dead).await, 1, "nothing ran");

    // The operator's token rotated (another instance, same database): the
    // cookie made with the old one is refused there, and one made with the new
    // token is taken.
    let mut settings = shipped_settings();
    let rotated_token = "rotated-operator-token-0123";
    settings
        .admin_tokens
        .iter_mut()
        .find(|t| t.name == "operator")
        .expect("operator")
        .token = hookd::signature::Secret::new(rotated_token);
    let rotated = spawn(Spawn {
        settings,
        db: app.db.clone(),
        ..Spawn::default()
    })
    .await;
    refused_everywhere(&rotated, &real, dead, "signed with the old token").await;
    let fresh = cookie_for(&rotated, "operator", rotated_token, now + 3600).await;
    assert_eq!(api_status(&rotated, &fresh).await, 200);
    // The real cookie still works where the token did not change.
    assert_eq!(api_status(&app, &real).await, 200);
}

#[tokio::test]
async fn an_origin_or_referer_naming_another_host_is_refused_even_beside_a_good_one() {
    let app = spawn_app().await;
    let dead = dead_event(&app, "evt_origins").await;
    let cookie = app.sign_in(OPERATOR).await;
    let client = cookie_client(&app, &cookie);
    let api = format!("/admin/api/events/{dead}/retry");
    let same_host = app.base.clone();
    let same_page = format!("{same_host}/admin/events/{dead}");
    for (origin, referer) in [
        ("https://evil.example", same_page.as_str()),
        (same_host.as_str(), "https://evil.example/page"),
    ] {
        let answer = client
            .post(&api, &[("Origin", origin), ("Referer", referer)])
            .await;
        assert_eq!(answer.status, 403, "Origin {origin}, Referer {referer}");
        assert_eq!(answer.json()["error"], "forbidden");
    }
    assert_eq!(attempts(&app, dead).await, 1, "nothing ran");
    // Both naming this host: accepted.
    let both = client
        .post(&api, &[("Origin", &same_host), ("Referer", &same_page)])
        .await;
    assert_eq!(both.status, 200);
    assert_eq!(attempts(&app, dead).await, 2);
}

/// Breaks its transaction on its first retry (a statement fails, and it returns as
/// if nothing happened), so that retry ends in a 5xx; then behaves.
#[derive(Default)]
struct BreaksOnce(std::sync::atomic::AtomicBool);

#[async_trait::async_trait]
impl hookd::handlers::Handler for BreaksOnce {
    async fn apply(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        event: &hookd::handlers::Event<'_>,
    ) -> Result<(), hookd::handlers::HandlerError> {
        if event.attempt > 1 && !self.0.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let _ = tx.execute("SELECT 1 / 0", &[]).await;
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_5xx_answer_releases_the_idempotency_key_for_a_retry() {
    let mut settings = shipped_settings();
    settings.sources[0]
        .event_types
        .insert("test.breaks".into(), "test_breaks".into());
    let mut registry = Registry::builtin();
    registry.register("test_breaks", Arc::new(BreaksOnce::default()));
    let app = spawn(Spawn {
        settings,
        registry,
        ..Spawn::default()
    })
    .await;
    app.deliver_ok(
        "stripe",
        &stripe_event("evt_breaks", "test.breaks", json!({})),
    )
    .await;
    let id = app
        .count(
            "SELECT id FROM webhook_events WHERE event_id = 'evt_breaks'",
            &[],
        )
        .await;
    let operator = app.admin(Credential::Bearer(OPERATOR.into()));
    let path = format!("/admin/api/events/{id}/retry");
    let key = [("Idempotency-Key", "retry-after-5xx")];
    let keys =
        "SELECT count(*) FROM admin_idempotency_keys WHERE idempotency_key = 'retry-after-5xx'";

    let failed = operator.post(&path, &key).await;
    assert!(failed.status >= 500, "{failed:?}");
    assert_eq!(app.count(keys, &[]).await, 0, "the key was given up");
    assert_eq!(
        attempts(&app, id).await,
        1,
        "the failed run was rolled back"
    );

    // The same request again runs (it is not told 409, nor given the 5xx back).
    let again = operator.post(&path, &key).await;
    assert_eq!(
        again.status,
        200,
        "{}",
        String::from_utf8_lossy(&again.body)
    );
    assert_eq!(again.header("Idempotent-Replayed"), None);
    assert_eq!(again.json()["status"], "processed");
    assert_eq!(attempts(&app, id).await, 2);
    // Its answer is the one kept.
    let replay = operator.post(&path, &key).await;
    assert_eq!(
        (replay.status, replay.header("Idempotent-Replayed")),
        (200, Some("true"))
    );
    assert_eq!(replay.body, again.body);
    assert_eq!(attempts(&app, id).await, 2);
}

#[tokio::test]
async fn hookd_admin_token_adds_an_operator_named_env_and_the_files_tokens_stay() {
    let env_token = "an-operator-token-from-the-environment";
    let env =
        std::collections::HashMap::from([("HOOKD_ADMIN_TOKEN".to_string(), env_token.to_string())]);
    let mut settings =
        hookd::config::Settings::from_toml("hookd.toml", hookd_kit::settings::SHIPPED_TOML, &env)
            .expect("config");
    settings.listen = "127.0.0.1:0".parse().expect("addr");
    let app = spawn_with_settings(settings).await;
    let dead = dead_event(&app, "evt_env_token").await;
    let from_env = app.admin(Credential::Bearer(env_token.into()));
    // An operator: it may retry, and the audit trail names it `env`.
    let retried = from_env
        .post(&format!("/admin/api/events/{dead}/retry"), &[])
        .await;
    assert_eq!(retried.status, 200);
    let audit = from_env.get("/admin/api/audit").await;
    assert_eq!(audit.status, 200);
    let entry = &audit.json()["entries"][0];
    assert_eq!(
        (entry["who"].clone(), entry["action"].clone()),
        (json!("env"), json!("retried")),
        "{entry}"
    );
    // It signs in on the page too.
    let cookie = app.sign_in(env_token).await;
    let page = cookie_client(&app, &cookie).get("/admin").await;
    assert_eq!(page.status, 200);
    // The file's tokens still work.
    for token in [VIEWER, OPERATOR] {
        let answer = app
            .admin(Credential::Bearer(token.into()))
            .get("/admin/api/events")
            .await;
        assert_eq!(answer.status, 200, "{token}");
    }
    assert_eq!(
        app.admin(Credential::Bearer(OPERATOR.into()))
            .post(&format!("/admin/api/events/{dead}/retry"), &[])
            .await
            .status,
        200
    );
}
