//! What the providers' unit tests share: checking a delivery as a source
//! does, what hookd sends when it signs as a provider, and the known answers
//! of a provider's own SDK (`tests/vectors/`).

use std::time::Duration;

use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::{Provider, Scheme, Verifier, sign};
use crate::signature::{Envelope, Headers, Secret, SignatureError, Signed, Verified};

/// Secrets as a source lists them.
pub fn secrets(values: &[&str]) -> Vec<Secret> {
    values.iter().map(|s| Secret::new(*s)).collect()
}

/// A source of `scheme` holding `secrets`, with five minutes' tolerance.
pub fn verifier<'a>(scheme: &'a Scheme, secrets: &'a [Secret]) -> Verifier<'a> {
    Verifier {
        scheme,
        secrets,
        tolerance: Duration::from_secs(300),
    }
}

/// Checks a delivery's signature as a source of `scheme` holding `secrets`
/// does at `now` (Unix seconds).
pub fn verify(
    scheme: &Scheme,
    secrets: &[&str],
    headers: &[(String, String)],
    body: &[u8],
    now: i64,
) -> Result<Verified, SignatureError> {
    verifier(scheme, &self::secrets(secrets)).verify(headers, body, now)
}

/// What hookd sends with `body` as `scheme`'s provider, signed with `secret`,
/// for the event `event_id` of `event_type` at `timestamp`.
pub fn signed(
    scheme: &Scheme,
    secret: &str,
    body: &[u8],
    (event_id, event_type): (&str, &str),
    timestamp: i64,
) -> Signed {
    let envelope = Envelope {
        event_id,
        event_type,
        timestamp,
    };
    sign(scheme, &Secret::new(secret), body, &envelope).expect("sign")
}

/// The value of the header `name` among `headers`.
pub fn header(headers: &[(String, String)], name: &str) -> String {
    headers.header(name).expect("header").to_string()
}

/// Each payload's payment facts are refused by `provider` with exactly its reason.
pub fn refuses_facts(provider: &dyn Provider, cases: Vec<(serde_json::Value, &str)>) {
    for (payload, reason) in cases {
        assert_eq!(
            provider.payment_facts(&payload).map_err(|e| e.to_string()),
            Err(reason.into()),
            "{payload}"
        );
    }
}

/// A provider SDK's known answers: the cases its docs cover, and the quirks
/// (inputs outside them) hookd decides for itself.
#[derive(Deserialize)]
pub struct Vectors<C> {
    pub cases: Vec<C>,
    #[serde(default = "Vec::new")]
    pub quirks: Vec<C>,
}

/// A known answer of an SDK whose secret is one text: whether it takes
/// `signature` for `body`, and, for a case it takes or one signed with
/// another secret, that it signs so.
#[derive(Deserialize)]
pub struct SecretCase {
    pub name: String,
    pub secret: String,
    pub body: String,
    pub signature: String,
    pub signed_with_secret: Option<String>,
    pub valid: bool,
    /// The ids of the events the SDK's parser gave, for an SDK that parses
    /// several events a request (accepted cases).
    #[serde(default)]
    pub parsed_ids: Vec<String>,
}

/// Each case gets the SDK's verdict from `accepts`, and `signature` (of a
/// secret and a body) signs as the SDK does.
pub fn sdk_verdicts(
    cases: &[SecretCase],
    accepts: impl Fn(&SecretCase) -> bool,
    signature: impl Fn(&str, &[u8]) -> String,
) {
    for case in cases {
        assert_eq!(accepts(case), case.valid, "{}", case.name);
        if case.valid || case.signed_with_secret.is_some() {
            let secret = case.signed_with_secret.as_deref().unwrap_or(&case.secret);
            assert_eq!(
                signature(secret, case.body.as_bytes()),
                case.signature,
                "{}",
                case.name
            );
        }
    }
}

/// The known answers in `json` (a file of `tests/vectors/`).
pub fn vectors<C: DeserializeOwned>(json: &str) -> Vectors<C> {
    serde_json::from_str(json).expect("vectors")
}
