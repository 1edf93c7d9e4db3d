//! The one implementation of "HMAC-SHA256 over some bytes, its tag encoded in
//! one header": GitHub, Razorpay, Checkout.com, GoCardless, Square and the
//! generic scheme differ only in the header's name, a prefix, the encoding,
//! whether the header is trimmed, and the bytes signed, which each provider's
//! folder states as data. Every secret is tried, and tags are compared in
//! constant time ([`Keys::find_signer`]).

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

use super::Encoding;
use crate::signature::{Headers, Keys, SignatureError, Verified, hmac_sha256};

/// How a provider writes its tag in its header.
#[derive(Debug, Clone, Copy)]
pub struct HeaderHmac<'a> {
    /// The header's name.
    pub header: &'a str,
    /// What stands before the tag (`sha256=`); empty for none.
    pub prefix: &'a str,
    pub encoding: Encoding,
    /// Whether surrounding white space is taken off before the prefix (else
    /// the header is decoded as sent, as the provider's own library does).
    pub trim: bool,
    /// Why a header without the prefix is malformed.
    pub unprefixed: &'static str,
}

impl HeaderHmac<'static> {
    /// A hex tag, alone in `header`, decoded as sent (either case, not trimmed).
    pub const fn hex(header: &'static str) -> Self {
        HeaderHmac {
            header,
            prefix: "",
            encoding: Encoding::Hex,
            trim: false,
            unprefixed: "",
        }
    }
}

impl HeaderHmac<'_> {
    /// The tag the header carries, or why it cannot be read.
    pub fn tag(&self, headers: &dyn Headers) -> Result<Vec<u8>, SignatureError> {
        let header = self.header;
        let value = headers
            .header(header)
            .ok_or_else(|| SignatureError::Missing(header.to_string()))?;
        let value = if self.trim { value.trim() } else { value };
        let encoded = value
            .strip_prefix(self.prefix)
            .ok_or_else(|| SignatureError::malformed(header, self.unprefixed))?;
        match self.encoding {
            Encoding::Hex => hex::decode(encoded).map_err(|_| "not hex"),
            Encoding::Base64 => BASE64.decode(encoded).map_err(|_| "not base64"),
        }
        .map_err(|detail| SignatureError::malformed(header, detail))
    }

    /// Checks the header's tag against `message` signed with every secret.
    pub fn verify(
        &self,
        keys: &Keys<'_>,
        headers: &dyn Headers,
        message: &[&[u8]],
    ) -> Result<Verified, SignatureError> {
        keys.find_signer(message, &[self.tag(headers)?])
    }

    /// The header the provider sends with `message` signed with `key`.
    pub fn sign(&self, key: &[u8], message: &[&[u8]]) -> (String, String) {
        let tag = hmac_sha256(key, message);
        let encoded = match self.encoding {
            Encoding::Hex => hex::encode(tag),
            Encoding::Base64 => BASE64.encode(tag),
        };
        (self.header.to_string(), format!("{}{encoded}", self.prefix))
    }
}
