//! Why a provider cannot do what is asked of it, as types every provider
//! shares: reading a request's payload and events ([`PayloadError`]), its
//! payment facts ([`FactsError`]), naming an event to fetch ([`FetchError`]),
//! and signing as it signs ([`SigningError`]). Each says itself in one line,
//! the text that reaches answers, logs and `hookd` output.

use crate::domain::{MAX_ID_LEN, PaymentFacts};
use crate::money::AmountError;
pub use crate::signature::SecretError;

/// Why a verified body holds no event: it is not what the provider sends.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// The body is not JSON.
    #[error("body is not JSON: {0}")]
    NotJson(String),
    /// The form has no `field` (where the payload travels).
    #[error("the form has no {0}")]
    NoField(&'static str),
    /// The form's `field` is not in the encoding the provider writes.
    #[error("{field} is not {encoding}")]
    NotEncoded {
        field: &'static str,
        encoding: &'static str,
    },
    /// The form's `field` decodes, but not to what the provider sends.
    #[error("{field}: {problem}")]
    Unreadable {
        field: &'static str,
        problem: String,
    },
    /// The list of a several-event request holds no event.
    #[error("{0} is empty")]
    Empty(&'static str),
    /// The several events of a request cannot be read: the provider's own words.
    #[error("{0}")]
    Events(&'static str),
}

/// Why an event's payment facts cannot be read: the event then goes `dead`
/// with this reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FactsError {
    /// The event's type (`what`: as the provider names types) is about no payment.
    #[error("{what} {name:?} is not about a payment")]
    NotAboutPayment { what: &'static str, name: String },
    /// The object holding the facts.
    #[error("{0} is missing or not an object")]
    NoObject(String),
    /// A field the facts need.
    #[error("{0} is missing")]
    Missing(String),
    /// Every field that may name the payment.
    #[error("{path} has neither {}", .fields.join(" nor "))]
    Neither {
        path: String,
        fields: &'static [&'static str],
    },
    /// A field that comes with another, which is given alone.
    #[error("{missing} is missing ({given} is given)")]
    Alone { missing: String, given: String },
    /// An amount in minor units that is not a whole number of them.
    #[error("{0} is not a non-negative integer")]
    NotAmount(String),
    /// A text field that is not text.
    #[error("{0} is not a string")]
    NotText(String),
    /// A decimal amount that is not money in its currency.
    #[error("{path}: {error}")]
    Money { path: String, error: AmountError },
    /// What an event of a kind needs (`a REFUND item` needs `amount.value`).
    #[error("{what} needs {field}")]
    Needs {
        what: &'static str,
        field: &'static str,
    },
    /// A field that is there, but not as the provider writes it.
    #[error("{path} {problem}")]
    Invalid { path: String, problem: String },
    /// One text of the facts does not fit a text column.
    #[error("the {0} is longer than {MAX_ID_LEN} bytes or contains a NUL character")]
    TooLong(&'static str),
    /// Some id of the facts does not fit a text column.
    #[error("an id is longer than {MAX_ID_LEN} bytes or contains a NUL character")]
    IdTooLong,
}

impl FactsError {
    /// `path` as not what the provider writes there.
    pub fn invalid(path: impl Into<String>, problem: impl Into<String>) -> Self {
        FactsError::Invalid {
            path: path.into(),
            problem: problem.into(),
        }
    }
}

/// The facts, if every id and text in them fits a PostgreSQL text column.
pub fn storable(facts: PaymentFacts) -> Result<PaymentFacts, FactsError> {
    facts.storable().map_err(|_| FactsError::IdTooLong)
}

/// The facts, if each of their texts fits a PostgreSQL text column: the
/// error names the first that does not.
pub fn each_storable(facts: PaymentFacts) -> Result<PaymentFacts, FactsError> {
    let texts = [
        ("payment id", Some(&facts.payment_id)),
        ("currency", facts.currency.as_ref()),
        ("customer id", facts.customer_id.as_ref()),
        ("refund id", facts.refund.as_ref().map(|r| &r.id)),
    ];
    for (what, text) in texts {
        if text.is_some_and(|t| !crate::domain::storable_id(t)) {
            return Err(FactsError::TooLong(what));
        }
    }
    Ok(facts)
}

/// An amount in minor units at `value`, if stated (absent or null is none);
/// `path` names it in the error.
pub fn minor_amount(
    value: Option<&serde_json::Value>,
    path: impl FnOnce() -> String,
) -> Result<Option<i64>, FactsError> {
    match value {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .filter(|v| *v >= 0)
            .map(Some)
            .ok_or_else(|| FactsError::NotAmount(path())),
    }
}

/// Why the event a request names cannot be asked of the provider's API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// The request names no event.
    #[error("the form names no id")]
    NoId,
    /// The id is not one path segment (letters, digits, `_` and `-`).
    #[error("the id {0:?} cannot be asked for")]
    Unaskable(String),
}

/// Why a body cannot be signed as its provider would sign it (`hookd sign`,
/// `hookd replay`, the tests).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SigningError {
    /// The body is not JSON.
    #[error("the body is not JSON: {0}")]
    NotJson(String),
    /// `body` (as messages name it: "a Stripe body") lacks `what`.
    #[error("{body} needs {what}")]
    Needs {
        body: &'static str,
        what: &'static str,
    },
    /// `body` lacks the top-level string member `field`.
    #[error("{body} needs {} {field:?}", article(.field))]
    NeedsMember {
        body: &'static str,
        field: &'static str,
    },
    /// The body has nothing at the pointer a source names.
    #[error("the body has no {0}")]
    NoPointer(String),
    /// The provider names this with the request, not in the body.
    #[error("{0}")]
    NotInBody(&'static str),
    /// The secret or key to sign with is unusable.
    #[error(transparent)]
    Secret(#[from] SecretError),
    /// The provider's signing key is absent or unusable.
    #[error("{0}")]
    Key(String),
    /// The body cannot be written as the provider sends it.
    #[error("{0}")]
    Unwritable(String),
}

/// The article before a word.
fn article(word: &str) -> &'static str {
    match word.starts_with(['a', 'e', 'i', 'o', 'u']) {
        true => "an",
        false => "a",
    }
}

/// What signing as a provider gives, or why it cannot.
pub type Signing<T> = Result<T, SigningError>;

impl SigningError {
    /// `body` lacks `what`.
    pub const fn needs(body: &'static str, what: &'static str) -> Self {
        SigningError::Needs { body, what }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Refund;

    #[test]
    fn each_error_says_itself_as_it_always_did() {
        let cases: [(String, &str); 12] = [
            (
                SigningError::NeedsMember {
                    body: "a Stripe body",
                    field: "id",
                }
                .to_string(),
                "a Stripe body needs an \"id\"",
            ),
            (
                SigningError::NeedsMember {
                    body: "the body",
                    field: "type",
                }
                .to_string(),
                "the body needs a \"type\"",
            ),
            (
                PayloadError::NotEncoded {
                    field: "bt_payload",
                    encoding: "base64",
                }
                .to_string(),
                "bt_payload is not base64",
            ),
            (PayloadError::Empty("events").to_string(), "events is empty"),
            (
                FactsError::NotAboutPayment {
                    what: "type",
                    name: "x.y".into(),
                }
                .to_string(),
                "type \"x.y\" is not about a payment",
            ),
            (
                FactsError::Neither {
                    path: "data.object".into(),
                    fields: &["payment_intent", "id"],
                }
                .to_string(),
                "data.object has neither payment_intent nor id",
            ),
            (
                FactsError::Alone {
                    missing: "data.refund_id".into(),
                    given: "data.refund_amount".into(),
                }
                .to_string(),
                "data.refund_id is missing (data.refund_amount is given)",
            ),
            (
                FactsError::Needs {
                    what: "a REFUND item",
                    field: "amount.value",
                }
                .to_string(),
                "a REFUND item needs amount.value",
            ),
            (
                FetchError::Unaskable("a/b".into()).to_string(),
                "the id \"a/b\" cannot be asked for",
            ),
            (
                SigningError::needs("a Stripe body", "an \"id\"").to_string(),
                "a Stripe body needs an \"id\"",
            ),
            (
                SigningError::from(SecretError::Empty).to_string(),
                "is empty",
            ),
            (
                SigningError::NoPointer("/a".into()).to_string(),
                "the body has no /a",
            ),
        ];
        for (said, expected) in cases {
            assert_eq!(said, expected);
        }
    }

    #[test]
    fn too_long_ids_are_refused_by_both_checks() {
        let facts = PaymentFacts {
            payment_id: "p".into(),
            refund: Some(Refund {
                id: "r".repeat(MAX_ID_LEN + 1),
                amount: 1,
            }),
            ..PaymentFacts::default()
        };
        let domain = facts.clone().storable().expect_err("too long");
        assert_eq!(storable(facts.clone()), Err(FactsError::IdTooLong));
        assert_eq!(FactsError::IdTooLong.to_string(), domain);
        assert_eq!(
            each_storable(facts).map_err(|e| e.to_string()),
            Err(format!(
                "the refund id is longer than {MAX_ID_LEN} bytes or contains a NUL character"
            ))
        );
    }
}
