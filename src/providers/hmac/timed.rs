//! The one implementation of "a header of `key=value` parts: a timestamp and
//! one or more hex HMAC-SHA256 tags of the timestamp, a joiner and the raw
//! body" (Stripe's `t=T,v1=HEX`, Paddle's `ts=T;h1=HEX`). Every tag is tried
//! (several come while a secret rolls), other parts are ignored, and the
//! timestamp must be within the tolerance. Each provider's folder states its
//! header, keys, separators and refusals as data.

use crate::signature::{
    Headers, Keys, SignatureError, Signed, Verified, hmac_sha256, parse_unix_seconds,
};

/// How a provider writes its timestamp and tags in its header.
#[derive(Debug, Clone, Copy)]
pub struct TimedTags {
    pub header: &'static str,
    /// What separates the parts (`,` or `;`).
    pub separator: char,
    /// Whether empty parts are skipped and white space around `=` taken off
    /// (else each part is only trimmed as a whole).
    pub lenient: bool,
    /// The timestamp's key (`t`) and the tags' (`v1`).
    pub timestamp: &'static str,
    pub tag: &'static str,
    /// What the signed text puts between the timestamp and the body.
    pub joiner: &'static str,
    pub refusals: Refusals,
}

/// Why a header is malformed, as the provider's library says it.
#[derive(Debug, Clone, Copy)]
pub struct Refusals {
    /// A part without `=`.
    pub unpaired: &'static str,
    pub two_timestamps: &'static str,
    pub not_hex: &'static str,
    pub no_timestamp: &'static str,
    pub no_tag: &'static str,
}

impl TimedTags {
    /// The header's timestamp (as sent) and its tags, or why it cannot be read.
    fn parts<'h>(
        &self,
        headers: &'h dyn Headers,
    ) -> Result<(&'h str, Vec<Vec<u8>>), SignatureError> {
        let header = self.header;
        let refused = |detail| SignatureError::malformed(header, detail);
        let value = headers
            .header(header)
            .ok_or_else(|| SignatureError::Missing(header.to_string()))?;
        let mut timestamp = None;
        let mut tags = Vec::new();
        let parts = value.split(self.separator);
        for part in parts.filter(|p| !self.lenient || !p.trim().is_empty()) {
            let part = if self.lenient { part } else { part.trim() };
            let (key, val) = part
                .split_once('=')
                .ok_or_else(|| refused(self.refusals.unpaired))?;
            let (key, val) = match self.lenient {
                true => (key.trim(), val.trim()),
                false => (key, val),
            };
            if key == self.timestamp {
                if timestamp.replace(val).is_some() {
                    return Err(refused(self.refusals.two_timestamps));
                }
            } else if key == self.tag {
                tags.push(hex::decode(val).map_err(|_| refused(self.refusals.not_hex))?);
            }
        }
        let timestamp = timestamp.ok_or_else(|| refused(self.refusals.no_timestamp))?;
        if tags.is_empty() {
            return Err(refused(self.refusals.no_tag));
        }
        Ok((timestamp, tags))
    }

    /// Checks the header's tags against the body signed with every secret,
    /// then its timestamp against the tolerance; `now` is Unix seconds.
    pub fn verify(
        &self,
        keys: &Keys<'_>,
        headers: &dyn Headers,
        body: &[u8],
        now: i64,
    ) -> Result<Verified, SignatureError> {
        let (text, tags) = self.parts(headers)?;
        let timestamp = parse_unix_seconds(self.header, text)?;
        let message = [text.as_bytes(), self.joiner.as_bytes(), body];
        let verified = keys.find_signer(&message, &tags)?;
        keys.check_timestamp(timestamp, now)?;
        Ok(verified)
    }

    /// What the provider sends with `body` signed with `key` at `timestamp`.
    pub fn sign(&self, key: &[u8], body: &[u8], timestamp: i64) -> Signed {
        let t = timestamp.to_string();
        let tag = hmac_sha256(key, &[t.as_bytes(), self.joiner.as_bytes(), body]);
        let value = format!(
            "{}={t}{}{}={}",
            self.timestamp,
            self.separator,
            self.tag,
            hex::encode(tag)
        );
        Signed::headers(vec![(self.header.to_string(), value)])
    }
}
