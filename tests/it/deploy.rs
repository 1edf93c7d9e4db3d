//! The files for production in `deploy/`: the alert rules refer only to metrics
//! hookd exposes and cover what must page someone, the systemd unit keeps its
//! hardening and never restarts a configuration error, and its configuration
//! file holds no secret (they come in as credentials). `promtool` and
//! `systemd-analyze` check them too where they are installed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use hookd::metrics::Metric;
use serde::Deserialize;

const ALERTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/alerts.yml");
const UNIT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/hookd.service");
const CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/hookd.toml");

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    groups: Vec<Group>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Group {
    name: String,
    rules: Vec<Rule>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Rule {
    alert: String,
    expr: String,
    #[serde(rename = "for")]
    for_: Option<String>,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
}

/// PromQL's grouping modifiers: a parenthesis after one holds label names.
const GROUPING: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Other words of PromQL that are not series names: keywords, and the
/// aggregation operators (which may stand apart from their parentheses:
/// `sum by (x) (…)`).
const PROMQL_WORDS: &[&str] = &[
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
];

/// The series names an expression reads: identifiers outside strings, label
/// matchers, ranges and grouping lists that are not function calls or PromQL
/// words. Numbers are not identifiers.
fn series_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let chars: Vec<char> = expr.chars().collect();
    let mut i = 0;
    let mut after_grouping = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' => {
                i += 1;
                while i < chars.len() && chars[i] != c {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
            }
            '{' | '[' => {
                let close = if c == '{' { '}' } else { ']' };
                while i < chars.len() && chars[i] != close {
                    i += 1;
                }
                i += 1;
            }
            '(' if after_grouping => {
                // by (instance, le): label names, not series.
                while i < chars.len() && chars[i] != ')' {
                    i += 1;
                }
                i += 1;
                after_grouping = false;
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let mut next = i;
                while next < chars.len() && chars[next].is_whitespace() {
                    next += 1;
                }
                let is_call = chars.get(next) == Some(&'(');
                after_grouping = GROUPING.contains(&word.as_str());
                if !is_call
                    && !GROUPING.contains(&word.as_str())
                    && !PROMQL_WORDS.contains(&word.as_str())
                {
                    names.insert(word);
                }
            }
            c if c.is_ascii_digit() || c == '.' => {
                // A number, or a duration such as 5m.
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    names
}

/// Every series name hookd's /metrics can have.
fn exposed() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for metric in Metric::ALL {
        names.insert(metric.name().to_string());
        if metric.kind() == "histogram" {
            for suffix in ["_bucket", "_sum", "_count"] {
                names.insert(format!("{}{suffix}", metric.name()));
            }
        }
    }
    names
}

#[test]
fn series_names_are_found_in_promql() {
    let names = series_names(
        "histogram_quantile(0.99, sum by (le, source) (rate(a_bucket{x=\"y z\"}[5m]))) > 1 \
         and on(instance) b_total / ignoring (q) c offset 5m",
    );
    let expected: BTreeSet<String> = ["a_bucket", "b_total", "c"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(names, expected);
}

#[test]
fn alert_rules_read_only_what_hookd_exposes_and_cover_what_matters() {
    let text = std::fs::read_to_string(ALERTS).expect("deploy/alerts.yml");
    let file: RuleFile = serde_yaml::from_str(&text).expect("a Prometheus rule file");
    let exposed = exposed();
    let mut alerts = BTreeSet::new();
    for group in &file.groups {
        assert!(!group.name.is_empty());
        for rule in &group.rules {
            assert!(alerts.insert(rule.alert.clone()), "{} twice", rule.alert);
            let names = series_names(&rule.expr);
            assert!(!names.is_empty(), "{}: reads no series", rule.alert);
            for name in names {
                // `up` is what Prometheus itself records for every scrape target.
                assert!(
                    name == "up" || exposed.contains(&name),
                    "{}: {name} is not a metric hookd exposes",
                    rule.alert
                );
            }
            assert!(
                ["warning", "critical"].contains(&rule.labels["severity"].as_str()),
                "{}",
                rule.alert
            );
            for key in ["summary", "description"] {
                assert!(
                    rule.annotations.get(key).is_some_and(|v| !v.is_empty()),
                    "{}: {key}",
                    rule.alert
                );
            }
            if let Some(wait) = &rule.for_ {
                assert!(
                    hookd::duration::parse(wait).is_ok(),
                    "{}: for {wait}",
                    rule.alert
                );
            }
        }
    }
    for required in [
        "HookdDown",
        "HookdNotReady",
        "HookdDatabaseUnavailable",
        "HookdInternalErrors",
        "HookdSignatureFailures",
        "HookdDeadEvents",
        "HookdRetryBacklog",
        "HookdDeliveryLatencyHigh",
        "HookdDatabasePoolSaturated",
    ] {
        assert!(alerts.contains(required), "{required} is missing");
    }
    // Where Prometheus's own checker is installed, it has the last word.
    if let Ok(output) = Command::new("promtool")
        .args(["check", "rules", ALERTS])
        .output()
    {
        assert!(output.status.success(), "promtool: {output:?}");
    }
}

/// `Key=value` lines per section (a key may repeat), comments left out.
fn unit_sections(text: &str) -> BTreeMap<String, Vec<(String, String)>> {
    let mut sections: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    let mut current = String::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = name.to_string();
            continue;
        }
        let (key, value) = line.split_once('=').expect("Key=value");
        assert!(!current.is_empty(), "{line} outside a section");
        sections
            .entry(current.clone())
            .or_default()
            .push((key.to_string(), value.to_string()));
    }
    sections
}

#[test]
fn slow_the_systemd_unit_is_hardened_and_never_restarts_a_configuration_error() {
    let text = std::fs::read_to_string(UNIT).expect("deploy/hookd.service");
    let sections = unit_sections(&text);
    let service = &sections["Service"];
    let values = |key: &str| -> Vec<&str> {
        service
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    let one = |key: &str| -> String {
        let found = values(key);
        assert_eq!(found.len(), 1, "{key}: {found:?}");
        found[0].to_string()
    };
    assert_eq!(
        one("ExecStart"),
        "/usr/local/bin/hookd serve --config /etc/hookd/hookd.toml"
    );
    assert_eq!(one("Restart"), "on-failure");
    assert_eq!(
        one("RestartPreventExitStatus"),
        hookd::cli::EX_CONFIG.to_string()
    );
    assert_eq!(one("DynamicUser"), "yes");
    for key in [
        "NoNewPrivileges",
        "ProtectHome",
        "PrivateTmp",
        "PrivateDevices",
        "ProtectKernelTunables",
        "ProtectKernelModules",
        "ProtectKernelLogs",
        "ProtectControlGroups",
        "LockPersonality",
        "MemoryDenyWriteExecute",
        "RestrictNamespaces",
        "RestrictSUIDSGID",
    ] {
        assert_eq!(one(key), "yes", "{key}");
    }
    assert_eq!(one("ProtectSystem"), "strict");
    assert_eq!(one("CapabilityBoundingSet"), "", "no capabilities");
    assert_eq!(one("RestrictAddressFamilies"), "AF_INET AF_INET6 AF_UNIX");
    assert_eq!(values("SystemCallFilter")[0], "@system-service");
    // SIGTERM's delay and grace fit in the stop timeout.
    let stop = hookd::duration::parse(&one("TimeoutStopSec")).expect("a duration");
    // deploy/hookd.toml as the unit's environment completes it (its stripe secrets).
    let env = [(
        "HOOKD_SOURCE_STRIPE_SECRETS".to_string(),
        "whsec_x".to_string(),
    )];
    let config = std::fs::read_to_string(CONFIG).expect("deploy/hookd.toml");
    let server = hookd::config::Settings::from_toml(CONFIG, &config, &env.into_iter().collect())
        .expect("deploy/hookd.toml with its secrets");
    assert!(
        stop > server.shutdown_delay + server.shutdown_grace,
        "{stop:?}"
    );

    // Each secret comes in as a credential, through its *_FILE variable.
    let environment = values("Environment");
    let credentials = values("LoadCredential");
    assert!(!credentials.is_empty());
    for credential in credentials {
        let (name, path) = credential.split_once(':').expect("NAME:PATH");
        assert!(path.starts_with("/etc/hookd/"), "{credential}");
        let variable = environment
            .iter()
            .find(|e| e.ends_with(&format!("_FILE=%d/{name}")))
            .unwrap_or_else(|| panic!("no *_FILE variable reads {name}"));
        assert!(variable.starts_with("HOOKD_"), "{variable}");
    }
    // Unit files are world-readable: no secret, no password in the URL.
    assert!(!text.contains("whsec_"));
    let url = environment
        .iter()
        .find_map(|e| e.strip_prefix("DATABASE_URL="))
        .expect("a DATABASE_URL placeholder");
    let user_info = url
        .split_once("//")
        .and_then(|(_, rest)| rest.split_once('@'))
        .map(|(user, _)| user)
        .expect("user@host");
    assert!(!user_info.contains(':'), "a password in {url}");
    assert_eq!(
        sections["Install"][0],
        ("WantedBy".into(), "multi-user.target".into())
    );

    // systemd's own check, where it is installed, of a copy that runs this build.
    let copy = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("unit-{}", std::process::id()))
        .join("hookd.service");
    std::fs::create_dir_all(copy.parent().expect("folder")).expect("folder");
    std::fs::write(
        &copy,
        text.replace("/usr/local/bin/hookd", env!("CARGO_BIN_EXE_hookd")),
    )
    .expect("copy");
    if let Ok(output) = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .output()
    {
        let said = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success() && said.trim().is_empty(),
            "systemd-analyze verify: {said}"
        );
    }
}

#[test]
fn slow_the_unit_brings_every_secret_as_a_credential_and_its_config_file_holds_none() {
    let config: toml::Table = std::fs::read_to_string(CONFIG)
        .expect("deploy/hookd.toml")
        .parse()
        .expect("toml");
    assert!(!config.contains_key("development"), "a server's config");
    assert!(
        !config.contains_key("admin"),
        "tokens come from a credential"
    );
    for table in ["sources", "forwards"] {
        for item in config
            .get(table)
            .and_then(|t| t.as_array())
            .into_iter()
            .flatten()
        {
            let item = item.as_table().expect("table");
            assert!(
                !item.contains_key("secrets") && !item.contains_key("secret"),
                "{table}: {item:?}"
            );
        }
    }

    // The unit's credentials, as systemd would hand them over (0600 files in %d),
    // make that file a working configuration, without a warning.
    let text = std::fs::read_to_string(UNIT).expect("deploy/hookd.service");
    assert!(
        text.contains("install -m 0644 deploy/hookd.toml /etc/hookd/hookd.toml"),
        "the unit installs the configuration without secrets"
    );
    let service = &unit_sections(&text)["Service"];
    assert!(
        service
            .iter()
            .any(|(k, v)| k == "Environment" && v.starts_with("HOOKD_ADMIN_TOKENS_FILE=%d/")),
        "the tokens file comes as a credential"
    );
    let credentials =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("credentials-{}", std::process::id()));
    std::fs::create_dir_all(&credentials).expect("folder");
    let mut command = Command::new(env!("CARGO_BIN_EXE_hookd"));
    command
        .args(["check-config", "--config", CONFIG])
        .env_remove("DATABASE_URL")
        .env("RUST_LOG", "warn");
    for (key, value) in service {
        match key.as_str() {
            "LoadCredential" => {
                let (name, _) = value.split_once(':').expect("NAME:PATH");
                let secret = hex::encode(rand::random::<[u8; 32]>());
                let contents = match name {
                    "admin-tokens" => format!("# support staff\nops operator {secret}\n"),
                    _ => format!("{secret}\n"),
                };
                let path = credentials.join(name);
                std::fs::write(&path, contents).expect("credential");
                std::fs::set_permissions(
                    &path,
                    std::os::unix::fs::PermissionsExt::from_mode(0o600),
                )
                .expect("chmod");
            }
            "Environment" => {
                let (var, value) = value.split_once('=').expect("VAR=value");
                if var.starts_with("HOOKD_") {
                    command.env(var, value.replace("%d", &credentials.to_string_lossy()));
                }
            }
            _ => {}
        }
    }
    let output = command.output().expect("run hookd");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("1 source(s) (stripe)") && stdout.contains("1 admin token(s)"),
        "{stdout}"
    );
    assert!(stderr.trim().is_empty(), "no warning: {stderr}");
    let _ = std::fs::remove_dir_all(&credentials);
}
