//! The lists' keyset cursors: the sort key of a page's last row, opaque to
//! clients (URL-safe base64 without padding). One codec for every list; each
//! key keeps the text it has always had, so a cursor handed out before still
//! works: `micros:id` for the history and the audit trail, and the JSON
//! `[micros, source, payment_id]` for a customer's payments.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use chrono::{DateTime, Utc};

use super::FilterError;

/// A sort key a list's next page starts after.
pub trait Key: Sized {
    /// The key's text, before base64.
    fn to_text(&self) -> String;
    /// The key a text stands for; `None` when no key gives that text.
    fn from_text(text: &str) -> Option<Self>;
}

/// `(received_at, id)` of the history; `(at, id)` of the audit trail.
impl Key for (DateTime<Utc>, i64) {
    fn to_text(&self) -> String {
        format!("{}:{}", self.0.timestamp_micros(), self.1)
    }

    fn from_text(text: &str) -> Option<Self> {
        let (micros, id) = text.split_once(':')?;
        let micros: i64 = micros.parse().ok()?;
        let id: i64 = id.parse().ok()?;
        Some((time(micros)?, id))
    }
}

/// `(created_at, source, payment_id)` of a customer's payments.
impl Key for (DateTime<Utc>, String, String) {
    fn to_text(&self) -> String {
        serde_json::json!([self.0.timestamp_micros(), self.1, self.2]).to_string()
    }

    fn from_text(text: &str) -> Option<Self> {
        let (micros, source, id): (i64, String, String) = serde_json::from_str(text).ok()?;
        // PostgreSQL text cannot hold NUL, so no stored source or payment id has
        // one: such a key names nothing (and must not reach a query, which would fail).
        if source.contains('\0') || id.contains('\0') {
            return None;
        }
        Some((time(micros)?, source, id))
    }
}

/// The cursor of the page after the one ending at `key`.
pub fn encode(key: &impl Key) -> String {
    B64.encode(key.to_text())
}

/// The key a cursor this API returned stands for; anything else is refused.
pub fn decode<K: Key>(cursor: &str) -> Result<K, FilterError> {
    B64.decode(cursor)
        .ok()
        .and_then(|raw| String::from_utf8(raw).ok())
        .and_then(|text| K::from_text(&text))
        .ok_or_else(|| FilterError("cursor is not one this API returned".into()))
}

/// A cursor's time: years 1 to 9999 only, since PostgreSQL refuses times far
/// outside them.
fn time(micros: i64) -> Option<DateTime<Utc>> {
    const YEARS_1_TO_9999: std::ops::RangeInclusive<i64> =
        -62_135_596_800_000_000..=253_402_300_799_999_999;
    YEARS_1_TO_9999
        .contains(&micros)
        .then(|| DateTime::from_timestamp_micros(micros))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(micros: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_micros(micros).expect("a time")
    }

    #[test]
    fn each_key_keeps_its_wire_text() {
        // The texts these lists have always handed out.
        let event = (at(1_700_000_000_123_456), 42_i64);
        assert_eq!(encode(&event), B64.encode("1700000000123456:42"));
        let payment = (at(1_700_000_000_000_000), "stripe".into(), "pi_\"1".into());
        assert_eq!(
            encode(&payment),
            B64.encode(r#"[1700000000000000,"stripe","pi_\"1"]"#)
        );
        assert_eq!(decode::<(DateTime<Utc>, i64)>(&encode(&event)), Ok(event));
        assert_eq!(decode(&encode(&payment)), Ok(payment));
    }

    #[test]
    fn anything_else_is_refused_alike() {
        let refused = [
            "!!!".to_string(),
            B64.encode("garbage"),
            B64.encode("1:2:3"),
            B64.encode("99999999999999999999:1"),
            B64.encode("-62135596800000001:1"),
            B64.encode([0xff, 0x3a, 0x31]),
            B64.encode(r#"[1,"stripe"]"#),
        ];
        for cursor in &refused {
            let error = decode::<(DateTime<Utc>, i64)>(cursor).expect_err(cursor);
            assert_eq!(error.0, "cursor is not one this API returned");
        }
        let nul = B64.encode(r#"[1700000000000000,"stripe","a\u0000"]"#);
        for cursor in refused.iter().chain([&nul, &B64.encode("1:1")]) {
            let error = decode::<(DateTime<Utc>, String, String)>(cursor).expect_err(cursor);
            assert_eq!(error.0, "cursor is not one this API returned");
        }
        // The earliest and latest times a cursor may name are kept.
        for micros in [-62_135_596_800_000_000, 253_402_300_799_999_999] {
            let key = (at(micros), 1_i64);
            assert_eq!(decode(&encode(&key)), Ok(key));
        }
    }
}
