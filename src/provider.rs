//! Acting as the provider: the headers a source's provider would send with a body,
//! signed with the source's first secret. `hookd sign` and `hookd replay` use it,
//! and so do the tests, the benchmarks and the load generator, so all of them sign
//! exactly as hookd verifies. The MACs come from `signature::sign`, the one
//! implementation of each scheme.

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::config::Source;
use crate::signature::{self, Envelope, Locator, Scheme};

/// What the caller knows beyond the body (GitHub names events by file name).
#[derive(Debug, Clone, Copy, Default)]
pub struct Hints<'a> {
    pub event_type: Option<&'a str>,
    pub event_id: Option<&'a str>,
}

#[derive(Debug, Clone)]
pub struct SignedDelivery {
    pub headers: Vec<(String, String)>,
    pub event_id: String,
    pub event_type: String,
}

/// The headers `source`'s provider would send with `body` at `now`, signed with the
/// source's first secret.
pub fn sign_delivery(
    source: &Source,
    body: &[u8],
    hints: Hints<'_>,
    now: i64,
) -> Result<SignedDelivery, String> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let text = |field: &str| value.get(field).and_then(Value::as_str).map(String::from);
    let pointer = |p: &str| match value.pointer(p) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    let content_id = || hex::encode(&Sha256::digest(body)[..12]);
    let event_id = match (hints.event_id, &source.scheme) {
        (Some(id), _) => id.to_string(),
        (None, Scheme::Stripe) => text("id").ok_or("a Stripe body needs an \"id\"")?,
        (None, Scheme::Standard) => text("id").unwrap_or_else(|| format!("msg_{}", content_id())),
        (None, Scheme::Github) => uuid_from(&Sha256::digest(body)),
        (None, Scheme::Hmac(opts)) => match &opts.id {
            Locator::Pointer(p) => pointer(p).ok_or_else(|| format!("the body has no {p}"))?,
            Locator::Header(_) => text("id").unwrap_or_else(content_id),
        },
    };
    let event_type = match (hints.event_type, &source.scheme) {
        (Some(ty), _) => ty.to_string(),
        (None, Scheme::Github) => {
            return Err("GitHub events are named by their file name (push.json → push)".into());
        }
        (None, Scheme::Hmac(opts)) => match &opts.event_type {
            Locator::Pointer(p) => pointer(p).ok_or_else(|| format!("the body has no {p}"))?,
            Locator::Header(_) => text("type").ok_or("the body needs a \"type\"")?,
        },
        (None, _) => text("type").ok_or("the body needs a \"type\"")?,
    };
    let secret = source
        .secrets
        .first()
        .ok_or_else(|| format!("source {} has no secret", source.name))?;
    let envelope = Envelope {
        event_id: &event_id,
        event_type: &event_type,
        timestamp: now,
    };
    let headers = signature::sign(&source.scheme, secret, body, &envelope)?;
    Ok(SignedDelivery {
        headers,
        event_id,
        event_type,
    })
}

/// The member `with_new_id` adds to a body that has no place for the id.
pub const REPLAY_ID_FIELD: &str = "hookd_replay_id";

/// Gives the body a fresh event id where the scheme keeps it in the body (or, for
/// a source that dedupes on the body and has no such place, in a member of its
/// own), and returns the new id for the schemes that carry it in a header.
pub fn with_new_id(source: &Source, body: &[u8]) -> Result<(Vec<u8>, String), String> {
    let mut value: Value =
        serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let random: [u8; 16] = rand::random();
    let (id, field) = match &source.scheme {
        Scheme::Stripe => (
            format!("evt_{}", hex::encode(&random[..12])),
            Some("/id".to_string()),
        ),
        Scheme::Standard => (
            format!("msg_{}", hex::encode(&random[..12])),
            Some("/id".into()),
        ),
        Scheme::Github => (uuid_from(&random), None),
        Scheme::Hmac(opts) => match &opts.id {
            Locator::Pointer(p) => (hex::encode(&random[..12]), Some(p.clone())),
            Locator::Header(_) => (hex::encode(&random[..12]), Some("/id".into())),
        },
    };
    let placed = field.and_then(|p| value.pointer_mut(&p)).map(|slot| {
        *slot = Value::String(id.clone());
    });
    // A source that dedupes on the body would take the same body under a new id
    // for a resend: the fresh id goes into the body too.
    if placed.is_none()
        && source.dedupe_on_body
        && let Value::Object(map) = &mut value
    {
        map.insert(REPLAY_ID_FIELD.into(), Value::String(id.clone()));
    }
    let body = serde_json::to_vec(&value).map_err(|e| e.to_string())?;
    Ok((body, id))
}

fn uuid_from(bytes: &[u8]) -> String {
    let h = hex::encode(&bytes[..16]);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}
