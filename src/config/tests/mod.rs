use std::collections::HashMap;
use std::time::Duration;

use super::*;
use crate::providers::{Encoding, Locator};

mod env;
mod forwards;
mod sources;

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
    let text = include_str!("../../../hookd.toml");
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
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(s.http_workers, (cores / 2).max(1));
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
    // The keys it lists are every key the source takes: the API's too.
    assert!(
        e.contains("`api_key`") && e.contains("`api_base`") && e.contains("`reconcile_types`"),
        "{e}"
    );
    assert!(!e.contains("`client_id`"), "{e}");
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
        (
            "http_workers = 0",
            "http_workers: 0 must be a positive number",
        ),
        (
            "http_workers = 300",
            "http_workers: 300 is more than 256 threads",
        ),
    ];
    for (line, key) in cases {
        let e = error(&format!("{line}\n{MINIMAL}"));
        assert!(e.contains(key), "{line}: {e}");
        assert!(!e.contains('\n'), "{line}: {e}");
    }
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
    let raw: toml::Value = toml::from_str(include_str!("../../../hookd.toml")).expect("toml");
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
    let shipped = include_str!("../../../hookd.toml");
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
    // Every kind of credential a source holds: Mollie's URL tokens and API
    // key from the file, Adyen's and Checkout.com's from the environment.
    let shipped = include_str!("../../../hookd.toml");
    let with_mollie = format!(
        "{shipped}\n[[sources]]\nname = \"mollie\"\nscheme = \"mollie\"\n\
         api_key = \"test_mollie-key-0123456789\"\n\
         url_tokens = [\"url-token-0123456789abcdef\"]\n"
    );
    let settings = load_env(
        &with_mollie,
        &[
            ("DATABASE_URL", "postgres://hookd:db-password-42@db/hookd"),
            ("HOOKD_ADMIN_TOKEN", "env-token-0123456789abcdef"),
            ("HOOKD_METRICS_TOKEN", "metrics-token-0123456789abcdef"),
            (
                "HOOKD_SOURCE_ADYEN_BASIC_AUTH",
                "adyen-user:basic-password-42",
            ),
            (
                "HOOKD_SOURCE_CHECKOUT_AUTHORIZATION",
                "cko-authorization-42",
            ),
            ("HOOKD_SOURCE_STRIPE_API_KEY", "sk_test_stripe-key-42"),
        ],
    )
    .expect("valid");
    assert!(settings.source("mollie").is_some());
    let printed = format!("{settings:?}");
    for value in development_credentials().chain([
        "db-password-42",
        "env-token-0123456789abcdef",
        "metrics-token-0123456789abcdef",
        "mollie-key-0123456789",
        "url-token-0123456789abcdef",
        "basic-password-42",
        "cko-authorization-42",
        "stripe-key-42",
    ]) {
        assert!(!printed.contains(value), "{value} in {printed}");
    }
}

#[test]
fn development_credentials_need_development_true_wherever_hookd_listens() {
    let shipped = include_str!("../../../hookd.toml");
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
    let shipped = load(include_str!("../../../hookd.toml")).expect("valid");
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
         dispatchers = 5\nhttp_workers = 7\nmax_body_memory = 2000000\ntrusted_proxies = [\"10.0.0.0/8\"]\n\
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
            "http_workers",
            "max_body_memory",
            "trusted_proxies"
        ]
    );
    assert_eq!(reloaded.listen, running.listen);
    assert_eq!(reloaded.admin_listen, running.admin_listen);
    assert!(reloaded.database_url.is_none());
    assert_eq!(reloaded.pool_size, running.pool_size);
    assert_eq!(reloaded.dispatchers, running.dispatchers);
    assert_eq!(reloaded.http_workers, running.http_workers);
    assert_eq!(reloaded.max_body_memory, running.max_body_memory);
    assert_eq!(reloaded.trusted_proxies, running.trusted_proxies);
    // The rest is the reloaded file's.
    assert_eq!(reloaded.max_attempts, 4);
    assert_eq!(reloaded.sources[0].secrets.len(), 1);
    // Nothing changed, nothing named.
    let mut same = load(MINIMAL).expect("valid");
    assert!(same.keep_restart_only(&running).is_empty());
}
