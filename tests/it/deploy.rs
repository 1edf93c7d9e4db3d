//! The files for production: the alert rules refer only to metrics hookd exposes
//! and cover what must page someone; the systemd unit keeps its hardening and
//! never restarts a configuration error; the packaged configuration holds no
//! secret and passes `check-config` as installed. And drift guards for the
//! packaging (the .deb's metadata, the unit, the Dockerfile, compose.yaml and
//! the Kubernetes example, none of which CI can run): each names the binary the
//! .deb installs, the port hookd listens on, the probe paths of its router,
//! environment variables hookd reads and configuration keys it takes, and stop
//! timeouts covering `shutdown_delay` + `shutdown_grace`. `promtool` and
//! `systemd-analyze` check their files too where they are installed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use hookd::config::Settings;
use hookd::metrics::Metric;
use serde::Deserialize;
use serde_yaml::Value;

const ALERTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/alerts.yml");
const UNIT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/hookd.service");
const CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/hookd.toml");
const DEFAULTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/hookd.default");
const MANIFEST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
const DOCKERFILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/Dockerfile");
const COMPOSE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/compose.yaml");
const K8S_CONFIG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/deploy/kubernetes/configmap.yaml"
);
const K8S_DEPLOYMENT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/deploy/kubernetes/deployment.yaml"
);
const K8S_MIGRATE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/deploy/kubernetes/migrate-job.yaml"
);

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
        "HookdForwardOpen",
        "HookdSourceSilent",
        "HookdPurgeFailing",
        "HookdReconcileFailing",
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

/// The values of `key` among `(key, value)` pairs: a unit section's lines, a
/// Dockerfile's instructions.
fn values<'a>(pairs: &'a [(String, String)], key: &str) -> Vec<&'a str> {
    pairs
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// The one value of `key` (a test failure when it is missing or repeated).
fn one(pairs: &[(String, String)], key: &str) -> String {
    let found = values(pairs, key);
    assert_eq!(found.len(), 1, "{key}: {found:?}");
    found[0].to_string()
}

/// `shutdown_delay` + `shutdown_grace` as the packaged configuration leaves them
/// (their defaults): how long a stopping hookd may take, which every stop
/// timeout must cover.
fn stop_window() -> Duration {
    let packaged =
        Settings::from_toml("hookd.toml", &read(CONFIG), &HashMap::new()).expect("config");
    packaged.shutdown_delay + packaged.shutdown_grace
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn yaml(path: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(&read(path))
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{path}: {e}")))
        .collect()
}

/// `value` at `path` (keys, or indexes into sequences).
fn at<'a>(value: &'a Value, path: &[&str]) -> &'a Value {
    path.iter().fold(value, |v, key| {
        let next = match key.parse::<usize>() {
            Ok(i) => v.get(i),
            Err(_) => v.get(*key),
        };
        next.unwrap_or_else(|| panic!("no {key} in {v:?} (path {path:?})"))
    })
}

fn text<'a>(value: &'a Value, path: &[&str]) -> &'a str {
    at(value, path)
        .as_str()
        .unwrap_or_else(|| panic!("{path:?}: not a string"))
}

fn strings(value: &Value, path: &[&str]) -> Vec<String> {
    at(value, path)
        .as_sequence()
        .unwrap_or_else(|| panic!("{path:?}: not a list"))
        .iter()
        .map(|v| v.as_str().expect("a string").to_string())
        .collect()
}

/// The .deb's assets, `[package.metadata.deb]` in Cargo.toml: source → (absolute
/// destination, mode).
fn deb_assets() -> BTreeMap<String, (String, String)> {
    let metadata = deb_metadata();
    let assets = metadata["assets"].as_array().expect("assets");
    assets
        .iter()
        .map(|asset| {
            let parts: Vec<&str> = asset
                .as_array()
                .expect("[source, dest, mode]")
                .iter()
                .map(|p| p.as_str().expect("a string"))
                .collect();
            let [source, dest, mode] = parts[..] else {
                panic!("{asset:?}: [source, dest, mode]")
            };
            let name = Path::new(source).file_name().expect("a file name");
            let dest = match dest.strip_suffix('/') {
                Some(folder) => format!("/{folder}/{}", name.to_string_lossy()),
                None => format!("/{dest}"),
            };
            (source.to_string(), (dest, mode.to_string()))
        })
        .collect()
}

fn deb_metadata() -> toml::Table {
    let manifest: toml::Table = read(MANIFEST).parse().expect("Cargo.toml");
    manifest["package"]["metadata"]["deb"]
        .as_table()
        .expect("[package.metadata.deb]")
        .clone()
}

/// Where the .deb installs the binary, and the configuration with its mode.
fn installed(source: &str) -> (String, String) {
    deb_assets()
        .remove(source)
        .unwrap_or_else(|| panic!("the .deb does not ship {source}"))
}

/// The path every packaging file runs hookd from: the .deb's binary, which is
/// the one cargo builds.
fn binary() -> String {
    let built = Path::new(env!("CARGO_BIN_EXE_hookd"))
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let (path, mode) = installed(&format!("target/release/{built}"));
    assert_eq!(mode, "755");
    assert!(path.ends_with(&format!("/{built}")), "{path}");
    path
}

/// Every environment variable name hookd's code reads, as written in it (plus
/// the `_FILE` twin of each), and the parts of the per-source and per-forward
/// names (`HOOKD_SOURCE_` + NAME + `_SECRETS`).
struct EnvNames {
    exact: BTreeSet<String>,
    suffixes: BTreeSet<String>,
}

impl EnvNames {
    fn read() -> Self {
        let mut files = Vec::new();
        crate::drift::imports::rust_files(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut files,
        );
        let mut exact = BTreeSet::new();
        let mut suffixes = BTreeSet::new();
        for file in files {
            let text = std::fs::read_to_string(&file).expect("source");
            for literal in text.split('"').skip(1).step_by(2) {
                let name_like = !literal.is_empty()
                    && literal
                        .chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
                if !name_like {
                    continue;
                }
                if literal.starts_with("HOOKD_") || ["DATABASE_URL", "RUST_LOG"].contains(&literal)
                {
                    exact.insert(literal.to_string());
                    exact.insert(format!("{literal}_FILE"));
                } else if literal.starts_with('_') {
                    suffixes.insert(literal.to_string());
                }
            }
        }
        assert!(exact.contains("DATABASE_URL") && exact.contains("HOOKD_LISTEN"));
        EnvNames { exact, suffixes }
    }

    /// Whether hookd reads `name` with these sources and forwards configured.
    fn reads(&self, name: &str, settings: &Settings) -> bool {
        if self.exact.contains(name) {
            return true;
        }
        let named = |prefix: &str, names: Vec<&str>| {
            names.iter().any(|n| {
                name.strip_prefix(prefix)
                    .and_then(|rest| rest.strip_prefix(&hookd::config::env_name(n)))
                    .is_some_and(|suffix| {
                        let suffix = suffix.strip_suffix("_FILE").unwrap_or(suffix);
                        self.suffixes.contains(suffix)
                    })
            })
        };
        self.exact.contains("HOOKD_SOURCE_")
            && named(
                "HOOKD_SOURCE_",
                settings.sources.iter().map(|s| s.name.as_str()).collect(),
            )
            || self.exact.contains("HOOKD_FORWARD_")
                && named(
                    "HOOKD_FORWARD_",
                    settings.forwards.iter().map(|f| f.name.as_str()).collect(),
                )
    }
}

/// A value for a variable a secret would fill in: what hookd must accept there.
fn stand_in(name: &str) -> String {
    let secret = hex::encode(rand::random::<[u8; 32]>());
    match name {
        "DATABASE_URL" => "postgres://hookd@db.internal:5432/hookd?sslmode=verify-full".into(),
        _ if name.starts_with("HOOKD_SOURCE_") => format!("whsec_{secret}"),
        _ => secret,
    }
}

/// The settings hookd runs with in a container: `config` (the file), then the
/// image's environment, then the container's (`None`: a secret's, stood in
/// for). Every variable set must be one hookd reads.
fn container_settings(
    what: &str,
    config: &str,
    image_env: &BTreeMap<String, String>,
    env: &[(String, Option<String>)],
) -> Settings {
    let mut all: HashMap<String, String> = image_env.clone().into_iter().collect();
    for (name, value) in env {
        let value = value.clone().unwrap_or_else(|| stand_in(name));
        all.insert(name.clone(), value);
    }
    let settings = Settings::from_toml(what, config, &all)
        .unwrap_or_else(|e| panic!("{what}: hookd refuses its configuration: {e}"));
    let names = EnvNames::read();
    for name in all.keys() {
        assert!(
            names.reads(name, &settings),
            "{what}: {name} is not a variable hookd reads"
        );
    }
    settings
}

/// The Dockerfile's runtime stage: its instructions, continuation lines joined.
fn dockerfile_runtime() -> Vec<(String, String)> {
    let text = read(DOCKERFILE).replace("\\\n", " ");
    let instructions: Vec<(String, String)> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (op, rest) = l.split_once(' ').unwrap_or((l, ""));
            (op.to_ascii_uppercase(), rest.trim().to_string())
        })
        .collect();
    let last_from = instructions
        .iter()
        .rposition(|(op, _)| op == "FROM")
        .expect("a FROM");
    instructions[last_from..].to_vec()
}

/// The image's `ENV` (`A=b C=d` pairs).
fn image_env(runtime: &[(String, String)]) -> BTreeMap<String, String> {
    runtime
        .iter()
        .filter(|(op, _)| op == "ENV")
        .flat_map(|(_, rest)| {
            rest.split_whitespace().map(|pair| {
                let (k, v) = pair.split_once('=').expect("ENV A=b");
                (k.to_string(), v.to_string())
            })
        })
        .collect()
}

#[test]
fn the_image_runs_the_built_binary_unprivileged_without_a_database_of_its_own() {
    let runtime = dockerfile_runtime();
    let one = |op: &str| one(&runtime, op);
    assert!(
        one("FROM").starts_with("debian:bookworm-slim"),
        "{}",
        one("FROM")
    );
    let binary = binary();
    let copies: Vec<&String> = runtime
        .iter()
        .filter(|(o, _)| o == "COPY")
        .map(|(_, r)| r)
        .collect();
    assert!(
        copies
            .iter()
            .any(|c| c.starts_with("--from=") && c.ends_with(&format!(" {binary}"))),
        "no COPY --from=… {binary}: {copies:?}"
    );
    let entrypoint: Vec<String> = serde_json::from_str(&one("ENTRYPOINT")).expect("exec form");
    assert_eq!(entrypoint, [binary.as_str()]);
    let cmd: Vec<String> = serde_json::from_str(&one("CMD")).expect("exec form");
    assert_eq!(cmd, ["serve"]);
    let user = one("USER");
    let uid = user.split(':').next().expect("uid");
    assert!(!["0", "root", ""].contains(&uid), "USER {user}");
    // No PostgreSQL server in the image: DATABASE_URL or nothing.
    for (op, rest) in &runtime {
        assert!(!(op == "RUN" && rest.contains("postgresql")), "{rest}");
    }

    // The packaged configuration, where the image's HOOKD_CONFIG says.
    let (config_path, _) = installed("deploy/hookd.toml");
    assert!(
        copies
            .iter()
            .any(|c| *c == &format!("deploy/hookd.toml {config_path}")),
        "{copies:?}"
    );
    let env = image_env(&runtime);
    assert_eq!(env["HOOKD_CONFIG"], config_path);
    let settings = container_settings(
        "Dockerfile",
        &read(CONFIG),
        &env,
        &[("DATABASE_URL".into(), None)],
    );
    assert!(settings.listen.ip().is_unspecified(), "{}", settings.listen);
    let exposed: u16 = one("EXPOSE").parse().expect("a port");
    assert_eq!(exposed, settings.listen.port());
    assert_eq!(one("STOPSIGNAL"), "SIGTERM");
}

#[test]
fn compose_starts_postgres_then_migrates_then_serves_on_the_real_port() {
    let file = &yaml(COMPOSE)[0];
    let services = at(file, &["services"]);
    let postgres = at(services, &["postgres"]);
    assert_eq!(text(postgres, &["image"]), "postgres:15");
    assert!(!strings(postgres, &["healthcheck", "test"]).is_empty());

    let env = image_env(&dockerfile_runtime());
    let config = read(CONFIG);
    let service_env = |service: &Value| -> Vec<(String, Option<String>)> {
        at(service, &["environment"])
            .as_mapping()
            .expect("environment: a map")
            .iter()
            .map(|(k, v)| {
                let name = k.as_str().expect("name").to_string();
                // ${POSTGRES_PASSWORD…} is compose's to fill in.
                let value = v
                    .as_str()
                    .expect("value")
                    .replace("${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}", "password");
                (name, Some(value))
            })
            .collect()
    };
    let migrate = at(services, &["migrate"]);
    assert_eq!(strings(migrate, &["command"]), ["migrate"]);
    assert_eq!(
        text(migrate, &["depends_on", "postgres", "condition"]),
        "service_healthy"
    );
    container_settings("compose.yaml migrate", &config, &env, &service_env(migrate));

    let serve = at(services, &["hookd"]);
    assert_eq!(strings(serve, &["command"]), ["serve"]);
    assert_eq!(text(serve, &["image"]), text(migrate, &["image"]));
    assert_eq!(
        text(serve, &["depends_on", "migrate", "condition"]),
        "service_completed_successfully"
    );
    let settings = container_settings("compose.yaml hookd", &config, &env, &service_env(serve));
    assert!(settings.database_url.is_some(), "no embedded database");
    let ports = strings(serve, &["ports"]);
    let target: u16 = ports[0]
        .rsplit(':')
        .next()
        .expect("a port")
        .parse()
        .expect("a port");
    assert_eq!(target, settings.listen.port(), "{ports:?}");
    let grace = hookd::duration::parse(text(serve, &["stop_grace_period"])).expect("a duration");
    assert!(grace >= stop_window(), "stop_grace_period {grace:?}");
}

/// A container of a pod spec: its arguments, its environment (`None` where a
/// Secret fills it in), and the port it names `http`.
fn container(spec: &Value) -> (&Value, Vec<(String, Option<String>)>) {
    let containers = at(spec, &["containers"]).as_sequence().expect("containers");
    assert_eq!(containers.len(), 1);
    let container = &containers[0];
    let env = at(container, &["env"])
        .as_sequence()
        .expect("env")
        .iter()
        .map(|e| {
            let name = text(e, &["name"]).to_string();
            let value = e.get("value").and_then(|v| v.as_str()).map(String::from);
            if value.is_none() {
                assert_eq!(text(e, &["valueFrom", "secretKeyRef", "name"]), "hookd");
            }
            (name, value)
        })
        .collect();
    (container, env)
}

#[test]
fn kubernetes_probes_ports_and_grace_period_match_hookd() {
    let config_map = &yaml(K8S_CONFIG)[0];
    assert_eq!(text(config_map, &["kind"]), "ConfigMap");
    let config = text(config_map, &["data", "hookd.toml"]);
    let env = image_env(&dockerfile_runtime());
    let (config_path, _) = installed("deploy/hookd.toml");
    let config_file = Path::new(&config_path);

    let docs = yaml(K8S_DEPLOYMENT);
    let deployment = docs
        .iter()
        .find(|d| text(d, &["kind"]) == "Deployment")
        .expect("a Deployment");
    let spec = at(deployment, &["spec", "template", "spec"]);
    let (hookd, pod_env) = container(spec);
    assert_eq!(strings(hookd, &["args"]), ["serve"]);
    let settings = container_settings("deployment.yaml", config, &env, &pod_env);
    assert!(settings.database_url.is_some(), "no embedded database");
    assert!(!settings.sources.is_empty());

    // The ConfigMap is mounted where the image reads its configuration.
    let mount = at(hookd, &["volumeMounts", "0"]);
    assert_eq!(
        Path::new(text(mount, &["mountPath"])),
        config_file.parent().expect("folder")
    );
    assert_eq!(
        text(spec, &["volumes", "0", "configMap", "name"]),
        text(config_map, &["metadata", "name"])
    );
    assert_eq!(
        Some(
            config_file
                .file_name()
                .expect("name")
                .to_str()
                .expect("utf-8")
        ),
        config_map["data"]
            .as_mapping()
            .expect("data")
            .keys()
            .next()
            .and_then(|k| k.as_str())
    );

    let port = at(hookd, &["ports", "0"]);
    assert_eq!(text(port, &["name"]), "http");
    assert_eq!(
        at(port, &["containerPort"]).as_u64(),
        Some(u64::from(settings.listen.port()))
    );
    for (probe, path) in [
        ("startupProbe", hookd::http::HEALTH_PATH),
        ("livenessProbe", hookd::http::HEALTH_PATH),
        ("readinessProbe", hookd::http::READY_PATH),
    ] {
        assert_eq!(text(hookd, &[probe, "httpGet", "path"]), path, "{probe}");
        assert_eq!(text(hookd, &[probe, "httpGet", "port"]), "http", "{probe}");
    }
    let pre_stop = at(hookd, &["lifecycle", "preStop", "sleep", "seconds"])
        .as_u64()
        .expect("seconds");
    let grace = at(spec, &["terminationGracePeriodSeconds"])
        .as_u64()
        .expect("seconds");
    assert!(
        Duration::from_secs(grace) >= Duration::from_secs(pre_stop) + stop_window(),
        "terminationGracePeriodSeconds {grace} < preStop {pre_stop} s + {:?}",
        stop_window()
    );
    assert_eq!(
        at(spec, &["securityContext", "runAsNonRoot"]).as_bool(),
        Some(true)
    );

    let service = docs
        .iter()
        .find(|d| text(d, &["kind"]) == "Service")
        .expect("a Service");
    assert_eq!(text(service, &["spec", "ports", "0", "targetPort"]), "http");

    // The migrate Job: the same image, configuration and environment, `migrate`.
    let job = &yaml(K8S_MIGRATE)[0];
    assert_eq!(text(job, &["kind"]), "Job");
    let job_spec = at(job, &["spec", "template", "spec"]);
    let (migrate, job_env) = container(job_spec);
    assert_eq!(strings(migrate, &["args"]), ["migrate"]);
    assert_eq!(text(migrate, &["image"]), text(hookd, &["image"]));
    assert_eq!(job_env, pod_env);
    assert_eq!(at(migrate, &["volumeMounts"]), at(hookd, &["volumeMounts"]));
    container_settings("migrate-job.yaml", config, &env, &job_env);
}

/// The package's documentation is the README and a pointer to the book, whose
/// sources stay in the repository: the pointer names pages that exist.
#[test]
fn the_package_ships_the_readme_and_a_pointer_to_the_book() {
    let assets = deb_assets();
    let docs: BTreeMap<&str, &str> = assets
        .iter()
        .filter(|(_, (dest, _))| dest.starts_with("/usr/share/doc/hookd/"))
        .map(|(source, (dest, _))| (source.as_str(), dest.as_str()))
        .collect();
    assert_eq!(
        docs,
        BTreeMap::from([
            ("README.md", "/usr/share/doc/hookd/README.md"),
            ("deploy/debian/BOOK", "/usr/share/doc/hookd/BOOK"),
        ])
    );
    assert!(
        assets.keys().all(|source| !source.starts_with("docs/")),
        "the book's sources are not packaged: {assets:?}"
    );
    let pointer = read(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/debian/BOOK"));
    let named: Vec<&str> = pointer
        .split_whitespace()
        // `docs/book/` is what `mdbook build` makes, not a file of the repository.
        .filter(|word| word.starts_with("docs/") && !word.starts_with("docs/book/"))
        .collect();
    assert!(named.contains(&"docs/src/SUMMARY.md"), "{pointer}");
    for path in named {
        assert!(
            Path::new(env!("CARGO_MANIFEST_DIR")).join(path).exists(),
            "deploy/debian/BOOK names {path}, which does not exist"
        );
    }
}

#[test]
fn the_package_ships_the_binary_unit_configuration_and_manual() {
    let assets = deb_assets();
    let binary = binary();
    let (config, mode) = installed("deploy/hookd.toml");
    assert_eq!(
        (config.as_str(), mode.as_str()),
        ("/etc/hookd/hookd.toml", "640")
    );
    let (default, mode) = installed("deploy/hookd.default");
    assert_eq!(
        (default.as_str(), mode.as_str()),
        ("/etc/default/hookd", "600")
    );
    assert!(
        assets
            .values()
            .any(|(dest, _)| dest.starts_with("/usr/share/man/man1/") && dest.ends_with("*.1.gz")),
        "no manual pages: {assets:?}"
    );
    let metadata = deb_metadata();
    let units = metadata["systemd-units"].as_table().expect("systemd-units");
    let folder = units["unit-scripts"].as_str().expect("a folder");
    assert_eq!(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(folder)
            .join("hookd.service"),
        Path::new(UNIT)
    );
    let scripts = metadata["maintainer-scripts"].as_str().expect("a folder");
    let postinst = read(&format!(
        "{}/{scripts}/postinst",
        env!("CARGO_MANIFEST_DIR")
    ));

    let sections = unit_sections(&read(UNIT));
    let service = &sections["Service"];
    let one = |key: &str| one(service, key);
    assert_eq!(
        one("ExecStart"),
        format!("{binary} serve --config {config}")
    );
    assert_eq!(one("EnvironmentFile"), format!("-{default}"));
    // The user the postinst makes, which may read the configuration.
    let user = one("User");
    assert_eq!(one("Group"), user);
    assert!(
        postinst.contains("adduser --system --group") && postinst.contains(&format!(" {user}\n")),
        "{postinst}"
    );
    assert!(
        postinst.contains(&format!("chown root:{user} {config}")),
        "{postinst}"
    );
    assert!(
        postinst.contains(&format!(
            "chmod 0{} {config}",
            installed("deploy/hookd.toml").1
        )),
        "{postinst}"
    );
    let stop = hookd::duration::parse(&one("TimeoutStopSec")).expect("a duration");
    assert!(stop > stop_window(), "TimeoutStopSec {stop:?}");
    assert_eq!(one("ExecReload"), "/bin/kill -HUP $MAINPID");

    // The default file sets only what hookd reads (commented out, as shipped).
    let names = EnvNames::read();
    let settings =
        Settings::from_toml("hookd.toml", &read(CONFIG), &HashMap::new()).expect("config");
    for line in read(DEFAULTS).lines() {
        let line = line.trim_start_matches('#');
        if let Some((name, _)) = line.split_once('=').filter(|(n, _)| !n.contains(' ')) {
            assert!(
                names.reads(name, &settings),
                "hookd.default: {name} is not read by hookd"
            );
        }
    }
}

#[test]
fn slow_version_completions_and_manual_come_from_the_command_line() {
    let hookd = |args: &[&str]| {
        let output = crate::support::hookd_binary()
            .args(args)
            .output()
            .expect("run hookd");
        assert!(output.status.success(), "{args:?}: {output:?}");
        String::from_utf8(output.stdout).expect("utf-8")
    };
    // The revision build.rs found: this checkout's HEAD, when it is one.
    let version = hookd(&["--version"]);
    let dir = env!("CARGO_MANIFEST_DIR");
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let expected = match git(&["rev-parse", "--show-toplevel"]) {
        Some(top) if Path::new(&top).canonicalize().ok() == Path::new(dir).canonicalize().ok() => {
            git(&["rev-parse", "--short=12", "HEAD"]).expect("HEAD")
        }
        _ => hookd::version::REVISION.to_string(),
    };
    assert_eq!(
        version.trim(),
        format!("hookd {} (rev {expected})", env!("CARGO_PKG_VERSION"))
    );

    for shell in ["bash", "zsh", "fish"] {
        // No configuration needed: packaging runs these where there is none.
        let script = hookd(&["--config", "/nonexistent.toml", "completions", shell]);
        for command in ["serve", "check-config", "completions"] {
            assert!(script.contains(command), "{shell}: no {command}");
        }
    }
    let page = hookd(&["--config", "/nonexistent.toml", "man"]);
    assert!(page.contains(".TH hookd 1"), "{page}");
    assert!(page.contains("check\\-config"), "{page}");
    let pages = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("man-{}", std::process::id()));
    std::fs::create_dir_all(&pages).expect("folder");
    hookd(&["man", "--dir", pages.to_str().expect("utf-8")]);
    for page in ["hookd.1", "hookd-serve.1", "hookd-events-list.1"] {
        assert!(pages.join(page).is_file(), "{page}");
    }
    let _ = std::fs::remove_dir_all(&pages);
}

/// The unit's `[Service]` with its commented-out examples (`#Key=value`, also
/// in the install notes) read as set: the lines an operator is told to add.
fn unit_with_examples(text: &str) -> Vec<(String, String)> {
    let mut service = unit_sections(text)["Service"].clone();
    for line in text.lines() {
        let Some(example) = line.strip_prefix('#').map(str::trim_start) else {
            continue;
        };
        for key in ["LoadCredential", "Environment"] {
            if let Some(value) = example.strip_prefix(&format!("{key}=")) {
                service.push((key.to_string(), value.to_string()));
            }
        }
    }
    service
}

#[test]
fn slow_the_systemd_unit_is_hardened_and_never_restarts_a_configuration_error() {
    let text = read(UNIT);
    let sections = unit_sections(&text);
    let service = &sections["Service"];
    let one = |key: &str| one(service, key);
    assert_eq!(one("Restart"), "on-failure");
    assert_eq!(
        one("RestartPreventExitStatus"),
        hookd::cli::EX_CONFIG.to_string()
    );
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
    assert_eq!(values(service, "SystemCallFilter")[0], "@system-service");

    // Each secret the notes show comes in as a credential, through its *_FILE variable.
    let examples = unit_with_examples(&text);
    let environment = values(&examples, "Environment");
    let credentials = values(&examples, "LoadCredential");
    assert!(credentials.len() >= 3, "{credentials:?}");
    for credential in credentials {
        let (name, path) = credential.split_once(':').expect("NAME:PATH");
        assert!(path.starts_with("/etc/hookd/"), "{credential}");
        let variable = environment
            .iter()
            .find(|e| e.ends_with(&format!("_FILE=%d/{name}")))
            .unwrap_or_else(|| panic!("no *_FILE variable reads {name}"));
        assert!(variable.starts_with("HOOKD_"), "{variable}");
    }
    // Unit files are world-readable: no secret, no database URL (it may hold a
    // password: it belongs in the root-only environment file).
    assert!(!text.contains("whsec_"));
    assert!(
        !environment.iter().any(|e| e.starts_with("DATABASE_URL=")),
        "{environment:?}"
    );
    assert_eq!(
        sections["Install"][0],
        ("WantedBy".into(), "multi-user.target".into())
    );

    // systemd's own check, where it is installed, of a copy that runs this build.
    let copy = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("unit-{}", std::process::id()))
        .join("hookd.service");
    std::fs::create_dir_all(copy.parent().expect("folder")).expect("folder");
    std::fs::write(&copy, text.replace(&binary(), env!("CARGO_BIN_EXE_hookd"))).expect("copy");
    // Its Documentation= names the manual page this build writes.
    let man = copy.with_file_name("man");
    let pages = man.join("man1");
    std::fs::create_dir_all(&pages).expect("folder");
    let status = crate::support::hookd_binary()
        .arg("man")
        .arg("--dir")
        .arg(&pages)
        .status()
        .expect("hookd man");
    assert!(status.success());
    if let Ok(output) = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .env("MANPATH", &man)
        .output()
    {
        let said = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success() && said.trim().is_empty(),
            "systemd-analyze verify: {said}"
        );
    }
}

/// The packaged configuration with the source its comments show uncommented.
fn with_example_source(config: &str) -> String {
    let example: Vec<&str> = config
        .lines()
        .skip_while(|l| *l != "# [[sources]]")
        .take_while(|l| l.starts_with("# [[") || l.starts_with("# ") && l.contains(" = "))
        .map(|l| &l[2..])
        .collect();
    assert!(
        !example.is_empty(),
        "no example source in the configuration"
    );
    format!("{config}\n{}\n", example.join("\n"))
}

#[test]
fn slow_the_packaged_configuration_holds_no_secret_and_passes_check_config() {
    let text = read(CONFIG);
    let config: toml::Table = text.parse().expect("toml");
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

    let folder =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("credentials-{}", std::process::id()));
    std::fs::create_dir_all(&folder).expect("folder");
    let check = |config: &Path, env: &[(String, String)]| {
        let output = crate::support::hookd_binary()
            .args(["check-config", "--config"])
            .arg(config)
            .env_remove("DATABASE_URL")
            .env("RUST_LOG", "warn")
            .envs(env.iter().cloned())
            .output()
            .expect("run hookd");
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert_eq!(output.status.code(), Some(0), "{stderr}");
        assert!(stderr.trim().is_empty(), "no warning: {stderr}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    // As installed, with the unit's environment: it passes, serving nothing yet.
    let unit = read(UNIT);
    let service = &unit_sections(&unit)["Service"];
    let env: Vec<(String, String)> = service
        .iter()
        .filter(|(k, _)| k == "Environment")
        .map(|(_, v)| v.split_once('=').expect("VAR=value"))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let stdout = check(Path::new(CONFIG), &env);
    assert!(stdout.contains("0 source(s)"), "{stdout}");

    // With the source its comments show, and the credentials the unit's notes
    // show, as systemd would hand them over (0600 files in %d): a working
    // configuration, without a warning.
    let mut env = env;
    for (key, value) in unit_with_examples(&unit) {
        match key.as_str() {
            "LoadCredential" => {
                let (name, _) = value.split_once(':').expect("NAME:PATH");
                let secret = hex::encode(rand::random::<[u8; 32]>());
                let contents = match name {
                    "admin-tokens" => format!("# support staff\nops operator {secret}\n"),
                    _ => format!("{secret}\n"),
                };
                let path = folder.join(name);
                std::fs::write(&path, contents).expect("credential");
                std::fs::set_permissions(
                    &path,
                    std::os::unix::fs::PermissionsExt::from_mode(0o600),
                )
                .expect("chmod");
            }
            "Environment" => {
                let (var, value) = value.split_once('=').expect("VAR=value");
                env.push((var.into(), value.replace("%d", &folder.to_string_lossy())));
            }
            _ => {}
        }
    }
    let example = folder.join("hookd.toml");
    std::fs::write(&example, with_example_source(&text)).expect("config");
    let stdout = check(&example, &env);
    assert!(
        stdout.contains("1 source(s) (stripe)") && stdout.contains("1 admin token(s)"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&folder);
}
