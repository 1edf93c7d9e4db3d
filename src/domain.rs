//! The words every layer shares: the built-in payment kinds, the facts a payment
//! event states, and what an id may be to be stored. A leaf: it names nothing
//! else of the crate, so configuration, parsing, handlers and the store can all
//! use it without needing one another.

use std::fmt;

use serde::Serialize;

/// Ids and types longer than this are refused; payment and customer ids longer
/// than this are not indexed (and a payment handler refuses them).
pub const MAX_ID_LEN: usize = 255;

/// Whether a payment or customer id fits its text column and index.
pub fn storable_id(id: &str) -> bool {
    id.len() <= MAX_ID_LEN && !id.contains('\0')
}

/// The built-in kinds: each is one fact about a payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaymentKind {
    Succeeded,
    Failed,
    Refunded,
    DisputeOpened,
}

impl PaymentKind {
    pub const ALL: [PaymentKind; 4] = [
        PaymentKind::Succeeded,
        PaymentKind::Failed,
        PaymentKind::Refunded,
        PaymentKind::DisputeOpened,
    ];

    /// The kind's name, as sources' `event_types` map provider types to it.
    pub fn as_str(self) -> &'static str {
        match self {
            PaymentKind::Succeeded => "payment_succeeded",
            PaymentKind::Failed => "payment_failed",
            PaymentKind::Refunded => "payment_refunded",
            PaymentKind::DisputeOpened => "dispute_opened",
        }
    }

    pub fn parse(kind: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == kind)
    }
}

/// The payment facts one event states. Absent fields are `None`: they say nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PaymentFacts {
    pub payment_id: String,
    pub amount: Option<i64>,
    pub amount_refunded: Option<i64>,
    pub currency: Option<String>,
    pub customer_id: Option<String>,
    /// One refund, for providers that state each refund rather than the total.
    pub refund: Option<Refund>,
}

impl PaymentFacts {
    /// The facts, if every id and text in them fits a PostgreSQL text column.
    pub fn storable(self) -> Result<Self, String> {
        let texts = [
            Some(&self.payment_id),
            self.currency.as_ref(),
            self.customer_id.as_ref(),
            self.refund.as_ref().map(|r| &r.id),
        ];
        if texts.into_iter().flatten().any(|t| !storable_id(t)) {
            return Err(format!(
                "an id is longer than {MAX_ID_LEN} bytes or contains a NUL character"
            ));
        }
        Ok(self)
    }
}

/// One refund of a payment, keyed by its id within the source: the largest
/// amount stated for an id stands, so resends of it count once, in any order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Refund {
    pub id: String,
    pub amount: i64,
}

/// How a forward's name starts in the attempts and views.
const FORWARD_PREFIX: &str = "forward:";

/// One handler of an event, by the name its attempts carry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HandlerName {
    /// The kind's own handler, named after the kind.
    Kind(String),
    /// A `[[forwards]]` entry, named `forward:NAME`.
    Forward(String),
}

impl HandlerName {
    /// A name as the database holds it.
    pub fn parse(text: &str) -> Self {
        match text.strip_prefix(FORWARD_PREFIX) {
            Some(name) => HandlerName::Forward(name.to_string()),
            None => HandlerName::Kind(text.to_string()),
        }
    }

    /// Whether `text` (as the database holds a name) is this handler's name.
    pub fn is(&self, text: &str) -> bool {
        match self {
            HandlerName::Kind(kind) => kind == text,
            HandlerName::Forward(name) => text.strip_prefix(FORWARD_PREFIX) == Some(name),
        }
    }
}

impl fmt::Display for HandlerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandlerName::Kind(kind) => f.write_str(kind),
            HandlerName::Forward(name) => write!(f, "{FORWARD_PREFIX}{name}"),
        }
    }
}

impl Serialize for HandlerName {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}
