//! Whether a body's canonical JSON says all its bytes say. Two requests share a
//! fingerprint, and a copy gets the first one's answer, only when they denote
//! the same JSON value; parsing into a `serde_json::Value` would blur two
//! differences an upstream may still see:
//! - a name twice in one object (`{"amount":1,"amount":1000}`): the value keeps
//!   the last, while parsers differ on which they keep;
//! - a number written with more digits than a double keeps
//!   (`100000000000000000001`, `0.10000000000000000001`): it becomes the
//!   nearest double, which a decimal parser upstream would not.
//!
//! Such a body is fingerprinted over its raw bytes instead: any other byte is
//! then another request (a 422 on reuse, never another's answer). What lies
//! under a `fingerprint_ignore` pointer is left out of the fingerprint either
//! way, so it is not looked at.

use std::collections::HashSet;

use serde_json::Value;

/// The body parsed, when its canonical form is faithful to it outside the
/// `ignore`d pointers; `None` when it is not JSON, or names a member twice, or
/// holds a number a double does not keep as written.
pub(super) fn parsed(body: &[u8], ignore: &[String]) -> Option<Value> {
    // First the parse, which refuses nesting deeper than 128 levels: the walk
    // below only ever sees valid JSON of bounded depth.
    let value: Value = serde_json::from_slice(body).ok()?;
    let text = std::str::from_utf8(body).ok()?;
    faithful(text, ignore).then_some(value)
}

/// An object or array the walk is inside.
enum Open {
    Object {
        names: HashSet<String>,
        /// The member being read (its name, once read).
        member: Option<String>,
        /// The next string is a member's name.
        expect_name: bool,
    },
    Array {
        index: usize,
    },
}

/// One pass over valid JSON `text`, no recursion: each object's names once,
/// each number kept as written, outside the `ignore`d pointers.
fn faithful(text: &str, ignore: &[String]) -> bool {
    let bytes = text.as_bytes();
    let mut open: Vec<Open> = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'{' => open.push(Open::Object {
                names: HashSet::new(),
                member: None,
                expect_name: true,
            }),
            b'[' => open.push(Open::Array { index: 0 }),
            b'}' | b']' => {
                open.pop();
            }
            b',' => match open.last_mut() {
                Some(Open::Object { expect_name, .. }) => *expect_name = true,
                Some(Open::Array { index }) => *index += 1,
                None => {}
            },
            b':' => {
                if let Some(Open::Object { expect_name, .. }) = open.last_mut() {
                    *expect_name = false;
                }
            }
            b'"' => {
                let end = string_end(bytes, at);
                if let Some(Open::Object {
                    expect_name: true, ..
                }) = open.last()
                {
                    // Escapes decode first: `"\u0041"` and `"A"` are one name.
                    let Ok(name) = serde_json::from_str::<String>(&text[at..end]) else {
                        return false;
                    };
                    let twice = match open.last_mut() {
                        Some(Open::Object { names, member, .. }) => {
                            *member = Some(name.clone());
                            !names.insert(name)
                        }
                        _ => false,
                    };
                    if twice && !ignored(&open, ignore) {
                        return false;
                    }
                }
                at = end;
                continue;
            }
            b'-' | b'0'..=b'9' => {
                let end = at
                    + bytes[at..]
                        .iter()
                        .take_while(|b| matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                        .count();
                if !exact_number(&text[at..end]) && !ignored(&open, ignore) {
                    return false;
                }
                at = end;
                continue;
            }
            // Whitespace, and the letters of true, false and null.
            _ => {}
        }
        at += 1;
    }
    true
}

/// Where the string starting at `start` (its opening quote) ends, past its
/// closing quote.
fn string_end(bytes: &[u8], start: usize) -> usize {
    let mut at = start + 1;
    while at < bytes.len() {
        match bytes[at] {
            b'\\' => at += 2,
            b'"' => return at + 1,
            _ => at += 1,
        }
    }
    bytes.len()
}

/// Whether the value the walk is at lies under one of the `ignore`d pointers.
fn ignored(open: &[Open], ignore: &[String]) -> bool {
    if ignore.is_empty() {
        return false;
    }
    let mut pointer = String::new();
    for step in open {
        pointer.push('/');
        match step {
            Open::Object { member, .. } => {
                let name = member.as_deref().unwrap_or_default();
                pointer.push_str(&name.replace('~', "~0").replace('/', "~1"));
            }
            Open::Array { index } => pointer.push_str(&index.to_string()),
        }
        if ignore.contains(&pointer) {
            return true;
        }
    }
    false
}

/// Whether the number as written and the number the canonical form writes
/// are one decimal value (`1.50` and `1.5`, `1e3` and `1000.0` are).
fn exact_number(text: &str) -> bool {
    let Ok(Value::Number(number)) = serde_json::from_str::<Value>(text) else {
        return false;
    };
    let written = decimal(text);
    written.is_some() && written == decimal(&number.to_string())
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
            r#"{"a": {"x": 1}, "b": {"x": 1}, "s": "\"x\": 1, \"x\": 2"}"#,
            r#"{"t": true, "f": false, "n": null, "e": [], "o": {}}"#,
            r#"  "text"  "#,
            "12345.678",
        ] {
            assert!(parsed(faithful.as_bytes(), &[]).is_some(), "{faithful}");
        }
        for blurred in [
            // A name twice: which one an upstream reads is its parser's choice.
            r#"{"amount": 1, "amount": 1000}"#,
            r#"{"order": {"id": "a", "id": "b"}}"#,
            r#"[{"x": {"amount": 1, "amount": 2}}]"#,
            // Escapes that decode to one name are the same name.
            r#"{"A": 1, "\u0041": 2}"#,
            // Numbers a double does not keep as written.
            r#"{"amount": 100000000000000000001}"#,
            r#"{"amount": 0.10000000000000000001}"#,
            r#"{"amount": 18446744073709551617}"#,
            r#"[1, 2, 100000000000000000001]"#,
            // Not JSON at all.
            "amount=100",
            r#"{"a": 1"#,
        ] {
            assert!(parsed(blurred.as_bytes(), &[]).is_none(), "{blurred}");
        }
    }

    #[test]
    fn what_the_fingerprint_ignores_is_not_looked_at() {
        let ignore = ["/client_time".to_string(), "/meta/1".to_string()];
        for body in [
            r#"{"amount": 1, "client_time": 1712345678.12345678912345}"#,
            r#"{"amount": 1, "client_time": {"t": 1, "t": 2}}"#,
            r#"{"amount": 1, "client_time": 1, "client_time": 2}"#,
            r#"{"meta": [1, 100000000000000000001, 3]}"#,
        ] {
            assert!(parsed(body.as_bytes(), &ignore).is_some(), "{body}");
        }
        for body in [
            r#"{"amount": 100000000000000000001, "client_time": 1}"#,
            r#"{"meta": [100000000000000000001, 2]}"#,
            r#"{"other": {"client_time": 100000000000000000001}}"#,
        ] {
            assert!(parsed(body.as_bytes(), &ignore).is_none(), "{body}");
        }
    }

    #[test]
    fn deep_nesting_is_refused_by_the_parse_never_walked() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(parsed(deep.as_bytes(), &[]).is_none());
        let fine = format!("{}1{}", "[".repeat(100), "]".repeat(100));
        assert!(parsed(fine.as_bytes(), &[]).is_some());
    }
}
