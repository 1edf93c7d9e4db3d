use std::collections::HashMap;
use std::time::Duration;

use super::*;
use crate::providers::{Encoding, Locator};

const MINIMAL: &str = r#"
[[sources]]
name = "stripe"
scheme = "stripe"
secrets = ["whsec_a", "whsec_b"]
"#;

fn load(text: &str) -> Result<Settings, ConfigError> {
    Settings::from_toml("test.toml", text, &HashMap::new())
}

fn load_env(text: &str, env: &[(&str, &str)]) -> Result<Settings, ConfigError> {
    let env = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Settings::from_toml("test.toml", text, &env)
}

/// Why `check_exposure` refuses these settings.
fn exposure_error(text: &str, env: &[(&str, &str)]) -> String {
    load_env(text, env)
        .expect("valid")
        .check_exposure()
        .expect_err("refused")
        .to_string()
}

fn error(text: &str) -> String {
    load(text).expect_err("must be refused").to_string()
}

#[test]
fn the_shipped_config_loads_with_its_sources() {
    let text = include_str!("../../hookd.toml");
    let settings = load(text).expect("shipped hookd.toml");
    let names: Vec<_> = settings.sources.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "stripe",
            "standard",
            "github",
            "shop",
            "adyen",
            "paddle",
            "square",
            "razorpay",
            "checkout",
            "gocardless",
            "paypal",
            "braintree"
        ]
    );
    assert_eq!(settings.source("stripe").map(|s| s.secrets.len()), Some(2));
    assert_eq!(settings.admin_tokens.len(), 2);
}

#[test]
fn defaults_follow_the_contract() {
    let s = load(MINIMAL).expect("valid");
    assert_eq!(s.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(s.max_body_bytes, 1_048_576);
    assert_eq!(s.handler_timeout, Duration::from_secs(5));
    assert_eq!(s.max_attempts, 10);
    assert_eq!(s.retry_base, Duration::from_secs(1));
    assert_eq!(s.retry_cap, Duration::from_secs(3600));
    assert_eq!(s.retention, Duration::from_secs(30 * 86400));
    assert_eq!(s.key_retention, Duration::from_secs(365 * 86400));
    assert_eq!(s.purge_interval, Duration::from_secs(3600));
    assert_eq!(s.purge_batch, 1000);
    assert_eq!((s.pool_size, s.dispatchers), (16, 2));
    let stripe = s.source("stripe").expect("stripe");
    assert_eq!(stripe.tolerance, Duration::from_secs(300));
    assert_eq!(
        stripe.kind_of("payment_intent.succeeded", &serde_json::Value::Null),
        Some("payment_succeeded")
    );
    assert_eq!(
        stripe.kind_of("charge.dispute.created", &serde_json::Value::Null),
        Some("dispute_opened")
    );
    assert_eq!(
        stripe.kind_of("customer.created", &serde_json::Value::Null),
        None
    );
}

#[test]
fn unknown_keys_are_refused_with_their_path() {
    let e = error(&format!("lissen = \"x\"\n{MINIMAL}"));
    assert!(e.contains("lissen"), "{e}");
    let e = error(&format!("{MINIMAL}sceme = \"stripe\"\n"));
    assert!(e.contains("sources[0]") && e.contains("sceme"), "{e}");
    assert!(!e.contains('\n'));
}

#[test]
fn bad_values_name_their_key_on_one_line() {
    let cases = [
        ("handler_timeout = \"5\"", "handler_timeout"),
        ("handler_timeout = \"5 parsecs\"", "handler_timeout"),
        ("retention = \"10h\"", "retention"),
        ("key_retention = \"12h\"", "key_retention"),
        (
            "retention = \"60d\"\nkey_retention = \"30d\"",
            "key_retention",
        ),
        ("max_attempts = 0", "max_attempts"),
        ("purge_batch = -1", "purge_batch"),
        ("listen = \"localhost\"", "listen"),
        ("listen = \"no-such-host.invalid:80\"", "listen"),
        ("handler_timeout = 0", "handler_timeout"),
        ("retry_base = \"2h\"", "retry_cap"),
        ("max_body_bytes = \"big\"", "max_body_bytes"),
        ("pool_size = 2", "pool_size"),
        ("dispatchers = 0", "dispatchers"),
    ];
    for (line, key) in cases {
        let e = error(&format!("{line}\n{MINIMAL}"));
        assert!(e.contains(key), "{line}: {e}");
        assert!(!e.contains('\n'), "{line}: {e}");
    }
}

#[test]
fn sources_are_checked() {
    let source = |body: &str| format!("[[sources]]\nname = \"s\"\n{body}\n");
    let cases = [
        (
            "scheme = \"paypall\"\nsecrets = [\"x\"]",
            "sources[0].scheme",
        ),
        (
            "scheme = \"paypal\"\nwebhook_id = \"W\"\nsecrets = [\"x\"]",
            "sources[0].secrets",
        ),
        ("scheme = \"stripe\"\nsecrets = []", "sources[0].secrets"),
        (
            "scheme = \"standard\"\nsecrets = [\"whsec_***\"]",
            "sources[0].secrets[0]",
        ),
        (
            "scheme = \"stripe\"\nsecrets = [\"x\"]\nsignature_header = \"X\"",
            "sources[0].signature_header",
        ),
        (
            "scheme = \"hmac\"\nsecrets = [\"x\"]",
            "sources[0].signature_header",
        ),
        (
            "scheme = \"hmac\"\nsecrets = [\"x\"]\nsignature_header = \"X\"\ntype_header = \"T\"",
            "sources[0].id_header",
        ),
        (
            "scheme = \"hmac\"\nsecrets = [\"x\"]\nsignature_header = \"X\"\nid_pointer = \"id\"\ntype_header = \"T\"",
            "sources[0].id_pointer",
        ),
        (
            "scheme = \"stripe\"\nsecrets = [\"x\"]\nevent_types = { \"a.b\" = \"\" }",
            "sources[0].event_types",
        ),
    ];
    for (body, key) in cases {
        let e = error(&source(body));
        assert!(e.contains(key), "{body}: {e}");
    }
    let twice = format!("{MINIMAL}{MINIMAL}");
    assert!(error(&twice).contains("sources[1].name"));
    let bad_name = "[[sources]]\nname = \"Bad Name\"\nscheme = \"stripe\"\nsecrets = [\"x\"]\n";
    assert!(error(bad_name).contains("sources[0].name"));
}

#[test]
fn environment_overrides_the_file() {
    let s = load_env(
        MINIMAL,
        &[
            ("HOOKD_LISTEN", "0.0.0.0:9999"),
            ("HOOKD_SOURCE_STRIPE_SECRETS", "whsec_env1, whsec_env2"),
            ("HOOKD_ADMIN_TOKEN", "an-operator-token-from-env"),
            ("DATABASE_URL", "postgres://x@localhost/db"),
        ],
    )
    .expect("valid");
    assert_eq!(s.listen.to_string(), "0.0.0.0:9999");
    let secrets: Vec<_> = s.sources[0].secrets.iter().map(|x| x.expose()).collect();
    assert_eq!(secrets, ["whsec_env1", "whsec_env2"]);
    assert_eq!(s.admin_tokens[0].role, Role::Operator);
    assert_eq!(
        s.database_url.as_ref().map(Secret::expose),
        Some("postgres://x@localhost/db")
    );

    let s = load_env(MINIMAL, &[("HOOKD_SOURCE_STRIPPE_SECRETS", "x")]).expect("a warning only");
    assert_eq!(
        s.sources[0].secrets[0].expose(),
        "whsec_a",
        "the file's secrets stay"
    );
}

/// A file of this test's own under the system's temporary folder.
fn secret_file(name: &str, contents: &str) -> String {
    let path = std::env::temp_dir().join(format!("hookd-config-{}-{name}", std::process::id()));
    std::fs::write(&path, contents).expect("write secret file");
    path.display().to_string()
}

#[test]
fn secrets_and_the_admin_token_can_come_from_files() {
    let secrets = secret_file("secrets", "whsec_file1,whsec_file2\n");
    let token = secret_file("token", "an-operator-token-from-a-file\r\n");
    let s = load_env(
        MINIMAL,
        &[
            ("HOOKD_SOURCE_STRIPE_SECRETS_FILE", secrets.as_str()),
            ("HOOKD_ADMIN_TOKEN_FILE", token.as_str()),
        ],
    )
    .expect("valid");
    let stripe: Vec<_> = s.sources[0].secrets.iter().map(|x| x.expose()).collect();
    assert_eq!(stripe, ["whsec_file1", "whsec_file2"], "newline trimmed");
    assert_eq!(s.sources[0].secrets_key, "HOOKD_SOURCE_STRIPE_SECRETS_FILE");
    let env_token = &s.admin_tokens[0];
    assert_eq!(env_token.token.expose(), "an-operator-token-from-a-file");
    assert_eq!(
        (env_token.role, env_token.key.as_str()),
        (Role::Operator, "HOOKD_ADMIN_TOKEN_FILE")
    );

    // An empty variable counts as unset, as with the plain ones.
    let s = load_env(
        MINIMAL,
        &[
            ("HOOKD_SOURCE_STRIPE_SECRETS", ""),
            ("HOOKD_SOURCE_STRIPE_SECRETS_FILE", secrets.as_str()),
        ],
    )
    .expect("valid");
    assert_eq!(s.sources[0].secrets[0].expose(), "whsec_file1");
}

#[test]
fn secret_files_that_cannot_be_used_are_one_line_naming_the_variable() {
    let missing = "/nonexistent/hookd/secret";
    type Env<'a> = &'a [(&'a str, &'a str)];
    let cases: [(Env, &str, &str); 5] = [
        (
            &[("HOOKD_SOURCE_STRIPE_SECRETS_FILE", missing)],
            "HOOKD_SOURCE_STRIPE_SECRETS_FILE",
            "cannot read /nonexistent/hookd/secret",
        ),
        (
            &[("HOOKD_ADMIN_TOKEN_FILE", missing)],
            "HOOKD_ADMIN_TOKEN_FILE",
            "cannot read",
        ),
        (
            &[
                ("HOOKD_SOURCE_STRIPE_SECRETS", "whsec_x"),
                ("HOOKD_SOURCE_STRIPE_SECRETS_FILE", missing),
            ],
            "HOOKD_SOURCE_STRIPE_SECRETS_FILE",
            "set either HOOKD_SOURCE_STRIPE_SECRETS or HOOKD_SOURCE_STRIPE_SECRETS_FILE, not both",
        ),
        (
            &[
                ("HOOKD_ADMIN_TOKEN", "an-operator-token-from-env"),
                ("HOOKD_ADMIN_TOKEN_FILE", missing),
            ],
            "HOOKD_ADMIN_TOKEN_FILE",
            "not both",
        ),
        (
            &[("HOOKD_SOURCE_STRIPE_SECRETS_FILE", "/")],
            "HOOKD_SOURCE_STRIPE_SECRETS_FILE",
            "cannot read /",
        ),
    ];
    for (env, key, problem) in cases {
        let e = load_env(MINIMAL, env).expect_err("refused").to_string();
        assert!(
            e.starts_with(&format!("config test.toml: {key}: ")) && e.contains(problem),
            "{env:?}: {e}"
        );
        assert!(!e.contains('\n'), "{e}");
    }
    let empty = secret_file("empty", "\n");
    let e = load_env(
        MINIMAL,
        &[("HOOKD_SOURCE_STRIPE_SECRETS_FILE", empty.as_str())],
    )
    .expect_err("no secret")
    .to_string();
    assert!(
        e.contains("HOOKD_SOURCE_STRIPE_SECRETS_FILE: needs at least one secret"),
        "{e}"
    );
    let e = load_env(MINIMAL, &[("HOOKD_ADMIN_TOKEN_FILE", empty.as_str())])
        .expect_err("empty token")
        .to_string();
    assert!(
        e.contains("HOOKD_ADMIN_TOKEN_FILE: must not be empty"),
        "{e}"
    );
    // A file for a source that is not configured is a warning, like the plain variable.
    assert!(load_env(MINIMAL, &[("HOOKD_SOURCE_NOPE_SECRETS_FILE", missing)]).is_ok());
}

#[test]
fn admin_tokens_are_checked() {
    let token = |role: &str, value: &str| {
        format!("{MINIMAL}[[admin.tokens]]\nname = \"a\"\ntoken = \"{value}\"\nrole = \"{role}\"\n")
    };
    assert!(load(&token("viewer", "long-enough-token-123")).is_ok());
    assert!(error(&token("admin", "long-enough-token-123")).contains("admin.tokens[0].role"));
    assert!(
        load(&token("viewer", "short")).is_ok(),
        "short tokens are a warning"
    );
    assert!(error(&token("viewer", "")).contains("admin.tokens[0].token"));
}

#[test]
fn kinds_without_a_handler_and_url_safe_names_are_accepted() {
    let text = r#"
[[sources]]
name = "My.Shop"
scheme = "stripe"
secrets = ["whsec_a"]
event_types = { "invoice.paid" = "invoice_paid" }
"#;
    let s = load_env(text, &[("HOOKD_SOURCE_MY_SHOP_SECRETS", "whsec_b")]).expect("valid");
    let source = s.source("My.Shop").expect("source");
    assert_eq!(
        source.kind_of("invoice.paid", &serde_json::Value::Null),
        Some("invoice_paid")
    );
    assert_eq!(source.secrets[0].expose(), "whsec_b");
    assert_eq!(env_name("my-shop.eu"), "MY_SHOP_EU");
}

#[test]
fn bare_numbers_are_seconds_and_host_names_resolve() {
    let s = load(&format!(
        "handler_timeout = 7\nlisten = \"localhost:9000\"\n{MINIMAL}"
    ))
    .expect("valid");
    assert_eq!(s.handler_timeout, Duration::from_secs(7));
    assert_eq!(s.listen.port(), 9000);
    assert!(s.listen.ip().is_loopback());
}

#[test]
fn every_credential_of_the_shipped_config_is_known_as_a_development_value() {
    let raw: toml::Value = toml::from_str(include_str!("../../hookd.toml")).expect("toml");
    let mut shipped: Vec<String> = Vec::new();
    for source in raw["sources"].as_array().expect("sources") {
        // PayPal's source has none: its development key is refused apart.
        for secret in source
            .get("secrets")
            .iter()
            .flat_map(|s| s.as_array().expect("secrets"))
        {
            shipped.push(secret.as_str().expect("text").to_string());
        }
    }
    for token in raw["admin"]["tokens"].as_array().expect("tokens") {
        shipped.push(token["token"].as_str().expect("text").to_string());
    }
    let known: Vec<&str> = development_credentials().collect();
    assert_eq!(shipped.len(), known.len(), "{known:?}");
    for value in &shipped {
        assert!(is_development_credential(value), "{value}");
    }
}

const PAYPAL_SIGNING_KEY: &str = "signing_key = \"fixtures/paypal/dev-signing-key.pem\"\n";

/// The shipped file with PayPal's development key and certificate taken out:
/// its source then fetches PayPal's certificates.
fn live_paypal(shipped: &str) -> String {
    shipped.replace(PAYPAL_SIGNING_KEY, "").replace(
        "certificates = [\"fixtures/paypal/dev-certificate.pem\"]\nfetch_certificates = false\n",
        "",
    )
}

/// Every source of the shipped file given a secret of its own.
const LIVE_SOURCE_SECRETS: [(&str, &str); 11] = [
    ("HOOKD_SOURCE_STRIPE_SECRETS", "whsec_live_a1b2c3"),
    (
        "HOOKD_SOURCE_STANDARD_SECRETS",
        "whsec_bGl2ZS1zdGFuZGFyZC1zZWNyZXQ=",
    ),
    ("HOOKD_SOURCE_GITHUB_SECRETS", "live-github"),
    ("HOOKD_SOURCE_SHOP_SECRETS", "live-shop"),
    ("HOOKD_SOURCE_ADYEN_SECRETS", "0A1B2C3D4E5F"),
    ("HOOKD_SOURCE_PADDLE_SECRETS", "pdl_ntfset_live"),
    ("HOOKD_SOURCE_SQUARE_SECRETS", "live-square"),
    ("HOOKD_SOURCE_RAZORPAY_SECRETS", "live-razorpay"),
    ("HOOKD_SOURCE_CHECKOUT_SECRETS", "live-checkout"),
    ("HOOKD_SOURCE_GOCARDLESS_SECRETS", "live-gocardless"),
    ("HOOKD_SOURCE_BRAINTREE_SECRETS", "livepublic:liveprivate"),
];

#[test]
fn development_credentials_are_refused_beyond_loopback_only() {
    let shipped = include_str!("../../hookd.toml");
    let on_loopback = load(shipped).expect("valid");
    assert!(on_loopback.uses_development_credentials());
    assert!(on_loopback.check_exposure().is_ok());

    let public = load_env(shipped, &[("HOOKD_LISTEN", "0.0.0.0:8080")]).expect("valid");
    let e = public.check_exposure().expect_err("refused").to_string();
    assert!(
        e.contains("sources[0].secrets[0]") && e.contains("0.0.0.0:8080"),
        "{e}"
    );
    assert!(!e.contains('\n') && !e.contains("whsec_dev"), "{e}");

    // Every source secret replaced, admin pages on loopback: the dev tokens may stay.
    let mut env = vec![
        ("HOOKD_LISTEN", "0.0.0.0:8080"),
        ("HOOKD_ADMIN_LISTEN", "127.0.0.1:9090"),
    ];
    env.extend(LIVE_SOURCE_SECRETS);
    // PayPal's shipped certificate and signing key have public keys too.
    let e = exposure_error(shipped, &env);
    assert!(
        e.contains("sources[10].signing_key") && e.contains("0.0.0.0:8080"),
        "{e}"
    );
    let pinned_only = shipped.replace(PAYPAL_SIGNING_KEY, "");
    let e = exposure_error(&pinned_only, &env);
    assert!(e.contains("sources[10].certificates[0]"), "{e}");
    let shipped = &live_paypal(shipped);
    assert!(
        load_env(shipped, &env)
            .expect("valid")
            .check_exposure()
            .is_ok()
    );

    // The admin pages beyond loopback: the shipped tokens, or a short one, are refused.
    env[1] = ("HOOKD_ADMIN_LISTEN", "10.0.0.5:9090");
    let e = exposure_error(shipped, &env);
    assert!(
        e.contains("admin.tokens[0].token") && e.contains("development token"),
        "{e}"
    );
    let own_tokens = format!(
        "{}\n[[admin.tokens]]\nname = \"ops\"\ntoken = \"short\"\nrole = \"operator\"\n",
        shipped.split("[[admin.tokens]]").next().expect("head")
    );
    let e = exposure_error(&own_tokens, &env);
    assert!(
        e.contains("admin.tokens[0].token") && e.contains("shorter than 16"),
        "{e}"
    );
    let long_env_token = load_env(
        shipped.split("[[admin.tokens]]").next().expect("head"),
        &[
            env.as_slice(),
            &[("HOOKD_ADMIN_TOKEN", "0123456789abcdef0123")],
        ]
        .concat(),
    )
    .expect("valid");
    assert!(long_env_token.check_exposure().is_ok());
    let e = load_env(
        shipped.split("[[admin.tokens]]").next().expect("head"),
        &[env.as_slice(), &[("HOOKD_ADMIN_TOKEN", "tiny")]].concat(),
    )
    .expect("valid")
    .check_exposure()
    .expect_err("refused")
    .to_string();
    assert!(e.contains("HOOKD_ADMIN_TOKEN"), "{e}");
}

#[test]
fn the_admin_listener_and_body_timeout_are_read_and_checked() {
    let s = load(MINIMAL).expect("valid");
    assert_eq!(s.body_timeout, Duration::from_secs(10));
    assert_eq!(s.admin_listen, None);
    assert_eq!(s.admin_address(), s.listen);
    let s = load_env(
        &format!("body_timeout = \"2s\"\nadmin_listen = \"127.0.0.1:9090\"\n{MINIMAL}"),
        &[("HOOKD_ADMIN_LISTEN", "127.0.0.1:9191")],
    )
    .expect("valid");
    assert_eq!(s.body_timeout, Duration::from_secs(2));
    assert_eq!(s.admin_address().to_string(), "127.0.0.1:9191");
    let e = error(&format!("admin_listen = \"127.0.0.1:8080\"\n{MINIMAL}"));
    assert!(e.contains("admin_listen"), "{e}");
    let e = error(&format!("body_timeout = \"36501d\"\n{MINIMAL}"));
    assert!(e.contains("body_timeout") && e.contains("too long"), "{e}");
}

#[test]
fn the_metrics_token_and_trusted_proxies_are_read_and_checked() {
    let s = load(MINIMAL).expect("valid");
    assert!(s.metrics_token.is_none());
    let loopback = ["127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1"];
    for ip in loopback.map(|ip| ip.parse().expect("ip")) {
        assert!(s.trusted_proxies.iter().any(|c| c.contains(ip)), "{ip}");
    }
    let private: std::net::IpAddr = "10.1.2.3".parse().expect("ip");
    assert!(!s.trusted_proxies.iter().any(|c| c.contains(private)));

    let text = format!(
        "metrics_token = \"scrape-token-from-the-file\"\ntrusted_proxies = [\"10.0.0.0/8\", \"fd00::/8\"]\n{MINIMAL}"
    );
    let s = load(&text).expect("valid");
    assert_eq!(
        s.metrics_token.as_ref().map(Secret::expose),
        Some("scrape-token-from-the-file")
    );
    assert!(s.trusted_proxies.iter().any(|c| c.contains(private)));
    // Only the blocks listed: loopback is no longer trusted.
    assert!(
        !s.trusted_proxies
            .iter()
            .any(|c| c.contains("127.0.0.1".parse().expect("ip")))
    );
    let s = load_env(
        &text,
        &[("HOOKD_METRICS_TOKEN", "scrape-token-from-the-env")],
    )
    .expect("valid");
    assert_eq!(
        s.metrics_token.as_ref().map(Secret::expose),
        Some("scrape-token-from-the-env")
    );

    let e = error(&format!(
        "trusted_proxies = [\"10.0.0.0/8\", \"10.0.0.0/40\"]\n{MINIMAL}"
    ));
    assert!(
        e.contains("trusted_proxies[1]") && e.contains("10.0.0.0/40"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
    let e = error(&format!("metrics_token = \"\"\n{MINIMAL}"));
    assert!(e.contains("metrics_token") && e.contains("empty"), "{e}");
}

#[test]
fn debug_output_never_shows_a_secret_a_token_or_the_database_password() {
    let settings = load_env(
        include_str!("../../hookd.toml"),
        &[
            ("DATABASE_URL", "postgres://hookd:db-password-42@db/hookd"),
            ("HOOKD_ADMIN_TOKEN", "env-token-0123456789abcdef"),
            ("HOOKD_METRICS_TOKEN", "metrics-token-0123456789abcdef"),
        ],
    )
    .expect("valid");
    let printed = format!("{settings:?}");
    for value in development_credentials().chain([
        "db-password-42",
        "env-token-0123456789abcdef",
        "metrics-token-0123456789abcdef",
    ]) {
        assert!(!printed.contains(value), "{value} in {printed}");
    }
}

#[test]
fn stripe_sources_leave_volatile_fields_out_of_the_fingerprint_unless_told_otherwise() {
    let s = load(MINIMAL).expect("valid");
    assert_eq!(
        s.source("stripe")
            .expect("stripe")
            .fingerprint_ignore
            .to_vec(),
        ["/pending_webhooks", "/request"]
    );
    let s = load(&format!("{MINIMAL}fingerprint_ignore = []\n")).expect("valid");
    assert!(
        s.source("stripe")
            .expect("stripe")
            .fingerprint_ignore
            .is_empty()
    );
    let shop = "[[sources]]\nname = \"g\"\nscheme = \"github\"\nsecrets = [\"x\"]\n";
    assert!(
        load(shop).expect("valid").sources[0]
            .fingerprint_ignore
            .is_empty()
    );
    let e = error(&format!("{MINIMAL}fingerprint_ignore = [\"request\"]\n"));
    assert!(e.contains("sources[0].fingerprint_ignore[0]"), "{e}");
}

#[test]
fn a_sources_mask_adds_to_its_providers_defaults_unless_they_are_turned_off() {
    let mask = |extra: &str| load(&format!("{MINIMAL}{extra}")).map(|s| s.sources[0].mask.clone());
    let defaults = mask("").expect("valid");
    assert!(defaults.contains(&"/data/object/client_secret".to_string()));
    let own = mask("mask = [\"/data/object/metadata/*\"]\n").expect("valid");
    assert_eq!(own.len(), defaults.len() + 1);
    assert_eq!(
        own.last().map(String::as_str),
        Some("/data/object/metadata/*")
    );
    let only = mask("mask = [\"/data/x\"]\nmask_defaults = false\n").expect("valid");
    assert_eq!(only, ["/data/x"]);
    let e = error(&format!("{MINIMAL}mask = [\"/a\", \"email\"]\n"));
    assert!(e.contains("sources[0].mask[1]"), "{e}");
    let e = error(&format!("{MINIMAL}mask_defaults = \"no\"\n"));
    assert!(e.contains("mask_defaults"), "{e}");
}

const FORWARD: &str = r#"
[[forwards]]
name = "billing"
url = "http://127.0.0.1:9000/hooks"
secret = "whsec_Zm9yd2FyZC10ZXN0LXNlY3JldC0zMi1ieXRlcy1sb25nISE="
kinds = ["payment_succeeded"]
types = ["invoice.paid"]
sources = ["stripe"]
timeout = "3s"
"#;

#[test]
fn forwards_are_read_and_match_by_kind_type_and_source() {
    let s = load(&format!("{MINIMAL}{FORWARD}")).expect("valid");
    let f = &s.forwards[0];
    assert_eq!(
        (f.name.as_str(), f.timeout),
        ("billing", Duration::from_secs(3))
    );
    assert_eq!(f.handler_name().to_string(), "forward:billing");
    assert!(f.matches(
        "stripe",
        "payment_intent.succeeded",
        Some("payment_succeeded")
    ));
    assert!(f.matches("stripe", "invoice.paid", None));
    assert!(!f.matches("stripe", "customer.created", None));
    assert!(!f.matches("shop", "invoice.paid", None), "another source");
    let every = load(&format!(
        "{MINIMAL}[[forwards]]\nname = \"all\"\nurl = \"https://x.example/h\"\n\
         secret = \"whsec_c2VjcmV0\"\ntypes = [\"*\"]\n"
    ))
    .expect("valid");
    assert!(every.forwards[0].matches("anything", "any.type", None));
    assert_eq!(every.forwards[0].timeout, Duration::from_secs(10));
    assert!(
        !format!("{every:?}").contains("c2VjcmV0"),
        "the secret is redacted"
    );
}

#[test]
fn bad_forwards_name_their_key() {
    let cases = [
        (
            FORWARD.replace("http://127.0.0.1:9000/hooks", "ftp://x"),
            "forwards[0].url",
        ),
        (
            FORWARD.replace("whsec_Zm9y", "whsec_***"),
            "forwards[0].secret",
        ),
        (
            FORWARD
                .replace("kinds = [\"payment_succeeded\"]\n", "")
                .replace("types = [\"invoice.paid\"]\n", ""),
            "forwards[0].kinds",
        ),
        (
            FORWARD.replace("[\"stripe\"]", "[\"nope\"]"),
            "forwards[0].sources[0]",
        ),
        (
            FORWARD.replace("\"billing\"", "\"bill ing\""),
            "forwards[0].name",
        ),
        (format!("{FORWARD}{FORWARD}"), "forwards[1].name"),
        (
            FORWARD.replace("timeout = \"3s\"", "timout = \"3s\""),
            "timout",
        ),
        (
            FORWARD.replace("timeout = \"3s\"", "timeout = \"61s\""),
            "forwards[0].timeout",
        ),
    ];
    for (forward, key) in cases {
        let e = error(&format!("{MINIMAL}{forward}"));
        assert!(e.contains(key), "{key}: {e}");
        assert!(!e.contains('\n'), "{e}");
    }
}

#[test]
fn forward_urls_with_credentials_are_refused_without_showing_them() {
    for url in [
        "http://hookd:s3cr3t@127.0.0.1:9000/hooks",
        "https://:s3cr3t@x.example/h",
        "https://hookd@x.example/h",
        "ftp://hookd:s3cr3t@x.example/h",
    ] {
        let text = FORWARD.replace("http://127.0.0.1:9000/hooks", url);
        let e = error(&format!("{MINIMAL}{text}"));
        assert!(e.contains("forwards[0].url"), "{e}");
        assert!(!e.contains("s3cr3t") && !e.contains("hookd@"), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }
    let capped = FORWARD.replace("timeout = \"3s\"", "timeout = \"60s\"");
    let s = load(&format!("{MINIMAL}{capped}")).expect("60s is the cap");
    assert_eq!(s.forwards[0].timeout, Duration::from_secs(60));
}

#[test]
fn a_forward_shows_its_url_without_the_query() {
    let text = FORWARD.replace(
        "http://127.0.0.1:9000/hooks",
        "https://x.example:8443/in/hooks?token=abc",
    );
    let s = load(&format!("{MINIMAL}{text}")).expect("valid");
    assert_eq!(s.forwards[0].endpoint(), "https://x.example:8443/in/hooks");
}

#[test]
fn the_scheme_tag_may_follow_its_keys_and_errors_inside_name_their_key() {
    let hmac = "[[sources]]\nname = \"h\"\nsecrets = [\"x\"]\nsignature_header = \"X\"\n\
                id_pointer = \"/id\"\ntype_header = \"T\"\nscheme = \"hmac\"\n";
    let s = load(hmac).expect("valid");
    let Scheme::Hmac(opts) = &s.sources[0].scheme else {
        panic!("not hmac: {:?}", s.sources[0].scheme);
    };
    assert_eq!(opts.encoding, Encoding::Hex);
    assert_eq!(opts.id, Locator::Pointer("/id".into()));
    let e = error(&hmac.replace("scheme", "signature_encoding = \"b64\"\nscheme"));
    assert!(
        e.ends_with("sources[0].signature_encoding: \"b64\" is not one of hex, base64"),
        "{e}"
    );
    let svix = "[[sources]]\nname = \"s\"\nscheme = \"svix\"\nsecrets = [\"whsec_c2VjcmV0\"]\n";
    assert_eq!(
        load(svix).expect("valid").sources[0].scheme,
        Scheme::Standard
    );
    let e = error(&format!("{svix}type_pointer = \"/t\"\nid_header = \"I\"\n"));
    assert!(
        e.ends_with("sources[0].id_header: only applies to scheme \"hmac\""),
        "{e}"
    );
}

#[test]
fn dedupe_on_body_is_on_where_the_id_or_type_is_unsigned_and_refused_elsewhere() {
    let shipped = load(include_str!("../../hookd.toml")).expect("shipped hookd.toml");
    let on: Vec<(&str, bool)> = shipped
        .sources
        .iter()
        .map(|s| (s.name.as_str(), s.dedupe_on_body))
        .collect();
    assert_eq!(
        on,
        [
            ("stripe", false),
            ("standard", false),
            ("github", true),
            ("shop", true),
            ("adyen", false),
            ("paddle", false),
            ("square", false),
            ("razorpay", true),
            ("checkout", false),
            ("gocardless", false),
            ("paypal", false),
            ("braintree", false)
        ]
    );
    let github = "[[sources]]\nname = \"g\"\nscheme = \"github\"\nsecrets = [\"x\"]\n";
    let off = load(&format!("{github}dedupe_on_body = false\n")).expect("valid");
    assert!(!off.sources[0].dedupe_on_body);
    let e = error(&format!("{github}dedupe_on_body = \"no\"\n"));
    assert!(e.contains("sources[0].dedupe_on_body"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    // A generic source signs its identity when both come from the body.
    let hmac = "[[sources]]\nname = \"h\"\nscheme = \"hmac\"\nsecrets = [\"x\"]\n\
                signature_header = \"S\"\nid_pointer = \"/id\"\n";
    let typed = load(&format!("{hmac}type_header = \"T\"\n")).expect("valid");
    assert!(
        typed.sources[0].dedupe_on_body,
        "the type header is unsigned"
    );
    for signed in [
        format!("{hmac}type_pointer = \"/type\"\n"),
        MINIMAL.to_string(),
        "[[sources]]\nname = \"s\"\nscheme = \"standard\"\nsecrets = [\"whsec_c2VjcmV0\"]\n"
            .to_string(),
    ] {
        assert!(!load(&signed).expect("valid").sources[0].dedupe_on_body);
        let e = error(&format!("{signed}dedupe_on_body = true\n"));
        assert!(
            e.ends_with(
                "sources[0].dedupe_on_body: only applies to sources whose event id or type is \
                 not signed (scheme \"github\" or \"razorpay\", or \"hmac\" with id_header or \
                 type_header)"
            ),
            "{e}"
        );
    }
}

#[test]
fn development_credentials_need_development_true_wherever_hookd_listens() {
    let shipped = include_str!("../../hookd.toml");
    assert!(load(shipped).expect("valid").development);
    let server = shipped.replace("development = true", "development = false");
    let settings = load(&server).expect("valid");
    assert!(settings.listen.ip().is_loopback());
    let e = settings.check_exposure().expect_err("refused").to_string();
    assert!(
        e.contains("sources[0].secrets[0]") && e.contains("development = true"),
        "{e}"
    );
    // Only the tokens left: they are refused too.
    let e = exposure_error(&live_paypal(&server), &LIVE_SOURCE_SECRETS);
    assert!(
        e.contains("admin.tokens[0].token") && e.contains("development token"),
        "{e}"
    );
    assert!(!load(MINIMAL).expect("valid").development);
    assert!(error("development = \"yes\"\n").contains("development"));
}

#[test]
fn credential_keys_in_the_file_are_secrets_unless_the_environment_replaced_them() {
    // Development secrets only, so the credential keys alone decide.
    let adyen = "[[sources]]\nname = \"ad\"\nscheme = \"adyen\"\n\
                 secrets = [\"686F6F6B642D6465762D616479656E2D686D61632D6B65792D30313233343536\"]\n";
    let checkout = "[[sources]]\nname = \"cko\"\nscheme = \"checkout\"\n\
                    secrets = [\"dev-checkout-signature-key\"]\n";
    let holds =
        |text: &str, env: &[(&str, &str)]| load_env(text, env).expect("valid").file_holds_secrets;
    assert!(!holds(&format!("{adyen}{checkout}"), &[]));
    let basic = format!("{adyen}basic_auth = \"u:p\"\n{checkout}");
    let authorization = format!("{adyen}{checkout}authorization = \"k\"\n");
    assert!(holds(&basic, &[]));
    assert!(holds(&authorization, &[]));
    assert!(!holds(&basic, &[("HOOKD_SOURCE_AD_BASIC_AUTH", "v:w")]));
    assert!(!holds(
        &authorization,
        &[("HOOKD_SOURCE_CKO_AUTHORIZATION", "from-env")]
    ));
    // Replacing one source's credential leaves the other's in the file.
    assert!(holds(
        &format!("{adyen}basic_auth = \"u:p\"\n{checkout}authorization = \"k\"\n"),
        &[("HOOKD_SOURCE_CKO_AUTHORIZATION", "from-env")]
    ));
    let file = secret_file("authorization", "from-a-file\n");
    let s = load_env(
        &authorization,
        &[("HOOKD_SOURCE_CKO_AUTHORIZATION_FILE", file.as_str())],
    )
    .expect("valid");
    assert!(!s.file_holds_secrets);
    assert!(s.secret_files.contains(&PathBuf::from(&file)));
    let in_file = load(&authorization.replace("\"k\"", "\"from-a-file\"")).expect("valid");
    assert_eq!(
        s.source("cko").map(|c| &c.scheme),
        in_file.source("cko").map(|c| &c.scheme)
    );
}

#[test]
fn relative_file_paths_are_read_from_the_configuration_files_folder() {
    let shipped = include_str!("../../hookd.toml");
    let beside = concat!(env!("CARGO_MANIFEST_DIR"), "/hookd.toml");
    assert!(Settings::from_toml(beside, shipped, &HashMap::new()).is_ok());
    let elsewhere = concat!(env!("CARGO_MANIFEST_DIR"), "/elsewhere/hookd.toml");
    let e = Settings::from_toml(elsewhere, shipped, &HashMap::new())
        .expect_err("no certificate there")
        .to_string();
    assert!(
        e.contains("certificates[0]") && e.contains("/elsewhere/fixtures/paypal/"),
        "{e}"
    );
}

#[test]
fn shutdown_delay_and_grace_are_read_and_checked() {
    let s = load(MINIMAL).expect("valid");
    assert_eq!(
        (s.shutdown_delay, s.shutdown_grace),
        (Duration::from_secs(5), Duration::from_secs(30))
    );
    let s = load(&format!(
        "shutdown_delay = \"0s\"\nshutdown_grace = \"1m\"\n{MINIMAL}"
    ))
    .expect("valid");
    assert_eq!(
        (s.shutdown_delay, s.shutdown_grace),
        (Duration::ZERO, Duration::from_secs(60))
    );
    let e = error(&format!("shutdown_grace = \"0s\"\n{MINIMAL}"));
    assert!(
        e.contains("shutdown_grace") && e.contains("longer than zero"),
        "{e}"
    );
    let e = error(&format!("shutdown_delay = \"soon\"\n{MINIMAL}"));
    assert!(e.contains("shutdown_delay") && !e.contains('\n'), "{e}");
    // The shipped (development) file stops at once: no balancer in front.
    let shipped = load(include_str!("../../hookd.toml")).expect("valid");
    assert_eq!(shipped.shutdown_delay, Duration::ZERO);
}

#[test]
fn the_embedded_cluster_beyond_loopback_needs_embedded_database_true() {
    let refused = |env: &[(&str, &str)]| {
        load_env(MINIMAL, env)
            .expect("valid")
            .check_database()
            .expect_err("refused")
            .to_string()
    };
    assert!(load(MINIMAL).expect("valid").check_database().is_ok());
    let e = refused(&[("HOOKD_LISTEN", "0.0.0.0:8080")]);
    assert!(
        e.contains("DATABASE_URL: is unset and listen = 0.0.0.0:8080")
            && e.contains("embedded_database = true")
            && !e.contains('\n'),
        "{e}"
    );
    let e = refused(&[("HOOKD_ADMIN_LISTEN", "10.0.0.5:9090")]);
    assert!(e.contains("admin_listen = 10.0.0.5:9090"), "{e}");
    let url = [
        ("HOOKD_LISTEN", "0.0.0.0:8080"),
        ("DATABASE_URL", "postgres://hookd@db/hookd"),
    ];
    assert!(
        load_env(MINIMAL, &url)
            .expect("valid")
            .check_database()
            .is_ok()
    );
    let chosen = load_env(
        &format!("embedded_database = true\n{MINIMAL}"),
        &[("HOOKD_LISTEN", "0.0.0.0:8080")],
    )
    .expect("valid");
    assert!(chosen.embedded_database && chosen.check_database().is_ok());
}

#[test]
fn a_reload_keeps_the_running_value_of_each_key_only_a_restart_applies() {
    let running = load(MINIMAL).expect("valid");
    let changed = format!(
        "listen = \"127.0.0.1:9000\"\nadmin_listen = \"127.0.0.1:9001\"\npool_size = 30\n\
         dispatchers = 5\nmax_body_memory = 2000000\ntrusted_proxies = [\"10.0.0.0/8\"]\n\
         max_attempts = 4\n{MINIMAL}"
    )
    .replace("\"whsec_a\", ", "");
    let env = [("DATABASE_URL", "postgres://elsewhere/hookd")];
    let mut reloaded = load_env(&changed, &env).expect("valid");
    assert_eq!(
        reloaded.keep_restart_only(&running),
        [
            "listen",
            "admin_listen",
            "DATABASE_URL",
            "pool_size",
            "dispatchers",
            "max_body_memory",
            "trusted_proxies"
        ]
    );
    assert_eq!(reloaded.listen, running.listen);
    assert_eq!(reloaded.admin_listen, running.admin_listen);
    assert!(reloaded.database_url.is_none());
    assert_eq!(reloaded.pool_size, running.pool_size);
    assert_eq!(reloaded.dispatchers, running.dispatchers);
    assert_eq!(reloaded.max_body_memory, running.max_body_memory);
    assert_eq!(reloaded.trusted_proxies, running.trusted_proxies);
    // The rest is the reloaded file's.
    assert_eq!(reloaded.max_attempts, 4);
    assert_eq!(reloaded.sources[0].secrets.len(), 1);
    // Nothing changed, nothing named.
    let mut same = load(MINIMAL).expect("valid");
    assert!(same.keep_restart_only(&running).is_empty());
}
