//! A source's keys for asking its provider's API for the events it may never
//! have delivered (`hookd reconcile`, and `serve`'s pass with `reconcile = true`):
//! `api_key` (or PayPal's `client_id` and `client_secret`), `api_base`,
//! `reconcile`, `reconcile_interval`, `reconcile_window` and `reconcile_types`.
//! Each may come from
//! `HOOKD_SOURCE_<NAME>_<KEY>` (or its `_FILE`) instead of the file.

use std::time::Duration;

use crate::config_keys::{Listed, Problem};
pub use crate::providers::Lister;
use crate::signature::Secret;

/// The keys of this module, as a source's table and the environment name them.
pub const KEYS: [&str; 8] = [
    "api_key",
    "api_base",
    "client_id",
    "client_secret",
    "reconcile",
    "reconcile_interval",
    "reconcile_window",
    "reconcile_types",
];

/// Of `KEYS`, those a source of `scheme` takes: PayPal's API takes a client id
/// and secret, every other one a key.
pub fn keys_for(scheme: &str) -> Vec<&'static str> {
    let client = Lister::of(scheme).is_ok_and(Lister::takes_client);
    KEYS.into_iter()
        .filter(|key| match *key {
            "api_key" => !client,
            "client_id" | "client_secret" => client,
            _ => true,
        })
        .collect()
}

/// Of those, the ones holding a credential.
pub const SECRET_KEYS: [&str; 2] = ["api_key", "client_secret"];

/// The shortest `reconcile_interval`.
const MIN_INTERVAL: Duration = Duration::from_secs(10);
const DEFAULT_INTERVAL: Duration = Duration::from_secs(15 * 60);
/// How far back a pass looks unless the source says (or its provider keeps less).
const DEFAULT_WINDOW: Duration = Duration::from_secs(72 * 3600);
/// How much nearer than `key_retention` a reconcile pass stays: for clocks
/// that differ and for the pass's own length.
pub(super) const KEY_MARGIN: Duration = Duration::from_secs(3600);

/// How far back a reconcile pass may look while keys are kept for
/// `key_retention`: an event is received no earlier than the provider made
/// it, and its key is purged `key_retention` after it was received, so one
/// older than this may have been received, applied and purged — recovering
/// it would apply it again.
pub fn keys_reach(key_retention: Duration) -> Duration {
    key_retention.saturating_sub(KEY_MARGIN)
}

/// How hookd authenticates to the provider's API.
#[derive(Debug, Clone)]
pub enum Credential {
    /// A key sent as a bearer token.
    Bearer(Secret),
    /// OAuth 2 client credentials, exchanged for a token (PayPal's).
    Client { id: String, secret: Secret },
}

/// A source's reconciliation keys, checked.
#[derive(Debug, Clone, Default)]
pub struct Reconcile {
    /// Its provider's list API, when it has one.
    pub lister: Option<&'static Lister>,
    pub credential: Option<Credential>,
    /// Where the API is: the provider's own unless `api_base` says.
    pub api_base: Option<reqwest::Url>,
    /// `serve` runs a pass every `interval`.
    pub enabled: bool,
    pub interval: Duration,
    /// How far back a pass looks.
    pub window: Duration,
    /// The event types a pass takes (`reconcile_types`): those the provider
    /// sends this source. Every type unless set.
    pub types: Types,
}

/// `reconcile_types`: event types as the provider names them, each exact or
/// ending in `*` (every type that starts with what comes before it:
/// `payment_intent.*`). Empty: every type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Types(Vec<String>);

impl Types {
    /// Whether a pass takes an event of `event_type`.
    pub fn takes(&self, event_type: &str) -> bool {
        self.0.is_empty()
            || self
                .0
                .iter()
                .any(|pattern| match pattern.strip_suffix('*') {
                    Some(prefix) => event_type.starts_with(prefix),
                    None => event_type == pattern,
                })
    }

    /// The types taken, when each is exact (no `*`): what a list API that
    /// filters by type can be asked for. Empty otherwise.
    pub fn exact(&self) -> &[String] {
        match self.0.iter().any(|pattern| pattern.ends_with('*')) {
            true => &[],
            false => &self.0,
        }
    }

    /// The key's value: a list, or (from the environment) one text listing
    /// them.
    fn read(value: Option<toml::Value>, key: &dyn Fn(&str) -> String) -> Result<Self, Problem> {
        let name = "reconcile_types";
        let Some(value) = value else {
            return Ok(Types::default());
        };
        let listed: Listed = value
            .try_into()
            .map_err(|_| (key(name), "must be a list of event types".to_string()))?;
        let patterns = listed.items(key(name), "event type", "take every type")?;
        for (i, pattern) in patterns.iter().enumerate() {
            let at = || key(&format!("{name}[{i}]"));
            if pattern.is_empty() || pattern.chars().any(char::is_whitespace) {
                return Err((at(), format!("{pattern:?} is not an event type")));
            }
            if pattern
                .find('*')
                .is_some_and(|star| star != pattern.len() - 1)
            {
                return Err((
                    at(),
                    format!("{pattern:?}: `*` may only end a type (`payment_intent.*`)"),
                ));
            }
        }
        Ok(Types(patterns))
    }
}

impl Reconcile {
    /// Reads the keys of `KEYS` out of `table` (a source's own keys, with the
    /// environment's already in), checked for `scheme`.
    pub fn take(
        table: &mut toml::Table,
        scheme: &str,
        key: &dyn Fn(&str) -> String,
    ) -> Result<Self, Problem> {
        let mut text = |name: &str| -> Result<Option<String>, Problem> {
            match table.remove(name) {
                None => Ok(None),
                Some(toml::Value::String(s)) => Ok(Some(s)),
                Some(toml::Value::Boolean(b)) => Ok(Some(b.to_string())),
                Some(toml::Value::Integer(n)) => Ok(Some(format!("{n}s"))),
                Some(_) => Err((key(name), "must be a string".into())),
            }
        };
        let api_key = text("api_key")?;
        let api_base = text("api_base")?;
        let client_id = text("client_id")?;
        let client_secret = text("client_secret")?;
        let reconcile = text("reconcile")?;
        let interval = text("reconcile_interval")?;
        let window = text("reconcile_window")?;
        let types = Types::read(table.remove("reconcile_types"), key)?;
        let lister = Lister::of(scheme);
        let enabled = match reconcile.as_deref().map(str::trim) {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => {
                return Err((key("reconcile"), format!("{other:?} is not true or false")));
            }
        };
        let lister = match (lister, enabled) {
            (Ok(lister), _) => Some(lister),
            (Err(instead), true) => {
                return Err((
                    key("reconcile"),
                    format!("scheme {scheme:?} cannot reconcile: {instead}"),
                ));
            }
            (Err(instead), false) => {
                if types != Types::default() {
                    return Err((
                        key("reconcile_types"),
                        format!("scheme {scheme:?} cannot reconcile: {instead}"),
                    ));
                }
                None
            }
        };
        let credential = credential(lister, api_key, client_id, client_secret, key)?;
        let names_only = crate::providers::named(scheme).is_some_and(|p| p.names_only());
        if names_only && credential.is_none() {
            return Err((
                key("api_key"),
                format!(
                    "is required: a {} webhook only names its event, which hookd fetches \
                     from the provider's API with it",
                    lister.map_or(scheme, |l| l.title())
                ),
            ));
        }
        if enabled && credential.is_none() {
            let needs = if lister.is_some_and(Lister::takes_client) {
                "client_id and client_secret"
            } else {
                "api_key"
            };
            return Err((
                key("reconcile"),
                format!("needs {needs} (the provider's API is asked with it)"),
            ));
        }
        let interval = duration(interval, key("reconcile_interval"))?.unwrap_or(DEFAULT_INTERVAL);
        if interval < MIN_INTERVAL {
            return Err((key("reconcile_interval"), "must be at least 10s".into()));
        }
        let max = lister.map_or(DEFAULT_WINDOW, |l| l.max_window());
        let window = duration(window, key("reconcile_window"))?;
        if let (Some(window), Some(lister)) = (window, lister)
            && window > max
        {
            return Err((
                key("reconcile_window"),
                format!(
                    "{} is longer than {} lists events for ({})",
                    crate::duration::format(window),
                    lister.title(),
                    crate::duration::format(max)
                ),
            ));
        }
        let api_base = api_base
            .map(|text| base_url(&text).map_err(|problem| (key("api_base"), problem)))
            .transpose()?;
        Ok(Reconcile {
            lister,
            credential,
            api_base,
            enabled,
            interval,
            window: window.unwrap_or(DEFAULT_WINDOW.min(max)),
            types,
        })
    }

    /// The API's base URL: `api_base`, else the provider's own.
    pub fn base(&self) -> Option<reqwest::Url> {
        self.api_base
            .clone()
            .or_else(|| reqwest::Url::parse(self.lister?.default_base()).ok())
    }
}

fn credential(
    lister: Option<&'static Lister>,
    api_key: Option<String>,
    client_id: Option<String>,
    client_secret: Option<String>,
    key: &dyn Fn(&str) -> String,
) -> Result<Option<Credential>, Problem> {
    let empty = |name: &str| (key(name), "must not be empty".to_string());
    if let Some(lister) = lister.filter(|l| l.takes_client()) {
        if api_key.is_some() {
            return Err((
                key("api_key"),
                format!("{}'s API takes client_id and client_secret", lister.title()),
            ));
        }
        return match (client_id, client_secret) {
            (None, None) => Ok(None),
            (Some(id), Some(secret)) => {
                if id.trim().is_empty() {
                    return Err(empty("client_id"));
                }
                if secret.trim().is_empty() {
                    return Err(empty("client_secret"));
                }
                Ok(Some(Credential::Client {
                    id: id.trim().to_string(),
                    secret: Secret::new(secret.trim()),
                }))
            }
            (Some(_), None) => Err((key("client_secret"), "is needed with client_id".into())),
            (None, Some(_)) => Err((key("client_id"), "is needed with client_secret".into())),
        };
    }
    for (name, value) in [("client_id", &client_id), ("client_secret", &client_secret)] {
        if value.is_some() {
            return Err((
                key(name),
                format!("only applies to scheme {:?}", Lister::client_scheme()),
            ));
        }
    }
    match api_key {
        None => Ok(None),
        Some(value) if value.trim().is_empty() => Err(empty("api_key")),
        Some(value) => Ok(Some(Credential::Bearer(Secret::new(value.trim())))),
    }
}

fn duration(text: Option<String>, key: String) -> Result<Option<Duration>, Problem> {
    let Some(text) = text else {
        return Ok(None);
    };
    let d = crate::duration::parse(text.trim())
        .map_err(|problem| (key.clone(), problem.to_string()))?;
    if d.is_zero() {
        return Err((key, "must be longer than zero".into()));
    }
    Ok(Some(d))
}

/// `api_base`: https, or http to a loopback host; no credentials, query or fragment.
pub fn base_url(text: &str) -> Result<reqwest::Url, String> {
    let url = reqwest::Url::parse(text.trim()).map_err(|_| "is not a URL".to_string())?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not carry a user or password (the key is sent apart)".into());
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("must not carry a query or fragment".into());
    }
    let host = url.host_str().ok_or_else(|| "has no host".to_string())?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    match url.scheme() {
        "https" => Ok(url),
        "http" if loopback => Ok(url),
        "http" => Err(
            "must be https (http only to a loopback host): the key travels with each request"
                .into(),
        ),
        other => Err(format!("{other}: is not an https URL")),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::config::Settings;

    fn source(scheme: &str, keys: &str, env: &[(&str, &str)]) -> Result<Reconcile, String> {
        let secrets = match scheme {
            "paypal" => "webhook_id = \"WH1\"\ncertificates = []\n".to_string(),
            _ => "secrets = [\"whsec_a\"]\n".to_string(),
        };
        let text = format!("[[sources]]\nname = \"s\"\nscheme = \"{scheme}\"\n{secrets}{keys}\n");
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_toml("test.toml", &text, &env)
            .map(|s| s.sources[0].reconcile.clone())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_off_a_quarter_hour_and_three_days() {
        let r = source("stripe", "", &[]).expect("valid");
        assert!(!r.enabled && r.credential.is_none());
        assert_eq!(r.interval, Duration::from_secs(900));
        assert_eq!(r.window, Duration::from_secs(72 * 3600));
        assert_eq!(r.base().expect("base").as_str(), "https://api.stripe.com/");
    }

    #[test]
    fn every_key_can_come_from_the_environment_and_its_file() {
        let dir = std::env::temp_dir().join(format!("hookd-reconcile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("key");
        std::fs::write(&file, "rk_live_from_file\n").expect("key file");
        let r = source(
            "stripe",
            "",
            &[
                ("HOOKD_SOURCE_S_API_KEY_FILE", file.to_str().expect("path")),
                ("HOOKD_SOURCE_S_API_BASE", "http://127.0.0.1:9"),
                ("HOOKD_SOURCE_S_RECONCILE", "true"),
                ("HOOKD_SOURCE_S_RECONCILE_INTERVAL", "10s"),
                ("HOOKD_SOURCE_S_RECONCILE_WINDOW", "30d"),
            ],
        )
        .expect("valid");
        assert!(r.enabled);
        assert!(
            matches!(&r.credential, Some(Credential::Bearer(k)) if k.expose() == "rk_live_from_file")
        );
        assert_eq!(r.interval, Duration::from_secs(10));
        assert_eq!(r.window, Duration::from_secs(30 * 24 * 3600));
        assert_eq!(r.base().expect("base").as_str(), "http://127.0.0.1:9/");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_values_name_their_key_and_never_the_key_itself() {
        let refused = |scheme: &str, keys: &str| source(scheme, keys, &[]).expect_err("refused");
        let e = refused("stripe", "api_key = \"rk_1\"\nreconcile_interval = \"5s\"");
        assert!(
            e.contains("sources[0].reconcile_interval") && e.contains("10s"),
            "{e}"
        );
        let e = refused("stripe", "api_key = \"rk_1\"\nreconcile_window = \"31d\"");
        assert!(
            e.contains("reconcile_window") && e.contains("Stripe"),
            "{e}"
        );
        let e = refused("square", "api_key = \"rk_1\"\nreconcile_window = \"29d\"");
        assert!(e.contains("28d"), "{e}");
        assert!(source("paddle", "api_key = \"k\"\nreconcile_window = \"90d\"", &[]).is_ok());
        let e = refused("stripe", "reconcile = true");
        assert!(e.contains("needs api_key"), "{e}");
        let e = refused("paypal", "reconcile = true\nclient_id = \"c\"");
        assert!(e.contains("client_secret"), "{e}");
        let e = refused(
            "stripe",
            "api_key = \"rk_secret_1\"\napi_base = \"http://api.example.com\"",
        );
        assert!(
            e.contains("must be https") && !e.contains("rk_secret_1"),
            "{e}"
        );
        let e = refused("stripe", "api_base = \"https://user:pw@api.example.com\"");
        assert!(e.contains("user or password") && !e.contains("pw@"), "{e}");
        let e = refused("stripe", "client_id = \"c\"");
        assert!(e.contains("only applies to scheme \"paypal\""), "{e}");
        assert!(source("stripe", "api_base = \"http://localhost:8443\"", &[]).is_ok());
        assert!(source("stripe", "api_base = \"http://[::1]:8443\"", &[]).is_ok());
    }

    #[test]
    fn a_scheduled_pass_reaches_no_further_back_than_the_keys_are_kept() {
        let settings = |keys: &str| {
            let text = format!(
                "retention = \"1d\"\nkey_retention = \"2d\"\n[[sources]]\nname = \"s\"\n\
                 scheme = \"stripe\"\nsecrets = [\"whsec_a\"]\n{keys}\n"
            );
            Settings::from_toml("test.toml", &text, &HashMap::new()).map_err(|e| e.to_string())
        };
        // The default window (3 days) outlives keys kept 2 days.
        let e = settings("api_key = \"rk_1\"\nreconcile = true").expect_err("refused");
        assert!(
            e.contains("sources[0].reconcile_window") && e.contains("key_retention 2d"),
            "{e}"
        );
        let e = settings("api_key = \"rk_1\"\nreconcile = true\nreconcile_window = \"2d\"")
            .expect_err("refused: within the margin");
        assert!(e.contains("reconcile_window"), "{e}");
        assert!(
            settings("api_key = \"rk_1\"\nreconcile = true\nreconcile_window = \"47h\"").is_ok()
        );
        // No scheduled pass: nothing reaches back.
        assert!(settings("api_key = \"rk_1\"").is_ok());
    }

    #[test]
    fn reconcile_types_take_exact_types_and_prefixes_ending_in_a_star() {
        let r = source("stripe", "", &[]).expect("valid");
        assert!(r.types.takes("customer.created"), "unset: every type");
        let r = source(
            "stripe",
            "reconcile_types = [\"payment_intent.*\", \"charge.refunded\"]",
            &[],
        )
        .expect("valid");
        for (event_type, taken) in [
            ("payment_intent.succeeded", true),
            ("payment_intent.payment_failed", true),
            ("charge.refunded", true),
            ("charge.refunded.updated", false),
            ("charge.succeeded", false),
            ("payment_intent_x.created", false),
            ("customer.created", false),
        ] {
            assert_eq!(r.types.takes(event_type), taken, "{event_type}");
        }
        let everything = source("paddle", "reconcile_types = [\"*\"]", &[]).expect("valid");
        assert!(everything.types.takes("transaction.completed"));
        // From the environment: commas or lines.
        let r = source(
            "stripe",
            "",
            &[(
                "HOOKD_SOURCE_S_RECONCILE_TYPES",
                "payment_intent.*\ncharge.refunded",
            )],
        )
        .expect("valid");
        assert!(r.types.takes("charge.refunded") && !r.types.takes("charge.captured"));

        let refused = |keys: &str| source("stripe", keys, &[]).expect_err("refused");
        let e = refused("reconcile_types = []");
        assert!(
            e.contains("sources[0].reconcile_types") && e.contains("names no event type"),
            "{e}"
        );
        let e = refused("reconcile_types = [\"payment_*.succeeded\"]");
        assert!(
            e.contains("sources[0].reconcile_types[0]") && e.contains("end"),
            "{e}"
        );
        let e = refused("reconcile_types = [\"a.b\", \"\"]");
        assert!(e.contains("sources[0].reconcile_types[1]"), "{e}");
        let e = refused("reconcile_types = 5");
        assert!(e.contains("must be a list"), "{e}");
        let e = source("adyen", "reconcile_types = [\"AUTHORISATION\"]", &[]).expect_err("adyen");
        assert!(
            e.contains("sources[0].reconcile_types") && e.contains("cannot reconcile"),
            "{e}"
        );
    }

    #[test]
    fn providers_without_a_list_of_past_events_refuse_reconcile_saying_what_they_offer() {
        for (scheme, offers) in [
            ("adyen", "Customer Area"),
            ("razorpay", "Dashboard"),
            ("checkout", "by payment"),
            ("braintree", "transactions"),
        ] {
            let e = source(scheme, "reconcile = true\napi_key = \"k\"", &[]).expect_err(scheme);
            assert!(
                e.contains("sources[0].reconcile") && e.contains(offers) && !e.contains('\n'),
                "{e}"
            );
        }
    }
}
