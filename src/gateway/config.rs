//! `[gateway]` and its `[[gateway.routes]]`: the raw TOML tables, read with the
//! rest of the configuration (unknown keys refused), and their validation into
//! typed routes. Each problem is one line naming the key (`gateway.routes[0].path`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::cidr::Cidr;
use crate::config_keys::{
    Names, Problem, check_name, json_pointer, one_of, socket_address, unique_names,
};
use crate::duration::{self, Positive};
use crate::idempotency::rules::{ADDED_HEADERS, Rules, ScopeRule};

/// A finished key is kept at least this long (a client's retries must find it).
pub const MIN_RETENTION: Duration = Duration::from_secs(3600);
const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 3600);
/// Waiting for upstream's answer: at least this, at most `MAX_TIMEOUT`.
const MIN_TIMEOUT: Duration = Duration::from_secs(1);
pub const MAX_TIMEOUT: Duration = Duration::from_secs(300);
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Whose key it is when a route does not say: the caller's credential.
const DEFAULT_SCOPE: &str = "header:Authorization";

/// The headers that belong to one connection (RFC 9110 §7.6.1) or to the
/// proxy, never passed on either way; `Connection` may name more.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
];

/// Whether a header belongs to one connection or to the proxy (`HOP_BY_HOP`,
/// `Proxy-*`): never passed on, kept or used to tell callers apart.
pub fn is_hop_by_hop(name: &str) -> bool {
    HOP_BY_HOP.contains(&name) || name.starts_with("proxy-")
}

/// The gateway: off unless `listen` is set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gateway {
    pub listen: Option<SocketAddr>,
    /// Set, hookd tells upstream who the client was (`X-Forwarded-*`,
    /// `X-Real-IP`), believing only the callers listed about their client;
    /// unset, a caller's headers go upstream as they are.
    pub trusted_proxies: Option<Vec<Cidr>>,
    /// Shared with each request that takes one.
    pub routes: Vec<Arc<Route>>,
}

/// The methods a route may take: the ones that are not idempotent by nature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Method {
    Post,
    Put,
    Patch,
    Delete,
}

impl Names for Method {
    const NAMES: &str = "POST, PUT, PATCH, DELETE";
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
        }
    }
}

/// Which request paths a route takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathMatch {
    /// This path only.
    Exact(String),
    /// `/orders/*`: every path below `/orders/` (held with its trailing `/`).
    Prefix(String),
}

impl PathMatch {
    fn matches(&self, path: &str) -> bool {
        match self {
            PathMatch::Exact(exact) => path == exact,
            PathMatch::Prefix(prefix) => {
                path.starts_with(prefix.as_str()) && path.len() > prefix.len()
            }
        }
    }

    /// Exact paths come before any prefix, longer prefixes before shorter ones.
    fn specificity(&self) -> (bool, usize) {
        match self {
            PathMatch::Exact(path) => (true, path.len()),
            PathMatch::Prefix(prefix) => (false, prefix.len()),
        }
    }

    /// The path as configured, for spans and the desk.
    pub fn pattern(&self) -> String {
        match self {
            PathMatch::Exact(path) => path.clone(),
            PathMatch::Prefix(prefix) => format!("{prefix}*"),
        }
    }
}

/// One `[[gateway.routes]]`: where matching requests go, and the key rules they
/// are held to.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    pub method: Method,
    pub path: PathMatch,
    /// `scheme://host[:port]` and a path prefix (no trailing `/`); the request's
    /// own path and query are appended.
    pub upstream: reqwest::Url,
    /// The rules shared with `hookd::idempotency`: name, scope, retention…
    pub rules: Rules,
    /// JSON pointers viewers see masked in stored bodies; `None`: all of it.
    pub mask: Option<Vec<String>>,
}

impl Route {
    pub fn name(&self) -> &str {
        &self.rules.route
    }

    /// The upstream URL of a request for `path_and_query`.
    pub fn upstream_url(&self, path_and_query: &str) -> String {
        let base = self.upstream.as_str().trim_end_matches('/');
        format!("{base}{path_and_query}")
    }
}

impl Gateway {
    /// The route a request is for: the exact path first, then the longest
    /// prefix, of the routes with its method. A path that could mean another
    /// once resolved (see `plain_path`) is no route's.
    pub fn route_for(&self, method: &str, path: &str) -> Option<&Arc<Route>> {
        if !plain_path(path) {
            return None;
        }
        self.routes
            .iter()
            .filter(|r| r.method.as_str() == method && r.path.matches(path))
            .max_by_key(|r| r.path.specificity())
    }

    pub fn route(&self, name: &str) -> Option<&Arc<Route>> {
        self.routes.iter().find(|r| r.name() == name)
    }
}

/// Whether `path` means what it says: no segment that is `.` or `..` and no
/// slash, backslash or NUL, once percent-decoded — nor one that is `.` or `..`
/// before a `;` (servers that take `;` as the start of a segment's parameters,
/// Tomcat and Jetty among them, resolve `/orders/..;/admin` to `/admin`). The
/// upstream URL is resolved (and most servers decode) after the route is
/// chosen, so `/orders/../admin` or `/orders/%2e%2e/admin` would match
/// `/orders/*` and reach `/admin` under another route's rules, or none.
fn plain_path(path: &str) -> bool {
    path.split('/').all(|segment| {
        // Most segments hold nothing that could decode to a dot or a slash.
        if !segment.contains(['.', '%', '\\']) {
            return true;
        }
        let decoded: Vec<u8> = percent_encoding::percent_decode_str(segment).collect();
        let name = decoded.split(|b| *b == b';').next().unwrap_or_default();
        name != b"." && name != b".." && !decoded.iter().any(|b| matches!(b, b'/' | b'\\' | 0))
    })
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGateway {
    listen: Option<String>,
    trusted_proxies: Option<Vec<String>>,
    #[serde(default)]
    routes: Vec<RawRoute>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    name: String,
    #[serde(default, deserialize_with = "one_of_opt")]
    method: Option<Method>,
    path: String,
    upstream: String,
    scope: Option<String>,
    required: Option<bool>,
    retention: Option<Positive>,
    timeout: Option<Positive>,
    resend_unknown: Option<bool>,
    #[serde(default)]
    fingerprint_ignore: Vec<String>,
    #[serde(default)]
    replay_headers: Vec<String>,
    mask: Option<Vec<String>>,
}

fn one_of_opt<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Method>, D::Error> {
    one_of(deserializer).map(Some)
}

impl RawGateway {
    /// `HOOKD_GATEWAY_LISTEN` replaces `listen`.
    pub fn apply_env(&mut self, env: &HashMap<String, String>) {
        if let Some(listen) = env.get("HOOKD_GATEWAY_LISTEN").filter(|v| !v.is_empty()) {
            self.listen = Some(listen.clone());
        }
    }

    /// The gateway, checked against the other listeners (it must differ from them).
    pub fn validate(self, others: &[Option<SocketAddr>]) -> Result<Gateway, Problem> {
        let listen = self
            .listen
            .map(|text| socket_address("gateway.listen", &text))
            .transpose()?;
        if let Some(addr) = listen
            && others.contains(&Some(addr))
            && addr.port() != 0
        {
            return Err((
                "gateway.listen".into(),
                format!("{addr} is already listen or admin_listen: the gateway needs its own"),
            ));
        }
        let trusted_proxies = self
            .trusted_proxies
            .map(|blocks| crate::config_keys::address_blocks("gateway.trusted_proxies", &blocks))
            .transpose()?;
        let routes = unique_names(
            "gateway.routes",
            self.routes,
            RawRoute::validate,
            Route::name,
        )?;
        let routes: Vec<Arc<Route>> = routes.into_iter().map(Arc::new).collect();
        for (i, route) in routes.iter().enumerate() {
            let same = routes[..i]
                .iter()
                .find(|r| r.method == route.method && r.path == route.path);
            if let Some(earlier) = same {
                return Err((
                    format!("gateway.routes[{i}].path"),
                    format!(
                        "{} {} is already route {:?}'s",
                        route.method.as_str(),
                        route.path.pattern(),
                        earlier.name()
                    ),
                ));
            }
        }
        Ok(Gateway {
            listen,
            trusted_proxies,
            routes,
        })
    }
}

impl RawRoute {
    fn validate(self, index: usize) -> Result<Route, Problem> {
        let key = |field: &str| format!("gateway.routes[{index}].{field}");
        check_name(key("name"), &self.name, &['-', '_', '.'], "-, _ and .")?;
        let path = path_match(&self.path).map_err(|problem| (key("path"), problem))?;
        let upstream = upstream(&self.upstream).map_err(|problem| (key("upstream"), problem))?;
        let scope = scope_rule(self.scope.as_deref().unwrap_or(DEFAULT_SCOPE))
            .map_err(|problem| (key("scope"), problem))?;
        let retention = self.retention.map_or(DEFAULT_RETENTION, Duration::from);
        if retention < MIN_RETENTION {
            return Err((
                key("retention"),
                format!(
                    "{} is below the 1h minimum (it must outlast the clients' retries)",
                    duration::format(retention)
                ),
            ));
        }
        let timeout = self.timeout.map_or(DEFAULT_TIMEOUT, Duration::from);
        if !(MIN_TIMEOUT..=MAX_TIMEOUT).contains(&timeout) {
            return Err((
                key("timeout"),
                format!(
                    "{} is not between {} and {}",
                    duration::format(timeout),
                    duration::format(MIN_TIMEOUT),
                    duration::format(MAX_TIMEOUT)
                ),
            ));
        }
        for (j, pointer) in self.fingerprint_ignore.iter().enumerate() {
            json_pointer(key(&format!("fingerprint_ignore[{j}]")), pointer)?;
        }
        for (j, pointer) in self.mask.iter().flatten().enumerate() {
            json_pointer(key(&format!("mask[{j}]")), pointer)?;
        }
        let mut replay_headers = Vec::with_capacity(self.replay_headers.len());
        for (j, name) in self.replay_headers.iter().enumerate() {
            let name =
                replay_header(name).map_err(|p| (key(&format!("replay_headers[{j}]")), p))?;
            replay_headers.push(name);
        }
        Ok(Route {
            method: self.method.unwrap_or(Method::Post),
            path,
            upstream,
            rules: Rules {
                route: self.name,
                scope,
                required: self.required.unwrap_or(true),
                retention,
                timeout,
                resend_unknown: self.resend_unknown.unwrap_or(true),
                fingerprint_ignore: Arc::from(self.fingerprint_ignore),
                replay_headers,
            },
            mask: self.mask,
        })
    }
}

/// `/payments` (exact) or `/orders/*` (every path below `/orders/`).
fn path_match(text: &str) -> Result<PathMatch, String> {
    let refuse = |why: &str| Err(format!("{text:?} {why}"));
    if !text.starts_with('/') {
        return refuse("must start with /");
    }
    if text.contains(['?', '#']) || text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return refuse("must be a path alone (no query, fragment or spaces)");
    }
    match text.strip_suffix('*') {
        Some(prefix) if prefix.ends_with('/') && !prefix.contains('*') => {
            Ok(PathMatch::Prefix(prefix.to_string()))
        }
        Some(_) => refuse("may hold * only as its last segment, as in \"/orders/*\""),
        None if text.contains('*') => {
            refuse("may hold * only as its last segment, as in \"/orders/*\"")
        }
        None => Ok(PathMatch::Exact(text.to_string())),
    }
}

/// An http(s) URL with a host, and neither credentials, query nor fragment.
fn upstream(text: &str) -> Result<reqwest::Url, String> {
    let url = reqwest::Url::parse(text)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
        .ok_or_else(|| format!("{text:?} is not an http(s) URL"))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(
            "must not carry a user or password (upstream authenticates the callers themselves)"
                .into(),
        );
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(
            "must not have a query or fragment (the request's own path and query are appended)"
                .into(),
        );
    }
    Ok(url)
}

/// `header:NAME` (the key is that header's value's) or `none`.
fn scope_rule(text: &str) -> Result<ScopeRule, String> {
    if text == "none" {
        return Ok(ScopeRule::None);
    }
    let bad = || format!("{text:?} is not \"header:NAME\" or \"none\"");
    let name = text.strip_prefix("header:").ok_or_else(bad)?.trim();
    let name = reqwest::header::HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad())?;
    if is_hop_by_hop(name.as_str()) || name == "idempotency-key" {
        return Err(format!(
            "{text:?} names a header that cannot tell callers apart"
        ));
    }
    if crate::proxy_headers::is_forwarding_header(name.as_str()) {
        return Err(format!(
            "{text:?} names a header proxies set, which a caller may write as it likes: \
             it cannot tell callers apart"
        ));
    }
    Ok(ScopeRule::Header(name.as_str().to_string()))
}

/// A header name kept with stored answers (lower case).
fn replay_header(text: &str) -> Result<String, String> {
    let name = reqwest::header::HeaderName::from_bytes(text.trim().as_bytes())
        .map_err(|_| format!("{text:?} is not a header name"))?;
    if is_hop_by_hop(name.as_str()) {
        return Err(format!(
            "{text:?} belongs to one connection; it is never passed on"
        ));
    }
    if ADDED_HEADERS.contains(&name.as_str()) {
        return Err(format!("{text:?} is one the gateway writes itself"));
    }
    Ok(name.as_str().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(toml: &str) -> Result<Gateway, Problem> {
        let raw: RawGateway = toml::from_str(toml).map_err(|e| ("toml".into(), e.to_string()))?;
        raw.validate(&[])
    }

    const ROUTE: &str = "[[routes]]\nname = \"payments\"\npath = \"/payments\"\nupstream = \"http://127.0.0.1:9000\"\n";

    #[test]
    fn trusted_proxies_are_unset_unless_written_and_each_block_is_checked() {
        assert_eq!(read(ROUTE).expect("valid").trusted_proxies, None);
        let none = read(&format!("trusted_proxies = []\n{ROUTE}")).expect("valid");
        assert_eq!(none.trusted_proxies, Some(vec![]));
        let error = read(&format!(
            "trusted_proxies = [\"10.0.0.0/8\", \"10.0.0.0/40\"]\n{ROUTE}"
        ))
        .expect_err("a bad block");
        assert_eq!(error.0, "gateway.trusted_proxies[1]");
    }

    #[test]
    fn a_route_takes_the_lead_engineers_defaults() {
        let gateway = read(&format!("listen = \"127.0.0.1:8090\"\n{ROUTE}")).expect("valid");
        let route = &gateway.routes[0];
        assert_eq!(route.method, Method::Post);
        assert_eq!(route.rules.scope, ScopeRule::Header("authorization".into()));
        assert!(route.rules.required && route.rules.resend_unknown);
        assert_eq!(route.rules.retention, DEFAULT_RETENTION);
        assert_eq!(route.rules.timeout, DEFAULT_TIMEOUT);
        assert_eq!(route.mask, None);
        assert_eq!(
            gateway.listen,
            Some("127.0.0.1:8090".parse().expect("addr"))
        );
    }

    #[test]
    fn each_bad_value_is_refused_under_its_key() {
        for (extra, key, says) in [
            ("retention = \"30m\"", "retention", "1h minimum"),
            ("timeout = \"6m\"", "timeout", "between 1s and 5m"),
            ("timeout = \"500ms\"", "timeout", "between 1s and 5m"),
            ("scope = \"cookie:x\"", "scope", "is not \"header:NAME\""),
            ("scope = \"header:Connection\"", "scope", "cannot tell"),
            (
                "fingerprint_ignore = [\"id\"]",
                "fingerprint_ignore[0]",
                "JSON pointer",
            ),
            (
                "replay_headers = [\"Transfer-Encoding\"]",
                "replay_headers[0]",
                "one connection",
            ),
            (
                "replay_headers = [\"Idempotent-Replayed\"]",
                "replay_headers[0]",
                "writes itself",
            ),
        ] {
            let error = read(&format!("{ROUTE}{extra}\n")).expect_err(extra);
            assert_eq!(error.0, format!("gateway.routes[0].{key}"), "{extra}");
            assert!(error.1.contains(says), "{extra}: {}", error.1);
        }
        for (path, says) in [
            ("payments", "start with /"),
            ("/a/*/b", "last segment"),
            ("/a*", "last segment"),
            ("/a?x=1", "no query"),
        ] {
            let text = ROUTE.replace("/payments", path);
            let error = read(&text).expect_err(path);
            assert_eq!(error.0, "gateway.routes[0].path");
            assert!(error.1.contains(says), "{path}: {}", error.1);
        }
        for upstream in ["ftp://x", "http://u:p@h", "http://h/?q=1", "nope"] {
            let text = ROUTE.replace("http://127.0.0.1:9000", upstream);
            assert_eq!(
                read(&text).expect_err(upstream).0,
                "gateway.routes[0].upstream"
            );
        }
        let method = read(&format!("{ROUTE}method = \"GET\"\n")).expect_err("GET");
        assert!(
            method.1.contains("is not one of POST, PUT, PATCH, DELETE"),
            "{}",
            method.1
        );
        let twice = read(&format!(
            "{ROUTE}{}",
            ROUTE.replace("payments\"\npath", "other\"\npath")
        ))
        .expect_err("twice");
        assert_eq!(twice.0, "gateway.routes[1].path");
    }

    #[test]
    fn the_exact_path_wins_then_the_longest_prefix() {
        let text = "[[routes]]\nname = \"all\"\npath = \"/orders/*\"\nupstream = \"http://a\"\n\
                    [[routes]]\nname = \"refunds\"\npath = \"/orders/refunds/*\"\nupstream = \"http://b\"\n\
                    [[routes]]\nname = \"one\"\npath = \"/orders/refunds/special\"\nupstream = \"http://c\"\n";
        let gateway = read(text).expect("valid");
        let name = |path: &str| gateway.route_for("POST", path).map(|r| r.name());
        assert_eq!(name("/orders/1"), Some("all"));
        assert_eq!(name("/orders/refunds/2"), Some("refunds"));
        assert_eq!(name("/orders/refunds/special"), Some("one"));
        assert_eq!(name("/orders/"), None);
        assert_eq!(name("/orders"), None);
        assert!(gateway.route_for("PUT", "/orders/1").is_none());
    }

    #[test]
    fn a_path_that_resolves_elsewhere_is_no_routes() {
        let text = "[[routes]]\nname = \"orders\"\npath = \"/orders/*\"\nupstream = \"http://a\"\n";
        let gateway = read(text).expect("valid");
        for path in [
            "/orders/../admin",
            "/orders/%2e%2e/admin",
            "/orders/%2E./admin",
            "/orders/./1",
            "/orders/a%2f..%2fadmin",
            "/orders/a%5c..%5cadmin",
            "/orders/a\\b",
            "/orders/..;/admin",
            "/orders/..%3b/admin",
            "/orders/.;x=1/1",
            "/orders/%2e%2e;jsessionid=1/admin",
            "/orders/a%00b",
        ] {
            assert!(gateway.route_for("POST", path).is_none(), "{path}");
        }
        // Dots inside a segment are a name like any other.
        assert!(gateway.route_for("POST", "/orders/v1.2...x").is_some());
        assert!(gateway.route_for("POST", "/orders/%41").is_some());
        assert!(gateway.route_for("POST", "/orders/a;b=1").is_some());
        assert!(gateway.route_for("POST", "/orders/...;x").is_some());
    }
}
