//! libpq's `sslmode`, `sslrootcert` (and hookd's `pgbouncer`) taken out of a
//! connection string, URL or key=value form.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use super::{DatabaseUrlError, PGBOUNCER, Pooler, SSLMODE, SSLROOTCERT, UrlParams};

/// Takes `sslmode` and `sslrootcert` out of a connection string, URL or key=value
/// form, and returns the rest as written, for `tokio_postgres::Config::from_str`.
/// A key given twice counts the last time, as in libpq.
pub fn split_hookd_params(url: &str) -> Result<(String, UrlParams), DatabaseUrlError> {
    let (rest, found) = if ["postgres://", "postgresql://"]
        .iter()
        .any(|prefix| url.starts_with(prefix))
    {
        split_url(url)
    } else {
        split_key_value(url)
    };
    let mut params = UrlParams::default();
    for (key, value) in found {
        if key == SSLMODE {
            params.mode = String::from_utf8_lossy(&value).parse()?;
        } else if key == PGBOUNCER {
            params.pooler = match &value[..] {
                b"true" => Pooler::Transaction,
                b"false" => Pooler::None,
                other => {
                    return Err(DatabaseUrlError::Pgbouncer(
                        String::from_utf8_lossy(other).into_owned(),
                    ));
                }
            };
        } else if value.is_empty() {
            // libpq reads an empty value as not set.
            params.root_cert = None;
        } else {
            params.root_cert = Some(PathBuf::from(OsStr::from_bytes(&value)));
        }
    }
    Ok((rest, params))
}

fn is_hookd_key(key: &str) -> bool {
    key == SSLMODE || key == SSLROOTCERT || key == PGBOUNCER
}

type Found = Vec<(String, Vec<u8>)>;

/// The query string: `&`-separated, percent-encoded `key=value` pairs. Its start is
/// found as tokio-postgres finds it: the first `?` after the user info.
fn split_url(url: &str) -> (String, Found) {
    let after_user = url.find('@').map_or(0, |at| at + 1);
    let Some(question) = url[after_user..].find('?').map(|q| after_user + q) else {
        return (url.to_string(), Vec::new());
    };
    let (head, query) = (&url[..question], &url[question + 1..]);
    let mut kept = Vec::new();
    let mut found = Vec::new();
    for pair in query.split('&') {
        let key = pair.split_once('=').map(|(key, value)| {
            let key = percent_encoding::percent_decode_str(key).decode_utf8_lossy();
            (key.into_owned(), value)
        });
        match key {
            Some((key, value)) if is_hookd_key(&key) => {
                found.push((key, percent_encoding::percent_decode_str(value).collect()));
            }
            _ => kept.push(pair),
        }
    }
    if kept.is_empty() {
        (head.to_string(), found)
    } else {
        (format!("{head}?{}", kept.join("&")), found)
    }
}

/// `key = value` pairs separated by white space; a value is quoted with `'` or not,
/// and `\` escapes the next character in both. What cannot be read is left as it is
/// for tokio-postgres to report.
fn split_key_value(text: &str) -> (String, Found) {
    let mut kept = Vec::new();
    let mut found = Vec::new();
    let mut cursor = Cursor { text, pos: 0 };
    loop {
        cursor.skip_whitespace();
        let start = cursor.pos;
        if start == text.len() {
            break;
        }
        match cursor.pair() {
            Some((key, value)) if is_hookd_key(key) => {
                found.push((key.to_string(), value.into_bytes()));
            }
            Some(_) => kept.push(&text[start..cursor.pos]),
            None => {
                kept.push(&text[start..]);
                break;
            }
        }
    }
    (kept.join(" "), found)
}

struct Cursor<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn next(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn skip_whitespace(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.next();
        }
    }

    fn pair(&mut self) -> Option<(&'a str, String)> {
        let start = self.pos;
        while self.peek().is_some_and(|c| !c.is_whitespace() && c != '=') {
            self.next();
        }
        let key = &self.text[start..self.pos];
        self.skip_whitespace();
        if key.is_empty() || self.next() != Some('=') {
            return None;
        }
        self.skip_whitespace();
        let quoted = self.peek() == Some('\'');
        if quoted {
            self.next();
        }
        let mut value = String::new();
        loop {
            match self.peek() {
                None if quoted => return None,
                None => break,
                Some('\'') if quoted => {
                    self.next();
                    break;
                }
                Some(c) if c.is_whitespace() && !quoted => break,
                Some('\\') => {
                    self.next();
                    if let Some(escaped) = self.next() {
                        value.push(escaped);
                    }
                }
                Some(c) => {
                    self.next();
                    value.push(c);
                }
            }
        }
        if value.is_empty() && !quoted {
            return None;
        }
        Some((key, value))
    }
}
