//! Acting as the provider: the headers a source's provider would send with a body,
//! signed with the source's first secret. `hookd sign` and `hookd replay` use it,
//! and so do the tests, the benchmarks and the load generator, so all of them sign
//! exactly as hookd verifies. The MACs come from `providers::sign`, the one
//! implementation of each scheme; the ids and types from the source's provider.

use serde_json::Value;

use crate::config::Source;
use crate::providers::{self, Body};
use crate::signature::{Envelope, Secret};

/// Why a body could not be signed as its source's provider would send it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SignError {
    #[error("the body is not JSON: {0}")]
    NotJson(String),
    #[error("source {0} has no secret")]
    NoSecret(String),
    /// The body with its new id could not be written out again.
    #[error("{0}")]
    Encode(String),
    /// The provider's own reason (an id or type it cannot find, a key it lacks).
    #[error(transparent)]
    Provider(#[from] providers::SigningError),
}

/// What the caller knows beyond the body (GitHub names events by file name).
#[derive(Debug, Clone, Copy, Default)]
pub struct Hints<'a> {
    pub event_type: Option<&'a str>,
    pub event_id: Option<&'a str>,
}

#[derive(Debug, Clone)]
pub struct SignedDelivery {
    pub headers: Vec<(String, String)>,
    /// The body to send: the one given, or the provider's signed copy of it
    /// when it signs inside the body (Adyen).
    pub body: Vec<u8>,
    pub event_id: String,
    pub event_type: String,
}

/// What `source`'s provider would send with `body` at `now`, signed with the
/// source's first secret.
pub fn sign_delivery(
    source: &Source,
    body: &[u8],
    hints: Hints<'_>,
    now: i64,
) -> Result<SignedDelivery, SignError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| SignError::NotJson(e.to_string()))?;
    let provider = source.scheme.provider();
    let body_of = Body {
        bytes: body,
        value: &value,
    };
    let event_id = match hints.event_id {
        Some(id) => id.to_string(),
        None => provider.signing_id(&body_of)?,
    };
    let event_type = match hints.event_type {
        Some(ty) => ty.to_string(),
        None => provider.signing_type(&body_of)?,
    };
    // A scheme that takes no secrets (PayPal) signs with a key of its own.
    let keyless = Secret::new("");
    let secret = match source.secrets.first() {
        Some(secret) => secret,
        None if !provider.takes_secrets() => &keyless,
        None => return Err(SignError::NoSecret(source.name.to_string())),
    };
    let envelope = Envelope {
        event_id: &event_id,
        event_type: &event_type,
        timestamp: now,
    };
    let signed = providers::sign(&source.scheme, secret, body, &envelope)?;
    Ok(SignedDelivery {
        headers: signed.headers,
        body: signed.body.unwrap_or_else(|| body.to_vec()),
        event_id,
        event_type,
    })
}

/// The member `with_new_id` adds to a body that has no place for the id.
pub const REPLAY_ID_FIELD: &str = "hookd_replay_id";

/// Gives the body a fresh event id where the scheme keeps it in the body (or, for
/// a source that dedupes on the body and has no such place, in a member of its
/// own), and returns the new id when the provider does not read it from the
/// body (the schemes that send it in a header).
pub fn with_new_id(source: &Source, body: &[u8]) -> Result<(Vec<u8>, Option<String>), SignError> {
    let mut value: Value =
        serde_json::from_slice(body).map_err(|e| SignError::NotJson(e.to_string()))?;
    let random: [u8; 16] = rand::random();
    let (id, placed) = source.scheme.provider().renew_ids(&mut value, &random);
    // A source that dedupes on the body would take the same body under a new id
    // for a resend: the fresh id goes into the body too.
    if !placed
        && source.dedupe_on_body
        && let Value::Object(map) = &mut value
    {
        map.insert(REPLAY_ID_FIELD.into(), Value::String(id.clone()));
    }
    let body = serde_json::to_vec(&value).map_err(|e| SignError::Encode(e.to_string()))?;
    // An id the body now carries is read from it as the provider's event id
    // (Adyen's is made of the item's pspReference, code and success).
    Ok((body, (!placed).then_some(id)))
}
