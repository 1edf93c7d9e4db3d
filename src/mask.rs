//! Personal data in payloads: what viewers see masked, and what forgetting a
//! customer erases. A source's `mask` is a list of JSON pointers (RFC 6901) in
//! which a `*` segment stands for every element of an array (and every member
//! of an object). A pointer that names an object or an array covers every
//! string and number inside it; `null`, `true` and `false` stay as they are.

use serde_json::Value;

/// What a masked string or number shows.
pub const MASKED: &str = "•••";
/// What an erased one becomes for good.
pub const REDACTED: &str = "[redacted]";

/// How the values a pointer names are replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cover {
    /// For viewers: `•••`, an e-mail address keeping its domain (`•••@example.com`).
    Mask,
    /// For good: `[redacted]`, nothing kept.
    Redact,
}

impl Cover {
    fn hide(self, value: &mut Value) {
        match value {
            Value::Object(members) => members.values_mut().for_each(|v| self.hide(v)),
            Value::Array(items) => items.iter_mut().for_each(|v| self.hide(v)),
            Value::String(text) => *text = self.text(text),
            Value::Number(_) => *value = Value::String(self.text("")),
            Value::Null | Value::Bool(_) => {}
        }
    }

    fn text(self, original: &str) -> String {
        match self {
            Cover::Redact => REDACTED.into(),
            Cover::Mask => match email_domain(original) {
                Some(domain) => format!("{MASKED}@{domain}"),
                None => MASKED.into(),
            },
        }
    }
}

/// The domain of a plain e-mail address (`someone@example.com`).
fn email_domain(text: &str) -> Option<&str> {
    let (local, domain) = text.split_once('@')?;
    let plain = !local.is_empty()
        && domain.contains('.')
        && !domain.contains('@')
        && !text.chars().any(char::is_whitespace);
    plain.then_some(domain)
}

/// Covers what each of `pointers` names in `payload`; a pointer that names
/// nothing there is skipped.
pub fn cover(payload: &mut Value, pointers: &[String], how: Cover) {
    for pointer in pointers {
        let segments: Vec<String> = pointer.split('/').skip(1).map(unescape).collect();
        cover_at(payload, &segments, how);
    }
}

/// Covers every string and number of `payload` (a source no longer configured,
/// whose personal fields are unknown).
pub fn cover_all(payload: &mut Value, how: Cover) {
    how.hide(payload);
}

/// Covers every string equal to `text`, wherever it is (a customer's own id).
pub fn cover_text(payload: &mut Value, text: &str, how: Cover) {
    match payload {
        Value::Object(members) => members.values_mut().for_each(|v| cover_text(v, text, how)),
        Value::Array(items) => items.iter_mut().for_each(|v| cover_text(v, text, how)),
        Value::String(found) if found == text => how.hide(payload),
        _ => {}
    }
}

fn cover_at(value: &mut Value, segments: &[String], how: Cover) {
    let Some((first, rest)) = segments.split_first() else {
        how.hide(value);
        return;
    };
    match value {
        Value::Object(members) if first == "*" => {
            members.values_mut().for_each(|v| cover_at(v, rest, how));
        }
        Value::Object(members) => {
            if let Some(member) = members.get_mut(first) {
                cover_at(member, rest, how);
            }
        }
        Value::Array(items) if first == "*" => {
            items.iter_mut().for_each(|v| cover_at(v, rest, how))
        }
        Value::Array(items) => {
            if let Some(item) = first.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                cover_at(item, rest, how);
            }
        }
        _ => {}
    }
}

/// The `mask` a source of each built-in scheme starts from: where its
/// provider puts e-mails, names, phones, addresses, card fingerprints and
/// client-side secrets. The generic schemes (`standard`, `hmac`) carry the
/// sender's own shape: their sources list their fields themselves.
pub fn defaults(scheme: &str) -> Vec<String> {
    let pointers: &[&str] = match scheme {
        "stripe" => &[
            "/data/object/client_secret",
            "/data/object/email",
            "/data/object/name",
            "/data/object/phone",
            "/data/object/address",
            "/data/object/shipping",
            "/data/object/receipt_email",
            "/data/object/billing_details",
            "/data/object/customer_email",
            "/data/object/customer_name",
            "/data/object/customer_phone",
            "/data/object/customer_address",
            "/data/object/customer_shipping",
            "/data/object/customer_details",
            "/data/object/payment_method_details/card/fingerprint",
            "/data/object/charges/data/*/billing_details",
            "/data/object/charges/data/*/payment_method_details/card/fingerprint",
            "/data/object/last_payment_error/payment_method/billing_details",
            "/data/object/last_payment_error/payment_method/card/fingerprint",
            "/data/object/evidence/customer_email_address",
            "/data/object/evidence/customer_name",
            "/data/object/evidence/customer_purchase_ip",
            "/data/object/evidence/billing_address",
            "/data/object/evidence/shipping_address",
            "/data/previous_attributes/email",
            "/data/previous_attributes/name",
            "/data/previous_attributes/phone",
            "/data/previous_attributes/address",
        ],
        // Into one notification item: each is stored as an event of its own.
        "adyen" => &[
            "/additionalData/shopperEmail",
            "/additionalData/shopperName",
            "/additionalData/shopperIP",
            "/additionalData/shopperTelephone",
            "/additionalData/cardHolderName",
            "/additionalData/billingAddress.street",
            "/additionalData/billingAddress.houseNumberOrName",
            "/additionalData/billingAddress.postalCode",
            "/additionalData/billingAddress.city",
            "/additionalData/deliveryAddress.street",
            "/additionalData/deliveryAddress.houseNumberOrName",
            "/additionalData/deliveryAddress.postalCode",
            "/additionalData/deliveryAddress.city",
        ],
        "braintree" => &[
            "/subject/transaction/customer",
            "/subject/transaction/billing",
            "/subject/transaction/shipping",
            "/subject/transaction/customer-ip",
            "/subject/transaction/credit-card/cardholder-name",
            "/subject/transaction/credit-card/unique-number-identifier",
            "/subject/customer",
        ],
        "checkout" => &[
            "/data/customer",
            "/data/shipping",
            "/data/source/name",
            "/data/source/phone",
            "/data/source/billing_address",
            "/data/source/fingerprint",
        ],
        "github" => &[
            "/pusher",
            "/head_commit/author",
            "/head_commit/committer",
            "/commits/*/author",
            "/commits/*/committer",
        ],
        "paddle" => &[
            "/data/email",
            "/data/name",
            "/data/payments/*/method_details/card/cardholder_name",
        ],
        "paypal" => &[
            "/resource/payer",
            "/resource/purchase_units/*/shipping",
            "/resource/disputed_transactions/*/buyer",
        ],
        "razorpay" => &[
            "/payload/payment/entity/email",
            "/payload/payment/entity/contact",
            "/payload/payment/entity/vpa",
            "/payload/payment/entity/card/name",
        ],
        "square" => &[
            "/data/object/customer/email_address",
            "/data/object/customer/given_name",
            "/data/object/customer/family_name",
            "/data/object/customer/phone_number",
            "/data/object/customer/address",
            "/data/object/payment/buyer_email_address",
            "/data/object/payment/billing_address",
            "/data/object/payment/shipping_address",
            "/data/object/payment/card_details/card/fingerprint",
        ],
        // GoCardless's events carry links, not people; the generic schemes are
        // the sender's own.
        _ => &[],
    };
    pointers.iter().map(|p| (*p).to_string()).collect()
}

/// RFC 6901: `~1` is `/`, `~0` is `~`.
fn unescape(segment: &str) -> String {
    segment.replace("~1", "/").replace("~0", "~")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pointers_with_stars_cover_every_element_and_keep_email_domains() {
        let mut payload = json!({
            "data": {"object": {
                "receipt_email": "jenny@example.com",
                "billing_details": {"name": "Jenny", "phone": "+1", "address": {"line1": "1 Main"},
                                    "zip": 12345, "vip": true, "fax": null},
                "charges": [{"fingerprint": "fp1"}, {"fingerprint": "fp2", "id": "ch_2"}],
                "a/b": "slash",
                "amount": 100
            }}
        });
        let pointers = [
            "/data/object/receipt_email",
            "/data/object/billing_details",
            "/data/object/charges/*/fingerprint",
            "/data/object/a~1b",
            "/data/object/absent/deeper",
        ]
        .map(String::from);
        cover(&mut payload, &pointers, Cover::Mask);
        assert_eq!(
            payload,
            json!({
                "data": {"object": {
                    "receipt_email": "•••@example.com",
                    "billing_details": {"name": "•••", "phone": "•••", "address": {"line1": "•••"},
                                        "zip": "•••", "vip": true, "fax": null},
                    "charges": [{"fingerprint": "•••"}, {"fingerprint": "•••", "id": "ch_2"}],
                    "a/b": "•••",
                    "amount": 100
                }}
            })
        );
    }

    #[test]
    fn redacting_keeps_nothing_of_an_address() {
        let mut payload =
            json!({"email": "jenny@example.com", "customer": "cus_1", "other": "cus_12"});
        cover(&mut payload, &["/email".into()], Cover::Redact);
        cover_text(&mut payload, "cus_1", Cover::Redact);
        assert_eq!(
            payload,
            json!({"email": "[redacted]", "customer": "[redacted]", "other": "cus_12"})
        );
    }

    #[test]
    fn only_plain_addresses_keep_a_domain() {
        assert_eq!(email_domain("a@b.io"), Some("b.io"));
        for text in ["@b.io", "a@b", "a@b@c.io", "a b@c.io", "Jenny"] {
            assert_eq!(email_domain(text), None, "{text}");
        }
    }
}
