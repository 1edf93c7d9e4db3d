//! The validators: raw settings, as read, turned into typed [`Settings`], the
//! first problem found reported with its key.

use std::net::SocketAddr;
use std::time::Duration;

use super::load::{RawForward, RawSettings, RawSource, RawToken, SOURCE_KEYS};
use super::{
    AdminToken, Cidr, DAY, Forward, HOUR, MAX_FORWARD_TIMEOUT, MIN_RETENTION, MIN_TOKEN_LEN,
    Reconcile, Settings, Source, env_name, shown_url,
};
use crate::config_keys::{Problem, check_name, json_pointer, socket_address, unique_names};
use crate::duration::Positive;
use crate::providers;
use crate::providers::Scheme;
use crate::signature::Secret;
use crate::words::SourceName;

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

impl RawSettings {
    /// Section by section; the first problem found is the one reported.
    pub(super) fn validate(self) -> Result<Settings, Problem> {
        let (listen, admin_listen) = listeners(self.listen, self.admin_listen)?;
        let max_body_bytes = positive("max_body_bytes", self.max_body_bytes, 1_048_576)?;
        let max_body_memory = body_memory(self.max_body_memory, max_body_bytes)?;
        let max_attempts = positive("max_attempts", self.max_attempts, 10)?;
        let purge_batch = positive("purge_batch", self.purge_batch, 1000)?;
        let pool_size = pool_size(self.pool_size)?;
        let dispatchers = positive("dispatchers", self.dispatchers, 2)?;
        let http_workers = http_workers(self.http_workers)?;
        let (retry_base, retry_cap) = retry_delays(self.retry_base, self.retry_cap)?;
        let (retention, key_retention) = retention_windows(self.retention, self.key_retention)?;
        let sources = unique_names("sources", self.sources, RawSource::validate, |s| &s.name)?;
        reconcile_within_keys(&sources, key_retention)?;
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
            http_workers,
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
    crate::config_keys::address_blocks("trusted_proxies", &values)
}

/// The most `http_workers` may ask for: each is a thread with connections of
/// its own, and the listener's connection limit is shared out between them.
const MAX_HTTP_WORKERS: usize = 256;

fn http_workers(value: Option<i64>) -> Result<usize, Problem> {
    let workers = positive("http_workers", value, default_http_workers())?;
    if workers > MAX_HTTP_WORKERS {
        return Err((
            "http_workers".into(),
            format!("{workers} is more than {MAX_HTTP_WORKERS} threads"),
        ));
    }
    Ok(workers)
}

/// Half the cores, one at least. The database most often shares the machine
/// and spends more of it on a delivery than hookd does: a worker thread
/// beyond hookd's share of the cores only adds its own wake-ups, sleeps and
/// switches to every delivery's path (measured on two cores, one worker
/// stores more a second than two, at less CPU a delivery).
fn default_http_workers() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    (cores / 2).max(1)
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

/// A scheduled reconcile pass looks back no further than the keys are kept
/// (`keys_reach`).
fn reconcile_within_keys(sources: &[Source], key_retention: Duration) -> Result<(), Problem> {
    let reach = super::keys_reach(key_retention);
    for (i, source) in sources.iter().enumerate() {
        if source.reconcile.enabled && source.reconcile.window > reach {
            return Err((
                format!("sources[{i}].reconcile_window"),
                format!(
                    "{} reaches past the keys kept (key_retention {}, less {}): an event \
                     older than its purged key would be recovered and applied again",
                    crate::duration::format(source.reconcile.window),
                    crate::duration::format(key_retention),
                    crate::duration::format(super::reconcile::KEY_MARGIN)
                ),
            ));
        }
    }
    Ok(())
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
    fn validate(self, index: usize) -> Result<Source, Problem> {
        let from_env = self.keys_from_env;
        // A key the environment set is named as its variable (`…_URL_TOKENS_FILE[1]`).
        let key = |field: &str| {
            for (set, var) in &from_env {
                if let Some(rest) = field.strip_prefix(set)
                    && (rest.is_empty() || rest.starts_with('['))
                {
                    return format!("{var}{rest}");
                }
            }
            format!("sources[{index}].{field}")
        };
        // The name is a URL path segment: unreserved characters only.
        check_name(
            key("name"),
            &self.name,
            &['-', '_', '.', '~'],
            "-, _, . and ~",
        )?;
        let mut scheme_keys = self.scheme_keys;
        let reconcile = Reconcile::take(&mut scheme_keys, &self.scheme, &key)?;
        // What an unknown key's message lists: every key this source takes.
        let mut known = SOURCE_KEYS.to_vec();
        known.extend(super::reconcile::keys_for(&self.scheme));
        let scheme = providers::configure(&self.scheme, scheme_keys, &key, &known)?;
        let secrets_key = self.secrets_env.unwrap_or_else(|| key("secrets"));
        let secrets = secrets(&scheme, self.secrets, &secrets_key)?;
        let mut event_types = scheme.provider().default_event_types();
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
            .unwrap_or_else(|| scheme.provider().default_fingerprint_ignore());
        for (j, pointer) in fingerprint_ignore.iter().enumerate() {
            json_pointer(key(&format!("fingerprint_ignore[{j}]")), pointer)?;
        }
        for (j, pointer) in self.mask.iter().enumerate() {
            json_pointer(key(&format!("mask[{j}]")), pointer)?;
        }
        let mut mask = match self.mask_defaults {
            Some(false) => Vec::new(),
            _ => scheme.provider().default_mask(),
        };
        mask.extend(self.mask);
        let dedupe_on_body = dedupe_on_body(&scheme, self.dedupe_on_body, &key)?;
        let tolerance = or(self.tolerance, scheme.provider().default_tolerance());
        let expect_events_within = self.expect_events_within.map(Duration::from);
        if expect_events_within.is_some_and(|d| d < MIN_SILENCE) {
            return Err((
                key("expect_events_within"),
                "is shorter than 1m: a provider's pause between two events is not silence".into(),
            ));
        }
        Ok(Source {
            name: SourceName::configured(&self.name),
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
    if scheme.provider().leaves_identity_unsigned() {
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
    let provider = scheme.provider();
    if !provider.takes_secrets() {
        if values.is_empty() {
            return Ok(Vec::new());
        }
        let proof = if provider.capabilities().names_only {
            "fetches each event from the provider's API with api_key"
        } else {
            "verifies with the provider's certificates"
        };
        return Err((
            key.to_string(),
            format!(
                "does not apply to scheme {:?}, which {proof}",
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
            .map_err(|problem| (format!("{key}[{j}]"), problem.to_string()))?;
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
