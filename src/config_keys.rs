//! Reading configuration keys with hookd's messages: one line naming the key and
//! what is wrong with it. A leaf, so the configuration and each provider's own
//! keys (`crate::providers`) and the gateway's routes (`crate::gateway`) read
//! theirs the same way.

use std::net::SocketAddr;

use serde::de::{DeserializeOwned, Error as _, IntoDeserializer};
use serde::{Deserialize, Deserializer};

/// A key, as messages name it, and what is wrong with its value.
pub type Problem = (String, String);

/// A message on one line.
pub fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The items of a value listing several, as an environment variable or the
/// file its `_FILE` form names does (`HOOKD_SOURCE_<NAME>_SECRETS`,
/// `…_URL_TOKENS`): separated by commas or line breaks (a file may hold one a
/// line), trimmed, empty ones left out.
pub fn listed(text: &str) -> Vec<String> {
    text.split([',', '\n'])
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(String::from)
        .collect()
}

/// A key that lists several texts: a list in the file, or one text as the
/// environment gives it (items separated as [`listed`] reads them).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Listed {
    Items(Vec<String>),
    Joined(String),
}

impl Listed {
    /// Its items, or a problem naming `key` when it is set but names none (an
    /// emptied file, a stray comma, `[]`): set, it must never quietly mean
    /// what leaving it out means. `leave_out` says what that is.
    pub fn items(self, key: String, none: &str, leave_out: &str) -> Result<Vec<String>, Problem> {
        let items = match self {
            Listed::Items(items) => items,
            Listed::Joined(text) => listed(&text),
        };
        if items.is_empty() {
            return Err((
                key,
                format!("names no {none}; leave the key out to {leave_out}"),
            ));
        }
        Ok(items)
    }
}

/// `values` as address blocks (`trusted_proxies`), an error naming the one
/// that is not (`key[i]`).
pub fn address_blocks(key: &str, values: &[String]) -> Result<Vec<crate::cidr::Cidr>, Problem> {
    values
        .iter()
        .enumerate()
        .map(|(i, text)| {
            text.parse()
                .map_err(|problem| (format!("{key}[{i}]"), problem))
        })
        .collect()
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

/// Reads `section`'s tables in order, refusing a name an earlier one has.
pub fn unique_names<R, T>(
    section: &str,
    raws: Vec<R>,
    read: impl Fn(R, usize) -> Result<T, Problem>,
    name: fn(&T) -> &str,
) -> Result<Vec<T>, Problem> {
    let mut read_so_far: Vec<T> = Vec::with_capacity(raws.len());
    for (i, raw) in raws.into_iter().enumerate() {
        let item = read(raw, i)?;
        if read_so_far.iter().any(|t| name(t) == name(&item)) {
            return Err((
                format!("{section}[{i}].name"),
                format!("{:?} is used twice", name(&item)),
            ));
        }
        read_so_far.push(item);
    }
    Ok(read_so_far)
}

/// A name of letters, digits and `others` (`listed` in the message).
pub fn check_name(key: String, name: &str, others: &[char], listed: &str) -> Result<(), Problem> {
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || others.contains(&c));
    if ok {
        return Ok(());
    }
    Err((
        key,
        format!("{name:?} must be non-empty and use only letters, digits, {listed}"),
    ))
}

/// `IP:port`, or `host:port` resolved once, at startup.
pub fn socket_address(key: &str, text: &str) -> Result<SocketAddr, Problem> {
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    std::net::ToSocketAddrs::to_socket_addrs(text)
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| {
            (
                key.to_string(),
                format!("{text:?} is not a host:port address"),
            )
        })
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
