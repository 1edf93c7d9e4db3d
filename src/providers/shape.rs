//! Where a provider's bodies carry payment facts, as data: the neutral shape
//! `{"id","type","created","data":{"payment_id","amount","amount_refunded","currency","customer_id"}}`
//! most schemes use, where a refund may also be stated one at a time
//! (`data.refund_id` with `data.refund_amount`), or a provider's own (Stripe's
//! `data.object`, declared in its folder). Pure: the payments handler reads
//! facts with it, and receiving indexes payment and customer ids with it.

use serde_json::Value;

use super::errors::{FactsError, each_storable, minor_amount};
use crate::domain::{PaymentFacts, Refund};

/// Where a provider's payment facts live in its bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PaymentShape {
    /// The object holding the facts (a JSON pointer), and how messages name it.
    pub object: &'static str,
    pub path: &'static str,
    /// The fields naming the payment, the first present winning (an id, or an
    /// expanded object with one). `id` is the object's own id.
    pub payment_id: &'static [&'static str],
    /// The field naming the customer.
    pub customer: &'static str,
    /// Whether one refund may be stated (`refund_id` with `refund_amount`)
    /// beside the cumulative `amount_refunded`.
    pub single_refunds: bool,
    /// For the history index: the `object` types whose own id is a payment's
    /// (`None`: any), and the one whose own id is a customer's.
    pub payment_objects: Option<&'static [&'static str]>,
    pub customer_object: Option<&'static str>,
}

/// The ids stored on every event for support look-ups, best effort.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IndexFields {
    pub payment_id: Option<String>,
    pub customer_id: Option<String>,
}

impl PaymentShape {
    /// `{"data":{"payment_id","amount","amount_refunded","currency","customer_id"}}`,
    /// plus `refund_id` and `refund_amount` (both or neither) for one refund.
    pub const NEUTRAL: PaymentShape = PaymentShape {
        object: "/data",
        path: "data",
        payment_id: &["payment_id"],
        customer: "customer_id",
        single_refunds: true,
        payment_objects: None,
        customer_object: None,
    };

    /// The payment facts a payment event must carry; the error is why it cannot be
    /// applied (the event then goes `dead` with that reason).
    pub fn payment_facts(self, payload: &Value) -> Result<PaymentFacts, FactsError> {
        let path = self.path;
        let object = payload
            .pointer(self.object)
            .filter(|o| o.is_object())
            .ok_or_else(|| FactsError::NoObject(path.into()))?;
        let payment_id = self
            .payment_id
            .iter()
            .find_map(|field| id_of(object.get(*field)))
            .ok_or_else(|| match self.payment_id {
                [field] => FactsError::Missing(format!("{path}.{field}")),
                fields => FactsError::Neither {
                    path: path.into(),
                    fields,
                },
            })?;
        let customer = self.customer;
        let facts = PaymentFacts {
            payment_id,
            amount: amount(object, "amount", path)?,
            amount_refunded: amount(object, "amount_refunded", path)?,
            currency: optional_string(object, "currency", path)?,
            customer_id: match object.get(customer) {
                None | Some(Value::Null) => None,
                value => Some(id_of(value).ok_or_else(|| {
                    FactsError::invalid(
                        format!("{path}.{customer}"),
                        "is neither an id nor an object with one",
                    )
                })?),
            },
            refund: match self.single_refunds {
                true => refund(object, path)?,
                false => None,
            },
        };
        each_storable(facts)
    }

    /// Payment and customer ids for the history index. Never fails: an event that
    /// cannot be indexed is still stored.
    pub fn index_fields(self, payload: &Value) -> IndexFields {
        let Some(object) = payload.pointer(self.object) else {
            return IndexFields::default();
        };
        let object_type = object.get("object").and_then(Value::as_str);
        let is_payment = self
            .payment_objects
            .is_none_or(|types| object_type.is_none_or(|t| types.contains(&t)));
        let is_customer = self.customer_object.is_some() && object_type == self.customer_object;
        let own_id = |yes: bool| yes.then(|| id_of(object.get("id"))).flatten();
        IndexFields {
            payment_id: self.payment_id.iter().find_map(|field| match *field {
                "id" => own_id(is_payment),
                field => id_of(object.get(field)),
            }),
            customer_id: id_of(object.get(self.customer)).or_else(|| own_id(is_customer)),
        }
    }
}

/// An id given as a string, or as an expanded object carrying one.
fn id_of(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(s) => non_empty_str(s),
        Value::Object(o) => o.get("id").and_then(Value::as_str).and_then(non_empty_str),
        _ => None,
    }
}

fn amount(object: &Value, field: &str, path: &str) -> Result<Option<i64>, FactsError> {
    minor_amount(object.get(field), || format!("{path}.{field}"))
}

/// The neutral shape's one refund: an id and its amount, both or neither.
fn refund(object: &Value, path: &str) -> Result<Option<Refund>, FactsError> {
    let id = optional_string(object, "refund_id", path)?;
    let amount = amount(object, "refund_amount", path)?;
    match (id, amount) {
        (Some(id), Some(amount)) => Ok(Some(Refund { id, amount })),
        (None, None) => Ok(None),
        (Some(_), None) => Err(FactsError::Alone {
            missing: format!("{path}.refund_amount"),
            given: format!("{path}.refund_id"),
        }),
        (None, Some(_)) => Err(FactsError::Alone {
            missing: format!("{path}.refund_id"),
            given: format!("{path}.refund_amount"),
        }),
    }
}

fn optional_string(object: &Value, field: &str, path: &str) -> Result<Option<String>, FactsError> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(non_empty_str(s)),
        Some(_) => Err(FactsError::NotText(format!("{path}.{field}"))),
    }
}

fn non_empty_str(value: &str) -> Option<String> {
    let value = value.trim();
    (!value.is_empty()).then(|| value.to_string())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::domain::MAX_ID_LEN;

    #[test]
    fn malformed_payment_payloads_say_why() {
        let cases = [
            (
                PaymentShape::NEUTRAL,
                json!({"data":{"amount":1}}),
                "data.payment_id",
            ),
            (
                PaymentShape::NEUTRAL,
                json!({"data":{"payment_id":"p","currency":7}}),
                "data.currency",
            ),
            (
                PaymentShape::NEUTRAL,
                json!({"data":{"payment_id":"p","refund_id":"r1"}}),
                "data.refund_amount is missing (data.refund_id is given)",
            ),
            (
                PaymentShape::NEUTRAL,
                json!({"data":{"payment_id":"p","refund_amount":5}}),
                "data.refund_id is missing (data.refund_amount is given)",
            ),
            (
                PaymentShape::NEUTRAL,
                json!({"data":{"payment_id":"p","refund_id":"r1","refund_amount":-5}}),
                "data.refund_amount is not a non-negative integer",
            ),
            (
                PaymentShape::NEUTRAL,
                json!({"data":{"payment_id":"p","refund_id":7,"refund_amount":5}}),
                "data.refund_id is not a string",
            ),
            (
                PaymentShape::NEUTRAL,
                json!({"data":{"payment_id":"p","refund_id":"r".repeat(MAX_ID_LEN + 1),"refund_amount":5}}),
                "the refund id is longer than",
            ),
        ];
        for (shape, payload, reason) in cases {
            let err = shape
                .payment_facts(&payload)
                .expect_err("malformed")
                .to_string();
            assert!(err.contains(reason), "{payload}: {err}");
        }
    }

    #[test]
    fn the_neutral_shape_states_one_refund() {
        let neutral = json!({"data":{"payment_id":"p_1","refund_id":" re_1 ","refund_amount":300}});
        let facts = PaymentShape::NEUTRAL
            .payment_facts(&neutral)
            .expect("valid");
        assert_eq!(
            (facts.refund, facts.amount_refunded),
            (
                Some(Refund {
                    id: "re_1".into(),
                    amount: 300
                }),
                None
            )
        );
    }
}
