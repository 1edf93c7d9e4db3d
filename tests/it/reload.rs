//! SIGHUP on the real `hookd serve`: the configuration file and every `_FILE`
//! secret read again and put in force without a restart — a rotated or added
//! secret verifies the next delivery and a removed one stops, a removed admin
//! token's sessions end and a new token works, a new source answers and a
//! removed one is unknown, the gateway's routes and `trusted_proxies` follow the
//! file, a new forward delivers and a removed one stops; a bad
//! configuration is refused with one log line and the running one kept serving;
//! `hookd_config_reloads_total{result}` counts both.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use hookd::config::{Settings, Source};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::support::{
    Exposition, FORWARD_SECRET, Receiver, TestDb, cluster, connect, stripe_event, wait_for,
};

const OLD_SECRET: &str = "whsec_reload_old_0123456789abcdef";
const NEW_SECRET: &str = "whsec_reload_new_0123456789abcdef";
const ALICE: &str = "alice-token-0123456789abcdef";
const BOB: &str = "bob-token-0123456789abcdef";
const CAROL: &str = "carol-token-0123456789abcdef";

/// `hookd serve` as a process with its configuration, secret files and log in a
/// folder of its own, against a fresh test database.
struct Served {
    child: Child,
    base: String,
    port: u16,
    dir: PathBuf,
    http: reqwest::Client,
    db: TestDb,
}

impl Drop for Served {
    fn drop(&mut self) {
        // A test that failed half-way leaves no server behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    /// Serves `config` (its `{port}` filled in), with `files` written beside it
    /// and `env` set (`{dir}` in a value names that folder).
    async fn start(name: &str, config: &str, files: &[(&str, &str)], env: &[(&str, &str)]) -> Self {
        let port = crate::process::free_port();
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("reload-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("folder");
        write_private(
            &dir,
            "hookd.toml",
            &config.replace("{port}", &port.to_string()),
        );
        for (file, text) in files {
            write_private(&dir, file, text);
        }
        let folder = dir.display().to_string();
        let env: Vec<(&str, String)> = env
            .iter()
            .map(|(k, v)| (*k, v.replace("{dir}", &folder)))
            .collect();
        let db = TestDb::create().await;
        let log = std::fs::File::create(dir.join("hookd.log")).expect("log file");
        let child = crate::support::hookd_binary()
            .args(["serve", "--config"])
            .arg(dir.join("hookd.toml"))
            .env("DATABASE_URL", cluster().connection_string(&db.name))
            .env("RUST_LOG", "info")
            .env_remove("HOOKD_LOG_FORMAT")
            .envs(env)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn hookd");
        let served = Served {
            child,
            base: format!("http://127.0.0.1:{port}"),
            port,
            dir,
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(Duration::from_secs(20))
                .build()
                .expect("client"),
            db,
        };
        let ready = format!("{}/readyz", served.base);
        wait_for("hookd to be ready", Duration::from_secs(30), || async {
            let answer = served.http.get(&ready).send().await.ok()?;
            (answer.status() == 200).then_some(())
        })
        .await;
        served
    }

    /// Writes `text` to the file `name` of its folder.
    fn write(&self, name: &str, text: &str) {
        write_private(&self.dir, name, text);
    }

    fn write_config(&self, config: &str) {
        self.write(
            "hookd.toml",
            &config.replace("{port}", &self.port.to_string()),
        );
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("hookd.log")).expect("log")
    }

    /// `GET /metrics`, with `bearer` if given: the status and the text.
    async fn metrics(&self, bearer: Option<&str>) -> (u16, String) {
        let mut request = self.http.get(format!("{}/metrics", self.base));
        if let Some(token) = bearer {
            request = request.bearer_auth(token);
        }
        let answer = request.send().await.expect("metrics");
        let status = answer.status().as_u16();
        (status, answer.text().await.expect("metrics text"))
    }

    async fn reloads(&self, result: &str) -> f64 {
        let (status, text) = self.metrics(None).await;
        assert_eq!(status, 200);
        Exposition::parse(&text).value("hookd_config_reloads_total", &[("result", result)])
    }

    /// Sends SIGHUP and waits until the reload counted as `result` (ok or error).
    async fn hup(&self, result: &str) {
        let (ok, error) = (self.reloads("ok").await, self.reloads("error").await);
        let pid = Pid::from_raw(i32::try_from(self.child.id()).expect("pid"));
        kill(pid, Signal::SIGHUP).expect("SIGHUP");
        let (want_ok, want_error) = match result {
            "ok" => (ok + 1.0, error),
            _ => (ok, error + 1.0),
        };
        wait_for(
            "the reload to be counted",
            Duration::from_secs(20),
            || async {
                let now = (self.reloads("ok").await, self.reloads("error").await);
                (now.0 >= want_ok && now.1 >= want_error).then_some(now)
            },
        )
        .await;
        assert_eq!(
            (self.reloads("ok").await, self.reloads("error").await),
            (want_ok, want_error),
            "one reload, counted as {result}"
        );
    }

    /// SIGHUP, waited for by its log line: the `nth` (from 1) reload put in force.
    async fn hup_logged(&self, nth: usize) {
        let pid = Pid::from_raw(i32::try_from(self.child.id()).expect("pid"));
        kill(pid, Signal::SIGHUP).expect("SIGHUP");
        wait_for("the reload's log line", Duration::from_secs(20), || async {
            (lines_with(&self.log(), "configuration reloaded").len() >= nth).then_some(())
        })
        .await;
    }

    /// POSTs `body` to `/webhooks/{source}` signed by `signer` now; the status.
    async fn deliver(&self, source: &str, signer: &Source, body: &Value) -> u16 {
        let now = chrono::Utc::now().timestamp();
        self.deliver_signed_at(source, signer, body, now).await
    }

    /// The same, signed at `at` (Unix seconds).
    async fn deliver_signed_at(&self, source: &str, signer: &Source, body: &Value, at: i64) -> u16 {
        let body = serde_json::to_vec(body).expect("json");
        let signed =
            hookd::simulate::sign_delivery(signer, &body, Default::default(), at).expect("sign");
        let mut request = self
            .http
            .post(format!("{}/webhooks/{source}", self.base))
            .body(body);
        for (name, value) in signed.headers {
            request = request.header(name, value);
        }
        request.send().await.expect("delivery").status().as_u16()
    }

    /// `GET /admin/api/events` with these headers; the status.
    async fn events_with(&self, header: (&str, &str)) -> u16 {
        self.http
            .get(format!("{}/admin/api/events", self.base))
            .header(header.0, header.1)
            .send()
            .await
            .expect("events")
            .status()
            .as_u16()
    }

    /// Signs in through the page's form; the session cookie pair.
    async fn sign_in(&self, token: &str) -> String {
        let answer = self
            .http
            .post(format!("{}/admin/login", self.base))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(format!("token={token}"))
            .send()
            .await
            .expect("sign-in");
        assert_eq!(answer.status(), 303, "sign-in");
        answer
            .headers()
            .get("set-cookie")
            .and_then(|c| c.to_str().ok())
            .and_then(|c| c.split(';').next())
            .expect("session cookie")
            .to_string()
    }

    /// A session on its database.
    async fn db(&self) -> tokio_postgres::Client {
        connect(cluster().config(&self.db.name)).await
    }

    async fn execute(&self, sql: &str) {
        self.db().await.batch_execute(sql).await.expect(sql);
    }

    /// How many of `forward`'s rows are in `state`.
    async fn forwards_in(&self, forward: &str, state: &str) -> i64 {
        self.db()
            .await
            .query_one(
                "SELECT count(*) FROM event_forwards WHERE forward = $1 AND state = $2",
                &[&forward, &state],
            )
            .await
            .expect("count")
            .get(0)
    }

    async fn event_status(&self, event_id: &str) -> String {
        self.db()
            .await
            .query_one(
                "SELECT status::text FROM webhook_events WHERE event_id = $1",
                &[&event_id],
            )
            .await
            .expect("event row")
            .get(0)
    }
}

/// Writes a file only its owner may read, as secrets are kept.
fn write_private(dir: &Path, name: &str, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

/// A Stripe-scheme source signing with `secret`, as a provider would.
fn signer(secret: &str) -> Source {
    let text =
        format!("[[sources]]\nname = \"s\"\nscheme = \"stripe\"\nsecrets = [\"{secret}\"]\n");
    Settings::from_toml("signer.toml", &text, &HashMap::new())
        .expect("signer settings")
        .source("s")
        .expect("source")
        .clone()
}

fn paid(id: &str) -> Value {
    stripe_event(
        id,
        "payment_intent.succeeded",
        json!({"id": format!("pi_{id}"), "object": "payment_intent", "amount": 900,
               "currency": "usd"}),
    )
}

/// The lines of `log` with `needle`.
fn lines_with<'a>(log: &'a str, needle: &str) -> Vec<&'a str> {
    log.lines().filter(|l| l.contains(needle)).collect()
}

const STRIPE_FROM_FILE: &str = "listen = \"127.0.0.1:{port}\"

[[sources]]
name = \"stripe\"
scheme = \"stripe\"
";

#[tokio::test]
async fn a_secret_rotated_in_its_file_verifies_the_next_delivery_and_the_old_one_stops() {
    let hookd = Served::start(
        "rotated",
        STRIPE_FROM_FILE,
        &[("stripe.secrets", OLD_SECRET)],
        &[("HOOKD_SOURCE_STRIPE_SECRETS_FILE", "{dir}/stripe.secrets")],
    )
    .await;
    let (old, new) = (signer(OLD_SECRET), signer(NEW_SECRET));
    assert_eq!(hookd.deliver("stripe", &old, &paid("evt_r1")).await, 200);
    assert_eq!(hookd.deliver("stripe", &new, &paid("evt_r2")).await, 401);

    hookd.write("stripe.secrets", &format!("{NEW_SECRET}\n"));
    hookd.hup("ok").await;
    assert_eq!(hookd.deliver("stripe", &old, &paid("evt_r3")).await, 401);
    assert_eq!(hookd.deliver("stripe", &new, &paid("evt_r4")).await, 200);
    assert_eq!(lines_with(&hookd.log(), "configuration reloaded").len(), 1);
}

#[tokio::test]
async fn a_secret_added_in_the_config_file_verifies_and_a_restart_only_key_is_named() {
    let config = |secrets: &str, listen_port: &str| {
        format!(
            "listen = \"127.0.0.1:{listen_port}\"\n\n[[sources]]\nname = \"stripe\"\n\
             scheme = \"stripe\"\nsecrets = [{secrets}]\n"
        )
    };
    let hookd = Served::start(
        "added",
        &config(&format!("\"{OLD_SECRET}\""), "{port}"),
        &[],
        &[],
    )
    .await;
    let (old, new) = (signer(OLD_SECRET), signer(NEW_SECRET));
    assert_eq!(hookd.deliver("stripe", &new, &paid("evt_a1")).await, 401);

    // The new secret first, the old one kept while the provider rolls over; and
    // a listen address, which only a restart can change.
    let other_port = hookd.port.wrapping_add(1).to_string();
    hookd.write_config(&config(
        &format!("\"{NEW_SECRET}\", \"{OLD_SECRET}\""),
        &other_port,
    ));
    hookd.hup("ok").await;
    assert_eq!(hookd.deliver("stripe", &new, &paid("evt_a2")).await, 200);
    assert_eq!(hookd.deliver("stripe", &old, &paid("evt_a3")).await, 200);
    let log = hookd.log();
    let named = lines_with(&log, "needs a restart");
    assert_eq!(named.len(), 1, "{log}");
    assert!(named[0].contains("listen changed"), "{log}");
}

#[tokio::test]
async fn a_removed_tokens_sessions_end_and_a_new_token_works() {
    let hookd = Served::start(
        "tokens",
        "listen = \"127.0.0.1:{port}\"\n",
        &[(
            "tokens",
            &format!("alice operator {ALICE}\nbob viewer {BOB}\n"),
        )],
        &[("HOOKD_ADMIN_TOKENS_FILE", "{dir}/tokens")],
    )
    .await;
    let alice = hookd.sign_in(ALICE).await;
    let bob = hookd.sign_in(BOB).await;
    assert_eq!(hookd.events_with(("Cookie", &alice)).await, 200);
    assert_eq!(hookd.events_with(("Cookie", &bob)).await, 200);
    let carol_bearer = format!("Bearer {CAROL}");
    assert_eq!(
        hookd.events_with(("Authorization", &carol_bearer)).await,
        401
    );

    hookd.write(
        "tokens",
        &format!("bob viewer {BOB}\ncarol operator {CAROL}\n"),
    );
    hookd.hup("ok").await;
    // Alice's session, made with a token no longer configured, is refused on
    // its next request; Bob's, whose token stayed, goes on.
    assert_eq!(hookd.events_with(("Cookie", &alice)).await, 401);
    let alice_bearer = format!("Bearer {ALICE}");
    assert_eq!(
        hookd.events_with(("Authorization", &alice_bearer)).await,
        401
    );
    assert_eq!(hookd.events_with(("Cookie", &bob)).await, 200);
    assert_eq!(
        hookd.events_with(("Authorization", &carol_bearer)).await,
        200
    );
    let carol = hookd.sign_in(CAROL).await;
    assert_eq!(hookd.events_with(("Cookie", &carol)).await, 200);
}

#[tokio::test]
async fn a_new_source_answers_and_a_removed_one_is_unknown() {
    let source = |name: &str| {
        format!(
            "[[sources]]\nname = \"{name}\"\nscheme = \"stripe\"\nsecrets = [\"{OLD_SECRET}\"]\n"
        )
    };
    let listen = "listen = \"127.0.0.1:{port}\"\n\n";
    let hookd = Served::start("sources", &format!("{listen}{}", source("old")), &[], &[]).await;
    let signer = signer(OLD_SECRET);
    assert_eq!(hookd.deliver("old", &signer, &paid("evt_s1")).await, 200);
    assert_eq!(hookd.deliver("fresh", &signer, &paid("evt_s2")).await, 404);

    hookd.write_config(&format!("{listen}{}", source("fresh")));
    hookd.hup("ok").await;
    assert_eq!(hookd.deliver("fresh", &signer, &paid("evt_s3")).await, 200);
    assert_eq!(hookd.deliver("old", &signer, &paid("evt_s4")).await, 404);
    assert_eq!(hookd.event_status("evt_s3").await, "processed");
}

#[tokio::test]
async fn a_new_forward_delivers_and_a_removed_one_stops() {
    let receiver = Receiver::start(&[]).await;
    let base = format!(
        "listen = \"127.0.0.1:{{port}}\"\n\n[[sources]]\nname = \"stripe\"\n\
         scheme = \"stripe\"\nsecrets = [\"{OLD_SECRET}\"]\n"
    );
    let forwarding = format!(
        "{base}\n[[forwards]]\nname = \"billing\"\nurl = \"{}\"\nsecret = \"{FORWARD_SECRET}\"\n\
         kinds = [\"payment_succeeded\"]\n",
        receiver.url
    );
    let hookd = Served::start("forwards", &base, &[], &[]).await;
    let signer = signer(OLD_SECRET);
    assert_eq!(hookd.deliver("stripe", &signer, &paid("evt_f1")).await, 200);
    // Nothing to forward: done at receipt.
    assert_eq!(hookd.event_status("evt_f1").await, "processed");

    hookd.write_config(&forwarding);
    hookd.hup("ok").await;
    let body = paid("evt_f2");
    assert_eq!(hookd.deliver("stripe", &signer, &body).await, 200);
    let got = receiver.wait_for(1).await;
    assert_eq!(got.len(), 1);
    assert!(got[0].verified, "signed with the forward's secret");
    assert_eq!(got[0].body, serde_json::to_vec(&body).expect("json"));
    wait_for(
        "evt_f2 forwarded and processed",
        Duration::from_secs(20),
        || async { (hookd.event_status("evt_f2").await == "processed").then_some(()) },
    )
    .await;

    hookd.write_config(&base);
    hookd.hup("ok").await;
    assert_eq!(hookd.deliver("stripe", &signer, &paid("evt_f3")).await, 200);
    // No forward in its plan: processed at receipt, with nothing left to send.
    assert_eq!(hookd.event_status("evt_f3").await, "processed");
    assert_eq!(receiver.received().len(), 1);
}

#[tokio::test]
async fn a_forward_removed_by_a_reload_keeps_its_waiting_events_until_it_is_back() {
    // The receiver fails the first send, then takes everything.
    let receiver = Receiver::start(&[503]).await;
    let base = format!(
        "listen = \"127.0.0.1:{{port}}\"\nretry_base = \"1h\"\nmax_attempts = 1\n\n\
         [[sources]]\nname = \"stripe\"\nscheme = \"stripe\"\nsecrets = [\"{OLD_SECRET}\"]\n"
    );
    let forwarding = format!(
        "{base}\n[[forwards]]\nname = \"billing\"\nurl = \"{}\"\nsecret = \"{FORWARD_SECRET}\"\n\
         kinds = [\"payment_succeeded\"]\n",
        receiver.url
    );
    let hookd = Served::start("forward-removed", &forwarding, &[], &[]).await;
    let signer = signer(OLD_SECRET);
    assert_eq!(hookd.deliver("stripe", &signer, &paid("evt_w1")).await, 200);
    receiver.wait_for(1).await;
    wait_for(
        "the failed send recorded",
        Duration::from_secs(20),
        || async { (hookd.event_status("evt_w1").await == "failed").then_some(()) },
    )
    .await;

    // The forward is removed while its event waits; then the event and its
    // forward are due (its one attempt spent): for some retry rounds nothing
    // is sent, nothing goes dead, and its row still waits.
    hookd.write_config(&base);
    hookd.hup("ok").await;
    hookd
        .execute("UPDATE webhook_events SET next_attempt_at = now() WHERE event_id = 'evt_w1'")
        .await;
    hookd
        .execute("UPDATE event_forwards SET next_attempt_at = now() WHERE forward = 'billing'")
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(receiver.received().len(), 1, "sent by a removed forward");
    assert_eq!(hookd.event_status("evt_w1").await, "failed");
    let waiting = |state: &'static str| hookd.forwards_in("billing", state);
    assert_eq!(waiting("pending").await, 1);

    // Back in the configuration: sent once, and the event is done.
    hookd.write_config(&forwarding);
    hookd.hup("ok").await;
    wait_for("evt_w1 forwarded", Duration::from_secs(20), || async {
        (hookd.event_status("evt_w1").await == "processed").then_some(())
    })
    .await;
    assert_eq!(receiver.received().len(), 2, "one failed send, one taken");
    assert_eq!(waiting("delivered").await, 1);
}

#[tokio::test]
async fn the_metrics_token_and_the_tolerance_follow_the_reloaded_files() {
    let config = |tolerance: &str| {
        format!(
            "listen = \"127.0.0.1:{{port}}\"\n\n[[sources]]\nname = \"stripe\"\n\
             scheme = \"stripe\"\nsecrets = [\"{OLD_SECRET}\"]\ntolerance = \"{tolerance}\"\n"
        )
    };
    let (first, second) = ("metrics-first-0123456789", "metrics-second-0123456789");
    let hookd = Served::start(
        "per-request",
        &config("5m"),
        &[("metrics.token", first)],
        &[("HOOKD_METRICS_TOKEN_FILE", "{dir}/metrics.token")],
    )
    .await;
    let signer = signer(OLD_SECRET);
    let signed_at = chrono::Utc::now().timestamp() - 600;
    let (t1, t2) = (paid("evt_t1"), paid("evt_t2"));
    let late = |body| hookd.deliver_signed_at("stripe", &signer, body, signed_at);
    assert_eq!(late(&t1).await, 401, "10 minutes late, 5 allowed");
    assert_eq!(hookd.metrics(Some(first)).await.0, 200);
    assert_eq!(hookd.metrics(Some(second)).await.0, 401);

    hookd.write_config(&config("1h"));
    hookd.write("metrics.token", second);
    hookd.hup_logged(1).await;
    assert_eq!(late(&t2).await, 200, "10 minutes late, an hour allowed");
    assert_eq!(hookd.metrics(Some(first)).await.0, 401);
    let (status, text) = hookd.metrics(Some(second)).await;
    assert_eq!(status, 200);
    let reloads = Exposition::parse(&text);
    let counted = |result| reloads.value("hookd_config_reloads_total", &[("result", result)]);
    assert_eq!((counted("ok"), counted("error")), (1.0, 0.0));
}

/// Sends SIGHUP to `hookd`, whose files are now bad: the reload is counted as
/// an error, logged as the `nth` refusal (from 0) in one line naming `named`,
/// and the running configuration still verifies deliveries signed with `running`.
async fn refused(hookd: &Served, nth: usize, named: &str, running: &Source) {
    hookd.hup("error").await;
    let log = hookd.log();
    let refusals = lines_with(&log, "reload refused");
    assert_eq!(refusals.len(), nth + 1, "one line per refusal:\n{log}");
    assert!(refusals[nth].contains(named), "{named}: {}", refusals[nth]);
    let id = format!("evt_refused_{nth}");
    assert_eq!(
        hookd.deliver("stripe", running, &paid(&id)).await,
        200,
        "{named}"
    );
}

#[tokio::test]
async fn a_bad_configuration_is_refused_with_one_line_and_the_running_one_kept() {
    let hookd = Served::start(
        "refused",
        STRIPE_FROM_FILE,
        &[("stripe.secrets", OLD_SECRET)],
        &[("HOOKD_SOURCE_STRIPE_SECRETS_FILE", "{dir}/stripe.secrets")],
    )
    .await;
    let old = signer(OLD_SECRET);
    // Not TOML; an unknown key; a bad value.
    hookd.write_config("listen = [");
    refused(&hookd, 0, "line 1: unclosed array", &old).await;
    hookd.write_config(&format!("{STRIPE_FROM_FILE}lisen = \"127.0.0.1:1\"\n"));
    refused(&hookd, 1, "lisen", &old).await;
    hookd.write_config(&format!("{STRIPE_FROM_FILE}tolerance = \"soon\"\n"));
    refused(&hookd, 2, "sources[0].tolerance", &old).await;
    // The file is fine again; the secret is a shipped (public) one, which only
    // `development = true` may use: `serve` would refuse to start with it.
    hookd.write_config(STRIPE_FROM_FILE);
    hookd.write("stripe.secrets", "whsec_dev_stripe_current_0123456789");
    refused(&hookd, 3, "shipped development secret", &old).await;
    // An unreadable secret file.
    std::fs::remove_file(hookd.dir.join("stripe.secrets")).expect("remove");
    refused(&hookd, 4, "HOOKD_SOURCE_STRIPE_SECRETS_FILE", &old).await;
    assert_eq!(hookd.reloads("ok").await, 0.0);

    // Fixed: the next reload is counted ok, and applies.
    hookd.write("stripe.secrets", NEW_SECRET);
    hookd.hup("ok").await;
    let new = signer(NEW_SECRET);
    assert_eq!(hookd.deliver("stripe", &new, &paid("evt_fixed")).await, 200);
    assert_eq!(hookd.deliver("stripe", &old, &paid("evt_old")).await, 401);
}

#[tokio::test]
async fn the_gateways_routes_and_trusted_proxies_follow_the_reloaded_file() {
    let upstream = crate::support::upstream::Upstream::created().await;
    let gateway_port = crate::process::free_port();
    let config = |trusted: &str, path: &str| {
        format!(
            "listen = \"127.0.0.1:{{port}}\"\n\n[gateway]\nlisten = \"127.0.0.1:{gateway_port}\"\n\
             {trusted}\n[[gateway.routes]]\nname = \"pay\"\npath = \"{path}\"\n\
             upstream = \"{}\"\nscope = \"none\"\n",
            upstream.url
        )
    };
    let hookd = Served::start("gateway", &config("", "/payments"), &[], &[]).await;
    let call = |path: &str, key: &str| {
        hookd
            .http
            .post(format!("http://127.0.0.1:{gateway_port}{path}"))
            .header("Idempotency-Key", key)
            .header("Content-Type", "application/json")
            .header("X-Forwarded-For", "198.51.100.7")
            .body("{}")
            .send()
    };
    let status =
        |answer: reqwest::Result<reqwest::Response>| answer.expect("gateway").status().as_u16();
    // As started: the one route, the caller's forwarding headers as they came.
    assert_eq!(status(call("/payments", "k1").await), 201);
    assert_eq!(status(call("/refunds", "k2").await), 404);
    let seen = &upstream.seen()[0];
    assert_eq!(seen.header("x-forwarded-for"), Some("198.51.100.7"));
    assert_eq!(seen.header("x-real-ip"), None);

    // Another route, and hookd speaking as a proxy that believes no caller.
    hookd.write_config(&config("trusted_proxies = []\n", "/refunds"));
    hookd.hup("ok").await;
    assert_eq!(status(call("/refunds", "k3").await), 201);
    assert_eq!(status(call("/payments", "k4").await), 404);
    assert_eq!(
        upstream.calls(),
        2,
        "only the routes in force reach upstream"
    );
    let seen = &upstream.seen()[1];
    assert_eq!(seen.header("x-forwarded-for"), Some("127.0.0.1"));
    assert_eq!(seen.header("x-real-ip"), Some("127.0.0.1"));
}
