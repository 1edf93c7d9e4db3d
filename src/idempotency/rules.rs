//! The rules themselves, with no database: what a key is, whose it is, what a
//! request refused by them is told, and what an answer does to its key. The
//! configuration reads routes into [`Rules`]; `http::error` gives each
//! [`Refusal`] its status.

use std::sync::Arc;
use std::time::Duration;

use actix_web::http::header::HeaderMap;
use sha2::{Digest, Sha256};

/// The request header that carries the client's key.
pub const KEY_HEADER: &str = "idempotency-key";
/// Sent upstream (and back to the client): the operation's stable id.
pub const OPERATION_HEADER: &str = "idempotency-operation";
/// On a stored answer given again.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";
/// On a copy of an answer whose body was too large to keep.
pub const BODY_OMITTED_HEADER: &str = "idempotent-body-omitted";
/// The headers hookd writes on answers itself.
pub const ADDED_HEADERS: [&str; 3] = [OPERATION_HEADER, REPLAYED_HEADER, BODY_OMITTED_HEADER];
/// The longest key taken.
pub const MAX_KEY_LEN: usize = 255;
/// The largest body kept for copies; a larger one is given whole to the first
/// caller only (copies get its status and headers).
pub const MAX_STORED_BODY: usize = 1024 * 1024;
/// Added to the timeout for a claim's lock: past it, the claim's instance is
/// taken for dead.
pub const TAKEOVER_AFTER_TIMEOUT: Duration = Duration::from_secs(30);
/// What a copy that arrives while the first runs is told to wait, in seconds.
pub const RETRY_AFTER_SECONDS: u64 = 1;

/// Whose key it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScopeRule {
    /// The value of this header (lower case): the caller's credential, hashed.
    Header(String),
    /// Every caller shares one space of keys.
    None,
}

/// The rules of one route (a gateway route, or a wrapped handler).
#[derive(Debug, Clone, PartialEq)]
pub struct Rules {
    /// The route's name: a metric label, a desk filter and part of each scope.
    pub route: String,
    pub scope: ScopeRule,
    /// No key: refused (`true`) or run unkeyed.
    pub required: bool,
    /// How long a finished key is kept.
    pub retention: Duration,
    /// How long the work may take (upstream's answer, or the handler).
    pub timeout: Duration,
    /// A copy of an `unknown` key runs again with the same operation id.
    pub resend_unknown: bool,
    /// JSON pointers left out of the request's fingerprint.
    pub fingerprint_ignore: Arc<[String]>,
    /// Headers (lower case) kept with a stored answer beside `Content-Type` and `Location`.
    pub replay_headers: Vec<String>,
}

/// The headers every stored answer keeps (lower case): the body's type and
/// encoding (stored bytes an upstream compressed mean nothing to a copy
/// without it) and `Location`. Nothing in them is a secret, so viewers of the
/// desk see them as stored.
pub const ALWAYS_KEPT: [&str; 3] = ["content-type", "content-encoding", "location"];

impl Rules {
    /// The rules' defaults for a route of this name (as the gateway's).
    pub fn new(route: impl Into<String>) -> Self {
        Rules {
            route: route.into(),
            scope: ScopeRule::Header("authorization".into()),
            required: true,
            retention: Duration::from_secs(24 * 3600),
            timeout: Duration::from_secs(30),
            resend_unknown: true,
            fingerprint_ignore: Arc::from(Vec::new()),
            replay_headers: Vec::new(),
        }
    }

    /// A claim's lock: past it, the claim's instance is taken for dead.
    pub fn lock(&self) -> Duration {
        self.timeout + TAKEOVER_AFTER_TIMEOUT
    }

    /// Whether a stored answer keeps this header (lower case): those it
    /// always keeps (`ALWAYS_KEPT`) and the route's `replay_headers`.
    pub fn keeps_header(&self, name: &str) -> bool {
        ALWAYS_KEPT.contains(&name) || self.replay_headers.iter().any(|h| h == name)
    }
}

/// Why a keyed request is answered by hookd rather than by the work. Each has
/// its `error` code; `http::error` gives each its status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    NoRoute,
    KeyMissing,
    KeyInvalid,
    ScopeMissing,
    /// The first request with the key is still running.
    InProgress,
    /// The key was used for another request.
    Reused,
    /// The key's outcome is unknown and the route does not resend.
    OutcomeUnknown,
    /// Nothing reached upstream; the key is released.
    UpstreamUnavailable,
    /// Sent, but no answer came; the key is `unknown`.
    UpstreamOutcomeUnknown,
}

impl Refusal {
    pub fn code(self) -> &'static str {
        match self {
            Refusal::NoRoute => "no_route",
            Refusal::KeyMissing => "idempotency_key_missing",
            Refusal::KeyInvalid => "idempotency_key_invalid",
            Refusal::ScopeMissing => "scope_missing",
            Refusal::InProgress => "request_in_progress",
            Refusal::Reused => "idempotency_key_reused",
            Refusal::OutcomeUnknown => "outcome_unknown",
            Refusal::UpstreamUnavailable => "upstream_unavailable",
            Refusal::UpstreamOutcomeUnknown => "upstream_outcome_unknown",
        }
    }

    /// The outcome `hookd_gateway_requests_total` counts it under.
    pub fn outcome(self) -> Outcome {
        match self {
            Refusal::KeyMissing | Refusal::ScopeMissing | Refusal::NoRoute => Outcome::MissingKey,
            Refusal::KeyInvalid => Outcome::InvalidKey,
            Refusal::InProgress => Outcome::InProgress,
            Refusal::Reused => Outcome::Reused,
            Refusal::OutcomeUnknown | Refusal::UpstreamOutcomeUnknown => Outcome::Unknown,
            Refusal::UpstreamUnavailable => Outcome::UpstreamError,
        }
    }
}

/// How a request through the gateway ended, as `hookd_gateway_requests_total`
/// counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Sent upstream, and its answer given (stored when keyed).
    Sent,
    /// A stored answer given again.
    Replayed,
    InProgress,
    Reused,
    MissingKey,
    InvalidKey,
    /// Nothing reached upstream, or it answered 5xx, 408 or 429 (released).
    UpstreamError,
    /// Sent without an answer, or a copy of such a key refused.
    Unknown,
}

impl Outcome {
    pub const ALL: [Outcome; 8] = [
        Outcome::Sent,
        Outcome::Replayed,
        Outcome::InProgress,
        Outcome::Reused,
        Outcome::MissingKey,
        Outcome::InvalidKey,
        Outcome::UpstreamError,
        Outcome::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Sent => "sent",
            Outcome::Replayed => "replayed",
            Outcome::InProgress => "in_progress",
            Outcome::Reused => "reused",
            Outcome::MissingKey => "missing_key",
            Outcome::InvalidKey => "invalid_key",
            Outcome::UpstreamError => "upstream_error",
            Outcome::Unknown => "unknown",
        }
    }
}

/// The key of a header value: 1 to 255 visible ASCII characters (0x21–0x7E),
/// or a Structured-Field string (`"…"`, as the draft writes it) whose content
/// is such a key.
pub fn parse_key(value: &[u8]) -> Result<String, Refusal> {
    let key = match value.strip_prefix(b"\"") {
        Some(quoted) => unquote(quoted).ok_or(Refusal::KeyInvalid)?,
        None => value.to_vec(),
    };
    let visible = key.iter().all(|b| (0x21..=0x7e).contains(b));
    if key.is_empty() || key.len() > MAX_KEY_LEN || !visible {
        return Err(Refusal::KeyInvalid);
    }
    String::from_utf8(key).map_err(|_| Refusal::KeyInvalid)
}

/// The content of a Structured-Field string after its opening quote: `\"` and
/// `\\` escapes, a closing quote at the very end.
fn unquote(rest: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(rest.len());
    let mut bytes = rest.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => match bytes.next() {
                Some(&escaped @ (b'"' | b'\\')) => out.push(escaped),
                _ => return None,
            },
            b'"' => return bytes.next().is_none().then_some(out),
            b => out.push(b),
        }
    }
    None
}

/// The key a request carries, if any: one `Idempotency-Key` header.
pub fn key_of(headers: &HeaderMap) -> Result<Option<String>, Refusal> {
    let mut values = headers.get_all(KEY_HEADER);
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(Refusal::KeyInvalid);
    }
    parse_key(first.as_bytes()).map(Some)
}

/// The scope part of a key's identity: SHA-256 of the scope header's value (the
/// value itself is never stored), or nothing for `none`.
pub fn scope_of(rule: &ScopeRule, headers: &HeaderMap) -> Result<Vec<u8>, Refusal> {
    match rule {
        ScopeRule::None => Ok(Vec::new()),
        ScopeRule::Header(name) => {
            let mut hash = Sha256::new();
            let mut found = false;
            for value in headers.get_all(name.as_str()) {
                if found {
                    hash.update(b"\n");
                }
                hash.update(value.as_bytes());
                found = true;
            }
            if found {
                Ok(hash.finalize().to_vec())
            } else {
                Err(Refusal::ScopeMissing)
            }
        }
    }
}

/// The key and scope a request is held to under `rules`: `None` when it has no
/// key and the rules let it run unkeyed.
pub fn key_and_scope(
    rules: &Rules,
    headers: &HeaderMap,
) -> Result<Option<(String, Vec<u8>)>, Refusal> {
    match key_of(headers)? {
        Some(key) => Ok(Some((key, scope_of(&rules.scope, headers)?))),
        None if rules.required => Err(Refusal::KeyMissing),
        None => Ok(None),
    }
}

/// What becomes of a key once the work answered with this status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// The answer is the request's: stored, given to copies.
    Store,
    /// The answer says nothing was done, or asks to come again: the key is
    /// released and a retry runs again.
    Release,
}

pub fn settle(status: u16) -> Settle {
    if status >= 500 || status == 408 || status == 429 {
        Settle::Release
    } else {
        Settle::Store
    }
}

/// `op_` and a random (version 4) UUID.
pub fn new_operation_id() -> String {
    let mut bytes: [u8; 16] = rand::random();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex = hex::encode(bytes);
    format!(
        "op_{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}
