//! Where each scheme's bodies carry payment facts: Stripe's `data.object` (a
//! PaymentIntent, Charge, Dispute or Refund), or the neutral shape
//! `{"id","type","created","data":{"payment_id","amount","amount_refunded","currency","customer_id"}}`
//! every other scheme uses, where a refund may also be stated one at a time
//! (`data.refund_id` with `data.refund_amount`). Pure: the payments handler reads facts with it, and
//! receiving indexes payment and customer ids with it.

use serde_json::Value;

use crate::domain::{MAX_ID_LEN, PaymentFacts, Refund, storable_id};

/// Where a scheme's payment facts live in its bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaymentShape {
    /// Stripe's `data.object`: a PaymentIntent, Charge or Dispute.
    Stripe,
    /// `{"id","type","created","data":{"payment_id","amount","amount_refunded","currency","customer_id"}}`,
    /// plus `refund_id` and `refund_amount` (both or neither) for one refund.
    Neutral,
}

/// The ids stored on every event for support look-ups, best effort.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IndexFields {
    pub payment_id: Option<String>,
    pub customer_id: Option<String>,
}

const STRIPE_PAYMENT_OBJECTS: [&str; 4] = ["payment_intent", "charge", "dispute", "refund"];

impl PaymentShape {
    /// The payment facts a payment event must carry; the error is why it cannot be
    /// applied (the event then goes `dead` with that reason).
    pub fn payment_facts(self, payload: &Value) -> Result<PaymentFacts, String> {
        let (object, path) = match self {
            PaymentShape::Stripe => (payload.pointer("/data/object"), "data.object"),
            PaymentShape::Neutral => (payload.get("data"), "data"),
        };
        let object = object
            .filter(|o| o.is_object())
            .ok_or_else(|| format!("{path} is missing or not an object"))?;
        let (payment_id, customer) = match self {
            PaymentShape::Stripe => (
                id_of(object.get("payment_intent")).or_else(|| id_of(object.get("id"))),
                "customer",
            ),
            PaymentShape::Neutral => (id_of(object.get("payment_id")), "customer_id"),
        };
        let payment_id = payment_id.ok_or_else(|| match self {
            PaymentShape::Stripe => format!("{path} has neither payment_intent nor id"),
            PaymentShape::Neutral => format!("{path}.payment_id is missing"),
        })?;
        let facts = PaymentFacts {
            payment_id,
            amount: amount(object, "amount", path)?,
            amount_refunded: amount(object, "amount_refunded", path)?,
            currency: optional_string(object, "currency", path)?,
            customer_id: match object.get(customer) {
                None | Some(Value::Null) => None,
                value => Some(id_of(value).ok_or_else(|| {
                    format!("{path}.{customer} is neither an id nor an object with one")
                })?),
            },
            // Stripe states the cumulative `amount_refunded` only.
            refund: match self {
                PaymentShape::Stripe => None,
                PaymentShape::Neutral => refund(object, path)?,
            },
        };
        let texts = [
            ("payment id", Some(&facts.payment_id)),
            ("currency", facts.currency.as_ref()),
            ("customer id", facts.customer_id.as_ref()),
            ("refund id", facts.refund.as_ref().map(|r| &r.id)),
        ];
        for (what, text) in texts {
            if text.is_some_and(|t| !storable_id(t)) {
                return Err(format!(
                    "the {what} is longer than {MAX_ID_LEN} bytes or contains a NUL character"
                ));
            }
        }
        Ok(facts)
    }

    /// Payment and customer ids for the history index. Never fails: an event that
    /// cannot be indexed is still stored.
    pub fn index_fields(self, payload: &Value) -> IndexFields {
        match self {
            PaymentShape::Stripe => {
                let Some(object) = payload.pointer("/data/object") else {
                    return IndexFields::default();
                };
                let object_type = object.get("object").and_then(Value::as_str);
                let is_customer = object_type == Some("customer");
                let is_payment = object_type.is_none_or(|t| STRIPE_PAYMENT_OBJECTS.contains(&t));
                IndexFields {
                    payment_id: id_of(object.get("payment_intent"))
                        .or_else(|| is_payment.then(|| id_of(object.get("id"))).flatten()),
                    customer_id: id_of(object.get("customer"))
                        .or_else(|| is_customer.then(|| id_of(object.get("id"))).flatten()),
                }
            }
            PaymentShape::Neutral => {
                let data = payload.get("data");
                let field = |name| data.and_then(|d| id_of(d.get(name)));
                IndexFields {
                    payment_id: field("payment_id"),
                    customer_id: field("customer_id"),
                }
            }
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

fn amount(object: &Value, field: &str, path: &str) -> Result<Option<i64>, String> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_i64()
            .filter(|v| *v >= 0)
            .map(Some)
            .ok_or_else(|| format!("{path}.{field} is not a non-negative integer")),
    }
}

/// The neutral shape's one refund: an id and its amount, both or neither.
fn refund(object: &Value, path: &str) -> Result<Option<Refund>, String> {
    let id = optional_string(object, "refund_id", path)?;
    let amount = amount(object, "refund_amount", path)?;
    match (id, amount) {
        (Some(id), Some(amount)) => Ok(Some(Refund { id, amount })),
        (None, None) => Ok(None),
        (Some(_), None) => Err(format!(
            "{path}.refund_amount is missing ({path}.refund_id is given)"
        )),
        (None, Some(_)) => Err(format!(
            "{path}.refund_id is missing ({path}.refund_amount is given)"
        )),
    }
}

fn optional_string(object: &Value, field: &str, path: &str) -> Result<Option<String>, String> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(non_empty_str(s)),
        Some(_) => Err(format!("{path}.{field} is not a string")),
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

    #[test]
    fn stripe_payment_facts_prefer_the_payment_intent() {
        let charge = json!({"data":{"object":{"id":"ch_1","object":"charge","payment_intent":"pi_9",
            "amount":1000,"amount_refunded":400,"currency":"eur","customer":{"id":"cus_2"}}}});
        let facts = PaymentShape::Stripe.payment_facts(&charge).expect("valid");
        assert_eq!(
            facts,
            PaymentFacts {
                payment_id: "pi_9".into(),
                amount: Some(1000),
                amount_refunded: Some(400),
                currency: Some("eur".into()),
                customer_id: Some("cus_2".into()),
                refund: None,
            }
        );
        let intent = json!({"data":{"object":{"id":"pi_3","amount":5,"customer":null}}});
        let facts = PaymentShape::Stripe.payment_facts(&intent).expect("valid");
        assert_eq!(
            (facts.payment_id.as_str(), facts.customer_id),
            ("pi_3", None)
        );
    }

    #[test]
    fn malformed_payment_payloads_say_why() {
        let cases = [
            (
                PaymentShape::Stripe,
                json!({"data":{}}),
                "data.object is missing",
            ),
            (
                PaymentShape::Stripe,
                json!({"data":{"object":{"amount":1}}}),
                "neither payment_intent nor id",
            ),
            (
                PaymentShape::Stripe,
                json!({"data":{"object":{"id":"pi","amount":"10"}}}),
                "data.object.amount",
            ),
            (
                PaymentShape::Stripe,
                json!({"data":{"object":{"id":"pi","amount":-1}}}),
                "data.object.amount",
            ),
            (
                PaymentShape::Neutral,
                json!({"data":{"amount":1}}),
                "data.payment_id",
            ),
            (
                PaymentShape::Neutral,
                json!({"data":{"payment_id":"p","currency":7}}),
                "data.currency",
            ),
            (
                PaymentShape::Neutral,
                json!({"data":{"payment_id":"p","refund_id":"r1"}}),
                "data.refund_amount is missing (data.refund_id is given)",
            ),
            (
                PaymentShape::Neutral,
                json!({"data":{"payment_id":"p","refund_amount":5}}),
                "data.refund_id is missing (data.refund_amount is given)",
            ),
            (
                PaymentShape::Neutral,
                json!({"data":{"payment_id":"p","refund_id":"r1","refund_amount":-5}}),
                "data.refund_amount is not a non-negative integer",
            ),
            (
                PaymentShape::Neutral,
                json!({"data":{"payment_id":"p","refund_id":7,"refund_amount":5}}),
                "data.refund_id is not a string",
            ),
            (
                PaymentShape::Neutral,
                json!({"data":{"payment_id":"p","refund_id":"r".repeat(MAX_ID_LEN + 1),"refund_amount":5}}),
                "the refund id is longer than",
            ),
        ];
        for (shape, payload, reason) in cases {
            let err = shape.payment_facts(&payload).expect_err("malformed");
            assert!(err.contains(reason), "{payload}: {err}");
        }
    }

    #[test]
    fn the_neutral_shape_states_one_refund_and_stripe_only_its_total() {
        let neutral = json!({"data":{"payment_id":"p_1","refund_id":" re_1 ","refund_amount":300}});
        let facts = PaymentShape::Neutral
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
        let stripe = json!({"data":{"object":{"id":"ch_1","payment_intent":"pi_1",
            "amount_refunded":300,"refund_id":"re_1","refund_amount":300}}});
        let facts = PaymentShape::Stripe.payment_facts(&stripe).expect("valid");
        assert_eq!((facts.refund, facts.amount_refunded), (None, Some(300)));
    }

    #[test]
    fn stripe_customers_are_indexed_as_customers_not_payments() {
        let customer = json!({"data":{"object":{"id":"cus_1","object":"customer"}}});
        assert_eq!(
            PaymentShape::Stripe.index_fields(&customer),
            IndexFields {
                payment_id: None,
                customer_id: Some("cus_1".into())
            }
        );
    }
}
