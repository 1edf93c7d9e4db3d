//! Durations as people write them in the config, the admin API, the page and the
//! command line: one number and a unit (`250ms`, `5s`, `5m`, `1h`, `30d`). Every
//! duration is bounded, so no arithmetic on a time can overflow: a window of a
//! hundred years is refused as a typo rather than turned into a panic.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::de::{self, Deserialize, Deserializer, Visitor};

/// The longest duration accepted anywhere: 100 years of 365 days.
pub const MAX: Duration = Duration::from_secs(36_500 * 86_400);

/// Why a duration's text was refused; each names the text as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("{0:?} needs a unit (ms, s, m, h or d)")]
    NoUnit(String),
    #[error("{0:?} is not a duration like 5s, 5m, 1h or 30d")]
    NotANumber(String),
    #[error("{0:?} has an unknown unit (use ms, s, m, h or d)")]
    UnknownUnit(String),
    #[error("{0:?} is too long (at most {max})", max = format(MAX))]
    TooLong(String),
    #[error("{0:?} must be longer than zero")]
    Zero(String),
}

/// Parses `250ms`, `5s`, `5m`, `1h`, `30d` (one number, one unit), at most [`MAX`].
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| DurationError::NoUnit(text.to_string()))?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| DurationError::NotANumber(text.to_string()))?;
    let unit_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(DurationError::UnknownUnit(text.to_string())),
    };
    number
        .checked_mul(unit_ms)
        .map(Duration::from_millis)
        .filter(|d| *d <= MAX)
        .ok_or_else(|| DurationError::TooLong(text.to_string()))
}

/// The shortest exact form of a duration in the units `parse` accepts.
pub fn format(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
    ] {
        if ms >= size && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// A duration the config sets: text [`parse`] accepts, or a bare number of seconds,
/// and longer than zero. It reads itself, so a bad one is refused under its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Positive(Duration);

/// The same, where zero is a choice (a wait that may be skipped altogether).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZeroOrMore(Duration);

/// A duration key's value type: how its text is read.
trait ConfigDuration: Sized {
    fn read(text: &str) -> Result<Self, DurationError>;
}

impl ConfigDuration for Positive {
    fn read(text: &str) -> Result<Self, DurationError> {
        let d = parse(text)?;
        if d.is_zero() {
            return Err(DurationError::Zero(text.to_string()));
        }
        Ok(Self(d))
    }
}

impl ConfigDuration for ZeroOrMore {
    fn read(text: &str) -> Result<Self, DurationError> {
        parse(text).map(Self)
    }
}

impl From<Positive> for Duration {
    fn from(value: Positive) -> Self {
        value.0
    }
}

impl From<ZeroOrMore> for Duration {
    fn from(value: ZeroOrMore) -> Self {
        value.0
    }
}

/// Reads text or a number of seconds into `T`.
struct Text<T>(std::marker::PhantomData<T>);

impl<T: ConfigDuration> Visitor<'_> for Text<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a duration like \"5m\" or a number of seconds")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<T, E> {
        T::read(text).map_err(E::custom)
    }

    fn visit_i64<E: de::Error>(self, seconds: i64) -> Result<T, E> {
        self.visit_str(&format!("{seconds}s"))
    }

    fn visit_u64<E: de::Error>(self, seconds: u64) -> Result<T, E> {
        self.visit_str(&format!("{seconds}s"))
    }
}

impl<'de> Deserialize<'de> for Positive {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(Text(std::marker::PhantomData))
    }
}

impl<'de> Deserialize<'de> for ZeroOrMore {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(Text(std::marker::PhantomData))
    }
}

/// `moment - d`, or `None` when that is outside the calendar chrono can represent.
pub fn before(moment: DateTime<Utc>, d: Duration) -> Option<DateTime<Utc>> {
    chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| moment.checked_sub_signed(d))
}

/// `moment + d`, or `None` when that is outside the calendar chrono can represent.
pub fn after(moment: DateTime<Utc>, d: Duration) -> Option<DateTime<Utc>> {
    chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| moment.checked_add_signed(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_bounds() {
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse(" 5m "), Ok(Duration::from_secs(300)));
        assert_eq!(parse("36500d"), Ok(MAX));
        for bad in [
            "36501d",
            "999999999d",
            "18446744073709551615ms",
            "5",
            "5y",
            "d",
            "",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert_eq!(format(Duration::from_secs(86_400 * 30)), "30d");
        assert_eq!(format(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format(Duration::from_secs(90)), "90s");
        assert_eq!(format(Duration::from_secs(7200)), "2h");
        assert!(parse("-5s").is_err());
    }

    #[test]
    fn positive_durations_read_text_or_seconds_and_refuse_zero() {
        let read = |toml_value: &str| {
            toml::from_str::<std::collections::BTreeMap<String, Positive>>(&format!(
                "d = {toml_value}"
            ))
            .map(|m| m.get("d").copied().map(Duration::from))
            .map_err(|e| e.message().to_string())
        };
        assert_eq!(read("\"5m\""), Ok(Some(Duration::from_secs(300))));
        assert_eq!(read("7"), Ok(Some(Duration::from_secs(7))));
        assert_eq!(read("0"), Err("\"0s\" must be longer than zero".into()));
        assert_eq!(
            read("\"0m\""),
            Err("\"0m\" must be longer than zero".into())
        );
        assert_eq!(
            read("\"5\""),
            Err("\"5\" needs a unit (ms, s, m, h or d)".into())
        );
        assert_eq!(
            read("-5"),
            Err("\"-5s\" is not a duration like 5s, 5m, 1h or 30d".into())
        );
        assert!(read("1.5").is_err());
        let zero_or_more = |toml_value: &str| {
            toml::from_str::<std::collections::BTreeMap<String, ZeroOrMore>>(&format!(
                "d = {toml_value}"
            ))
            .map(|m| m.get("d").copied().map(Duration::from))
            .map_err(|e| e.message().to_string())
        };
        assert_eq!(zero_or_more("\"0s\""), Ok(Some(Duration::ZERO)));
        assert_eq!(zero_or_more("0"), Ok(Some(Duration::ZERO)));
        assert_eq!(zero_or_more("\"5s\""), Ok(Some(Duration::from_secs(5))));
        assert!(zero_or_more("\"5\"").is_err());
    }

    #[test]
    fn arithmetic_on_the_longest_duration_never_overflows() {
        let now = Utc::now();
        assert!(before(now, MAX).is_some_and(|t| t < now));
        assert!(after(now, MAX).is_some_and(|t| t > now));
        assert_eq!(
            before(DateTime::<Utc>::MIN_UTC, Duration::from_secs(1)),
            None
        );
        assert_eq!(
            after(DateTime::<Utc>::MAX_UTC, Duration::from_secs(1)),
            None
        );
    }
}
