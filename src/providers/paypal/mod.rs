//! PayPal: RSA, not HMAC. `PAYPAL-TRANSMISSION-SIG` is base64 RSA PKCS#1 v1.5
//! SHA-256 (`PAYPAL-AUTH-ALGO: SHA256withRSA`) over
//! `{PAYPAL-TRANSMISSION-ID}|{PAYPAL-TRANSMISSION-TIME}|{webhook_id}|{CRC32 of the raw body}`,
//! the CRC32 as an unsigned decimal and the time as sent (RFC 3339), within the
//! tolerance. The key is a certificate: one pinned in the configuration
//! (`certificates`, tried in order: `signed_with` is the position), or the one
//! `PAYPAL-CERT-URL` names, fetched before verifying (see [`Provider::to_fetch`])
//! only when the URL has the shape of PayPal's own
//! (`https://{host}/v1/notifications/certs/CERT-…`, the host on
//! `certificate_hosts`, port 443, no query), its chain checked against the
//! system's roots and its subject PayPal's, and cached until its `notAfter`
//! (`signed_with` 0). The id and type are the body's `id` and `event_type`; a
//! capture, refund or dispute is in `resource`, amounts as decimal text.

mod reconcile;

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, TrustAnchor, UnixTime};
use serde::Deserialize;
use serde_json::Value;

use super::errors::{FactsError, Signing, SigningError, storable};
use super::shape::IndexFields;
use super::{
    Body, Capabilities, Missing, Provider, Scheme, Simulator, body_identity, kind_table, non_empty,
    uuid_from,
};
use crate::config_keys::{self as keys, Problem};
use crate::domain::{PaymentFacts, PaymentKind, Refund};
use crate::money::minor_units;
use crate::signature::{
    Envelope, Headers, KeyFormat, Keys, Secret, SignatureError, Signed, Verified,
};

use certificates::*;

const TRANSMISSION_ID: &str = "PAYPAL-TRANSMISSION-ID";
const TRANSMISSION_TIME: &str = "PAYPAL-TRANSMISSION-TIME";
const TRANSMISSION_SIG: &str = "PAYPAL-TRANSMISSION-SIG";
const CERT_URL: &str = "PAYPAL-CERT-URL";
const AUTH_ALGO: &str = "PAYPAL-AUTH-ALGO";
const ALGORITHM: &str = "SHA256withRSA";

/// PayPal's live API hosts: where its certificates are served.
pub const LIVE_HOSTS: [&str; 2] = ["api.paypal.com", "api-m.paypal.com"];

/// Its sandbox's, trusted by default only by a source with `sandbox = true`.
pub const SANDBOX_HOSTS: [&str; 2] = ["api.sandbox.paypal.com", "api-m.sandbox.paypal.com"];

/// The path of PayPal's certificate URLs, before the certificate's name
/// (`CERT-360caa42-fca2a594-a5cafa77`).
const CERT_PATH: &str = "/v1/notifications/certs/CERT-";

/// The longest certificate name after `CERT-` taken (PayPal's are 26 characters).
const MAX_CERT_NAME: usize = 64;

/// The subject (common name) of PayPal's webhook signing certificate, as
/// PayPal's own SDK checks it (`SSLUtil.validateCertificateChain`), and the
/// sandbox's, taken only by a source with `sandbox = true`.
pub const LIVE_SUBJECT: &str = "messageverificationcerts.paypal.com";
pub const SANDBOX_SUBJECT: &str = "messageverificationcerts.sandbox.paypal.com";

/// The certificate of the shipped `hookd.toml`, whose private key ships too.
const DEVELOPMENT_CERTIFICATE: &[u8] =
    include_bytes!("../../../fixtures/paypal/dev-certificate.pem");

/// `signed_with` of a delivery verified with a fetched certificate: no
/// configured key signed it.
pub const FETCHED: i32 = 0;

/// A source of scheme `paypal`, with its own keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayPal {
    /// The webhook's id in PayPal's dashboard: part of what is signed.
    pub webhook_id: String,
    /// Pinned certificates, in the order configured.
    pub certificates: Vec<CertificateDer<'static>>,
    /// Whether a certificate no pinned one replaces is fetched from its URL.
    pub fetch_certificates: bool,
    /// The hosts a certificate may be fetched from.
    pub certificate_hosts: Vec<String>,
    /// Whether PayPal's sandbox signs too: its hosts are on the default
    /// `certificate_hosts`, and its certificate's subject is taken.
    pub sandbox: bool,
    /// Development only: the private key `hookd sign` signs with (PKCS#8 DER).
    pub signing_key: Option<Secret>,
}

/// A PayPal source with no keys of its own, for what does not depend on them.
pub static ANY: PayPal = PayPal {
    webhook_id: String::new(),
    certificates: Vec::new(),
    fetch_certificates: false,
    certificate_hosts: Vec::new(),
    sandbox: false,
    signing_key: None,
};

/// The keys only scheme `paypal` takes.
pub const KEYS: &[&str] = &[
    "webhook_id",
    "certificates",
    "fetch_certificates",
    "certificate_hosts",
    "sandbox",
    "signing_key",
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPayPal {
    webhook_id: Option<String>,
    #[serde(default)]
    certificates: Vec<String>,
    fetch_certificates: Option<bool>,
    certificate_hosts: Option<Vec<String>>,
    sandbox: Option<bool>,
    signing_key: Option<String>,
}

pub fn configure(table: toml::Table, key: &dyn Fn(&str) -> String) -> Result<Scheme, Problem> {
    let raw: RawPayPal = keys::read(table, key)?;
    let webhook_id = raw.webhook_id.unwrap_or_default();
    if webhook_id.trim().is_empty() || webhook_id.trim() != webhook_id {
        return Err((
            key("webhook_id"),
            "is required for scheme \"paypal\": the webhook's id in PayPal's dashboard".into(),
        ));
    }
    let mut certificates = Vec::with_capacity(raw.certificates.len());
    for (j, path) in raw.certificates.iter().enumerate() {
        let at = key(&format!("certificates[{j}]"));
        let pem = std::fs::read(path).map_err(|e| (at.clone(), format!("{path}: {e}")))?;
        let cert = CertificateDer::pem_slice_iter(&pem)
            .next()
            .and_then(Result::ok)
            .ok_or_else(|| (at.clone(), format!("{path}: no PEM certificate")))?;
        webpki::EndEntityCert::try_from(&cert)
            .map_err(|e| (at, format!("{path}: not an X.509 certificate ({e})")))?;
        certificates.push(cert);
    }
    let fetch_certificates = raw.fetch_certificates.unwrap_or(true);
    if certificates.is_empty() && !fetch_certificates {
        return Err((
            key("certificates"),
            "is empty and fetch_certificates = false: no certificate could verify a delivery"
                .into(),
        ));
    }
    let sandbox = raw.sandbox.unwrap_or(false);
    let certificate_hosts = raw
        .certificate_hosts
        .unwrap_or_else(|| default_hosts(sandbox));
    for (j, host) in certificate_hosts.iter().enumerate() {
        let valid = !host.is_empty()
            && reqwest::Url::parse(&format!("https://{host}/"))
                .is_ok_and(|u| u.host_str() == Some(host.as_str()));
        if !valid {
            return Err((
                key(&format!("certificate_hosts[{j}]")),
                format!("{host:?} is not a host name (no scheme, port or path)"),
            ));
        }
    }
    let signing_key = match raw.signing_key {
        None => None,
        Some(path) => {
            Some(read_signing_key(&path).map_err(|e| (key("signing_key"), e.to_string()))?)
        }
    };
    Ok(Scheme::PayPal(PayPal {
        webhook_id,
        certificates,
        fetch_certificates,
        certificate_hosts,
        sandbox,
        signing_key,
    }))
}

/// The live hosts, and the sandbox's too for a sandbox source.
pub fn default_hosts(sandbox: bool) -> Vec<String> {
    let sandbox_hosts: &[&str] = if sandbox { &SANDBOX_HOSTS } else { &[] };
    LIVE_HOSTS
        .iter()
        .chain(sandbox_hosts)
        .map(|h| h.to_string())
        .collect()
}

/// Why a signing key cannot sign.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum KeyError {
    /// The file (its path, and why).
    #[error("{0}: {1}")]
    Unreadable(String, String),
    #[error("{0}: no PEM private key")]
    NoPem(String),
    #[error("not an RSA private key")]
    NotRsa,
    #[error("not a usable RSA private key ({0})")]
    Unusable(String),
    /// The key in the file at the path.
    #[error("{0}: {1}")]
    In(String, Box<KeyError>),
}

/// A PEM RSA private key (PKCS#8 or PKCS#1), checked usable, as PKCS#8 or PKCS#1 DER.
fn read_signing_key(path: &str) -> Result<Secret, KeyError> {
    let pem = std::fs::read(path).map_err(|e| KeyError::Unreadable(path.into(), e.to_string()))?;
    let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|_| KeyError::NoPem(path.into()))?;
    key_pair(&key).map_err(|e| KeyError::In(path.into(), Box::new(e)))?;
    Ok(Secret::new(BASE64.encode(key.secret_der())))
}

fn key_pair(key: &PrivateKeyDer<'_>) -> Result<ring::rsa::KeyPair, KeyError> {
    match key {
        PrivateKeyDer::Pkcs8(der) => ring::rsa::KeyPair::from_pkcs8(der.secret_pkcs8_der()),
        PrivateKeyDer::Pkcs1(der) => ring::rsa::KeyPair::from_der(der.secret_pkcs1_der()),
        _ => return Err(KeyError::NotRsa),
    }
    .map_err(|e| KeyError::Unusable(e.to_string()))
}

/// `{transmission id}|{transmission time}|{webhook id}|{CRC32 of the body}`.
fn signed_text(transmission_id: &str, time: &str, webhook_id: &str, body: &[u8]) -> String {
    format!(
        "{transmission_id}|{time}|{webhook_id}|{}",
        crc32fast::hash(body)
    )
}

fn required<'h>(headers: &'h dyn Headers, name: &str) -> Result<&'h str, SignatureError> {
    headers
        .header(name)
        .ok_or_else(|| SignatureError::Missing(name.to_string()))
}

impl PayPal {
    /// The certificate URL a request names, if it has the shape of PayPal's:
    /// anything else is never requested.
    fn certificate_url(&self, headers: &dyn Headers) -> Result<reqwest::Url, SignatureError> {
        let text = required(headers, CERT_URL)?;
        let url = reqwest::Url::parse(text)
            .map_err(|_| SignatureError::malformed(CERT_URL, "not a URL"))?;
        let name = url.path().strip_prefix(CERT_PATH).unwrap_or_default();
        let shaped = url.scheme() == "https"
            && url.username().is_empty()
            && url.password().is_none()
            // The default port, 443: the URL keeps no other.
            && url.port().is_none()
            && url.query().is_none()
            && url.fragment().is_none()
            && (1..=MAX_CERT_NAME).contains(&name.len())
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && url.host_str().is_some_and(|h| {
                self.certificate_hosts
                    .iter()
                    .any(|a| a.eq_ignore_ascii_case(h))
            });
        if !shaped {
            return Err(SignatureError::malformed(
                CERT_URL,
                "not PayPal's certificate URL (https on port 443, a host on the source's \
                 certificate_hosts, /v1/notifications/certs/CERT-…, no query)",
            ));
        }
        Ok(url)
    }

    /// Whether a certificate with this subject common name signs for the source.
    fn signs_for_us(&self, subject: &str) -> Option<bool> {
        if subject.eq_ignore_ascii_case(LIVE_SUBJECT) {
            Some(false)
        } else if self.sandbox && subject.eq_ignore_ascii_case(SANDBOX_SUBJECT) {
            Some(true)
        } else {
            None
        }
    }
}

impl KeyFormat for PayPal {}

/// PayPal's types for the built-in kinds: every PayPal source maps them unlisted.
const EVENT_TYPES: [(&str, PaymentKind); 5] = [
    ("PAYMENT.CAPTURE.COMPLETED", PaymentKind::Succeeded),
    ("PAYMENT.CAPTURE.DENIED", PaymentKind::Failed),
    ("PAYMENT.CAPTURE.DECLINED", PaymentKind::Failed),
    ("PAYMENT.CAPTURE.REFUNDED", PaymentKind::Refunded),
    ("CUSTOMER.DISPUTE.CREATED", PaymentKind::DisputeOpened),
];

/// What a type's `resource` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resource {
    Capture,
    Refund,
    Dispute,
}

fn resource_of(event_type: &str) -> Option<Resource> {
    match event_type {
        "PAYMENT.CAPTURE.REFUNDED" | "PAYMENT.CAPTURE.REVERSED" => Some(Resource::Refund),
        t if t.starts_with("PAYMENT.CAPTURE.") => Some(Resource::Capture),
        t if t.starts_with("CUSTOMER.DISPUTE.") => Some(Resource::Dispute),
        _ => None,
    }
}

/// The capture a refund's `up` link names (`…/captures/{id}`).
fn refunded_capture(resource: &Value) -> Option<String> {
    let links = resource.get("links")?.as_array()?;
    let up = links
        .iter()
        .find(|l| l.get("rel").and_then(Value::as_str) == Some("up"))?;
    let href = up.get("href")?.as_str()?;
    let (path, id) = href.trim_end_matches('/').rsplit_once('/')?;
    (path.ends_with("/captures") && !id.is_empty()).then(|| id.to_string())
}

/// The payment an event is about, where its type says.
fn payment_id(resource: &Value, kind: Resource) -> Option<String> {
    match kind {
        Resource::Capture => non_empty(resource.get("id")),
        Resource::Refund => refunded_capture(resource),
        Resource::Dispute => {
            non_empty(resource.pointer("/disputed_transactions/0/seller_transaction_id"))
        }
    }
}

/// `resource.amount` ({currency_code, value "10.00"}) in minor units, if stated.
fn amount(resource: &Value) -> Result<Option<(i64, String)>, FactsError> {
    let Some(amount) = resource.get("amount").filter(|a| !a.is_null()) else {
        return Ok(None);
    };
    let currency = non_empty(amount.get("currency_code"))
        .ok_or_else(|| FactsError::Missing("resource.amount.currency_code".into()))?;
    let value = amount.get("value").and_then(Value::as_str).ok_or_else(|| {
        FactsError::invalid("resource.amount.value", "is missing or not a string")
    })?;
    let minor = minor_units(value, &currency).map_err(|error| FactsError::Money {
        path: "resource.amount".into(),
        error,
    })?;
    Ok(Some((minor, currency)))
}

impl Provider for PayPal {
    fn lister(&self) -> Result<&'static super::Lister, &'static str> {
        Ok(&reconcile::LISTER)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            takes_secrets: false,
            ..Capabilities::DEFAULT
        }
    }

    fn certificate_named_by(&self) -> &'static str {
        "its PAYPAL-CERT-URL"
    }

    fn certificate_owner(&self) -> &'static str {
        "PayPal's"
    }

    fn default_mask(&self) -> Vec<String> {
        super::pointers(&[
            "/resource/payer",
            "/resource/purchase_units/*/shipping",
            "/resource/disputed_transactions/*/buyer",
        ])
    }

    fn name(&self) -> &'static str {
        "paypal"
    }

    fn signed_header_names(&self) -> Vec<&str> {
        vec![
            TRANSMISSION_ID,
            TRANSMISSION_TIME,
            TRANSMISSION_SIG,
            CERT_URL,
            AUTH_ALGO,
        ]
    }

    fn path_keys(&self) -> &'static [&'static str] {
        &["certificates", "signing_key"]
    }

    /// A signing key is for development only, and the shipped certificate's key
    /// is public.
    fn development_credential(&self) -> Option<String> {
        if self.signing_key.is_some() {
            return Some("signing_key".into());
        }
        let shipped = CertificateDer::from_pem_slice(DEVELOPMENT_CERTIFICATE).ok()?;
        let j = self.certificates.iter().position(|c| *c == shipped)?;
        Some(format!("certificates[{j}]"))
    }

    /// The pinned certificates first, then the fetched one the request names (if
    /// the source fetches and it is cached): no network here.
    fn verify(
        &self,
        keys: &Keys<'_>,
        headers: &dyn Headers,
        body: &[u8],
        now: i64,
    ) -> Result<Verified, SignatureError> {
        let algorithm = required(headers, AUTH_ALGO)?;
        if !algorithm.trim().eq_ignore_ascii_case(ALGORITHM) {
            return Err(SignatureError::malformed(AUTH_ALGO, "not SHA256withRSA"));
        }
        let transmission_id = required(headers, TRANSMISSION_ID)?;
        let time = required(headers, TRANSMISSION_TIME)?;
        let signature = BASE64
            .decode(required(headers, TRANSMISSION_SIG)?.trim())
            .map_err(|_| SignatureError::malformed(TRANSMISSION_SIG, "not base64"))?;
        let timestamp = chrono::DateTime::parse_from_rfc3339(time.trim())
            .map_err(|_| SignatureError::malformed(TRANSMISSION_TIME, "not an RFC 3339 time"))?
            .timestamp();
        let message = signed_text(transmission_id, time, &self.webhook_id, body);
        let pinned = self
            .certificates
            .iter()
            .position(|c| signed_by(c, message.as_bytes(), &signature))
            .map(|i| i32::try_from(i + 1).unwrap_or(i32::MAX));
        let signed_with = match pinned {
            Some(position) => position,
            None if self.fetch_certificates => {
                let url = self.certificate_url(headers)?;
                match cached(url.as_str(), self.sandbox) {
                    Some(c) if signed_by(&c, message.as_bytes(), &signature) => FETCHED,
                    _ => return Err(SignatureError::Mismatch),
                }
            }
            None => return Err(SignatureError::Mismatch),
        };
        keys.check_timestamp(timestamp, now)?;
        Ok(Verified { signed_with })
    }

    /// The certificate URL when the source fetches and has not got it yet.
    fn to_fetch(&self, headers: &dyn Headers) -> Result<Option<reqwest::Url>, SignatureError> {
        if !self.fetch_certificates {
            return Ok(None);
        }
        let url = self.certificate_url(headers)?;
        Ok(cached(url.as_str(), self.sandbox).is_none().then_some(url))
    }

    /// A fetched PEM chain (the signing certificate first) is cached, until
    /// its `notAfter`, once it chains to one of `roots` and its subject is
    /// PayPal's.
    fn fetched(
        &self,
        url: &reqwest::Url,
        pem: &[u8],
        roots: &[TrustAnchor<'static>],
    ) -> Result<(), SignatureError> {
        let unusable = |why: String| SignatureError::Unavailable(format!("{url}: {why}"));
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<_, _>>()
            .map_err(|_| unusable("not PEM certificates".into()))?;
        let (leaf, intermediates) = chain
            .split_first()
            .ok_or_else(|| unusable("no PEM certificate".into()))?;
        let cert = webpki::EndEntityCert::try_from(leaf)
            .map_err(|e| unusable(format!("not an X.509 certificate ({e})")))?;
        let algorithms = rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .all;
        cert.verify_for_usage(
            algorithms,
            roots,
            intermediates,
            UnixTime::now(),
            webpki::KeyUsage::server_auth(),
            None,
            None,
        )
        .map_err(|e| unusable(format!("not trusted ({e})")))?;
        let (subject, not_after) = subject_and_expiry(leaf).map_err(|e| unusable(e.to_string()))?;
        let sandbox = self.signs_for_us(&subject).ok_or_else(|| {
            let wanted = if self.sandbox {
                format!("{LIVE_SUBJECT} or {SANDBOX_SUBJECT}")
            } else {
                LIVE_SUBJECT.to_string()
            };
            unusable(format!(
                "not PayPal's signing certificate (its subject is CN={subject}, not CN={wanted})"
            ))
        })?;
        let fetched = Fetched {
            certificate: leaf.clone(),
            not_after,
            sandbox,
            used: 0,
        };
        if let Ok(mut cache) = FETCHED_CERTIFICATES.lock() {
            cache.insert(url.as_str(), fetched, chrono::Utc::now().timestamp());
        }
        Ok(())
    }

    /// The signed text holds the body's CRC32 only, which another body can
    /// match: the signature is bound to the body it is first accepted with.
    fn checksum_signature(&self, headers: &dyn Headers) -> Option<Vec<u8>> {
        BASE64.decode(headers.header(TRANSMISSION_SIG)?.trim()).ok()
    }

    fn identity(&self, _: &dyn Headers, payload: &Value) -> Result<(String, String), Missing> {
        body_identity(payload, "id", "event_type")
    }

    fn default_event_types(&self) -> HashMap<String, String> {
        kind_table(&EVENT_TYPES)
    }

    /// A capture states its amount; a refund its own id and amount and, by its
    /// `up` link, the capture refunded; a dispute the capture disputed.
    fn payment_facts(&self, payload: &Value) -> Result<PaymentFacts, FactsError> {
        let event_type = payload
            .get("event_type")
            .and_then(Value::as_str)
            .unwrap_or("");
        let kind = resource_of(event_type).ok_or_else(|| FactsError::NotAboutPayment {
            what: "type",
            name: event_type.into(),
        })?;
        let resource = payload
            .get("resource")
            .filter(|r| r.is_object())
            .ok_or_else(|| FactsError::NoObject("resource".into()))?;
        let payment_id = payment_id(resource, kind).ok_or_else(|| match kind {
            Resource::Capture => FactsError::Missing("resource.id".into()),
            Resource::Refund => FactsError::invalid(
                "resource.links",
                "has no \"up\" link to …/captures/{id} (the capture refunded)",
            ),
            Resource::Dispute => FactsError::Missing(
                "resource.disputed_transactions[0].seller_transaction_id".into(),
            ),
        })?;
        let stated = match kind {
            Resource::Dispute => None,
            _ => amount(resource)?,
        };
        let refund = match kind {
            Resource::Refund => Some(Refund {
                id: non_empty(resource.get("id"))
                    .ok_or_else(|| FactsError::Missing("resource.id".into()))?,
                amount: stated
                    .as_ref()
                    .map(|(minor, _)| *minor)
                    .ok_or_else(|| FactsError::Missing("resource.amount".into()))?,
            }),
            _ => None,
        };
        let facts = PaymentFacts {
            payment_id,
            amount: stated
                .as_ref()
                .filter(|_| kind == Resource::Capture)
                .map(|(minor, _)| *minor),
            amount_refunded: None,
            currency: stated.map(|(_, currency)| currency),
            // PayPal's capture, refund and dispute resources name no customer.
            customer_id: None,
            refund,
        };
        storable(facts)
    }

    fn index_fields(&self, payload: &Value) -> IndexFields {
        let event_type = payload
            .get("event_type")
            .and_then(Value::as_str)
            .unwrap_or("");
        let (Some(kind), Some(resource)) = (resource_of(event_type), payload.get("resource"))
        else {
            return IndexFields::default();
        };
        IndexFields {
            payment_id: payment_id(resource, kind),
            customer_id: None,
        }
    }
}

impl Simulator for PayPal {
    /// With the source's `signing_key` (development only); the certificate URL
    /// names the first of `certificate_hosts`.
    fn sign(&self, _: &[u8], body: &[u8], envelope: &Envelope<'_>) -> Signing<Signed> {
        let key = self.signing_key.as_ref().ok_or_else(|| {
            SigningError::Key(
                "scheme \"paypal\" signs with the source's signing_key (a PEM RSA private key, \
                 for development), and this source sets none"
                    .into(),
            )
        })?;
        let der = BASE64
            .decode(key.expose())
            .map_err(|_| SigningError::Key("the signing key is unreadable".into()))?;
        let key = PrivateKeyDer::try_from(der).map_err(|e| SigningError::Key(e.to_string()))?;
        let pair = key_pair(&key).map_err(|e| SigningError::Key(e.to_string()))?;
        let transmission_id = uuid_from(&rand::random::<[u8; 16]>());
        let time = chrono::DateTime::from_timestamp(envelope.timestamp, 0)
            .ok_or_else(|| SigningError::Unwritable("the time is out of range".into()))?
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let message = signed_text(&transmission_id, &time, &self.webhook_id, body);
        let mut signature = vec![0; pair.public().modulus_len()];
        pair.sign(
            &ring::signature::RSA_PKCS1_SHA256,
            &ring::rand::SystemRandom::new(),
            message.as_bytes(),
            &mut signature,
        )
        .map_err(|_| SigningError::Key("RSA signing failed".into()))?;
        let host = self
            .certificate_hosts
            .first()
            .map_or(LIVE_HOSTS[0], String::as_str);
        Ok(Signed::headers(vec![
            (TRANSMISSION_ID.to_string(), transmission_id),
            (TRANSMISSION_TIME.to_string(), time),
            (TRANSMISSION_SIG.to_string(), BASE64.encode(signature)),
            (
                CERT_URL.to_string(),
                format!("https://{host}/v1/notifications/certs/CERT-hookd-development"),
            ),
            (AUTH_ALGO.to_string(), ALGORITHM.to_string()),
        ]))
    }

    fn signing_id(&self, body: &Body<'_>) -> Result<String, SigningError> {
        body.member("id", "a PayPal body")
    }

    fn signing_type(&self, body: &Body<'_>) -> Result<String, SigningError> {
        body.member("event_type", "a PayPal body")
    }

    /// `WH-` and 24 upper-case hex digits, as PayPal's event ids look.
    fn new_id(&self, random: &[u8; 16]) -> (String, Option<String>) {
        (
            format!("WH-{}", hex::encode_upper(&random[..12])),
            Some("/id".into()),
        )
    }
}

mod certificates;

#[cfg(test)]
mod tests;
