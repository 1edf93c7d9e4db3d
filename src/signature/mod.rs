//! What every provider's signature shares: secrets that never show in logs, the
//! HMAC itself, trying each configured secret in constant time, the timestamp
//! tolerance, and the typed reasons a delivery is refused. A leaf: each
//! provider's own message and header format is in `crate::providers`.
//!
//! Rules common to every scheme: the MAC is computed over the raw bytes as received;
//! tags are compared in constant time; every configured secret is tried in order and
//! the 1-based position of the one that matched is reported (`signed_with`), so an
//! operator can see when an old secret stops being used.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};
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

    /// Whether `given` is this secret, compared as SHA-256 digests in
    /// constant time: the time taken tells nothing of its length or of how
    /// much of it matched (a credential sent as it is: Adyen's Basic
    /// credentials, Checkout.com's authorization key, Mollie's URL token).
    pub fn is(&self, given: &[u8]) -> bool {
        bool::from(Sha256::digest(given).ct_eq(&Sha256::digest(self.0.as_bytes())))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// How a provider turns a configured secret into key bytes (most use the text
/// itself; some decode it).
pub trait KeyFormat {
    /// The key bytes a secret stands for; an error explains why a configured
    /// secret is unusable (checked once, at startup).
    fn key_bytes<'s>(&self, secret: &'s Secret) -> Result<Cow<'s, [u8]>, SecretError> {
        Ok(Cow::Borrowed(secret.expose().as_bytes()))
    }
}

/// Why a configured secret is not in its provider's format: what follows the
/// key's name in a message (`sources[0].secrets[0] is empty`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("is empty")]
    Empty,
    /// Empty once the prefix its format starts with is taken off.
    #[error("is empty after the {0} prefix")]
    EmptyAfter(&'static str),
    /// Not in the encoding its format uses after its prefix.
    #[error("is not {encoding} after the {prefix} prefix")]
    NotEncoded {
        encoding: &'static str,
        prefix: &'static str,
    },
    /// Not what the provider's secrets are (as its dashboard shows them).
    #[error("is not {0}")]
    Not(&'static str),
}

/// Read access to request headers, case-insensitive, whatever the HTTP library.
pub trait Headers {
    fn header(&self, name: &str) -> Option<&str>;

    /// The request URL's query, for a request that came over HTTP: what a
    /// provider whose requests are unsigned may carry a secret in (Mollie's
    /// URL token). Never kept with an event.
    fn query(&self) -> Option<&str> {
        None
    }
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

impl Verified {
    /// An event listed by the provider's own API (`hookd reconcile`): no secret
    /// signed it; the TLS connection made with the source's key proves it. Stored
    /// as its `signed_with`, which marks its row `origin = 'api'`.
    pub const FROM_PROVIDER_API: Verified = Verified { signed_with: -1 };
}

/// Why a delivery was refused. The messages name what was wrong, never secret material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("missing {0} header")]
    Missing(String),
    #[error("missing {0} query parameter")]
    MissingQuery(&'static str),
    #[error("malformed {header} header: {detail}")]
    Malformed {
        header: String,
        detail: &'static str,
    },
    /// A signature the provider puts in the body is absent or unreadable.
    #[error("{where_}: {detail}")]
    InBody {
        where_: String,
        detail: &'static str,
    },
    #[error("signature mismatch")]
    Mismatch,
    /// The key the request names could not be fetched or is not trusted
    /// (PayPal's certificate). Why is for the log: the answer says no more
    /// (it would tell the sender about hookd's network).
    #[error("signing certificate unavailable")]
    Unavailable(String),
    /// A signature covering only a checksum of the body (PayPal's CRC32) came
    /// again with another body than the one it was first accepted with.
    #[error("signature already accepted with another body")]
    Replayed,
    /// Signed this many seconds before now, beyond the tolerance.
    #[error("timestamp too old")]
    TooOld { seconds: u64 },
    /// Signed this many seconds after now, beyond the tolerance.
    #[error("timestamp too new")]
    TooNew { seconds: u64 },
}

impl SignatureError {
    pub fn malformed(header: &str, detail: &'static str) -> Self {
        SignatureError::Malformed {
            header: header.to_string(),
            detail,
        }
    }

    /// A short, stable label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            SignatureError::Missing(_) | SignatureError::MissingQuery(_) => "missing",
            SignatureError::Malformed { .. } | SignatureError::InBody { .. } => "malformed",
            SignatureError::Mismatch => "mismatch",
            SignatureError::Unavailable(_) => "unavailable",
            SignatureError::Replayed => "replayed",
            SignatureError::TooOld { .. } => "too_old",
            SignatureError::TooNew { .. } => "too_new",
        }
    }
}

/// A source's secrets and tolerance, as a provider's verification uses them.
#[derive(Clone, Copy)]
pub struct Keys<'a> {
    pub format: &'a dyn KeyFormat,
    pub secrets: &'a [Secret],
    pub tolerance: Duration,
}

impl Keys<'_> {
    /// Tries each secret's tag against each candidate; reports the first secret that matched.
    pub fn find_signer(
        &self,
        message: &[&[u8]],
        candidates: &[Vec<u8>],
    ) -> Result<Verified, SignatureError> {
        for (position, secret) in self.secrets.iter().enumerate() {
            let Ok(key) = self.format.key_bytes(secret) else {
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

    pub fn check_timestamp(&self, timestamp: i64, now: i64) -> Result<(), SignatureError> {
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

/// What signing a body gives: the headers to send with it, and the body itself
/// when the provider signs inside it (Adyen).
#[derive(Debug, Clone, Default)]
pub struct Signed {
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
}

impl Signed {
    pub fn headers(headers: Vec<(String, String)>) -> Self {
        Signed {
            headers,
            body: None,
        }
    }
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

pub fn parse_unix_seconds(header: &str, value: &str) -> Result<i64, SignatureError> {
    value
        .trim()
        .parse::<i64>()
        .map_err(|_| SignatureError::malformed(header, "timestamp is not Unix seconds"))
}
