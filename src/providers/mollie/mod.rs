//! Mollie: a webhook is an unsigned form, `id=tr_…`, that only names a
//! payment. Nothing in it can be trusted, so nothing in it is kept: at receipt
//! hookd fetches `GET /v2/payments/{id}` with the source's `api_key` (over TLS,
//! as reconcile asks: that fetch is the event's proof), and the payment it
//! answers is the event. Its id is the payment's id and status (`tr_x:paid`),
//! with the amounts refunded and charged back when there are any
//! (`tr_x:paid:refunded=5.00`), so each change Mollie calls the webhook for is
//! one event; its type is `payment.` and what changed (`payment.paid`,
//! `payment.refunded`, `payment.charged_back`). Amounts are decimal text
//! (`"10.00"`), in minor units once read; refunds and chargebacks are read
//! from the payment's own `amountRefunded` and `amountChargedBack` totals.
//! An id the API does not know is stored, ignored, as `{id}:unknown`.
//!
//! Anyone can post an id, and each post spends a call of the merchant's key.
//! Mollie calls the `webhookUrl` the merchant gave when creating the payment,
//! so that URL can carry a secret: with `url_tokens`, a request must name one
//! of them as its `token` query parameter (`…/webhooks/mollie?token=…`) or it
//! is refused before anything is fetched. A payment keeps its URL for life
//! (refunds and chargebacks come months later), so rotation adds a token and
//! keeps the old one for as long as payments made with it may still change.

mod reconcile;

use serde::Deserialize;
use serde_json::{Value, json};

use super::api::Fetch;
use super::errors::{FactsError, FetchError, Signing, SigningError, storable};
use super::shape::IndexFields;
use super::{
    Answer, Body, Capabilities, Missing, Provider, Scheme, Simulator, body_member, id_in_body,
    non_empty,
};
use crate::config_keys::{self as keys, Problem};
use crate::domain::{PaymentFacts, PaymentKind};
use crate::signature::{
    Envelope, Headers, KeyFormat, Keys, Secret, SignatureError, Signed, Verified,
};

const FORM: &str = "application/x-www-form-urlencoded";
/// A body to sign, as messages name it.
const BODY: &str = "a Mollie body";
const PAYMENTS: &str = "/v2/payments/";
/// The status an id the API does not know is stored with.
const UNKNOWN: &str = "unknown";

/// The query parameter a request names its URL token in.
pub const TOKEN: &str = "token";
/// A URL token's length at least: it is all that keeps the key's calls for
/// Mollie's requests.
const MIN_TOKEN: usize = 16;

/// A source of scheme `mollie`, with its own keys.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Mollie {
    /// The tokens a request's `token` query parameter may name (none: any
    /// request is fetched).
    pub url_tokens: Vec<Secret>,
}

impl std::fmt::Debug for Mollie {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mollie")
            .field("url_tokens", &self.url_tokens.len())
            .finish()
    }
}

/// A Mollie source with no keys of its own, for what does not depend on them.
pub static ANY: Mollie = Mollie {
    url_tokens: Vec::new(),
};

/// The keys only scheme `mollie` takes.
pub const KEYS: &[&str] = &["url_tokens"];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMollie {
    /// As the file lists them, or as `HOOKD_SOURCE_<NAME>_URL_TOKENS` gives them.
    url_tokens: Option<keys::Listed>,
}

pub fn configure(table: toml::Table, key: &dyn Fn(&str) -> String) -> Result<Scheme, Problem> {
    let raw: RawMollie = keys::read(table, key)?;
    // Set but naming none must not quietly open the source to every call.
    let tokens = match raw.url_tokens {
        None => Vec::new(),
        Some(listed) => listed.items(key("url_tokens"), "token", "take every call")?,
    };
    let mut url_tokens: Vec<Secret> = Vec::with_capacity(tokens.len());
    for (i, token) in tokens.into_iter().enumerate() {
        let at = || key(&format!("url_tokens[{i}]"));
        if token.len() < MIN_TOKEN {
            return Err((
                at(),
                format!("is shorter than {MIN_TOKEN} characters; easy to guess"),
            ));
        }
        // What can stand in a URL as it is, so the webhookUrl given to Mollie
        // needs no escaping.
        let unreserved = |c: char| c.is_ascii_alphanumeric() || "-._~".contains(c);
        if !token.chars().all(unreserved) {
            return Err((at(), "must use only letters, digits, -, ., _ and ~".into()));
        }
        if url_tokens.iter().any(|t| t.expose() == token) {
            return Err((at(), "is the same as another token".into()));
        }
        url_tokens.push(Secret::new(token));
    }
    Ok(Scheme::Mollie(Mollie { url_tokens }))
}

impl KeyFormat for Mollie {}

/// A payment's amount at `field` (`{"value": "10.00", "currency": "EUR"}`)
/// in minor units, with its currency; `None` when absent.
fn amount(payment: &Value, field: &str) -> Result<Option<(i64, String)>, FactsError> {
    let Some(amount) = payment.get(field).filter(|a| !a.is_null()) else {
        return Ok(None);
    };
    let currency = amount
        .get("currency")
        .and_then(Value::as_str)
        .ok_or_else(|| FactsError::Missing(format!("{field}.currency")))?;
    let value = amount
        .get("value")
        .and_then(Value::as_str)
        .ok_or_else(|| FactsError::Missing(format!("{field}.value")))?;
    let minor = crate::money::minor_units(value, currency).map_err(|error| FactsError::Money {
        path: field.into(),
        error,
    })?;
    Ok(Some((minor, currency.to_string())))
}

/// The decimal text of a non-zero amount at `field`.
fn stated(payment: &Value, field: &str) -> Option<String> {
    let value = payment.pointer(&format!("/{field}/value"))?.as_str()?;
    amount(payment, field)
        .ok()
        .flatten()
        .filter(|(minor, _)| *minor > 0)
        .map(|_| value.to_string())
}

fn status(payment: &Value) -> Option<String> {
    body_member(payment, "status")
}

/// What changed, as the event's type says it: a chargeback, else a refund,
/// else the status.
fn change(payment: &Value) -> Option<String> {
    if stated(payment, "amountChargedBack").is_some() {
        return Some("charged_back".into());
    }
    if stated(payment, "amountRefunded").is_some() {
        return Some("refunded".into());
    }
    status(payment)
}

/// A payment id's length at most (Mollie's are `tr_` and ten characters).
const MAX_PAYMENT_ID: usize = 64;

impl Provider for Mollie {
    fn lister(&self) -> Result<&'static super::Lister, &'static str> {
        Ok(&reconcile::LISTER)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            takes_secrets: false,
            names_only: true,
            ..Capabilities::DEFAULT
        }
    }

    fn name(&self) -> &'static str {
        "mollie"
    }

    /// Anyone can post an id: the answer must not tell what the API said.
    fn answer(&self) -> Answer {
        Answer::Nothing
    }

    fn signed_header_names(&self) -> Vec<&str> {
        Vec::new()
    }

    /// With `url_tokens`, the request's `token` query parameter must be one
    /// of them; every token is tried, each in constant time.
    fn authenticate(&self, headers: &dyn Headers) -> Result<(), SignatureError> {
        if self.url_tokens.is_empty() {
            return Ok(());
        }
        let given = headers
            .query()
            .and_then(|query| {
                form_urlencoded::parse(query.as_bytes())
                    .find(|(name, _)| name == TOKEN)
                    .map(|(_, token)| token.into_owned())
            })
            .ok_or(SignatureError::MissingQuery(TOKEN))?;
        let matched = self
            .url_tokens
            .iter()
            .fold(false, |matched, token| matched | token.is(given.as_bytes()));
        if matched {
            Ok(())
        } else {
            Err(SignatureError::Mismatch)
        }
    }

    fn exposure(&self) -> Option<String> {
        self.url_tokens.is_empty().then(|| {
            "no url_tokens: anyone who can reach the listener can make hookd spend calls of \
             api_key (one for each id posted); give Mollie webhookUrls carrying ?token= and \
             list the token in url_tokens"
                .to_string()
        })
    }

    /// What `hookd replay` adds to the source's URL: its newest token.
    fn delivery_query(&self) -> Option<String> {
        let token = self.url_tokens.first()?;
        Some(
            form_urlencoded::Serializer::new(String::new())
                .append_pair(TOKEN, token.expose())
                .finish(),
        )
    }

    /// Nothing to verify: the fetch at receipt is the proof.
    fn verify(
        &self,
        _: &Keys<'_>,
        _: &dyn Headers,
        _: &[u8],
        _: i64,
    ) -> Result<Verified, SignatureError> {
        Ok(Verified::FROM_PROVIDER_API)
    }

    fn receipt_fetch(&self, body: &[u8]) -> Option<Result<(Fetch, Value), FetchError>> {
        let id = form_urlencoded::parse(body)
            .find(|(name, _)| name == "id")
            .map(|(_, id)| id.into_owned());
        Some(match id {
            None => Err(FetchError::NoId),
            // Only a payment's id is asked for: anything else would spend a
            // call of the merchant's key on a 404 (or another resource).
            Some(id) if !id.starts_with("tr_") || id.len() > MAX_PAYMENT_ID => {
                Err(FetchError::Unaskable(id))
            }
            Some(id) => Fetch::of(PAYMENTS, &id, Vec::new())
                .map(|fetch| (fetch, json!({"id": id, "status": UNKNOWN}))),
        })
    }

    fn identity(&self, _: &dyn Headers, payload: &Value) -> Result<(String, String), Missing> {
        let id = id_in_body(payload, "id")?;
        let status = status(payload).ok_or_else(|| Missing::Type("body.status".into()))?;
        let mut event_id = format!("{id}:{status}");
        for (field, name) in [
            ("amountRefunded", "refunded"),
            ("amountChargedBack", "charged_back"),
        ] {
            if let Some(value) = stated(payload, field) {
                event_id.push_str(&format!(":{name}={value}"));
            }
        }
        let change = change(payload).unwrap_or(status);
        Ok((event_id, format!("payment.{change}")))
    }

    /// A payment's kind follows what changed: paid → succeeded; failed,
    /// expired, canceled → failed; a refund → refunded; a chargeback →
    /// dispute opened; open, pending and authorized have none.
    fn kind_of(&self, event_type: &str, _payload: &Value) -> Option<PaymentKind> {
        match event_type.strip_prefix("payment.")? {
            "paid" => Some(PaymentKind::Succeeded),
            "failed" | "expired" | "canceled" => Some(PaymentKind::Failed),
            "refunded" => Some(PaymentKind::Refunded),
            "charged_back" => Some(PaymentKind::DisputeOpened),
            _ => None,
        }
    }

    fn payment_facts(&self, payload: &Value) -> Result<PaymentFacts, FactsError> {
        let payment_id =
            non_empty(payload.get("id")).ok_or_else(|| FactsError::Missing("id".into()))?;
        let (minor, currency) =
            amount(payload, "amount")?.ok_or_else(|| FactsError::Missing("amount".into()))?;
        let refunded = amount(payload, "amountRefunded")?.map(|(minor, _)| minor);
        storable(PaymentFacts {
            payment_id,
            amount: Some(minor),
            amount_refunded: refunded,
            currency: Some(currency),
            customer_id: non_empty(payload.get("customerId")),
            refund: None,
        })
    }

    fn index_fields(&self, payload: &Value) -> IndexFields {
        IndexFields {
            payment_id: non_empty(payload.get("id")),
            customer_id: non_empty(payload.get("customerId")),
        }
    }

    /// Parts of a payment that change without Mollie calling the webhook.
    fn default_fingerprint_ignore(&self) -> Vec<String> {
        [
            "/_links",
            "/details",
            "/amountRemaining",
            "/amountCaptured",
            "/expiresAt",
        ]
        .map(String::from)
        .to_vec()
    }

    fn default_mask(&self) -> Vec<String> {
        [
            "/billingAddress",
            "/shippingAddress",
            "/billingEmail",
            "/details/consumerName",
            "/details/consumerAccount",
            "/details/cardHolder",
            "/details/cardFingerprint",
        ]
        .map(String::from)
        .to_vec()
    }
}

impl Simulator for Mollie {
    /// The form Mollie would post for a payment (or `{"id": …}`): its id only.
    fn sign(&self, _: &[u8], body: &[u8], _: &Envelope<'_>) -> Signing<Signed> {
        let payment: Value =
            serde_json::from_slice(body).map_err(|e| SigningError::NotJson(e.to_string()))?;
        let id = payment
            .get("id")
            .and_then(Value::as_str)
            .ok_or(SigningError::NeedsMember {
                body: BODY,
                field: "id",
            })?;
        let form = form_urlencoded::Serializer::new(String::new())
            .append_pair("id", id)
            .finish();
        Ok(Signed {
            headers: vec![("Content-Type".into(), FORM.into())],
            body: Some(form.into_bytes()),
        })
    }

    fn signing_id(&self, body: &Body<'_>) -> Result<String, SigningError> {
        match self.identity(&Vec::<(String, String)>::new(), body.value) {
            Ok((id, _)) => Ok(id),
            Err(_) => body.member("id", BODY),
        }
    }

    fn signing_type(&self, body: &Body<'_>) -> Result<String, SigningError> {
        Ok(change(body.value).map_or_else(|| "payment".into(), |c| format!("payment.{c}")))
    }

    /// `tr_` and 10 letters and digits, as Mollie's payment ids are.
    fn new_id(&self, random: &[u8; 16]) -> (String, Option<String>) {
        (
            format!("tr_{}", &hex::encode(random)[..10]),
            Some("/id".into()),
        )
    }
}

#[cfg(test)]
mod tests;
