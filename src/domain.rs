//! The words every layer shares: the built-in payment kinds, the facts a payment
//! event states, and what an id may be to be stored. A leaf: it names nothing
//! else of the crate, so configuration, parsing, handlers and the store can all
//! use it without needing one another.

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
}
