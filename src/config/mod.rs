//! Settings: the TOML file (`hookd.toml` by default), then environment overrides,
//! turned into typed values once. Every problem is reported as one line that names
//! the key, and unknown keys are errors so a typo cannot pass silently.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde::de::IntoDeserializer;

mod cidr;
mod live;
mod reconcile;

pub use cidr::Cidr;
pub use live::LiveSettings;
pub use reconcile::{Credential, Lister, Reconcile};

use crate::domain::PaymentKind;
use crate::duration::{Positive, ZeroOrMore};
use crate::keys::{
    Names, Problem, check_name, json_pointer, one_line, one_of, socket_address, unique_names,
};
use crate::providers;
use crate::providers::{Scheme, Verifier};
use crate::signature::Secret;

/// The admin tokens of the shipped `hookd.toml`.
const DEVELOPMENT_TOKENS: [&str; 2] = [
    "dev-viewer-token-0123456789",
    "dev-operator-token-0123456789",
];

/// The secrets and tokens of the shipped `hookd.toml`: its sources' (each
/// provider names its own) and its admin tokens. They are public, so `serve`
/// accepts them only with `development = true`, and then only on loopback
/// addresses.
pub fn development_credentials() -> impl Iterator<Item = &'static str> {
    providers::REGISTRY
        .iter()
        .flat_map(|entry| entry.provider.development_secrets().iter().copied())
        .chain(DEVELOPMENT_TOKENS)
}

/// Whether `value` is one of the shipped `hookd.toml`'s public credentials.
pub fn is_development_credential(value: &str) -> bool {
    development_credentials().any(|shipped| shipped == value)
}

/// Admin tokens shorter than this are refused beyond loopback (and warned about on it).
pub const MIN_TOKEN_LEN: usize = 16;

/// Seconds in these, for the defaults.
const MINUTE: u64 = 60;
const HOUR: u64 = 60 * MINUTE;
const DAY: u64 = 24 * HOUR;

/// Retention windows must outlive every provider's retry window.
pub const MIN_RETENTION: Duration = Duration::from_secs(DAY);

#[derive(Debug, thiserror::Error)]
#[error("config {origin}: {key}: {problem}")]
pub struct ConfigError {
    pub origin: String,
    pub key: String,
    pub problem: String,
}

#[derive(Debug, Clone)]
pub struct Settings {
    /// The file these settings came from, for messages.
    pub origin: String,
    pub listen: SocketAddr,
    /// When set, `/admin…` and `/metrics` are served only here.
    pub admin_listen: Option<SocketAddr>,
    pub max_body_bytes: usize,
    /// Webhook body bytes held at once, beyond each body's first `FREE_BODY_BYTES`.
    pub max_body_memory: usize,
    /// How long a request body may take to arrive, once its headers are in.
    pub body_timeout: Duration,
    pub handler_timeout: Duration,
    pub max_attempts: i32,
    pub retry_base: Duration,
    pub retry_cap: Duration,
    pub retention: Duration,
    pub key_retention: Duration,
    pub purge_interval: Duration,
    pub purge_batch: i64,
    /// Connections to PostgreSQL per instance.
    pub pool_size: usize,
    /// Retry loops per instance (each runs one event's handlers at a time).
    pub dispatchers: usize,
    /// After SIGTERM, how long `/readyz` answers 503 while everything is still
    /// served, so balancers stop sending before the listener closes.
    pub shutdown_delay: Duration,
    /// Then, how long in-flight work gets to finish before it is cut off.
    pub shutdown_grace: Duration,
    /// `embedded_database = true`: the operator chose the embedded cluster, also
    /// for a `serve` that other machines reach.
    pub embedded_database: bool,
    pub sources: Vec<Source>,
    /// Where events are POSTed for handlers in other stacks.
    pub forwards: Vec<Forward>,
    /// The Idempotency-Key gateway (`[gateway]`): off without `listen`.
    pub gateway: crate::gateway::config::Gateway,
    pub admin_tokens: Vec<AdminToken>,
    /// `Secure` on the session cookie: `None` decides by `development` (off) and
    /// the request (off when a trusted proxy says it came over plain HTTP).
    pub cookie_secure: Option<bool>,
    /// `DATABASE_URL`; `None` means the embedded cluster. A secret: it may hold a password.
    pub database_url: Option<Secret>,
    /// When set, `/metrics` wants it as a bearer token.
    pub metrics_token: Option<Secret>,
    /// Peers (and `X-Forwarded-For` hops) believed about the client they forward.
    pub trusted_proxies: Vec<Cidr>,
    /// `development = true`: the shipped (public) secrets and tokens are accepted
    /// on loopback addresses, and the session cookie is not `Secure` while the
    /// admin pages listen on loopback.
    pub development: bool,
    /// The files secrets were read from: every `*_FILE`, and the configuration
    /// file itself when it holds any.
    pub secret_files: Vec<PathBuf>,
    /// Whether any secret or token in use was written in the configuration text.
    file_holds_secrets: bool,
}

#[derive(Debug, Clone)]
pub struct Source {
    pub name: String,
    pub scheme: Scheme,
    pub secrets: Vec<Secret>,
    /// Where the secrets were set, for messages: `sources[0].secrets` or its variable.
    pub secrets_key: String,
    pub tolerance: Duration,
    /// Provider type → hookd kind, defaults included.
    pub event_types: HashMap<String, String>,
    /// JSON pointers left out of the fingerprint (fields a provider changes
    /// between deliveries of one event).
    /// Shared with each event parsed for the source.
    pub fingerprint_ignore: std::sync::Arc<[String]>,
    /// A body already stored under another id is a duplicate of that event
    /// (only for schemes that leave the id or type unsigned; false otherwise).
    pub dedupe_on_body: bool,
    /// JSON pointers of the personal data viewers see masked and forgetting a
    /// customer erases: the provider's defaults (unless `mask_defaults = false`)
    /// and the source's own `mask`.
    pub mask: Vec<String>,
    /// A delivery is expected at least this often: longer without one makes
    /// `hookd_source_silent` 1 (none: not watched).
    pub expect_events_within: Option<Duration>,
    /// Asking the provider's API for the events it never delivered.
    pub reconcile: Reconcile,
}

impl Source {
    /// The verifier of this source's deliveries: its scheme, secrets and tolerance.
    pub fn verifier(&self) -> Verifier<'_> {
        Verifier {
            scheme: &self.scheme,
            secrets: &self.secrets,
            tolerance: self.tolerance,
        }
    }

    /// hookd's kind for an event: the source's table (its provider's defaults
    /// included), else its provider's rule for that type and payload, else a
    /// type that is already a built-in kind name stands for itself.
    pub fn kind_of(&self, event_type: &str, payload: &serde_json::Value) -> Option<&str> {
        if let Some(kind) = self.event_types.get(event_type) {
            return Some(kind);
        }
        if let Some(kind) = providers::of(&self.scheme).kind_of(event_type, payload) {
            return Some(kind.as_str());
        }
        PaymentKind::parse(event_type).map(PaymentKind::as_str)
    }
}

/// A `[[forwards]]` table: events it matches are POSTed to `url`, signed as
/// Standard Webhooks with `secret`, after the delivery is acknowledged.
#[derive(Debug, Clone)]
pub struct Forward {
    pub name: String,
    pub url: reqwest::Url,
    pub secret: Secret,
    /// hookd kinds it takes.
    pub kinds: Vec<String>,
    /// Provider types it takes; `*` takes every event.
    pub types: Vec<String>,
    /// Sources it takes events from; empty means every source.
    pub sources: Vec<String>,
    pub timeout: Duration,
    /// Sends to it under way at once, per instance.
    pub concurrency: usize,
    /// An event goes dead for it only once its sends are `max_attempts` and
    /// its first send is this long ago.
    pub retry_for: Duration,
    /// Consecutive failed sends that open its circuit breaker.
    pub open_after: i32,
    /// Its events wait, unsent, until it is resumed.
    pub paused: bool,
}

impl Forward {
    /// Whether an event of this source, type and kind goes to this forward.
    pub fn matches(&self, source: &str, event_type: &str, kind: Option<&str>) -> bool {
        let from_source = self.sources.is_empty() || self.sources.iter().any(|s| s == source);
        let by_kind = kind.is_some_and(|kind| self.kinds.iter().any(|k| k == kind));
        let by_type = self.types.iter().any(|t| t == "*" || t == event_type);
        from_source && (by_kind || by_type)
    }

    /// Its name in the attempts and the admin views: `forward:NAME`.
    pub fn handler_name(&self) -> crate::domain::HandlerName {
        crate::domain::HandlerName::Forward(self.name.clone())
    }

    /// Its URL as errors and logs show it: `scheme://host:port/path`, without
    /// the query (which may carry a token).
    pub fn endpoint(&self) -> String {
        shown_url(&self.url)
    }
}

/// `scheme://host[:port]/path` of a URL: never its credentials or query.
pub(crate) fn shown_url(url: &reqwest::Url) -> String {
    let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
    format!(
        "{}://{}{port}{}",
        url.scheme(),
        url.host_str().unwrap_or_default(),
        url.path()
    )
}

/// The shortest `expect_events_within` a source may have.
const MIN_SILENCE: Duration = Duration::from_secs(60);

/// Sends to one forward under way at once (per instance), unless it says.
const DEFAULT_FORWARD_CONCURRENCY: i64 = 4;
/// How long a forward's failing sends go on at least, unless it says: Stripe's
/// own horizon for redelivering a webhook.
const DEFAULT_RETRY_FOR: Duration = Duration::from_secs(72 * 3600);
/// Consecutive failed sends that open a forward's breaker, unless it says.
const DEFAULT_OPEN_AFTER: i64 = 10;
/// The most a forward may ask for: each send holds a connection to its receiver.
const MAX_FORWARD_CONCURRENCY: i64 = 64;

/// The longest `timeout` a forward may have: a send holds its event's lease (and
/// a dispatcher) that long, and an operator's retry waits for it.
pub const MAX_FORWARD_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Viewer,
    Operator,
}

impl Names for Role {
    const NAMES: &str = "viewer, operator";
}

#[derive(Debug, Clone)]
pub struct AdminToken {
    pub name: String,
    pub token: Secret,
    pub role: Role,
    /// Where the token was set, for messages: `admin.tokens[0].token` or its variable.
    pub key: String,
}

impl Settings {
    pub fn source(&self, name: &str) -> Option<&Source> {
        self.sources.iter().find(|s| s.name == name)
    }

    pub fn forward(&self, name: &str) -> Option<&Forward> {
        self.forwards.iter().find(|f| f.name == name)
    }

    /// Where `/admin…` and `/metrics` are served.
    pub fn admin_address(&self) -> SocketAddr {
        self.admin_listen.unwrap_or(self.listen)
    }

    /// Whether any source secret or admin token is a shipped development value.
    pub fn uses_development_credentials(&self) -> bool {
        let secrets = self.sources.iter().flat_map(|s| s.secrets.iter());
        let tokens = self.admin_tokens.iter().map(|t| &t.token);
        secrets
            .chain(tokens)
            .any(|secret| is_development_credential(secret.expose()))
            || self
                .sources
                .iter()
                .any(|s| providers::of(&s.scheme).development_credential().is_some())
    }

    /// `serve` refuses public development credentials unless `development = true`
    /// says this is a development machine, and even then on an address other
    /// machines can reach: source secrets when the webhook listener is not loopback,
    /// admin tokens (and short ones) when the admin listener is not. The shipped
    /// `hookd.toml` says `development = true`, so it works out of the box on loopback.
    pub fn check_exposure(&self) -> Result<(), ConfigError> {
        let refuse = |key: &str, problem: String| ConfigError {
            origin: self.origin.clone(),
            key: key.to_string(),
            problem,
        };
        let is_dev = |secret: &Secret| is_development_credential(secret.expose());
        let dev_secret = self.sources.iter().enumerate().find_map(|(i, source)| {
            match source.secrets.iter().position(is_dev) {
                Some(j) => Some((format!("{}[{j}]", source.secrets_key), source)),
                // PayPal's shipped certificate and signing key.
                None => providers::of(&source.scheme)
                    .development_credential()
                    .map(|key| (format!("sources[{i}].{key}"), source)),
            }
        });
        if !self.development {
            let dev_token = self.admin_tokens.iter().find(|t| is_dev(&t.token));
            let found = dev_secret
                .as_ref()
                .map(|(key, source)| (key.clone(), "secret", source.scheme.name()))
                .or_else(|| dev_token.map(|t| (t.key.clone(), "token", "hmac")));
            if let Some((key, what, scheme)) = found {
                return Err(refuse(
                    &key,
                    format!(
                        "is a shipped development {what}, which only a configuration saying \
                         development = true may use: set your own (hookd secret --scheme \
                         {scheme} prints a fresh one)"
                    ),
                ));
            }
        }
        if let Some((key, source)) = dev_secret.filter(|_| !self.listen.ip().is_loopback()) {
            return Err(refuse(
                &key,
                format!(
                    "is a shipped development secret, and listen = {} reaches beyond \
                     this machine: set the provider's secret (hookd secret --scheme {} \
                     prints a fresh one)",
                    self.listen,
                    source.scheme.name()
                ),
            ));
        }
        let admin = self.admin_address();
        if !admin.ip().is_loopback() {
            for token in &self.admin_tokens {
                let problem = if is_dev(&token.token) {
                    "is a shipped development token"
                } else if token.token.expose().len() < MIN_TOKEN_LEN {
                    "is shorter than 16 characters"
                } else {
                    continue;
                };
                return Err(refuse(
                    &token.key,
                    format!(
                        "{problem}, and the admin pages listen on {admin}, beyond this machine: \
                         set a long random token (hookd secret --scheme hmac prints one)"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `serve` refuses to keep acknowledged events only in the embedded cluster
    /// (one machine's disk, often a throwaway one: a container's, a VM's) once
    /// other machines reach it, unless `embedded_database = true` says that was
    /// the operator's choice.
    pub fn check_database(&self) -> Result<(), ConfigError> {
        if self.database_url.is_some() || self.embedded_database {
            return Ok(());
        }
        let Some((key, addr)) = [
            ("listen", Some(self.listen)),
            ("admin_listen", self.admin_listen),
            ("gateway.listen", self.gateway.listen),
        ]
        .into_iter()
        .find_map(|(key, addr)| addr.filter(|a| !a.ip().is_loopback()).map(|a| (key, a))) else {
            return Ok(());
        };
        Err(ConfigError {
            origin: self.origin.clone(),
            key: "DATABASE_URL".into(),
            problem: format!(
                "is unset and {key} = {addr} reaches beyond this machine: acknowledged events \
                 would live only in the embedded cluster on this machine's disk; set \
                 DATABASE_URL to a PostgreSQL that outlives it, or embedded_database = true \
                 if the embedded cluster is your choice"
            ),
        })
    }

    /// One warning line for each file holding secrets that its group or others may
    /// read (`serve` and `check-config` say it; neither refuses, since a shared
    /// group may be deliberate).
    pub fn warn_readable_secret_files(&self) {
        for path in &self.secret_files {
            let Ok(meta) = std::fs::metadata(path) else {
                continue;
            };
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                log::warn!(
                    "{}: holds secrets but its group or others may read it (mode {mode:03o}): \
                     chmod 600 it",
                    path.display()
                );
            }
        }
    }

    /// Reads the file, applies the process environment, validates.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            origin: origin.clone(),
            key: "(file)".into(),
            problem: format!("cannot read: {e}"),
        })?;
        let env: HashMap<String, String> = std::env::vars().collect();
        let mut settings = Self::from_toml(&origin, &text, &env)?;
        if settings.file_holds_secrets {
            settings.secret_files.insert(0, path.to_path_buf());
        }
        Ok(settings)
    }

    /// Parses TOML text with the given environment; `origin` names the file in errors.
    pub fn from_toml(
        origin: &str,
        text: &str,
        env: &HashMap<String, String>,
    ) -> Result<Self, ConfigError> {
        let fail = |key: String, problem: String| ConfigError {
            origin: origin.to_string(),
            key,
            problem,
        };
        let deserializer = toml::Deserializer::parse(text)
            .map_err(|e| fail(locate(text, e.span()), one_line(e.message())))?;
        let mut raw: RawSettings = serde_path_to_error::deserialize(deserializer).map_err(|e| {
            let key = e.path().to_string();
            let inner = e.into_inner();
            let key = if key == "." {
                locate(text, inner.span())
            } else {
                key
            };
            fail(key, one_line(inner.message()))
        })?;
        apply_env(&mut raw, env).map_err(|(key, problem)| fail(key, problem))?;
        if let Some(folder) = Path::new(origin)
            .parent()
            .filter(|f| !f.as_os_str().is_empty())
        {
            for source in &mut raw.sources {
                source.resolve_paths(folder);
            }
        }
        let file_holds_secrets = raw.holds_secrets();
        let mut settings = raw
            .validate()
            .map_err(|(key, problem)| fail(key, problem))?;
        settings.origin = origin.to_string();
        settings.file_holds_secrets = file_holds_secrets;
        Ok(settings)
    }
}

fn locate(text: &str, span: Option<std::ops::Range<usize>>) -> String {
    match span {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            format!("line {line}")
        }
        None => "(file)".into(),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSettings {
    listen: Option<String>,
    admin_listen: Option<String>,
    max_body_bytes: Option<i64>,
    max_body_memory: Option<i64>,
    body_timeout: Option<Positive>,
    handler_timeout: Option<Positive>,
    max_attempts: Option<i64>,
    retry_base: Option<Positive>,
    retry_cap: Option<Positive>,
    retention: Option<Positive>,
    key_retention: Option<Positive>,
    purge_interval: Option<Positive>,
    purge_batch: Option<i64>,
    pool_size: Option<i64>,
    dispatchers: Option<i64>,
    shutdown_delay: Option<ZeroOrMore>,
    shutdown_grace: Option<Positive>,
    #[serde(default)]
    embedded_database: bool,
    metrics_token: Option<String>,
    trusted_proxies: Option<Vec<String>>,
    #[serde(default)]
    development: bool,
    #[serde(default)]
    sources: Vec<RawSource>,
    #[serde(default)]
    forwards: Vec<RawForward>,
    #[serde(default)]
    admin: RawAdmin,
    #[serde(default)]
    gateway: crate::gateway::config::RawGateway,
    #[serde(skip)]
    database_url: Option<String>,
    /// The environment variable that set `metrics_token`, if one did.
    #[serde(skip)]
    metrics_token_env: Option<String>,
    /// The `*_FILE` files secrets were read from.
    #[serde(skip)]
    secret_files: Vec<PathBuf>,
}

/// A `[[sources]]` table. Its `scheme` is the tag of [`Scheme`], and the keys only
/// the `hmac` variant takes share the table with the rest: serde's own internal
/// tagging would buffer the table and lose the key of any error inside it, so
/// they are collected here and read by [`SchemeName::with_keys`].
#[derive(Debug, Deserialize)]
struct RawSource {
    name: String,
    scheme: String,
    #[serde(default)]
    secrets: Vec<String>,
    tolerance: Option<Positive>,
    #[serde(default)]
    event_types: BTreeMap<String, String>,
    fingerprint_ignore: Option<Vec<String>>,
    dedupe_on_body: Option<bool>,
    #[serde(default)]
    mask: Vec<String>,
    mask_defaults: Option<bool>,
    expect_events_within: Option<Positive>,
    /// Every other key: the scheme's own, or unknown ones.
    #[serde(flatten)]
    scheme_keys: toml::Table,
    /// The environment variable that replaced `secrets`, if one did.
    #[serde(skip)]
    secrets_env: Option<String>,
    /// The credential keys (see [`CREDENTIAL_KEYS`]) the environment set.
    #[serde(skip)]
    credentials_from_env: Vec<&'static str>,
}

/// The keys of a scheme that hold a credential: each may come from
/// `HOOKD_SOURCE_<NAME>_<KEY>` (or its `_FILE`) instead of the file.
const CREDENTIAL_KEYS: [&str; 2] = ["basic_auth", "authorization"];

/// The keys every source takes, whatever its scheme (each provider adds its own).
const SOURCE_KEYS: [&str; 10] = [
    "name",
    "scheme",
    "secrets",
    "tolerance",
    "event_types",
    "fingerprint_ignore",
    "dedupe_on_body",
    "mask",
    "mask_defaults",
    "expect_events_within",
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawForward {
    name: String,
    url: String,
    secret: Option<String>,
    #[serde(default)]
    kinds: Vec<String>,
    #[serde(default)]
    types: Vec<String>,
    #[serde(default)]
    sources: Vec<String>,
    timeout: Option<Positive>,
    concurrency: Option<i64>,
    retry_for: Option<Positive>,
    open_after: Option<i64>,
    #[serde(default)]
    paused: bool,
    /// The environment variable that set `secret`, if one did.
    #[serde(skip)]
    secret_env: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAdmin {
    #[serde(default)]
    tokens: Vec<RawToken>,
    cookie_secure: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToken {
    name: String,
    token: String,
    #[serde(deserialize_with = "one_of")]
    role: Role,
    /// The environment variable it came from, if it did.
    #[serde(skip)]
    from_env: Option<String>,
}

fn apply_env(raw: &mut RawSettings, env: &HashMap<String, String>) -> Result<(), Problem> {
    let set = |var: &str| env.get(var).filter(|v| !v.is_empty());
    if let Some(url) = set("DATABASE_URL") {
        raw.database_url = Some(url.clone());
    }
    if let Some(listen) = set("HOOKD_LISTEN") {
        raw.listen = Some(listen.clone());
    }
    if let Some(listen) = set("HOOKD_ADMIN_LISTEN") {
        raw.admin_listen = Some(listen.clone());
    }
    raw.gateway.apply_env(env);
    let mut files = Vec::new();
    if let Some(path) = set(TOKENS_FILE) {
        raw.admin.tokens = tokens_file(Path::new(path))?;
        files.push(PathBuf::from(path));
    }
    // Records each file a secret came from, for the permission check.
    let mut read = |var: &str| -> Result<Option<(String, String)>, Problem> {
        let found = secret_from_env(env, var)?;
        if let Some((from, _)) = &found
            && from != var
        {
            files.push(PathBuf::from(&env[from]));
        }
        Ok(found)
    };
    if let Some((var, token)) = read("HOOKD_METRICS_TOKEN")? {
        raw.metrics_token = Some(token);
        raw.metrics_token_env = Some(var);
    }
    if let Some((var, token)) = read("HOOKD_ADMIN_TOKEN")? {
        raw.admin.tokens.push(RawToken {
            name: "env".into(),
            token,
            role: Role::Operator,
            from_env: Some(var),
        });
    }
    for (var, upper) in named_vars(env, "HOOKD_SOURCE_", "_SECRETS") {
        let Some(source) = raw.sources.iter_mut().find(|s| env_name(&s.name) == upper) else {
            // Not fatal (one environment may serve several configurations), but
            // never silent: it may be a typo.
            log::warn!("{var}: no configured source is named {upper}; ignored");
            continue;
        };
        let Some((from, value)) = read(&format!("HOOKD_SOURCE_{upper}_SECRETS"))? else {
            continue;
        };
        source.secrets_env = Some(from);
        source.secrets = value
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
    }
    for key in CREDENTIAL_KEYS.into_iter().chain(reconcile::KEYS) {
        let suffix = format!("_{}", key.to_ascii_uppercase());
        for (var, upper) in named_vars(env, "HOOKD_SOURCE_", &suffix) {
            let Some(source) = raw.sources.iter_mut().find(|s| env_name(&s.name) == upper) else {
                log::warn!("{var}: no configured source is named {upper}; ignored");
                continue;
            };
            let Some((_, value)) = read(&format!("HOOKD_SOURCE_{upper}{suffix}"))? else {
                continue;
            };
            source.credentials_from_env.push(key);
            source
                .scheme_keys
                .insert(key.into(), toml::Value::String(value.trim().to_string()));
        }
    }
    for (var, upper) in named_vars(env, "HOOKD_FORWARD_", "_SECRET") {
        let Some(forward) = raw.forwards.iter_mut().find(|f| env_name(&f.name) == upper) else {
            log::warn!("{var}: no configured forward is named {upper}; ignored");
            continue;
        };
        let Some((from, value)) = read(&format!("HOOKD_FORWARD_{upper}_SECRET"))? else {
            continue;
        };
        forward.secret_env = Some(from);
        forward.secret = Some(value.trim().to_string());
    }
    raw.secret_files = files;
    Ok(())
}

/// The NAMEs of the set `PREFIX<NAME>SUFFIX` and `PREFIX<NAME>SUFFIX_FILE`
/// variables, each once (under the plain variable when both are set) and in name
/// order, so the first problem reported is always the same one.
fn named_vars(env: &HashMap<String, String>, prefix: &str, suffix: &str) -> Vec<(String, String)> {
    let file_suffix = format!("{suffix}_FILE");
    let mut found: BTreeMap<String, String> = BTreeMap::new();
    for (var, value) in env {
        let Some(upper) = var.strip_prefix(prefix).and_then(|rest| {
            rest.strip_suffix(suffix)
                .or_else(|| rest.strip_suffix(file_suffix.as_str()))
        }) else {
            continue;
        };
        if value.is_empty() {
            continue;
        }
        let plain = var.ends_with(suffix);
        let entry = found
            .entry(upper.to_string())
            .or_insert_with(|| var.clone());
        if plain {
            entry.clone_from(var);
        }
    }
    let mut names: Vec<(String, String)> = found.into_iter().map(|(u, v)| (v, u)).collect();
    names.sort();
    names
}

/// `HOOKD_ADMIN_TOKENS_FILE`: names a file of `name role token` lines, which
/// replace the configuration file's `[[admin.tokens]]`.
const TOKENS_FILE: &str = "HOOKD_ADMIN_TOKENS_FILE";

/// The tokens of a tokens file: one `name role token` a line; blank lines and
/// lines starting with `#` are skipped. A problem names the file and line, never
/// the token.
fn tokens_file(path: &Path) -> Result<Vec<RawToken>, Problem> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        (
            TOKENS_FILE.to_string(),
            format!("cannot read {}: {e}", path.display()),
        )
    })?;
    let mut tokens = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = format!("{}:{}", path.display(), n + 1);
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [name, role, token] = fields[..] else {
            return Err((
                at,
                format!(
                    "expected three fields, name role token ({} found)",
                    fields.len()
                ),
            ));
        };
        let role =
            Role::deserialize(role.into_deserializer()).map_err(|_: serde::de::value::Error| {
                (
                    at.clone(),
                    // Never the field itself: a line in the wrong order holds the token here.
                    format!("the second field (the role) is not one of {}", Role::NAMES),
                )
            })?;
        tokens.push(RawToken {
            name: name.to_string(),
            token: token.to_string(),
            role,
            from_env: Some(at),
        });
    }
    Ok(tokens)
}

/// A secret from the environment: `VAR` itself, or the contents of the file that
/// `VAR_FILE` names (a container secret, a systemd credential) without its
/// trailing newline. Returns the variable it came from; refuses both at once.
fn secret_from_env(
    env: &HashMap<String, String>,
    var: &str,
) -> Result<Option<(String, String)>, Problem> {
    let file_var = format!("{var}_FILE");
    let plain = env.get(var).filter(|v| !v.is_empty());
    let file = env.get(&file_var).filter(|v| !v.is_empty());
    match (plain, file) {
        (None, None) => Ok(None),
        (Some(value), None) => Ok(Some((var.to_string(), value.clone()))),
        (Some(_), Some(_)) => Err((
            file_var,
            format!("set either {var} or {var}_FILE, not both"),
        )),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| (file_var.clone(), format!("cannot read {path}: {e}")))?;
            let value = text.strip_suffix('\n').unwrap_or(&text);
            let value = value.strip_suffix('\r').unwrap_or(value);
            Ok(Some((file_var, value.to_string())))
        }
    }
}

/// The NAME in `HOOKD_SOURCE_<NAME>_SECRETS`: upper-cased, and any character that
/// cannot appear in an environment variable name becomes `_`.
pub fn env_name(source: &str) -> String {
    source
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

impl RawSettings {
    /// Whether a secret or token still comes from the configuration text (not
    /// replaced by the environment), other than the public development values.
    fn holds_secrets(&self) -> bool {
        let secret = |value: &String| !is_development_credential(value);
        let sources = self
            .sources
            .iter()
            .filter(|s| s.secrets_env.is_none())
            .flat_map(|s| &s.secrets);
        let forwards = self
            .forwards
            .iter()
            .filter(|f| f.secret_env.is_none())
            .filter_map(|f| f.secret.as_ref());
        let tokens = self
            .admin
            .tokens
            .iter()
            .filter(|t| t.from_env.is_none())
            .map(|t| &t.token);
        let metrics = self
            .metrics_token
            .iter()
            .filter(|_| self.metrics_token_env.is_none());
        let credentials = self.sources.iter().flat_map(|s| {
            CREDENTIAL_KEYS
                .iter()
                .chain(&reconcile::SECRET_KEYS)
                .filter(|key| !s.credentials_from_env.contains(key))
                .filter_map(|key| match s.scheme_keys.get(*key) {
                    Some(toml::Value::String(value)) => Some(value),
                    _ => None,
                })
        });
        sources
            .chain(forwards)
            .chain(tokens)
            .chain(metrics)
            .chain(credentials)
            .any(secret)
    }

    /// Section by section; the first problem found is the one reported.
    fn validate(self) -> Result<Settings, Problem> {
        let (listen, admin_listen) = listeners(self.listen, self.admin_listen)?;
        let max_body_bytes = positive("max_body_bytes", self.max_body_bytes, 1_048_576)?;
        let max_body_memory = body_memory(self.max_body_memory, max_body_bytes)?;
        let max_attempts = positive("max_attempts", self.max_attempts, 10)?;
        let purge_batch = positive("purge_batch", self.purge_batch, 1000)?;
        let pool_size = pool_size(self.pool_size)?;
        let dispatchers = positive("dispatchers", self.dispatchers, 2)?;
        let (retry_base, retry_cap) = retry_delays(self.retry_base, self.retry_cap)?;
        let (retention, key_retention) = retention_windows(self.retention, self.key_retention)?;
        let sources = unique_names("sources", self.sources, RawSource::validate, |s| &s.name)?;
        let forwards = unique_names(
            "forwards",
            self.forwards,
            |raw, i| raw.validate(i, &sources),
            |f| &f.name,
        )?;
        let admin_tokens = admin_tokens(self.admin.tokens)?;
        let metrics_token = metrics_token(self.metrics_token, self.metrics_token_env)?;
        let trusted_proxies = trusted_proxies(self.trusted_proxies)?;
        let gateway = self.gateway.validate(&[Some(listen), admin_listen])?;
        Ok(Settings {
            origin: String::new(),
            listen,
            admin_listen,
            max_body_bytes,
            max_body_memory,
            body_timeout: or(self.body_timeout, Duration::from_secs(10)),
            handler_timeout: or(self.handler_timeout, Duration::from_secs(5)),
            max_attempts,
            retry_base,
            retry_cap,
            retention,
            key_retention,
            purge_interval: or(self.purge_interval, Duration::from_secs(HOUR)),
            purge_batch,
            pool_size,
            dispatchers,
            shutdown_delay: self
                .shutdown_delay
                .map_or(Duration::from_secs(5), Duration::from),
            shutdown_grace: or(self.shutdown_grace, Duration::from_secs(30)),
            embedded_database: self.embedded_database,
            sources,
            forwards,
            gateway,
            admin_tokens,
            cookie_secure: self.admin.cookie_secure,
            database_url: self.database_url.map(Secret::new),
            metrics_token,
            trusted_proxies,
            development: self.development,
            secret_files: self.secret_files,
            file_holds_secrets: false,
        })
    }
}

/// `listen`, and `admin_listen`, which must be another address.
fn listeners(
    listen: Option<String>,
    admin: Option<String>,
) -> Result<(SocketAddr, Option<SocketAddr>), Problem> {
    let listen = socket_address("listen", listen.as_deref().unwrap_or("127.0.0.1:8080"))?;
    let admin = admin
        .map(|text| socket_address("admin_listen", &text))
        .transpose()?;
    if admin == Some(listen) {
        return Err((
            "admin_listen".into(),
            "must differ from listen (it separates the admin pages from the webhooks)".into(),
        ));
    }
    Ok((listen, admin))
}

/// `metrics_token`, from the file or `from_env`: not empty.
fn metrics_token(
    value: Option<String>,
    from_env: Option<String>,
) -> Result<Option<Secret>, Problem> {
    let Some(token) = value else {
        return Ok(None);
    };
    let key = from_env.unwrap_or_else(|| "metrics_token".into());
    if token.is_empty() {
        return Err((key, "must not be empty".into()));
    }
    if token.len() < MIN_TOKEN_LEN {
        log::warn!("{key}: shorter than 16 characters; easy to guess");
    }
    Ok(Some(Secret::new(token)))
}

/// `trusted_proxies`: address blocks, loopback's by default.
fn trusted_proxies(values: Option<Vec<String>>) -> Result<Vec<Cidr>, Problem> {
    let Some(values) = values else {
        return Ok(vec![Cidr::LOOPBACK_V4, Cidr::LOOPBACK_V6]);
    };
    values
        .iter()
        .enumerate()
        .map(|(i, text)| {
            text.parse()
                .map_err(|problem| (format!("trusted_proxies[{i}]"), problem))
        })
        .collect()
}

fn pool_size(value: Option<i64>) -> Result<usize, Problem> {
    let pool_size = positive("pool_size", value, 16)?;
    if pool_size < 4 {
        return Err((
            "pool_size".into(),
            format!("{pool_size} is too small: receiving, retries and the purge need 4 at least"),
        ));
    }
    Ok(pool_size)
}

/// `retry_base` and `retry_cap`, which must not be shorter.
fn retry_delays(
    base: Option<Positive>,
    cap: Option<Positive>,
) -> Result<(Duration, Duration), Problem> {
    let base = or(base, Duration::from_secs(1));
    let cap = or(cap, Duration::from_secs(HOUR));
    if cap < base {
        return Err((
            "retry_cap".into(),
            "must not be shorter than retry_base".into(),
        ));
    }
    Ok((base, cap))
}

/// `retention` and `key_retention`: each a day at least, and the keys kept as long
/// as the events.
fn retention_windows(
    events: Option<Positive>,
    keys: Option<Positive>,
) -> Result<(Duration, Duration), Problem> {
    let events = or(events, Duration::from_secs(30 * DAY));
    let keys = or(keys, Duration::from_secs(365 * DAY));
    for (key, value) in [("retention", events), ("key_retention", keys)] {
        if value < MIN_RETENTION {
            return Err((
                key.into(),
                format!(
                    "{} is below the 24h minimum (it must outlive providers' retries)",
                    crate::duration::format(value)
                ),
            ));
        }
    }
    if keys < events {
        return Err((
            "key_retention".into(),
            "must not be shorter than retention".into(),
        ));
    }
    Ok((events, keys))
}

fn admin_tokens(raws: Vec<RawToken>) -> Result<Vec<AdminToken>, Problem> {
    let mut tokens: Vec<AdminToken> = Vec::with_capacity(raws.len());
    for (i, raw) in raws.into_iter().enumerate() {
        let token = raw.validate(i, &tokens)?;
        tokens.push(token);
    }
    Ok(tokens)
}

impl RawToken {
    /// A token, checked against the ones before it.
    fn validate(self, index: usize, earlier: &[AdminToken]) -> Result<AdminToken, Problem> {
        let key = |field: &str| match &self.from_env {
            Some(var) => var.clone(),
            None => format!("admin.tokens[{index}].{field}"),
        };
        if self.name.trim().is_empty() {
            return Err((key("name"), "must not be empty".into()));
        }
        if self.token.is_empty() {
            return Err((key("token"), "must not be empty".into()));
        }
        if self.token.len() < MIN_TOKEN_LEN {
            log::warn!(
                "{}: shorter than 16 characters; easy to guess",
                key("token")
            );
        }
        if earlier.iter().any(|t| t.name == self.name) {
            return Err((key("name"), format!("{:?} is used twice", self.name)));
        }
        if earlier.iter().any(|t| t.token.expose() == self.token) {
            return Err((key("token"), "is the same as another token".into()));
        }
        Ok(AdminToken {
            key: key("token"),
            name: self.name,
            token: Secret::new(self.token),
            role: self.role,
        })
    }
}

impl RawSource {
    /// Relative paths in its provider's file keys, made relative to `folder`
    /// (the configuration file's), so the file reads the same from anywhere.
    fn resolve_paths(&mut self, folder: &Path) {
        let Some(provider) = providers::named(&self.scheme) else {
            return;
        };
        let resolve = |value: &mut toml::Value| {
            if let toml::Value::String(path) = value
                && Path::new(path.as_str()).is_relative()
            {
                *path = folder.join(path.as_str()).display().to_string();
            }
        };
        for key in provider.path_keys() {
            match self.scheme_keys.get_mut(*key) {
                Some(toml::Value::Array(items)) => items.iter_mut().for_each(resolve),
                Some(value) => resolve(value),
                None => {}
            }
        }
    }

    fn validate(self, index: usize) -> Result<Source, Problem> {
        let key = |field: &str| format!("sources[{index}].{field}");
        // The name is a URL path segment: unreserved characters only.
        check_name(
            key("name"),
            &self.name,
            &['-', '_', '.', '~'],
            "-, _, . and ~",
        )?;
        let mut scheme_keys = self.scheme_keys;
        let reconcile = Reconcile::take(&mut scheme_keys, &self.scheme, &key)?;
        let scheme = providers::configure(&self.scheme, scheme_keys, &key, &SOURCE_KEYS)?;
        let secrets_key = self.secrets_env.unwrap_or_else(|| key("secrets"));
        let secrets = secrets(&scheme, self.secrets, &secrets_key)?;
        let mut event_types = providers::of(&scheme).default_event_types();
        for (provider, kind) in self.event_types {
            if kind.trim().is_empty() {
                return Err((
                    key(&format!("event_types.{provider:?}")),
                    "the kind must not be empty".into(),
                ));
            }
            event_types.insert(provider, kind);
        }
        let fingerprint_ignore = self
            .fingerprint_ignore
            .unwrap_or_else(|| providers::of(&scheme).default_fingerprint_ignore());
        for (j, pointer) in fingerprint_ignore.iter().enumerate() {
            json_pointer(key(&format!("fingerprint_ignore[{j}]")), pointer)?;
        }
        for (j, pointer) in self.mask.iter().enumerate() {
            json_pointer(key(&format!("mask[{j}]")), pointer)?;
        }
        let mut mask = match self.mask_defaults {
            Some(false) => Vec::new(),
            _ => providers::of(&scheme).default_mask(),
        };
        mask.extend(self.mask);
        let dedupe_on_body = dedupe_on_body(&scheme, self.dedupe_on_body, &key)?;
        let tolerance = or(self.tolerance, providers::of(&scheme).default_tolerance());
        let expect_events_within = self.expect_events_within.map(Duration::from);
        if expect_events_within.is_some_and(|d| d < MIN_SILENCE) {
            return Err((
                key("expect_events_within"),
                "is shorter than 1m: a provider's pause between two events is not silence".into(),
            ));
        }
        Ok(Source {
            name: self.name,
            scheme,
            secrets,
            secrets_key,
            tolerance,
            event_types,
            fingerprint_ignore: fingerprint_ignore.into(),
            dedupe_on_body,
            mask,
            expect_events_within,
            reconcile,
        })
    }
}

/// `dedupe_on_body`: on by default where the scheme leaves the id or type
/// unsigned; refused elsewhere, where the signed id already rules out a copy
/// under another one.
fn dedupe_on_body(
    scheme: &Scheme,
    value: Option<bool>,
    key: &dyn Fn(&str) -> String,
) -> Result<bool, Problem> {
    if providers::of(scheme).leaves_identity_unsigned() {
        return Ok(value.unwrap_or(true));
    }
    match value {
        None => Ok(false),
        Some(_) => {
            // The schemes that never sign them (whatever their keys), then the
            // one whose keys say.
            let unsigned: Vec<String> = providers::REGISTRY
                .iter()
                .filter(|entry| entry.keys.is_empty() && entry.provider.leaves_identity_unsigned())
                .map(|entry| format!("\"{}\"", entry.provider.name()))
                .collect();
            Err((
                key("dedupe_on_body"),
                format!(
                    "only applies to sources whose event id or type is not signed (scheme {}, \
                     or \"hmac\" with id_header or type_header)",
                    unsigned.join(" or ")
                ),
            ))
        }
    }
}

/// A source's secrets: at least one, each usable as a key of its scheme (none
/// for a scheme that takes none).
fn secrets(scheme: &Scheme, values: Vec<String>, key: &str) -> Result<Vec<Secret>, Problem> {
    if !providers::of(scheme).takes_secrets() {
        if values.is_empty() {
            return Ok(Vec::new());
        }
        return Err((
            key.to_string(),
            format!(
                "does not apply to scheme {:?}, which verifies with the provider's certificates",
                scheme.name()
            ),
        ));
    }
    if values.is_empty() {
        return Err((key.to_string(), "needs at least one secret".into()));
    }
    let mut secrets = Vec::with_capacity(values.len());
    for (j, value) in values.into_iter().enumerate() {
        let secret = Secret::new(value);
        if secret.expose().is_empty() {
            return Err((format!("{key}[{j}]"), "is empty".into()));
        }
        scheme
            .key_bytes(&secret)
            .map_err(|problem| (format!("{key}[{j}]"), problem))?;
        secrets.push(secret);
    }
    Ok(secrets)
}

impl RawForward {
    fn validate(self, index: usize, sources: &[Source]) -> Result<Forward, Problem> {
        let key = |field: &str| format!("forwards[{index}].{field}");
        check_name(key("name"), &self.name, &['-', '_', '.'], "-, _ and .")?;
        let parsed = reqwest::Url::parse(&self.url).ok();
        if let Some(u) = parsed.as_ref().filter(|u| has_credentials(u)) {
            return Err((
                key("url"),
                format!(
                    "{} must not carry a user or password (user:pass@): the receiver \
                     authenticates hookd by the signature (secret)",
                    shown_url(u)
                ),
            ));
        }
        let url = parsed
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .ok_or_else(|| {
                let shown = if self.url.contains('@') {
                    String::new()
                } else {
                    format!("{:?} ", self.url)
                };
                (key("url"), format!("{shown}is not an http(s) URL"))
            })?;
        let secret_key = self.secret_env.unwrap_or_else(|| key("secret"));
        let secret = self.secret.map(Secret::new).ok_or_else(|| {
            (
                secret_key.clone(),
                format!(
                    "is required: set it here or in HOOKD_FORWARD_{}_SECRET (or its _FILE)",
                    env_name(&self.name)
                ),
            )
        })?;
        Scheme::Standard.key_bytes(&secret).map_err(|problem| {
            (
                secret_key,
                format!("{problem} (a Standard Webhooks secret)"),
            )
        })?;
        if self.kinds.is_empty() && self.types.is_empty() {
            return Err((
                key("kinds"),
                "set kinds and/or types (\"*\" for every event): it matches nothing".into(),
            ));
        }
        for (j, source) in self.sources.iter().enumerate() {
            if !sources.iter().any(|s| &s.name == source) {
                return Err((
                    format!("forwards[{index}].sources[{j}]"),
                    format!("{source:?} is not a configured source"),
                ));
            }
        }
        let timeout = or(self.timeout, Duration::from_secs(10));
        if timeout > MAX_FORWARD_TIMEOUT {
            return Err((
                key("timeout"),
                format!(
                    "{} is longer than the most a forward may wait, {}",
                    crate::duration::format(timeout),
                    crate::duration::format(MAX_FORWARD_TIMEOUT)
                ),
            ));
        }
        let concurrency = self.concurrency.unwrap_or(DEFAULT_FORWARD_CONCURRENCY);
        if !(1..=MAX_FORWARD_CONCURRENCY).contains(&concurrency) {
            return Err((
                key("concurrency"),
                format!("{concurrency} is not between 1 and {MAX_FORWARD_CONCURRENCY}"),
            ));
        }
        let open_after = self.open_after.unwrap_or(DEFAULT_OPEN_AFTER);
        let open_after = i32::try_from(open_after)
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| (key("open_after"), format!("{open_after} is not at least 1")))?;
        Ok(Forward {
            name: self.name,
            url,
            secret,
            kinds: self.kinds,
            types: self.types,
            sources: self.sources,
            timeout,
            concurrency: usize::try_from(concurrency).unwrap_or(1),
            retry_for: or(self.retry_for, DEFAULT_RETRY_FOR),
            open_after,
            paused: self.paused,
        })
    }
}

/// A URL with a user name or password in it (`user:pass@host`).
fn has_credentials(url: &reqwest::Url) -> bool {
    !url.username().is_empty() || url.password().is_some()
}

/// At least one whole body, so any single delivery can always be received.
fn body_memory(value: Option<i64>, max_body_bytes: usize) -> Result<usize, Problem> {
    let memory = positive("max_body_memory", value, 256 * 1024 * 1024)?;
    if memory < max_body_bytes {
        return Err((
            "max_body_memory".into(),
            format!(
                "{memory} is below max_body_bytes ({max_body_bytes}): no body that large could be received"
            ),
        ));
    }
    Ok(memory)
}

fn positive<T>(key: &str, value: Option<i64>, default: T) -> Result<T, Problem>
where
    T: TryFrom<i64>,
{
    match value {
        None => Ok(default),
        Some(v) if v > 0 => {
            T::try_from(v).map_err(|_| (key.to_string(), format!("{v} is too large")))
        }
        Some(v) => Err((key.to_string(), format!("{v} must be a positive number"))),
    }
}

/// A duration key's value, else its default.
fn or(value: Option<Positive>, default: Duration) -> Duration {
    value.map_or(default, Duration::from)
}

#[cfg(test)]
mod tests;
