//! Settings: the TOML file (`hookd.toml` by default), then environment overrides,
//! turned into typed values once. Every problem is reported as one line that names
//! the key, and unknown keys are errors so a typo cannot pass silently.
//!
//! The model lives here; the rest is split by job: `load` reads the TOML file
//! (its raw serde structs), `env` lays the `HOOKD_*` environment over it,
//! `validate` turns it into these types, and `exposure` holds what `serve`
//! refuses beyond loopback.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

mod env;
mod exposure;
mod live;
mod load;
mod reconcile;
mod validate;

pub use crate::cidr::Cidr;
pub use env::env_name;
pub use live::LiveSettings;
pub use reconcile::{Credential, Lister, Reconcile, keys_reach};

use crate::config_keys::Names;
use crate::domain::PaymentKind;
use crate::providers;
use crate::providers::{Scheme, Verifier};
use crate::signature::Secret;
use crate::words::SourceName;

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
    /// Worker threads of the webhook listener, and of the gateway's.
    pub http_workers: usize,
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
    /// Checked here (a URL path segment), so an event can carry it unchecked.
    pub name: SourceName,
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
        if let Some(kind) = self.scheme.provider().kind_of(event_type, payload) {
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
                .any(|s| s.scheme.provider().development_credential().is_some())
    }
}

#[cfg(test)]
mod tests;
