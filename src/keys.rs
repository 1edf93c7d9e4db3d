//! Reading configuration keys with hookd's messages: one line naming the key and
//! what is wrong with it. A leaf, so the configuration and each provider's own
//! keys (`crate::providers`) read theirs the same way.

use serde::de::{DeserializeOwned, Error as _, IntoDeserializer};
use serde::{Deserialize, Deserializer};

/// A key, as messages name it, and what is wrong with its value.
pub type Problem = (String, String);

/// A message on one line.
pub fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Refuses a value that is not a JSON pointer.
pub fn json_pointer(key: String, pointer: &str) -> Result<(), Problem> {
    if pointer.starts_with('/') {
        return Ok(());
    }
    Err((
        key,
        format!("{pointer:?} is not a JSON pointer (it must start with /)"),
    ))
}

/// The message for an unknown key, listing the known ones as serde does.
pub fn unknown_key(unknown: &str, known: &[&str]) -> String {
    let quoted: Vec<String> = known.iter().map(|k| format!("`{k}`")).collect();
    let expected = match quoted.as_slice() {
        [] => "there are no fields".to_string(),
        [one] => format!("expected {one}"),
        [a, b] => format!("expected {a} or {b}"),
        many => format!("expected one of {}", many.join(", ")),
    };
    format!("unknown field `{unknown}`, {expected}")
}

/// A table of keys read into `T`, an error naming the key inside it.
pub fn read<T: DeserializeOwned>(
    table: toml::Table,
    key: &dyn Fn(&str) -> String,
) -> Result<T, Problem> {
    serde_path_to_error::deserialize(toml::Value::Table(table))
        .map_err(|e| (key(&e.path().to_string()), one_line(e.inner().message())))
}

/// The names a config enum is written as, for the message refusing any other.
pub trait Names {
    const NAMES: &str;
}

/// Reads an enum by its name, refusing another as `"x" is not one of a, b` (hookd's
/// message since before serde read these; serde's own would differ).
pub fn one_of<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned + Names,
{
    let text = String::deserialize(deserializer)?;
    T::deserialize(text.as_str().into_deserializer()).map_err(|_: serde::de::value::Error| {
        D::Error::custom(format!("{text:?} is not one of {}", T::NAMES))
    })
}
