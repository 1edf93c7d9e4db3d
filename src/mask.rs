//! Personal data in payloads: what viewers see masked, and what forgetting a
//! customer erases. A source's `mask` is a list of JSON pointers (RFC 6901) in
//! which a `*` segment stands for every element of an array (and every member
//! of an object). A pointer that names an object or an array covers every
//! string and number inside it; `null`, `true` and `false` stay as they are.
//!
//! Free texts beside a payload (an error, a receiver's answer) have no fields:
//! in them every e-mail address and every value the payload's mask names (of
//! at least `QUOTED_MIN_CHARS` characters) is covered wherever it is quoted.

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

/// The shortest value searched for in a free text: a shorter one (a country or
/// state code) would hide unrelated words and names no one.
pub const QUOTED_MIN_CHARS: usize = 3;

/// Covers what each of `pointers` names in `payload`; a pointer that names
/// nothing there is skipped.
pub fn cover(payload: &mut Value, pointers: &[String], how: Cover) {
    for pointer in pointers {
        visit_at(payload, &segments(pointer), &mut |v| how.hide(v));
    }
}

/// The strings, and numbers as written, that `pointers` name in `payload`: the
/// personal values a free text beside it may quote.
pub fn values(payload: &Value, pointers: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    let mut copy = payload.clone();
    for pointer in pointers {
        visit_at(&mut copy, &segments(pointer), &mut |v| {
            leaves(v, &mut found)
        });
    }
    found.sort();
    found.dedup();
    found
}

fn leaves(value: &Value, found: &mut Vec<String>) {
    match value {
        Value::Object(members) => members.values().for_each(|v| leaves(v, found)),
        Value::Array(items) => items.iter().for_each(|v| leaves(v, found)),
        Value::String(text) => found.push(text.clone()),
        Value::Number(number) => found.push(number.to_string()),
        Value::Null | Value::Bool(_) => {}
    }
}

/// Covers, in a free text, every e-mail address and every one of `values`
/// quoted in it (those of at least `QUOTED_MIN_CHARS` characters). A text
/// `cut` short (ending in `…`, or at the length kept of a receiver's answer)
/// also has a value's beginning at its very end covered.
pub fn cover_quoted(text: &str, values: &[String], how: Cover, cut: bool) -> String {
    let mut values: Vec<&str> = values
        .iter()
        .map(String::as_str)
        .filter(|v| v.chars().count() >= QUOTED_MIN_CHARS)
        .collect();
    // The longest first, so a name is covered whole before a part of it.
    values.sort_by_key(|v| std::cmp::Reverse(v.len()));
    values.dedup();
    let (body, ellipsis) = match text.strip_suffix('…') {
        Some(body) if cut => (body, "…"),
        _ => (text, ""),
    };
    // The beginning of a value cut off at the end, before any value inside it.
    let (body, tail) = match cut_value(body, &values).filter(|_| cut) {
        Some((start, value)) => (&body[..start], how.text(value)),
        None => (body, String::new()),
    };
    let mut covered = body.to_string();
    for value in &values {
        if covered.contains(value) {
            covered = covered.replace(value, &how.text(value));
        }
    }
    let mut covered = cover_emails(&covered, how);
    covered.push_str(&tail);
    covered.push_str(ellipsis);
    covered
}

/// Covers every string of `value` as a free text (see [`cover_quoted`]): JSON
/// whose strings may quote values anywhere.
pub fn cover_quoted_in(value: &mut Value, values: &[String], how: Cover) {
    match value {
        Value::Object(members) => members
            .values_mut()
            .for_each(|v| cover_quoted_in(v, values, how)),
        Value::Array(items) => items
            .iter_mut()
            .for_each(|v| cover_quoted_in(v, values, how)),
        Value::String(text) => *text = cover_quoted(text, values, how, false),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// Where a text ends with the beginning of one of `values` (at least
/// `QUOTED_MIN_CHARS` of it), and that value: the longest such beginning.
fn cut_value<'v>(text: &str, values: &[&'v str]) -> Option<(usize, &'v str)> {
    values
        .iter()
        .filter_map(|value| {
            let longest = value
                .char_indices()
                .map(|(i, _)| i)
                .skip(QUOTED_MIN_CHARS)
                .filter(|&end| text.ends_with(&value[..end]))
                .max()?;
            Some((text.len() - longest, *value))
        })
        .min_by_key(|(start, _)| *start)
}

/// Covers every e-mail address in a free text: a run of address characters,
/// `@`, and a domain.
fn cover_emails(text: &str, how: Cover) -> String {
    let local = |c: char| c.is_alphanumeric() || "._%+-".contains(c);
    let domain = |c: char| c.is_alphanumeric() || ".-".contains(c);
    let mut covered = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('@') {
        let start = rest[..at]
            .char_indices()
            .rev()
            .take_while(|&(_, c)| local(c))
            .last()
            .map_or(at, |(i, _)| i);
        let after = &rest[at + 1..];
        let length = after.find(|c: char| !domain(c)).unwrap_or(after.len());
        // A sentence's full stop is not the domain's.
        let end = at + 1 + after[..length].trim_end_matches('.').len();
        if start < at && end > at + 1 {
            covered.push_str(&rest[..start]);
            covered.push_str(&how.text(&rest[start..end]));
            rest = &rest[end..];
        } else {
            covered.push_str(&rest[..=at]);
            rest = &rest[at + 1..];
        }
    }
    covered.push_str(rest);
    covered
}

/// Covers every string and number of `payload` (a source no longer configured,
/// whose personal fields are unknown).
pub fn cover_all(payload: &mut Value, how: Cover) {
    how.hide(payload);
}

/// A request target (`/path?query`) as viewers see it: the path whole, every
/// query parameter's value masked, its name kept (a query may carry a token
/// or an e-mail address; its names say what was asked). A parameter without
/// `=` is a value of its own, masked too.
pub fn cover_query(target: &str) -> String {
    let Some((path, query)) = target.split_once('?') else {
        return target.to_string();
    };
    let covered: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, "")) => format!("{name}="),
            Some((name, _)) => format!("{name}={MASKED}"),
            None if pair.is_empty() => String::new(),
            None => MASKED.to_string(),
        })
        .collect();
    format!("{path}?{}", covered.join("&"))
}

/// Covers every value that reads as `text`, wherever it is (a customer's own
/// id: see `reads_as`).
pub fn cover_text(payload: &mut Value, text: &str, how: Cover) {
    match payload {
        Value::Object(members) => members.values_mut().for_each(|v| cover_text(v, text, how)),
        Value::Array(items) => items.iter_mut().for_each(|v| cover_text(v, text, how)),
        found if reads_as(found, text) => how.hide(found),
        _ => {}
    }
}

/// Whether a value of `value`, wherever it is, reads as `text`.
pub fn holds(value: &Value, text: &str) -> bool {
    match value {
        Value::Object(members) => members.values().any(|v| holds(v, text)),
        Value::Array(items) => items.iter().any(|v| holds(v, text)),
        found => reads_as(found, text),
    }
}

/// Whether a string or number is read as the id `text`, as providers' ids are:
/// a string without the spaces around it, or a number as written.
fn reads_as(value: &Value, text: &str) -> bool {
    match value {
        Value::String(found) => found.trim() == text,
        Value::Number(number) => number.to_string() == text,
        _ => false,
    }
}

fn segments(pointer: &str) -> Vec<String> {
    pointer.split('/').skip(1).map(unescape).collect()
}

/// Calls `found` on what `segments` name in `value`.
fn visit_at(value: &mut Value, segments: &[String], found: &mut dyn FnMut(&mut Value)) {
    let Some((first, rest)) = segments.split_first() else {
        found(value);
        return;
    };
    match value {
        Value::Object(members) if first == "*" => {
            members.values_mut().for_each(|v| visit_at(v, rest, found));
        }
        Value::Object(members) => {
            if let Some(member) = members.get_mut(first) {
                visit_at(member, rest, found);
            }
        }
        Value::Array(items) if first == "*" => {
            items.iter_mut().for_each(|v| visit_at(v, rest, found))
        }
        Value::Array(items) => {
            if let Some(item) = first.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                visit_at(item, rest, found);
            }
        }
        _ => {}
    }
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
        let mut payload = json!({"email": "jenny@example.com", "customer": "cus_1",
                                 "padded": " cus_1 ", "other": "cus_12"});
        cover(&mut payload, &["/email".into()], Cover::Redact);
        cover_text(&mut payload, "cus_1", Cover::Redact);
        assert_eq!(
            payload,
            json!({"email": "[redacted]", "customer": "[redacted]", "padded": "[redacted]",
                   "other": "cus_12"})
        );
        // A numeric id is read as written.
        let mut payload = json!({"customer_id": 4711, "amount": 47110});
        assert!(holds(&payload, "4711"));
        cover_text(&mut payload, "4711", Cover::Redact);
        assert_eq!(
            payload,
            json!({"customer_id": "[redacted]", "amount": 47110})
        );
    }

    #[test]
    fn free_text_is_covered_where_it_quotes_a_value_or_an_email() {
        let values = ["Jenny Rosen", "Jenny", "+4915112345678", "DE", "12345"].map(String::from);
        let error = "the CRM refused jenny.rosen@example.com (Jenny Rosen, +4915112345678): \
                     DENIED at 12345, see admin@crm.example.org.";
        assert_eq!(
            cover_quoted(error, &values, Cover::Mask, false),
            "the CRM refused •••@example.com (•••, •••): DENIED at •••, see •••@crm.example.org."
        );
        assert_eq!(
            cover_quoted(error, &values, Cover::Redact, false),
            "the CRM refused [redacted] ([redacted], [redacted]): DENIED at [redacted], see \
             [redacted]."
        );
        // Not addresses: a bare @, a handle, a domain alone.
        let plain = "@ a@ @b.io answered 422";
        assert_eq!(cover_quoted(plain, &values, Cover::Mask, false), plain);
        // A text cut short hides the beginning of a value at its end, not elsewhere.
        let cut = "{\"name\":\"Jenny Ro";
        assert_eq!(
            cover_quoted(cut, &values, Cover::Mask, true),
            "{\"name\":\"•••"
        );
        assert_eq!(
            cover_quoted(cut, &values, Cover::Mask, false),
            "{\"name\":\"••• Ro"
        );
        assert_eq!(
            cover_quoted("sent to jenny.rosen@exa…", &values, Cover::Mask, true),
            "sent to •••…"
        );
    }

    #[test]
    fn values_are_the_strings_and_numbers_the_pointers_name() {
        let payload = json!({"a": {"email": "j@x.io", "zip": 12345, "vip": true}, "b": "kept"});
        assert_eq!(
            values(&payload, &["/a".into(), "/nope".into()]),
            ["12345", "j@x.io"]
        );
        assert_eq!(
            values(&payload, &[String::new()]),
            ["12345", "j@x.io", "kept"]
        );
    }

    #[test]
    fn only_plain_addresses_keep_a_domain() {
        assert_eq!(email_domain("a@b.io"), Some("b.io"));
        for text in ["@b.io", "a@b", "a@b@c.io", "a b@c.io", "Jenny"] {
            assert_eq!(email_domain(text), None, "{text}");
        }
    }

    #[test]
    fn a_query_shows_its_names_and_masks_its_values() {
        assert_eq!(cover_query("/payments"), "/payments");
        assert_eq!(cover_query("/payments?"), "/payments?");
        assert_eq!(
            cover_query("/payments/pay_1?api_key=sk_live_1&email=a%40b.c&expand=&debug"),
            "/payments/pay_1?api_key=•••&email=•••&expand=&•••"
        );
        // Only the first `?` ends the path; a value may hold `=`.
        assert_eq!(cover_query("/p?a=b=c&&x=?y"), "/p?a=•••&&x=•••");
    }
}
