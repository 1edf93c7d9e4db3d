//! Whether a stored event's signature still proves where it came from.

use serde::Serialize;

use super::Desk;
use crate::store::StoreError;
use crate::store::history::{self, SignedDelivery};

/// Whether a stored event's signature still proves where it came from, and
/// what beside the body it covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Origin {
    #[serde(flatten)]
    pub verdict: Verdict,
    /// `None` when the source is no longer configured.
    #[serde(flatten)]
    pub covers: Option<Covered>,
}

/// Whether the signature covers the event id and type. GitHub's and a generic
/// source's headers travel beside the signed body: whoever holds one real
/// delivery may change them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Covered {
    pub id_signed: bool,
    pub type_signed: bool,
}

impl Covered {
    pub fn for_scheme(scheme: &crate::providers::Scheme) -> Self {
        Covered {
            id_signed: scheme.provider().signs_id(),
            type_signed: scheme.provider().signs_type(),
        }
    }

    /// What people are told when the signature leaves the id or type out.
    pub fn caveat(self) -> Option<String> {
        let what = match (self.id_signed, self.type_signed) {
            (true, true) => return None,
            (false, false) => "the event id and type were",
            (false, true) => "the event id was",
            (true, false) => "the event type was",
        };
        Some(format!(
            "{what} not signed (the scheme signs only the body)"
        ))
    }
}

/// The signature check of a stored event, with the source's current secrets as
/// of the time it was received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Verdict {
    /// The kept body and headers verify with secret number `secret` (1-based).
    Verified { secret: i32 },
    /// They do not verify (a secret was rotated away since, or the record changed).
    Unverified { reason: String },
    /// Its customer (or a customer of its kept request) was forgotten: the
    /// personal data was erased from what is kept, which therefore no longer
    /// matches its signature.
    Redacted { reason: String },
    /// The exact body or its signature headers are not kept (purged, or stored
    /// before hookd kept them), or the source is no longer configured.
    Unavailable { reason: String },
    /// Recovered from the provider's API (`hookd reconcile`): no signature
    /// came with it; the TLS connection made with the source's key proves it.
    ProviderApi { proof: String },
}

impl Desk {
    /// Re-checks a stored event's signature against the source's current
    /// secrets, as of the time it was received.
    pub async fn verify_origin(&self, id: i64) -> Result<Origin, StoreError> {
        self.origin_with(&self.client().await?, id).await
    }

    pub(super) async fn origin_with(
        &self,
        client: &deadpool_postgres::Object,
        id: i64,
    ) -> Result<Origin, StoreError> {
        let delivery = history::signed_delivery(client, id).await?;
        let settings = self.settings.now();
        let source = delivery.as_ref().and_then(|d| settings.source(&d.source));
        let covers = source.map(|s| Covered::for_scheme(&s.scheme));
        let verdict = match (delivery, source) {
            (
                Some(SignedDelivery {
                    redacted_at: None,
                    recovered: true,
                    received_at,
                    ..
                }),
                _,
            ) => Verdict::ProviderApi {
                proof: format!(
                    "recovered from the provider's API on {}: listed over TLS to the \
                     provider's own API, asked with the source's key (no signature came with it)",
                    received_at.format("%Y-%m-%d %H:%M UTC")
                ),
            },
            (
                Some(SignedDelivery {
                    redacted_at: Some(at),
                    ..
                }),
                _,
            ) => Verdict::Redacted {
                reason: format!(
                    "a customer's personal data was erased from it on {}",
                    at.format("%Y-%m-%d %H:%M UTC")
                ),
            },
            (
                Some(SignedDelivery {
                    kept: Some((body, headers)),
                    received_at,
                    ..
                }),
                Some(source),
            ) => {
                match source
                    .verifier()
                    .verify_kept(&headers, &body, received_at.timestamp())
                {
                    Ok(verified) => Verdict::Verified {
                        secret: verified.signed_with,
                    },
                    Err(error) => Verdict::Unverified {
                        reason: format!(
                            "{error} (with the current secrets, as of its received time)"
                        ),
                    },
                }
            }
            (
                Some(SignedDelivery {
                    kept: Some(_),
                    source,
                    ..
                }),
                None,
            ) => Verdict::Unavailable {
                reason: format!("source {source} is not configured any more"),
            },
            _ => Verdict::Unavailable {
                reason: "the exact body and signature headers are not kept (purged, or stored \
                         before hookd kept them)"
                    .into(),
            },
        };
        Ok(Origin { verdict, covers })
    }
}
