//! Settings: the TOML file (`hookd.toml` by default), then environment overrides,
//! turned into typed values once. Every problem is reported as one line that names
//! the key, and unknown keys are errors so a typo cannot pass silently.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::signature::{Encoding, GenericHmac, Locator, Scheme, Secret};

/// Event kinds the built-in handlers understand.
pub const BUILTIN_KINDS: [&str; 4] = [
    "payment_succeeded",
    "payment_failed",
    "payment_refunded",
    "dispute_opened",
];

const STRIPE_DEFAULT_TYPES: [(&str, &str); 4] = [
    ("payment_intent.succeeded", "payment_succeeded"),
    ("payment_intent.payment_failed", "payment_failed"),
    ("charge.refunded", "payment_refunded"),
    ("charge.dispute.created", "dispute_opened"),
];

/// Retention windows must outlive every provider's retry window.
pub const MIN_RETENTION: Duration = Duration::from_secs(24 * 3600);

#[derive(Debug, thiserror::Error)]
#[error("config {origin}: {key}: {problem}")]
pub struct ConfigError {
    pub origin: String,
    pub key: String,
    pub problem: String,
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub listen: SocketAddr,
    pub max_body_bytes: usize,
    pub handler_timeout: Duration,
    pub max_attempts: i32,
    pub retry_base: Duration,
    pub retry_cap: Duration,
    pub retention: Duration,
    pub key_retention: Duration,
    pub purge_interval: Duration,
    pub purge_batch: i64,
    pub sources: Vec<Source>,
    pub admin_tokens: Vec<AdminToken>,
    /// `DATABASE_URL`; `None` means the embedded cluster.
    pub database_url: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Source {
    pub name: String,
    pub scheme: Scheme,
    pub secrets: Vec<Secret>,
    pub tolerance: Duration,
    /// Provider type → hookd kind, defaults included.
    pub event_types: HashMap<String, String>,
}

impl Source {
    /// hookd's kind for a provider type: the source's table, else a type that is
    /// already a built-in kind name stands for itself.
    pub fn kind_of(&self, event_type: &str) -> Option<&str> {
        if let Some(kind) = self.event_types.get(event_type) {
            return Some(kind);
        }
        BUILTIN_KINDS.iter().copied().find(|k| *k == event_type)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Viewer,
    Operator,
}

#[derive(Debug, Clone)]
pub struct AdminToken {
    pub name: String,
    pub token: Secret,
    pub role: Role,
}

impl Settings {
    pub fn source(&self, name: &str) -> Option<&Source> {
        self.sources.iter().find(|s| s.name == name)
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
        Self::from_toml(&origin, &text, &env)
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
        apply_env(&mut raw, env);
        raw.validate().map_err(|(key, problem)| fail(key, problem))
    }
}

fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
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
    max_body_bytes: Option<i64>,
    handler_timeout: Option<DurationValue>,
    max_attempts: Option<i64>,
    retry_base: Option<DurationValue>,
    retry_cap: Option<DurationValue>,
    retention: Option<DurationValue>,
    key_retention: Option<DurationValue>,
    purge_interval: Option<DurationValue>,
    purge_batch: Option<i64>,
    #[serde(default)]
    sources: Vec<RawSource>,
    #[serde(default)]
    admin: RawAdmin,
    #[serde(skip)]
    database_url: Option<String>,
}

/// A duration as written: `"5m"`, or a bare number of seconds.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum DurationValue {
    Text(String),
    Seconds(i64),
}

impl DurationValue {
    fn text(self) -> String {
        match self {
            DurationValue::Text(text) => text,
            DurationValue::Seconds(seconds) => format!("{seconds}s"),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    name: String,
    scheme: String,
    #[serde(default)]
    secrets: Vec<String>,
    tolerance: Option<DurationValue>,
    #[serde(default)]
    event_types: BTreeMap<String, String>,
    signature_header: Option<String>,
    signature_encoding: Option<String>,
    signature_prefix: Option<String>,
    id_header: Option<String>,
    id_pointer: Option<String>,
    type_header: Option<String>,
    type_pointer: Option<String>,
    timestamp_header: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAdmin {
    #[serde(default)]
    tokens: Vec<RawToken>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToken {
    name: String,
    token: String,
    role: String,
}

type Problem = (String, String);

fn apply_env(raw: &mut RawSettings, env: &HashMap<String, String>) {
    if let Some(url) = env.get("DATABASE_URL").filter(|v| !v.is_empty()) {
        raw.database_url = Some(url.clone());
    }
    if let Some(listen) = env.get("HOOKD_LISTEN").filter(|v| !v.is_empty()) {
        raw.listen = Some(listen.clone());
    }
    if let Some(token) = env.get("HOOKD_ADMIN_TOKEN").filter(|v| !v.is_empty()) {
        raw.admin.tokens.push(RawToken {
            name: "env".into(),
            token: token.clone(),
            role: "operator".into(),
        });
    }
    for (var, value) in env {
        let Some(upper) = var
            .strip_prefix("HOOKD_SOURCE_")
            .and_then(|rest| rest.strip_suffix("_SECRETS"))
        else {
            continue;
        };
        let Some(source) = raw.sources.iter_mut().find(|s| env_name(&s.name) == upper) else {
            // Not fatal (one environment may serve several configurations), but
            // never silent: it may be a typo.
            log::warn!("{var}: no configured source is named {upper}; ignored");
            continue;
        };
        source.secrets = value
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
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
    fn validate(self) -> Result<Settings, Problem> {
        let listen = self.listen.as_deref().unwrap_or("127.0.0.1:8080");
        let listen: SocketAddr = match listen.parse() {
            Ok(addr) => addr,
            // A host name (`localhost:8080`) is resolved once, at startup.
            Err(_) => std::net::ToSocketAddrs::to_socket_addrs(listen)
                .ok()
                .and_then(|mut addrs| addrs.next())
                .ok_or_else(|| {
                    (
                        "listen".to_string(),
                        format!("{listen:?} is not a host:port address"),
                    )
                })?,
        };
        let max_body_bytes = positive("max_body_bytes", self.max_body_bytes, 1_048_576)?;
        let max_attempts = positive("max_attempts", self.max_attempts, 10)?;
        let purge_batch = positive("purge_batch", self.purge_batch, 1000)?;
        let handler_timeout = duration("handler_timeout", self.handler_timeout, "5s")?;
        let retry_base = duration("retry_base", self.retry_base, "1s")?;
        let retry_cap = duration("retry_cap", self.retry_cap, "1h")?;
        if retry_cap < retry_base {
            return Err((
                "retry_cap".into(),
                "must not be shorter than retry_base".into(),
            ));
        }
        let retention = duration("retention", self.retention, "30d")?;
        let key_retention = duration("key_retention", self.key_retention, "365d")?;
        for (key, value) in [("retention", retention), ("key_retention", key_retention)] {
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
        if key_retention < retention {
            return Err((
                "key_retention".into(),
                "must not be shorter than retention".into(),
            ));
        }
        let purge_interval = duration("purge_interval", self.purge_interval, "1h")?;

        let mut sources: Vec<Source> = Vec::with_capacity(self.sources.len());
        for (i, raw) in self.sources.into_iter().enumerate() {
            let source = raw.validate(i)?;
            if sources.iter().any(|s| s.name == source.name) {
                return Err((
                    format!("sources[{i}].name"),
                    format!("{:?} is used twice", source.name),
                ));
            }
            sources.push(source);
        }

        let mut admin_tokens: Vec<AdminToken> = Vec::with_capacity(self.admin.tokens.len());
        for (i, raw) in self.admin.tokens.into_iter().enumerate() {
            let key = |field: &str| format!("admin.tokens[{i}].{field}");
            if raw.name.trim().is_empty() {
                return Err((key("name"), "must not be empty".into()));
            }
            if raw.token.is_empty() {
                return Err((key("token"), "must not be empty".into()));
            }
            if raw.token.len() < 16 {
                log::warn!(
                    "{}: shorter than 16 characters; easy to guess",
                    key("token")
                );
            }
            let role = match raw.role.as_str() {
                "viewer" => Role::Viewer,
                "operator" => Role::Operator,
                other => {
                    return Err((
                        key("role"),
                        format!("{other:?} is not one of viewer, operator"),
                    ));
                }
            };
            if admin_tokens.iter().any(|t| t.name == raw.name) {
                return Err((key("name"), format!("{:?} is used twice", raw.name)));
            }
            if admin_tokens.iter().any(|t| t.token.expose() == raw.token) {
                return Err((key("token"), "is the same as another token".into()));
            }
            admin_tokens.push(AdminToken {
                name: raw.name,
                token: Secret::new(raw.token),
                role,
            });
        }

        Ok(Settings {
            listen,
            max_body_bytes,
            handler_timeout,
            max_attempts,
            retry_base,
            retry_cap,
            retention,
            key_retention,
            purge_interval,
            purge_batch,
            sources,
            admin_tokens,
            database_url: self.database_url,
        })
    }
}

impl RawSource {
    fn validate(self, index: usize) -> Result<Source, Problem> {
        let key = |field: &str| format!("sources[{index}].{field}");
        // The name is a URL path segment: unreserved characters only.
        let name_ok = !self.name.is_empty()
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '~'));
        if !name_ok {
            return Err((
                key("name"),
                format!(
                    "{:?} must be non-empty and use only letters, digits, -, _, . and ~",
                    self.name
                ),
            ));
        }
        let generic_keys = [
            ("signature_header", self.signature_header.is_some()),
            ("signature_encoding", self.signature_encoding.is_some()),
            ("signature_prefix", self.signature_prefix.is_some()),
            ("id_header", self.id_header.is_some()),
            ("id_pointer", self.id_pointer.is_some()),
            ("type_header", self.type_header.is_some()),
            ("type_pointer", self.type_pointer.is_some()),
            ("timestamp_header", self.timestamp_header.is_some()),
        ];
        let scheme = match self.scheme.as_str() {
            "stripe" => Scheme::Stripe,
            "standard" | "svix" => Scheme::Standard,
            "github" => Scheme::Github,
            "hmac" => Scheme::Hmac(self.generic_hmac(index)?),
            other => {
                return Err((
                    key("scheme"),
                    format!("{other:?} is not one of stripe, standard, github, hmac"),
                ));
            }
        };
        if let (false, Some((field, _))) = (
            matches!(scheme, Scheme::Hmac(_)),
            generic_keys.iter().find(|(_, set)| *set),
        ) {
            return Err((key(field), "only applies to scheme \"hmac\"".into()));
        }
        if self.secrets.is_empty() {
            return Err((key("secrets"), "needs at least one secret".into()));
        }
        let mut secrets = Vec::with_capacity(self.secrets.len());
        for (j, value) in self.secrets.into_iter().enumerate() {
            let secret = Secret::new(value);
            if secret.expose().is_empty() {
                return Err((format!("sources[{index}].secrets[{j}]"), "is empty".into()));
            }
            scheme
                .key_bytes(&secret)
                .map_err(|problem| (format!("sources[{index}].secrets[{j}]"), problem))?;
            secrets.push(secret);
        }
        let tolerance = duration(&key("tolerance"), self.tolerance, "5m")?;
        let mut event_types: HashMap<String, String> = HashMap::new();
        if scheme == Scheme::Stripe {
            for (provider, kind) in STRIPE_DEFAULT_TYPES {
                event_types.insert(provider.into(), kind.into());
            }
        }
        for (provider, kind) in self.event_types {
            if kind.trim().is_empty() {
                return Err((
                    format!("sources[{index}].event_types.{provider:?}"),
                    "the kind must not be empty".into(),
                ));
            }
            // Allowed (its events are stored as `ignored`), but said out loud: it
            // may be a typo for a payment kind.
            if !BUILTIN_KINDS.contains(&kind.as_str()) {
                log::warn!(
                    "sources[{index}].event_types.{provider:?}: no built-in handler for kind \
                     {kind:?} ({}); these events will be stored as ignored",
                    BUILTIN_KINDS.join(", ")
                );
            }
            event_types.insert(provider, kind);
        }
        Ok(Source {
            name: self.name,
            scheme,
            secrets,
            tolerance,
            event_types,
        })
    }

    fn generic_hmac(&self, index: usize) -> Result<GenericHmac, Problem> {
        let key = |field: &str| format!("sources[{index}].{field}");
        let signature_header = self
            .signature_header
            .clone()
            .filter(|h| !h.trim().is_empty())
            .ok_or_else(|| {
                (
                    key("signature_header"),
                    "is required for scheme \"hmac\"".into(),
                )
            })?;
        let encoding = match self.signature_encoding.as_deref().unwrap_or("hex") {
            "hex" => Encoding::Hex,
            "base64" => Encoding::Base64,
            other => {
                return Err((
                    key("signature_encoding"),
                    format!("{other:?} is not one of hex, base64"),
                ));
            }
        };
        let locator = |what: &str, header: &Option<String>, pointer: &Option<String>| {
            let non_empty = |v: &Option<String>| v.clone().filter(|s| !s.is_empty());
            match (non_empty(header), non_empty(pointer)) {
                (Some(h), None) => Ok(Locator::Header(h)),
                (None, Some(p)) if p.starts_with('/') => Ok(Locator::Pointer(p)),
                (None, Some(p)) => Err((
                    key(&format!("{what}_pointer")),
                    format!("{p:?} is not a JSON pointer (it must start with /)"),
                )),
                (Some(_), Some(_)) => Err((
                    key(&format!("{what}_header")),
                    format!("set either {what}_header or {what}_pointer, not both"),
                )),
                (None, None) => Err((
                    key(&format!("{what}_header")),
                    format!("scheme \"hmac\" needs {what}_header or {what}_pointer"),
                )),
            }
        };
        Ok(GenericHmac {
            signature_header,
            encoding,
            prefix: self.signature_prefix.clone().unwrap_or_default(),
            id: locator("id", &self.id_header, &self.id_pointer)?,
            event_type: locator("type", &self.type_header, &self.type_pointer)?,
            timestamp_header: self.timestamp_header.clone().filter(|h| !h.is_empty()),
        })
    }
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

fn duration(key: &str, value: Option<DurationValue>, default: &str) -> Result<Duration, Problem> {
    let text = value.map_or_else(|| default.to_string(), DurationValue::text);
    let text = text.as_str();
    let parsed = crate::duration::parse(text).map_err(|problem| (key.to_string(), problem))?;
    if parsed.is_zero() {
        return Err((
            key.to_string(),
            format!("{text:?} must be longer than zero"),
        ));
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests;
