//! Whether a body's canonical JSON says all its bytes say. Two requests share a
//! fingerprint, and a copy gets the first one's answer, only when they denote
//! the same JSON value; parsing into a `serde_json::Value` would blur two
//! differences an upstream may still see:
//! - a name twice in one object (`{"amount":1,"amount":1000}`): the value keeps
//!   the last, while parsers differ on which they keep;
//! - a number a double cannot hold (`100000000000000000001`, or
//!   `0.10000000000000000001`): it becomes the nearest double, which a decimal
//!   parser upstream would not.
//!
//! Such a body is fingerprinted over its raw bytes instead: any other byte is
//! then another request (a 422 on reuse, never another's answer).

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

/// The body parsed, when its canonical form is faithful to it; `None` when it
/// is not JSON, or names a member twice, or holds a number no double denotes
/// exactly as written.
pub(super) fn parsed(body: &[u8]) -> Option<Value> {
    let raw: &RawValue = serde_json::from_slice(body).ok()?;
    if !faithful(raw) {
        return None;
    }
    serde_json::from_str(raw.get()).ok()
}

/// Walks one JSON value as written.
fn faithful(raw: &RawValue) -> bool {
    let text = raw.get();
    match text.as_bytes().first() {
        Some(b'{') => match serde_json::from_str::<Members>(text) {
            Ok(Members(members)) => {
                let mut names: Vec<&str> = members.iter().map(|(name, _)| name.as_str()).collect();
                names.sort_unstable();
                let unique = names.windows(2).all(|pair| pair[0] != pair[1]);
                unique && members.iter().all(|(_, value)| faithful(value))
            }
            Err(_) => false,
        },
        Some(b'[') => match serde_json::from_str::<Vec<&RawValue>>(text) {
            Ok(items) => items.into_iter().all(faithful),
            Err(_) => false,
        },
        Some(b'-' | b'0'..=b'9') => exact_number(text),
        // Strings (their escapes decode to one text), true, false, null.
        _ => true,
    }
}

/// Whether the number as written and the number the canonical form writes
/// are one decimal value (`1.50` and `1.5`, `1e3` and `1000.0` are).
fn exact_number(text: &str) -> bool {
    let Ok(Value::Number(number)) = serde_json::from_str::<Value>(text) else {
        return false;
    };
    decimal(text).is_some() && decimal(text) == decimal(&number.to_string())
}

/// A decimal number as (negative, significant digits, exponent of the last
/// digit): `-1.50e2` → (true, "15", 1); zero is (false, "", 0).
fn decimal(text: &str) -> Option<(bool, String, i64)> {
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => (&unsigned[..at], unsigned[at + 1..].parse::<i64>().ok()?),
        None => (unsigned, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{whole}{fraction}");
    let mut exponent = exponent.checked_sub(i64::try_from(fraction.len()).ok()?)?;
    let significant = digits.trim_start_matches('0');
    let trimmed = significant.trim_end_matches('0');
    exponent = exponent.checked_add(i64::try_from(significant.len() - trimmed.len()).ok()?)?;
    if trimmed.is_empty() {
        return Some((false, String::new(), 0));
    }
    Some((negative, trimmed.to_string(), exponent))
}

/// An object's members in the order written, each value as written.
struct Members<'a>(Vec<(String, &'a RawValue)>);

impl<'de: 'a, 'a> Deserialize<'de> for Members<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Walk<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for Walk<'a> {
            type Value = Members<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Members<'a>, M::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry::<String, &'de RawValue>()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
            fn visit_seq<S: SeqAccess<'de>>(self, _: S) -> Result<Members<'a>, S::Error> {
                Err(serde::de::Error::custom("an array, not an object"))
            }
        }
        deserializer.deserialize_map(Walk(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::parsed;

    #[test]
    fn a_body_is_parsed_only_when_its_canonical_form_is_faithful_to_it() {
        for faithful in [
            r#"{"amount": 100, "currency": "EUR"}"#,
            r#"{"a": {"b": [1, 2.5, -0.1, 1.50, 1e3, 0, -0, 0.0]}, "c": null}"#,
            r#"{"big": 18446744073709551615, "small": -9223372036854775808}"#,
            r#"{"escaped \u0041": "x", "escaped B": "y"}"#,
            r#"[{"a": 1}, {"a": 1}]"#,
            r#"  "text"  "#,
            "12345.678",
        ] {
            assert!(parsed(faithful.as_bytes()).is_some(), "{faithful}");
        }
        for blurred in [
            // A name twice: which one an upstream reads is its parser's choice.
            r#"{"amount": 1, "amount": 1000}"#,
            r#"{"order": {"id": "a", "id": "b"}}"#,
            r#"[{"x": {"amount": 1, "amount": 2}}]"#,
            // Escapes that decode to one name are the same name.
            r#"{"A": 1, "\u0041": 2}"#,
            // Numbers no double holds as written.
            r#"{"amount": 100000000000000000001}"#,
            r#"{"amount": 0.10000000000000000001}"#,
            r#"{"amount": 18446744073709551617}"#,
            // Not JSON at all.
            "amount=100",
            r#"{"a": 1"#,
        ] {
            assert!(parsed(blurred.as_bytes()).is_none(), "{blurred}");
        }
    }
}
