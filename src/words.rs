//! The words an event carries from the edge to the store: whose it is
//! ([`SourceName`]), the provider's id and type ([`EventId`], [`EventType`]) and
//! hookd's kind for it ([`Kind`]). Each is checked once, where it is made — an
//! id or type PostgreSQL's `text` can hold (no NUL, at most 255 bytes), a
//! source and a kind from the checked configuration — so what takes one needs
//! no check of its own, and one cannot be passed where another is meant.

use std::fmt;

use bytes::BytesMut;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

use crate::domain::MAX_ID_LEN;

/// A word the store cannot hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WordError {
    #[error("{0} is longer than 255 bytes")]
    TooLong(&'static str),
    #[error("{0} contains a NUL character")]
    Nul(&'static str),
}

macro_rules! word {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.0
            }
        }

        impl From<$name> for String {
            fn from(word: $name) -> String {
                word.0
            }
        }

        impl ToSql for $name {
            fn to_sql(
                &self,
                ty: &Type,
                out: &mut BytesMut,
            ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
                self.0.to_sql(ty, out)
            }

            fn accepts(ty: &Type) -> bool {
                <String as ToSql>::accepts(ty)
            }

            to_sql_checked!();
        }
    };
}

word!(
    /// A configured source's name (`stripe`, `shop`): checked when the
    /// configuration is.
    SourceName
);
word!(
    /// The provider's id of an event.
    EventId
);
word!(
    /// The provider's type of an event (`invoice.paid`).
    EventType
);
word!(
    /// hookd's kind for an event's type (`payment_succeeded`), from its
    /// source's checked rules.
    Kind
);

/// `value`, if `text` can hold it: `what` names it in the refusal.
fn storable(value: String, what: &'static str) -> Result<String, WordError> {
    if value.len() > MAX_ID_LEN {
        return Err(WordError::TooLong(what));
    }
    if value.contains('\0') {
        return Err(WordError::Nul(what));
    }
    Ok(value)
}

impl EventId {
    /// A provider's event id, refused when the store cannot hold it (the same
    /// way on every resend).
    pub fn parse(id: String) -> Result<Self, WordError> {
        storable(id, "event id").map(EventId)
    }
}

impl EventId {
    /// The id of a stored row: checked when it was stored.
    pub fn stored(id: String) -> Self {
        EventId(id)
    }
}

impl EventType {
    /// A provider's event type, refused when the store cannot hold it.
    pub fn parse(event_type: String) -> Result<Self, WordError> {
        storable(event_type, "event type").map(EventType)
    }
}

impl SourceName {
    /// The name of a source the configuration has checked.
    pub fn configured(name: &str) -> Self {
        SourceName(name.to_string())
    }
}

impl Kind {
    /// A kind the source's checked rules give.
    pub fn configured(kind: &str) -> Self {
        Kind(kind.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_types_the_store_cannot_hold_are_refused_once_where_they_are_made() {
        assert_eq!(
            EventId::parse("evt_1".into()).map(String::from),
            Ok("evt_1".into())
        );
        assert_eq!(
            EventId::parse("x".repeat(256)),
            Err(WordError::TooLong("event id"))
        );
        assert!(EventId::parse("x".repeat(255)).is_ok());
        assert_eq!(
            EventType::parse("a\0b".into()),
            Err(WordError::Nul("event type"))
        );
        let kind = Kind::configured("payment_succeeded");
        assert_eq!(kind, "payment_succeeded");
        assert_eq!(kind.to_string(), "payment_succeeded");
    }
}
