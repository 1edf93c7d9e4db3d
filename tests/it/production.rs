//! Running hookd in production: `hookd check-config` and exit code 78 for a bad
//! configuration (which systemd is told not to restart), `HOOKD_CONFIG`, secrets
//! and tokens read from the environment or files (and a warning for such a file
//! others may read), and `hookd verify` — all through the real binary.

use std::path::PathBuf;
use std::process::Output;

use hookd::simulate::{Hints, sign_delivery};

use crate::support::{run_hookd_with, shipped_settings};

const SHIPPED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/hookd.toml");
const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/fixtures/stripe/01_payment_intent.succeeded.json"
);

/// A file of this test run's own.
fn file(name: &str, contents: &[u8]) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("production-{}-{name}", std::process::id()));
    std::fs::write(&path, contents).expect("write");
    path
}

/// A configuration file of one GitHub source named `source`, listening on `port`.
fn one_source_config(name: &str, port: u16, source: &str) -> PathBuf {
    let text = format!(
        "listen = \"127.0.0.1:{port}\"\n[[sources]]\nname = \"{source}\"\n\
         scheme = \"github\"\nsecrets = [\"a-github-secret-of-ours\"]\n"
    );
    file(name, text.as_bytes())
}

/// The binary with exactly these arguments and variables (no `--config` added).
async fn hookd(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = crate::support::hookd_binary();
    command
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("DATABASE_URL")
        .env_remove("HOOKD_CONFIG")
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied());
    tokio::task::spawn_blocking(move || command.output().expect("run hookd"))
        .await
        .expect("join")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// stderr, which must be exactly one line.
fn one_line(output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    stderr
}

#[tokio::test]
async fn slow_check_config_summarises_a_good_configuration_without_a_database() {
    // An address where no database listens: check-config never connects.
    let env = [(
        "DATABASE_URL",
        "postgres://hookd@127.0.0.1:1/hookd".to_string(),
    )];
    let output = run_hookd_with(&["check-config"], &env).await;
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let out = stdout(&output);
    assert!(
        out.starts_with("ok: ")
            && out.contains(
                "12 source(s) (stripe, standard, github, shop, adyen, paddle, square, razorpay, \
                 checkout, gocardless, paypal, braintree)"
            )
            && out.contains("2 admin token(s)")
            && out.contains("webhooks on 127.0.0.1:8080")
            && out.contains("database: DATABASE_URL"),
        "{out}"
    );
    assert!(
        !out.contains("127.0.0.1:1"),
        "the URL is not printed: {out}"
    );
}

#[tokio::test]
async fn slow_a_bad_configuration_exits_78_with_one_line_for_check_config_and_serve() {
    let bad = file("bad.toml", b"retention = \"1h\"\n");
    let bad = bad.to_str().expect("utf-8");
    for command in ["check-config", "serve", "migrate", "events"] {
        let args: Vec<&str> = match command {
            "events" => vec!["events", "list", "--config", bad],
            other => vec![other, "--config", bad],
        };
        let output = hookd(&args, &[]).await;
        assert_eq!(output.status.code(), Some(78), "{command}: {output:?}");
        let line = one_line(&output);
        assert!(
            line.starts_with(&format!("hookd: config {bad}: retention: ")) && line.contains("24h"),
            "{command}: {line}"
        );
    }
    let missing = hookd(
        &["check-config", "--config", "/nonexistent/hookd.toml"],
        &[],
    )
    .await;
    assert_eq!(missing.status.code(), Some(78));
    assert!(one_line(&missing).contains("/nonexistent/hookd.toml"));

    // The shipped secrets on a public address: what serve refuses, check-config refuses.
    let public = hookd(
        &["check-config", "--config", SHIPPED],
        &[("HOOKD_LISTEN", "0.0.0.0:0")],
    )
    .await;
    assert_eq!(public.status.code(), Some(78));
    assert!(one_line(&public).contains("sources[0].secrets[0]: is a shipped development secret"));

    // A DATABASE_URL that cannot be used is a configuration error too.
    let url = hookd(
        &["check-config", "--config", SHIPPED],
        &[(
            "DATABASE_URL",
            "postgres://h@localhost/db?sslmode=sometimes",
        )],
    )
    .await;
    assert_eq!(url.status.code(), Some(78));
    assert!(one_line(&url).contains("DATABASE_URL"), "{url:?}");
}

#[tokio::test]
async fn slow_hookd_config_names_the_file_unless_config_is_given() {
    let own = one_source_config("own.toml", 18080, "only");
    let own = own.to_str().expect("utf-8");
    let output = hookd(&["check-config"], &[("HOOKD_CONFIG", own)]).await;
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let out = stdout(&output);
    assert!(
        out.starts_with(&format!("ok: {own}: 1 source(s) (only)")),
        "{out}"
    );
    let flag_wins = hookd(
        &["check-config", "--config", SHIPPED],
        &[("HOOKD_CONFIG", "/nonexistent/hookd.toml")],
    )
    .await;
    assert_eq!(flag_wins.status.code(), Some(0), "{flag_wins:?}");
    assert!(stdout(&flag_wins).contains("12 source(s)"));
    let missing = hookd(
        &["check-config"],
        &[("HOOKD_CONFIG", "/nonexistent/hookd.toml")],
    )
    .await;
    assert_eq!(missing.status.code(), Some(78));
    assert!(one_line(&missing).starts_with("hookd: config /nonexistent/hookd.toml: "));
}

#[tokio::test]
async fn slow_secrets_and_tokens_come_from_files_and_a_bad_file_is_one_line() {
    let secrets = file("secrets", b"whsec_from_a_file_0123456789,whsec_second\n");
    let token = file("token", b"an-operator-token-from-a-file\n");
    let (secrets, token) = (
        secrets.to_str().expect("utf-8"),
        token.to_str().expect("utf-8"),
    );
    let output = run_hookd_with(
        &["check-config"],
        &[
            ("HOOKD_SOURCE_STRIPE_SECRETS_FILE", secrets.into()),
            ("HOOKD_ADMIN_TOKEN_FILE", token.into()),
        ],
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(stdout(&output).contains("3 admin token(s)"));

    let missing = run_hookd_with(
        &["serve"],
        &[("HOOKD_ADMIN_TOKEN_FILE", "/nonexistent/token".into())],
    )
    .await;
    assert_eq!(missing.status.code(), Some(78));
    let line = one_line(&missing);
    assert!(
        line.contains("HOOKD_ADMIN_TOKEN_FILE: cannot read /nonexistent/token"),
        "{line}"
    );
    let both = run_hookd_with(
        &["check-config"],
        &[
            ("HOOKD_SOURCE_STRIPE_SECRETS", "whsec_x".into()),
            ("HOOKD_SOURCE_STRIPE_SECRETS_FILE", secrets.into()),
        ],
    )
    .await;
    assert_eq!(both.status.code(), Some(78));
    assert!(one_line(&both).contains(
        "HOOKD_SOURCE_STRIPE_SECRETS_FILE: set either HOOKD_SOURCE_STRIPE_SECRETS or \
         HOOKD_SOURCE_STRIPE_SECRETS_FILE, not both"
    ));
    assert!(!String::from_utf8_lossy(&both.stderr).contains("whsec_"));
}

/// `hookd verify` of these headers and body, with the shipped configuration.
async fn verify(headers: &[(String, String)], body: &[u8], env: &[(&str, String)]) -> Output {
    let text: String = headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}\n"))
        .collect();
    let tag = rand::random::<u64>();
    let headers_file = file(&format!("headers-{tag}"), text.as_bytes());
    let body_file = file(&format!("body-{tag}"), body);
    run_hookd_with(
        &[
            "verify",
            "--source",
            "stripe",
            "--headers",
            headers_file.to_str().expect("utf-8"),
            body_file.to_str().expect("utf-8"),
        ],
        env,
    )
    .await
}

fn signed_at(body: &[u8], at: i64) -> Vec<(String, String)> {
    let settings = shipped_settings();
    let source = settings.source("stripe").expect("stripe");
    sign_delivery(source, body, Hints::default(), at)
        .expect("sign")
        .headers
}

#[tokio::test]
async fn slow_verify_names_the_secret_that_signed_what_hookd_sign_printed() {
    let printed = run_hookd_with(&["sign", "--source", "stripe", FIXTURE], &[]).await;
    assert!(printed.status.success(), "{printed:?}");
    let headers_file = file("signed-headers", &printed.stdout);
    let args = [
        "verify",
        "--source",
        "stripe",
        "--headers",
        headers_file.to_str().expect("utf-8"),
        FIXTURE,
    ];
    let output = run_hookd_with(&args, &[]).await;
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(
        stdout(&output),
        "ok: signed with secret 1 of 2 (sources[0].secrets[0])"
    );
    // Rotation: the same secret is now the second of two set in the environment.
    let rotated = run_hookd_with(
        &args,
        &[(
            "HOOKD_SOURCE_STRIPE_SECRETS",
            "whsec_the_next_one_0123456789,whsec_dev_stripe_current_0123456789".into(),
        )],
    )
    .await;
    assert_eq!(rotated.status.code(), Some(0), "{rotated:?}");
    assert_eq!(
        stdout(&rotated),
        "ok: signed with secret 2 of 2 (HOOKD_SOURCE_STRIPE_SECRETS[1])"
    );
}

#[tokio::test]
async fn slow_verify_says_which_check_fails_and_why() {
    let body = std::fs::read(FIXTURE).expect("fixture");
    let now = chrono::Utc::now().timestamp();

    let mut changed = body.clone();
    changed.push(b'\n');
    let mismatch = verify(&signed_at(&body, now), &changed, &[]).await;
    assert_eq!(mismatch.status.code(), Some(1));
    let line = one_line(&mismatch);
    assert!(
        line.starts_with("hookd: not verified: signature mismatch: ")
            && line.contains("2 secret(s)")
            && line.contains("byte for byte"),
        "{line}"
    );

    let old = verify(&signed_at(&body, now - 3 * 3600 - 120), &body, &[]).await;
    assert_eq!(old.status.code(), Some(1));
    let line = one_line(&old);
    assert!(
        line.starts_with("hookd: not verified: timestamp too old: signed 3h 2m")
            && line.contains("tolerance of 5m"),
        "{line}"
    );

    let new = verify(&signed_at(&body, now + 630), &body, &[]).await;
    assert_eq!(new.status.code(), Some(1));
    let line = one_line(&new);
    assert!(
        line.starts_with("hookd: not verified: timestamp too new: signed 10m")
            && line.contains("in the future"),
        "{line}"
    );

    let unsigned = [("Content-Type".to_string(), "application/json".to_string())];
    let missing = verify(&unsigned, &body, &[]).await;
    assert_eq!(missing.status.code(), Some(1));
    let line = one_line(&missing);
    assert!(
        line.contains("missing Stripe-Signature header") && line.contains("Content-Type"),
        "{line}"
    );

    let garbled = [("Stripe-Signature".to_string(), "v1".to_string())];
    let malformed = verify(&garbled, &body, &[]).await;
    assert_eq!(malformed.status.code(), Some(1));
    assert!(one_line(&malformed).contains("malformed Stripe-Signature header"));

    let not_headers = file("not-headers", b"POST /webhooks/stripe HTTP/1.1\n");
    let output = run_hookd_with(
        &[
            "verify",
            "--source",
            "stripe",
            "--headers",
            not_headers.to_str().expect("utf-8"),
            FIXTURE,
        ],
        &[],
    )
    .await;
    assert_eq!(output.status.code(), Some(1));
    assert!(one_line(&output).contains(":1: not a \"Name: value\" header line"));
}

#[tokio::test]
async fn slow_config_may_come_before_the_subcommand() {
    let own = one_source_config("before.toml", 18081, "first");
    let own = own.to_str().expect("utf-8");
    for args in [
        ["--config", own, "check-config"],
        ["check-config", "--config", own],
    ] {
        // HOOKD_CONFIG names another file: the flag wins wherever it stands.
        let output = hookd(&args, &[("HOOKD_CONFIG", SHIPPED)]).await;
        assert_eq!(output.status.code(), Some(0), "{args:?}: {output:?}");
        assert!(
            stdout(&output).starts_with(&format!("ok: {own}: 1 source(s) (first)")),
            "{args:?}: {}",
            stdout(&output)
        );
    }
    let missing = hookd(
        &["--config", "/nonexistent/first.toml", "check-config"],
        &[],
    )
    .await;
    assert_eq!(missing.status.code(), Some(78));
    assert!(one_line(&missing).starts_with("hookd: config /nonexistent/first.toml: "));
}

/// A file of this test run's own, with this mode.
fn file_with_mode(name: &str, contents: &[u8], mode: u32) -> String {
    let path = file(name, contents);
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(mode))
        .expect("chmod");
    path.to_str().expect("utf-8").to_string()
}

/// A configuration of one GitHub source (its secret from the environment) and a
/// forward named `billing`, with no secret in the file.
fn forward_config(name: &str) -> String {
    let text = "[[sources]]\nname = \"gh\"\nscheme = \"github\"\n\
                [[forwards]]\nname = \"billing\"\nurl = \"https://billing.example/hooks\"\n\
                types = [\"*\"]\n";
    file_with_mode(name, text.as_bytes(), 0o644)
}

#[tokio::test]
async fn slow_a_forward_secret_comes_from_the_environment_or_a_file() {
    let config = forward_config("forward.toml");
    let source = ("HOOKD_SOURCE_GH_SECRETS", "a-github-secret-of-ours");
    let secret = "whsec_Zm9yd2FyZC10ZXN0LXNlY3JldC0zMi1ieXRlcy1sb25nISE=";
    let args = ["check-config", "--config", config.as_str()];

    let without = hookd(&args, &[source]).await;
    assert_eq!(without.status.code(), Some(78), "{without:?}");
    let line = one_line(&without);
    assert!(
        line.contains("forwards[0].secret: is required")
            && line.contains("HOOKD_FORWARD_BILLING_SECRET"),
        "{line}"
    );

    let from_env = hookd(&args, &[source, ("HOOKD_FORWARD_BILLING_SECRET", secret)]).await;
    assert_eq!(from_env.status.code(), Some(0), "{from_env:?}");
    assert!(stdout(&from_env).contains("1 forward(s)"));

    let private = file_with_mode("forward-secret", format!("{secret}\n").as_bytes(), 0o600);
    let from_file = hookd(
        &args,
        &[
            source,
            ("HOOKD_FORWARD_BILLING_SECRET_FILE", private.as_str()),
        ],
    )
    .await;
    assert_eq!(from_file.status.code(), Some(0), "{from_file:?}");
    assert!(stdout(&from_file).contains("1 forward(s)"));

    // What the file holds is checked as the key would be, under the variable's name.
    let bad = file_with_mode("forward-bad", b"not-base64-at-all!\n", 0o600);
    let refused = hookd(
        &args,
        &[source, ("HOOKD_FORWARD_BILLING_SECRET_FILE", bad.as_str())],
    )
    .await;
    assert_eq!(refused.status.code(), Some(78), "{refused:?}");
    let line = one_line(&refused);
    assert!(line.contains("HOOKD_FORWARD_BILLING_SECRET_FILE"), "{line}");
    assert!(!line.contains("not-base64-at-all"), "{line}");
}

#[tokio::test]
async fn slow_a_tokens_file_replaces_the_configured_tokens_and_a_bad_line_is_named() {
    let good = file_with_mode(
        "tokens",
        b"# support staff\n\nalice viewer alices-token-0123456789\n  bob   operator bobs-token-0123456789  \n",
        0o600,
    );
    let output = run_hookd_with(
        &["check-config"],
        &[("HOOKD_ADMIN_TOKENS_FILE", good.clone())],
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    // The file's two, instead of hookd.toml's two; HOOKD_ADMIN_TOKEN still adds one.
    assert!(
        stdout(&output).contains("2 admin token(s)"),
        "{}",
        stdout(&output)
    );
    let with_env = run_hookd_with(
        &["check-config"],
        &[
            ("HOOKD_ADMIN_TOKENS_FILE", good),
            ("HOOKD_ADMIN_TOKEN", "an-operator-token-from-env".into()),
        ],
    )
    .await;
    assert!(
        stdout(&with_env).contains("3 admin token(s)"),
        "{with_env:?}"
    );

    for (contents, problem) in [
        (
            "alice viewer alices-token-0123456789\nbob bobs-token-0123456789\n",
            "expected three fields",
        ),
        (
            "# ok\nalice admin alices-token-0123456789\n",
            "the second field (the role) is not one of viewer, operator",
        ),
        (
            // The fields out of order: the token stands where the role belongs.
            "# ok\nalice alices-token-0123456789 viewer\n",
            "the second field (the role) is not one of viewer, operator",
        ),
        (
            "alice viewer alices-token-0123456789\nalice operator another-token-0123456789\n",
            "\"alice\" is used twice",
        ),
    ] {
        let bad = file_with_mode(
            &format!("tokens-bad-{}", rand::random::<u32>()),
            contents.as_bytes(),
            0o600,
        );
        for command in ["check-config", "serve"] {
            let output =
                run_hookd_with(&[command], &[("HOOKD_ADMIN_TOKENS_FILE", bad.clone())]).await;
            assert_eq!(output.status.code(), Some(78), "{command}: {output:?}");
            let line = one_line(&output);
            assert!(
                line.contains(&format!("{bad}:2: ")) && line.contains(problem),
                "{command}: {line}"
            );
            assert!(
                !line.contains("token-0123456789"),
                "no token printed: {line}"
            );
        }
    }
}

#[tokio::test]
async fn slow_a_secrets_file_others_may_read_is_warned_about_and_a_private_one_is_not() {
    let open = file_with_mode("open-secrets", b"whsec_live_open_0123456789\n", 0o644);
    let output = run_hookd_with(
        &["check-config"],
        &[("HOOKD_SOURCE_STRIPE_SECRETS_FILE", open.clone())],
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let line = one_line(&output);
    assert!(
        line.contains(&format!("{open}: holds secrets")) && line.contains("mode 644"),
        "{line}"
    );

    let private = file_with_mode("private-secrets", b"whsec_live_private_0123456789\n", 0o600);
    let output = run_hookd_with(
        &["check-config"],
        &[("HOOKD_SOURCE_STRIPE_SECRETS_FILE", private)],
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(
        String::from_utf8_lossy(&output.stderr).trim(),
        "",
        "no warning"
    );

    // A configuration file holding a real secret is a secrets file too; the
    // shipped one (public development values only) is not warned about.
    let config = format!(
        "{}\n[[admin.tokens]]\nname = \"ops\"\ntoken = \"a-real-token-0123456789\"\nrole = \"operator\"\n",
        hookd_kit::settings::shipped_toml_anywhere()
    );
    let config = file_with_mode("real-token.toml", config.as_bytes(), 0o644);
    let output = hookd(&["check-config", "--config", config.as_str()], &[]).await;
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(one_line(&output).contains(&format!("{config}: holds secrets")));
}

#[tokio::test]
async fn slow_sslmode_prefer_to_another_machine_is_warned_about() {
    let prefer = run_hookd_with(
        &["check-config"],
        &[(
            "DATABASE_URL",
            "postgres://hookd@db.example:5432/hookd".into(),
        )],
    )
    .await;
    assert_eq!(prefer.status.code(), Some(0), "{prefer:?}");
    let line = one_line(&prefer);
    assert!(
        line.contains("sslmode=prefer")
            && line.contains("may be unencrypted")
            && line.contains("verify-full")
            && !line.contains("db.example"),
        "{line}"
    );
    for url in [
        "postgres://hookd@db.example:5432/hookd?sslmode=require",
        "postgres://hookd@localhost:5432/hookd",
    ] {
        let output = run_hookd_with(&["check-config"], &[("DATABASE_URL", url.into())]).await;
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        assert_eq!(String::from_utf8_lossy(&output.stderr).trim(), "", "{url}");
    }
}
