//! Signing deliveries as a provider would: `hookd sign` prints the headers for
//! curl, `hookd replay` sends them, and the tests use the same function. The MACs
//! themselves come from `signature::sign`, the one implementation of each scheme.

use std::path::Path;

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::CliError;
use crate::config::{Settings, Source};
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

/// Gives the body a fresh event id where the scheme keeps it in the body, and
/// returns the new id for the schemes that carry it in a header.
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
    if let Some(slot) = field.and_then(|p| value.pointer_mut(&p)) {
        *slot = Value::String(id.clone());
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

/// The GitHub event name for a fixture file: its stem (`push.json` → `push`).
pub fn event_name_from_path(path: &Path) -> Option<String> {
    path.file_stem()
        .and_then(|s| s.to_str())
        .map(|s| s.split('.').next().unwrap_or(s).to_string())
}

pub fn source<'s>(settings: &'s Settings, name: &str) -> Result<&'s Source, CliError> {
    settings.source(name).ok_or_else(|| {
        let known: Vec<_> = settings.sources.iter().map(|s| s.name.as_str()).collect();
        CliError::Other(format!(
            "no source named {name:?} in the configuration (known: {})",
            known.join(", ")
        ))
    })
}

/// `hookd sign --source NAME FILE`: one header per line, ready for `curl -H @file`.
pub fn run(settings: &Settings, source_name: &str, file: &Path) -> Result<(), CliError> {
    let source = source(settings, source_name)?;
    let body =
        std::fs::read(file).map_err(|e| CliError::Other(format!("{}: {e}", file.display())))?;
    let name = event_name_from_path(file);
    let hints = Hints {
        event_type: match source.scheme {
            Scheme::Github => name.as_deref(),
            _ => None,
        },
        event_id: None,
    };
    let signed = sign_delivery(source, &body, hints, chrono::Utc::now().timestamp())
        .map_err(|e| CliError::Other(format!("{}: {e}", file.display())))?;
    for (name, value) in signed.headers {
        println!("{name}: {value}");
    }
    Ok(())
}
