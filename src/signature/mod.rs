//! Provider signatures: pure functions from (scheme, secrets, headers, raw body, clock)
//! to a verdict, and the inverse for developers (`sign`). Nothing here knows HTTP
//! frameworks or databases, so every rule is unit-tested with plain bytes.
//!
//! Rules common to every scheme: the MAC is computed over the raw bytes as received;
//! tags are compared in constant time; every configured secret is tried in order and
//! the 1-based position of the one that matched is reported (`signed_with`), so an
//! operator can see when an old secret stops being used.
//!
//! What else a provider defines (where its ids live, its default rules, its
//! secrets' format) is in `crate::providers`.

mod github;
mod hmac_generic;
mod standard;
mod stripe;

pub use github::{DELIVERY as GITHUB_DELIVERY, EVENT as GITHUB_EVENT};
pub use standard::event_id as standard_event_id;

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// A shared secret. Its `Debug` never shows the value, so it cannot leak through logs.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// How a provider signs, and where it puts the event's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scheme {
    Stripe,
    Standard,
    Github,
    Hmac(GenericHmac),
}

impl Scheme {
    pub fn name(&self) -> &'static str {
        match self {
            Scheme::Stripe => "stripe",
            Scheme::Standard => "standard",
            Scheme::Github => "github",
            Scheme::Hmac(_) => "hmac",
        }
    }

    /// The headers a delivery's signature depends on (all names a scheme accepts):
    /// kept with the event so its signature can be checked again later.
    pub fn signed_header_names(&self) -> Vec<&str> {
        match self {
            Scheme::Stripe => vec![stripe::HEADER],
            Scheme::Standard => standard::HEADERS.to_vec(),
            Scheme::Github => github::HEADERS.to_vec(),
            Scheme::Hmac(opts) => {
                let mut names = vec![opts.signature_header.as_str()];
                for locator in [&opts.id, &opts.event_type] {
                    if let Locator::Header(name) = locator {
                        names.push(name);
                    }
                }
                names.extend(opts.timestamp_header.as_deref());
                names
            }
        }
    }

    /// The key bytes a secret stands for under this scheme; an error explains why a
    /// configured secret is unusable (checked once, at startup).
    pub fn key_bytes<'s>(&self, secret: &'s Secret) -> Result<Cow<'s, [u8]>, String> {
        match self {
            Scheme::Standard => standard::key_bytes(secret.expose()).map(Cow::Owned),
            _ => Ok(Cow::Borrowed(secret.expose().as_bytes())),
        }
    }
}

/// Settings of the generic `hmac` scheme (Shopify and the like).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenericHmac {
    pub signature_header: String,
    pub encoding: Encoding,
    pub prefix: String,
    pub id: Locator,
    pub event_type: Locator,
    pub timestamp_header: Option<String>,
}

/// How the generic scheme writes its tag; hex unless a source says otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    #[default]
    Hex,
    Base64,
}

/// Where a value lives in a delivery: a header, or a JSON pointer into the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Locator {
    Header(String),
    Pointer(String),
}

/// Read access to request headers, case-insensitive, whatever the HTTP library.
pub trait Headers {
    fn header(&self, name: &str) -> Option<&str>;
}

impl Headers for [(String, String)] {
    fn header(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl Headers for Vec<(String, String)> {
    fn header(&self, name: &str) -> Option<&str> {
        self.as_slice().header(name)
    }
}

/// What a verified delivery proved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verified {
    /// 1-based position of the matching secret in the source's list.
    pub signed_with: i32,
}

/// Why a delivery was refused. The messages name what was wrong, never secret material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("missing {0} header")]
    Missing(String),
    #[error("malformed {header} header: {detail}")]
    Malformed {
        header: String,
        detail: &'static str,
    },
    #[error("signature mismatch")]
    Mismatch,
    /// Signed this many seconds before now, beyond the tolerance.
    #[error("timestamp too old")]
    TooOld { seconds: u64 },
    /// Signed this many seconds after now, beyond the tolerance.
    #[error("timestamp too new")]
    TooNew { seconds: u64 },
}

impl SignatureError {
    fn malformed(header: &str, detail: &'static str) -> Self {
        SignatureError::Malformed {
            header: header.to_string(),
            detail,
        }
    }

    /// A short, stable label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            SignatureError::Missing(_) => "missing",
            SignatureError::Malformed { .. } => "malformed",
            SignatureError::Mismatch => "mismatch",
            SignatureError::TooOld { .. } => "too_old",
            SignatureError::TooNew { .. } => "too_new",
        }
    }
}

/// One configured source as the verifier sees it.
#[derive(Debug, Clone, Copy)]
pub struct Verifier<'a> {
    pub scheme: &'a Scheme,
    pub secrets: &'a [Secret],
    pub tolerance: Duration,
}

impl Verifier<'_> {
    /// Checks a delivery against every secret; `now` is Unix seconds.
    pub fn verify(
        &self,
        headers: &(impl Headers + ?Sized),
        body: &[u8],
        now: i64,
    ) -> Result<Verified, SignatureError> {
        match self.scheme {
            Scheme::Stripe => stripe::verify(self, headers, body, now),
            Scheme::Standard => standard::verify(self, headers, body, now),
            Scheme::Github => github::verify(self, headers, body),
            Scheme::Hmac(opts) => hmac_generic::verify(self, opts, headers, body, now),
        }
    }

    /// Tries each secret's tag against each candidate; reports the first secret that matched.
    fn find_signer(
        &self,
        message: &[&[u8]],
        candidates: &[Vec<u8>],
    ) -> Result<Verified, SignatureError> {
        for (position, secret) in self.secrets.iter().enumerate() {
            let Ok(key) = self.scheme.key_bytes(secret) else {
                continue;
            };
            let tag = hmac_sha256(&key, message);
            if candidates
                .iter()
                .any(|c| bool::from(c.as_slice().ct_eq(&tag)))
            {
                return Ok(Verified {
                    signed_with: i32::try_from(position + 1).unwrap_or(i32::MAX),
                });
            }
        }
        Err(SignatureError::Mismatch)
    }

    fn check_timestamp(&self, timestamp: i64, now: i64) -> Result<(), SignatureError> {
        let tolerance = i64::try_from(self.tolerance.as_secs()).unwrap_or(i64::MAX);
        let seconds = timestamp.abs_diff(now);
        if timestamp < now.saturating_sub(tolerance) {
            Err(SignatureError::TooOld { seconds })
        } else if timestamp > now.saturating_add(tolerance) {
            Err(SignatureError::TooNew { seconds })
        } else {
            Ok(())
        }
    }
}

/// What the provider would put around a body besides the signature itself.
#[derive(Debug, Clone)]
pub struct Envelope<'a> {
    pub event_id: &'a str,
    pub event_type: &'a str,
    /// Unix seconds.
    pub timestamp: i64,
}

/// The headers the provider would send with `body`, signed with `secret`: the one
/// implementation of each scheme's signing, shared by `hookd sign`, `hookd replay`
/// and the tests.
pub fn sign(
    scheme: &Scheme,
    secret: &Secret,
    body: &[u8],
    envelope: &Envelope<'_>,
) -> Result<Vec<(String, String)>, String> {
    let key = scheme.key_bytes(secret)?;
    let mut headers = vec![("Content-Type".to_string(), "application/json".to_string())];
    match scheme {
        Scheme::Stripe => headers.extend(stripe::sign(&key, body, envelope)),
        Scheme::Standard => headers.extend(standard::sign(&key, body, envelope)),
        Scheme::Github => headers.extend(github::sign(&key, body, envelope)),
        Scheme::Hmac(opts) => headers.extend(hmac_generic::sign(opts, &key, body, envelope)),
    }
    Ok(headers)
}

pub fn hmac_sha256(key: &[u8], message: &[&[u8]]) -> Vec<u8> {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    for part in message {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

fn parse_unix_seconds(header: &str, value: &str) -> Result<i64, SignatureError> {
    value
        .trim()
        .parse::<i64>()
        .map_err(|_| SignatureError::malformed(header, "timestamp is not Unix seconds"))
}

#[cfg(test)]
mod tests;
