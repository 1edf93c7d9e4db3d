//! Reading the TOML file: the raw serde structs, as written, with the location
//! of any problem, then the environment overlay and validation.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::env::apply_env;
use super::{ConfigError, Role, Settings, is_development_credential, reconcile};
use crate::config_keys::{one_line, one_of};
use crate::duration::{Positive, ZeroOrMore};
use crate::providers;

impl Settings {
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
pub(super) struct RawSettings {
    pub(super) listen: Option<String>,
    pub(super) admin_listen: Option<String>,
    pub(super) max_body_bytes: Option<i64>,
    pub(super) max_body_memory: Option<i64>,
    pub(super) body_timeout: Option<Positive>,
    pub(super) handler_timeout: Option<Positive>,
    pub(super) max_attempts: Option<i64>,
    pub(super) retry_base: Option<Positive>,
    pub(super) retry_cap: Option<Positive>,
    pub(super) retention: Option<Positive>,
    pub(super) key_retention: Option<Positive>,
    pub(super) purge_interval: Option<Positive>,
    pub(super) purge_batch: Option<i64>,
    pub(super) pool_size: Option<i64>,
    pub(super) dispatchers: Option<i64>,
    pub(super) http_workers: Option<i64>,
    pub(super) shutdown_delay: Option<ZeroOrMore>,
    pub(super) shutdown_grace: Option<Positive>,
    #[serde(default)]
    pub(super) embedded_database: bool,
    pub(super) metrics_token: Option<String>,
    pub(super) trusted_proxies: Option<Vec<String>>,
    #[serde(default)]
    pub(super) development: bool,
    #[serde(default)]
    pub(super) sources: Vec<RawSource>,
    #[serde(default)]
    pub(super) forwards: Vec<RawForward>,
    #[serde(default)]
    pub(super) admin: RawAdmin,
    #[serde(default)]
    pub(super) gateway: crate::gateway::config::RawGateway,
    #[serde(skip)]
    pub(super) database_url: Option<String>,
    /// The environment variable that set `metrics_token`, if one did.
    #[serde(skip)]
    pub(super) metrics_token_env: Option<String>,
    /// The `*_FILE` files secrets were read from.
    #[serde(skip)]
    pub(super) secret_files: Vec<PathBuf>,
}

/// A `[[sources]]` table. Its `scheme` is the tag of [`Scheme`], and the keys only
/// the `hmac` variant takes share the table with the rest: serde's own internal
/// tagging would buffer the table and lose the key of any error inside it, so
/// they are collected here and read by [`SchemeName::with_keys`].
#[derive(Debug, Deserialize)]
pub(super) struct RawSource {
    pub(super) name: String,
    pub(super) scheme: String,
    #[serde(default)]
    pub(super) secrets: Vec<String>,
    pub(super) tolerance: Option<Positive>,
    #[serde(default)]
    pub(super) event_types: BTreeMap<String, String>,
    pub(super) fingerprint_ignore: Option<Vec<String>>,
    pub(super) dedupe_on_body: Option<bool>,
    #[serde(default)]
    pub(super) mask: Vec<String>,
    pub(super) mask_defaults: Option<bool>,
    pub(super) expect_events_within: Option<Positive>,
    /// Every other key: the scheme's own, or unknown ones.
    #[serde(flatten)]
    pub(super) scheme_keys: toml::Table,
    /// The environment variable that replaced `secrets`, if one did.
    #[serde(skip)]
    pub(super) secrets_env: Option<String>,
    /// The credential and reconcile keys the environment set, each
    /// with the variable it came from, which messages about it then name.
    #[serde(skip)]
    pub(super) keys_from_env: Vec<(&'static str, String)>,
}

/// The keys of a scheme that hold a credential: each may come from
/// `HOOKD_SOURCE_<NAME>_<KEY>` (or its `_FILE`) instead of the file.
pub(super) const CREDENTIAL_KEYS: [&str; 3] = ["basic_auth", "authorization", "url_tokens"];

/// The keys every source takes, whatever its scheme (each provider adds its own).
pub(super) const SOURCE_KEYS: [&str; 10] = [
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
pub(super) struct RawForward {
    pub(super) name: String,
    pub(super) url: String,
    pub(super) secret: Option<String>,
    #[serde(default)]
    pub(super) kinds: Vec<String>,
    #[serde(default)]
    pub(super) types: Vec<String>,
    #[serde(default)]
    pub(super) sources: Vec<String>,
    pub(super) timeout: Option<Positive>,
    pub(super) concurrency: Option<i64>,
    pub(super) retry_for: Option<Positive>,
    pub(super) open_after: Option<i64>,
    #[serde(default)]
    pub(super) paused: bool,
    /// The environment variable that set `secret`, if one did.
    #[serde(skip)]
    pub(super) secret_env: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdmin {
    #[serde(default)]
    pub(super) tokens: Vec<RawToken>,
    pub(super) cookie_secure: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawToken {
    pub(super) name: String,
    pub(super) token: String,
    #[serde(deserialize_with = "one_of")]
    pub(super) role: Role,
    /// The environment variable it came from, if it did.
    #[serde(skip)]
    pub(super) from_env: Option<String>,
}

impl RawSettings {
    /// Whether a secret or token still comes from the configuration text (not
    /// replaced by the environment), other than the public development values.
    pub(super) fn holds_secrets(&self) -> bool {
        let secret = |value: &str| !is_development_credential(value);
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
                .filter(|key| !s.keys_from_env.iter().any(|(set, _)| set == *key))
                .filter_map(|key| s.scheme_keys.get(*key))
                .flat_map(|value| match value {
                    toml::Value::String(value) => vec![value.as_str()],
                    // A list of them (Mollie's `url_tokens`).
                    toml::Value::Array(values) => {
                        values.iter().filter_map(toml::Value::as_str).collect()
                    }
                    _ => Vec::new(),
                })
        });
        sources
            .chain(forwards)
            .chain(tokens)
            .chain(metrics)
            .map(String::as_str)
            .chain(credentials)
            .any(secret)
    }
}

impl RawSource {
    /// Relative paths in its provider's file keys, made relative to `folder`
    /// (the configuration file's), so the file reads the same from anywhere.
    pub(super) fn resolve_paths(&mut self, folder: &Path) {
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
}
