//! Generic HMAC (Shopify and the like): HMAC-SHA256 over the raw body in a
//! configured header, hex or base64, with an optional prefix (`sha256=`) and an
//! optional timestamp header checked against the tolerance (it is not part of
//! the signed message). The id and type are wherever the source's
//! `id_header`/`id_pointer` and `type_header`/`type_pointer` say; only pointers
//! into the body are signed.

use serde::Deserialize;
use serde_json::Value;

use super::errors::{Signing, SigningError};
use super::{Body, Capabilities, Missing, Provider, Scheme, Simulator, locate};
use crate::config_keys::{self as keys, Names, Problem, json_pointer, one_of};
use crate::signature::{
    Envelope, Headers, KeyFormat, Keys, SignatureError, Signed, Verified, parse_unix_seconds,
};

mod header;
mod timed;
pub(super) use header::HeaderHmac;
pub(super) use timed::{Refusals, TimedTags};

/// Settings of the generic `hmac` scheme.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenericHmac {
    pub signature_header: String,
    pub encoding: Encoding,
    pub prefix: String,
    pub id: Locator,
    pub event_type: Locator,
    pub timestamp_header: Option<String>,
}

/// How a tag is written; the generic scheme's is hex unless a source says otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    #[default]
    Hex,
    Base64,
}

impl Names for Encoding {
    const NAMES: &str = "hex, base64";
}

/// Where a value lives in a delivery: a header, or a JSON pointer into the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Locator {
    Header(String),
    Pointer(String),
}

/// The keys only scheme `hmac` takes: the fields of [`RawHmac`].
pub const KEYS: &[&str] = &[
    "signature_header",
    "signature_encoding",
    "signature_prefix",
    "id_header",
    "id_pointer",
    "type_header",
    "type_pointer",
    "timestamp_header",
];

/// The keys of scheme `hmac`, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHmac {
    signature_header: Option<String>,
    #[serde(default, deserialize_with = "one_of")]
    signature_encoding: Encoding,
    signature_prefix: Option<String>,
    id_header: Option<String>,
    id_pointer: Option<String>,
    type_header: Option<String>,
    type_pointer: Option<String>,
    timestamp_header: Option<String>,
}

/// A source's `hmac` keys, read and checked.
pub fn configure(table: toml::Table, key: &dyn Fn(&str) -> String) -> Result<Scheme, Problem> {
    let raw: RawHmac = keys::read(table, key)?;
    let signature_header = raw
        .signature_header
        .filter(|h| !h.trim().is_empty())
        .ok_or_else(|| {
            (
                key("signature_header"),
                "is required for scheme \"hmac\"".into(),
            )
        })?;
    let locator = |what: &str, header: Option<String>, pointer: Option<String>| {
        let non_empty = |v: Option<String>| v.filter(|s| !s.is_empty());
        match (non_empty(header), non_empty(pointer)) {
            (Some(h), None) => Ok(Locator::Header(h)),
            (None, Some(p)) => {
                json_pointer(key(&format!("{what}_pointer")), &p)?;
                Ok(Locator::Pointer(p))
            }
            (Some(_), Some(_)) => Err((
                key(&format!("{what}_header")),
                format!("set either {what}_header or {what}_pointer, not both"),
            )),
            (None, None) => Err((
                key(&format!("{what}_header")),
                format!("scheme \"hmac\" needs {what}_header or {what}_pointer"),
            )),
        }
    };
    Ok(Scheme::Hmac(GenericHmac {
        signature_header,
        encoding: raw.signature_encoding,
        prefix: raw.signature_prefix.unwrap_or_default(),
        id: locator("id", raw.id_header, raw.id_pointer)?,
        event_type: locator("type", raw.type_header, raw.type_pointer)?,
        timestamp_header: raw.timestamp_header.filter(|h| !h.is_empty()),
    }))
}

impl KeyFormat for GenericHmac {}

/// A generic source with no keys of its own, for what does not depend on them
/// (the secret format, the payment shape).
pub static ANY: GenericHmac = GenericHmac {
    signature_header: String::new(),
    encoding: Encoding::Hex,
    prefix: String::new(),
    id: Locator::Header(String::new()),
    event_type: Locator::Header(String::new()),
    timestamp_header: None,
};

impl GenericHmac {
    /// Its header, as the source configures it: trimmed before the prefix.
    fn signed(&self) -> HeaderHmac<'_> {
        HeaderHmac {
            header: &self.signature_header,
            prefix: &self.prefix,
            encoding: self.encoding,
            trim: true,
            unprefixed: "missing the configured prefix",
        }
    }
}

fn describe(locator: &Locator) -> String {
    match locator {
        Locator::Header(name) => format!("{name} header"),
        Locator::Pointer(pointer) => format!("body{pointer}"),
    }
}

impl Provider for GenericHmac {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            signs_id: matches!(self.id, Locator::Pointer(_)),
            signs_type: matches!(self.event_type, Locator::Pointer(_)),
            ..Capabilities::DEFAULT
        }
    }

    fn development_secrets(&self) -> &'static [&'static str] {
        &["dev-shop-secret"]
    }

    fn name(&self) -> &'static str {
        "hmac"
    }

    fn signed_header_names(&self) -> Vec<&str> {
        let mut names = vec![self.signature_header.as_str()];
        for locator in [&self.id, &self.event_type] {
            if let Locator::Header(name) = locator {
                names.push(name);
            }
        }
        names.extend(self.timestamp_header.as_deref());
        names
    }

    fn verify(
        &self,
        keys: &Keys<'_>,
        headers: &dyn Headers,
        body: &[u8],
        now: i64,
    ) -> Result<Verified, SignatureError> {
        let verified = self.signed().verify(keys, headers, &[body])?;
        if let Some(timestamp_header) = &self.timestamp_header {
            let text = headers
                .header(timestamp_header)
                .ok_or_else(|| SignatureError::Missing(timestamp_header.clone()))?;
            let timestamp = parse_unix_seconds(timestamp_header, text)?;
            keys.check_timestamp(timestamp, now)?;
        }
        Ok(verified)
    }

    fn identity(
        &self,
        headers: &dyn Headers,
        payload: &Value,
    ) -> Result<(String, String), Missing> {
        let id =
            locate(&self.id, headers, payload).ok_or_else(|| Missing::Id(describe(&self.id)))?;
        let ty = locate(&self.event_type, headers, payload)
            .ok_or_else(|| Missing::Type(describe(&self.event_type)))?;
        Ok((id, ty))
    }
}

impl Simulator for GenericHmac {
    fn sign(&self, key: &[u8], body: &[u8], envelope: &Envelope<'_>) -> Signing<Signed> {
        let mut headers = vec![self.signed().sign(key, &[body])];
        if let Locator::Header(name) = &self.id {
            headers.push((name.clone(), envelope.event_id.to_string()));
        }
        if let Locator::Header(name) = &self.event_type {
            headers.push((name.clone(), envelope.event_type.to_string()));
        }
        if let Some(name) = &self.timestamp_header {
            headers.push((name.clone(), envelope.timestamp.to_string()));
        }
        Ok(Signed::headers(headers))
    }

    fn signing_id(&self, body: &Body<'_>) -> Result<String, SigningError> {
        match &self.id {
            Locator::Pointer(p) => body
                .pointer(p)
                .ok_or_else(|| SigningError::NoPointer(p.clone())),
            Locator::Header(_) => Ok(body.text("id").unwrap_or_else(|| body.content_id())),
        }
    }

    fn signing_type(&self, body: &Body<'_>) -> Result<String, SigningError> {
        match &self.event_type {
            Locator::Pointer(p) => body
                .pointer(p)
                .ok_or_else(|| SigningError::NoPointer(p.clone())),
            Locator::Header(_) => body.member("type", "the body"),
        }
    }

    fn new_id(&self, random: &[u8; 16]) -> (String, Option<String>) {
        let field = match &self.id {
            Locator::Pointer(p) => p.clone(),
            Locator::Header(_) => "/id".into(),
        };
        (hex::encode(&random[..12]), Some(field))
    }
}
