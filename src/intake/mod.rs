//! A delivery from bytes to receipt, in one place: it is verified (the
//! certificate a request names fetched if need be), held to the shipped
//! credentials' policy, parsed into its events, a checksum-only signature
//! bound to its body, and each event stored once (conflicting items of a
//! several-event request kept beside their events). The route extracts and
//! answers; the receipt or the refusal says what the answer, the log line and
//! the metrics report.

pub mod verify;

use deadpool_postgres::Pool;
use sha2::{Digest, Sha256};
use tokio::sync::SemaphorePermit;
use tracing::Instrument;
use tracing::field::Empty;

use crate::config::{Settings, Source};
use crate::event::{EventError, IncomingEvent};
use crate::ingest::{Ingested, Ingester};
use crate::outbound::Certificates;
use crate::provider_api::Api;
use crate::providers::{self, SignatureRefusal};
use crate::signature::{Headers, SignatureError, Verified};
use crate::store::events::{EventStatus, Recorded};
use crate::store::{StoreError, bound_signatures};
use crate::traces;

/// What a delivery is taken in with: the store's pool, the certificates
/// deliveries name, and the ingester.
pub struct Intake<'a> {
    pub pool: &'a Pool,
    pub certificates: &'a Certificates,
    pub ingester: &'a Ingester,
    pub receipt_fetches: &'a tokio::sync::Semaphore,
}

/// API fetches at receipt at once, at most, per instance. Anyone can post an
/// id to a source that fetches (Mollie's), and each post would spend a call
/// of the merchant's key: past this many at once a delivery is answered 503
/// unfetched (the provider retries), so a flood neither exhausts the key's
/// rate limit nor holds hookd's connections.
pub const RECEIPT_FETCHES: usize = 8;

/// A delivery as the route read it.
pub struct Delivery<'a, H: Headers + ?Sized> {
    pub source: &'a Source,
    pub headers: &'a H,
    pub body: Vec<u8>,
    /// When it arrived (Unix seconds): what its signature's age is judged by.
    pub arrived: i64,
    /// Whether a proxy forwarded it, from beyond this machine.
    pub forwarded: bool,
    /// The body's share of the memory budget, held until it is verified.
    pub held: Option<SemaphorePermit<'a>>,
}

/// What was done with a verified delivery.
#[derive(Debug)]
pub enum Receipt {
    /// One event: stored now (with the status its handlers left), or a
    /// duplicate of one stored before.
    One {
        event_id: String,
        kind: Option<String>,
        recorded: Recorded,
        status: Option<EventStatus>,
    },
    /// A request of several events (or none): each stored once, all in one
    /// commit; an item reusing a stored id with another payload kept beside
    /// that event.
    Several {
        event_ids: Vec<String>,
        duplicates: usize,
        conflicts: usize,
    },
}

impl Receipt {
    /// The delivery's outcome, as the log line and `hookd_deliveries_total` say it.
    pub fn outcome(&self) -> &'static str {
        match self {
            Receipt::One {
                recorded: Recorded::Duplicate { .. },
                ..
            } => "duplicate",
            Receipt::One {
                status: Some(status),
                ..
            } => status.as_str(),
            Receipt::One {
                recorded: Recorded::Conflict,
                ..
            } => "conflict_recorded",
            Receipt::One { .. } => "accepted",
            Receipt::Several { conflicts, .. } if *conflicts > 0 => "conflict_recorded",
            Receipt::Several {
                event_ids,
                duplicates,
                ..
            } if *duplicates == event_ids.len() => "duplicate",
            Receipt::Several { .. } => "accepted",
        }
    }

    /// Events of this delivery that were already stored.
    pub fn duplicates(&self) -> usize {
        match self {
            Receipt::One { recorded, .. } => {
                usize::from(matches!(recorded, Recorded::Duplicate { .. }))
            }
            Receipt::Several { duplicates, .. } => *duplicates,
        }
    }

    /// Whether every event was already stored: the answer is the first one's.
    pub fn replayed(&self) -> bool {
        match self {
            Receipt::One { recorded, .. } => matches!(recorded, Recorded::Duplicate { .. }),
            Receipt::Several {
                event_ids,
                duplicates,
                ..
            } => *duplicates == event_ids.len(),
        }
    }

    pub fn seen(&self) -> Seen {
        match self {
            Receipt::One { event_id, kind, .. } => Seen {
                event_id: Some(event_id.clone()),
                kind: kind.clone(),
            },
            Receipt::Several { event_ids, .. } => Seen {
                event_id: Some(event_ids.join(",")),
                kind: None,
            },
        }
    }
}

/// What the log line names of a delivery: its event id(s) and kind, once read.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pub event_id: Option<String>,
    pub kind: Option<String>,
}

/// Why a delivery was not taken.
#[derive(Debug, thiserror::Error)]
pub enum IntakeError {
    /// Refused as the source's provider wants a bad signature refused.
    #[error("invalid signature: {0}")]
    Signature(SignatureError, SignatureRefusal),
    #[error(transparent)]
    Event(#[from] EventError),
    #[error("the request carries no event")]
    NoEvent,
    /// The event the request names could not be fetched from the provider's
    /// API (the log line says why; the answer does not): the provider sends
    /// it again.
    #[error("the provider's API could not be asked for the event; send it again later")]
    Unfetched,
    /// Its event id is stored with another payload.
    #[error("event id conflict")]
    Conflict,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A refusal, with what was read of the delivery before it.
#[derive(Debug)]
pub struct Refused {
    pub error: IntakeError,
    pub seen: Seen,
}

impl<E: Into<IntakeError>> From<E> for Refused {
    fn from(error: E) -> Self {
        Refused {
            error: error.into(),
            seen: Seen::default(),
        }
    }
}

/// The event a request only names, fetched from the source's API with its
/// key (see `Provider::receipt_fetch`): what the API answers, or the provider's
/// stand-in for an id the API does not know (stored, ignored: the answer is
/// the same, so a prober learns nothing of which ids exist).
async fn fetched(
    source: &Source,
    named: Result<(providers::api::Fetch, serde_json::Value), providers::FetchError>,
) -> Result<Vec<u8>, IntakeError> {
    let (fetch, unknown) =
        named.map_err(|problem| IntakeError::Event(EventError::NoEvents(problem.to_string())))?;
    let mut api = Api::for_fetch(source).map_err(|error| {
        log::warn!("{}: {error}", source.name);
        IntakeError::Unfetched
    })?;
    let event = match fetch.send(&mut api).await {
        Ok(event) => event,
        Err(_) if api.said_not_found() => unknown,
        Err(error) => {
            log::warn!(
                "{}: fetching the event a delivery names: {error}",
                source.name
            );
            return Err(IntakeError::Unfetched);
        }
    };
    serde_json::to_vec(&event).map_err(|e| IntakeError::Event(EventError::NoEvents(e.to_string())))
}

impl Intake<'_> {
    /// Takes a delivery in, under `settings` (the configuration in force when
    /// it arrived, whatever a reload does meanwhile).
    pub async fn receive<H: Headers + ?Sized>(
        &self,
        settings: &Settings,
        delivery: Delivery<'_, H>,
    ) -> Result<Receipt, Refused> {
        let Delivery {
            source,
            headers,
            body,
            arrived,
            forwarded,
            held,
        } = delivery;
        let provider = source.scheme.provider();
        let refused = |reason| IntakeError::Signature(reason, provider.refused_signature());
        let span = tracing::trace_span!(
            "verify",
            hookd.scheme = source.scheme.name(),
            otel.status_message = Empty,
        );
        let verified = verify::request(self.certificates, source, headers, &body, arrived)
            .instrument(span.clone())
            .await;
        drop(held);
        if let Err(error) = &verified {
            traces::fail(&span, error);
        }
        let verified = verified.map_err(refused)?;
        // The shipped secrets are public: a delivery a proxy forwarded (from
        // beyond this machine) may not use them, whatever address hookd
        // listens on.
        if forwarded && verify::signed_with_a_shipped_credential(source, &verified) {
            log::warn!(
                "refused a forwarded delivery to {:?} signed with a shipped development secret",
                source.name
            );
            return Err(refused(SignatureError::Mismatch).into());
        }
        let fetched_at_receipt = provider.receipt_fetch(&body);
        let from_the_api = fetched_at_receipt.is_some();
        let body = match fetched_at_receipt {
            None => body,
            Some(named) => {
                let Ok(_room) = self.receipt_fetches.try_acquire() else {
                    log::warn!(
                        "{}: {RECEIPT_FETCHES} API fetches for deliveries already under way; \
                         answered 503 unfetched",
                        source.name
                    );
                    return Err(IntakeError::Unfetched.into());
                };
                // Held to `handler_timeout`, as a read in a handler's run is:
                // the listener answers within twice that.
                let limit = settings.handler_timeout;
                match tokio::time::timeout(limit, fetched(source, named)).await {
                    Ok(fetched) => fetched?,
                    Err(_) => {
                        log::warn!(
                            "{}: fetching the event a delivery names: no answer within {}; \
                             answered 503 unfetched",
                            source.name,
                            crate::duration::format(limit)
                        );
                        return Err(IntakeError::Unfetched.into());
                    }
                }
            }
        };
        let mut events = IncomingEvent::parse_all(source, headers, &body)?;
        if let (Some(signature), Some(event)) = (
            provider.checksum_signature(&providers::AnyHeaders(headers)),
            events.first(),
        ) && !self
            .bind_signature(settings, source, &signature, &body, event)
            .await?
        {
            return Err(refused(SignatureError::Replayed).into());
        }
        if events.len() != 1 {
            return self.receive_several(events, verified).await;
        }
        let event = events.pop().ok_or(IntakeError::NoEvent)?;
        let seen = Seen {
            event_id: Some(event.event_id.to_string()),
            kind: event.kind.as_ref().map(|k| k.to_string()),
        };
        let refuse = |error: IntakeError| Refused {
            error,
            seen: seen.clone(),
        };
        // The API's reading is the provider's own, as reconcile's is: an event
        // conflicting with the one stored is kept beside it, not refused (the
        // provider cannot send another, and a request anyone can post must not
        // learn what the stored one says).
        let keeps_conflicts = from_the_api;
        let ingested = if keeps_conflicts {
            self.ingester
                .ingest_all_keeping_conflicts(vec![event], verified)
                .await
                .map(|mut all| all.pop())
        } else {
            self.ingester.ingest(event, verified).await.map(Some)
        };
        let Ingested { recorded, status } = ingested
            .map_err(|e| refuse(e.into()))?
            .ok_or_else(|| refuse(IntakeError::NoEvent))?;
        if matches!(recorded, Recorded::Conflict) && !keeps_conflicts {
            return Err(refuse(IntakeError::Conflict));
        }
        Ok(Receipt::One {
            event_id: seen.event_id.clone().unwrap_or_default(),
            kind: seen.kind,
            recorded,
            status,
        })
    }

    /// Binds a signature that covers only a checksum of the body (PayPal's)
    /// to this body, unless it is bound already: whether it is bound to this one.
    async fn bind_signature(
        &self,
        settings: &Settings,
        source: &Source,
        signature: &[u8],
        body: &[u8],
        event: &IncomingEvent,
    ) -> Result<bool, StoreError> {
        let sha256 = |bytes: &[u8]| Sha256::digest(bytes).to_vec();
        // Kept as long as the payloads: a signature that old is refused for its time anyway.
        let expired_before = crate::duration::before(chrono::Utc::now(), settings.retention)
            .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC);
        let client = self.pool.get().await?;
        bound_signatures::claim(
            &client,
            &source.name,
            &sha256(signature),
            &sha256(body),
            &event.event_id,
            expired_before,
        )
        .await
    }

    /// A request carrying several events (Adyen's batches): each is stored
    /// once, all in one commit. An item reusing a stored id with another
    /// payload is recorded as a conflict and acknowledged: refusing the
    /// request would hold back its other items for the provider's whole retry
    /// window, and the provider cannot fix the item anyway.
    async fn receive_several(
        &self,
        events: Vec<IncomingEvent>,
        verified: Verified,
    ) -> Result<Receipt, Refused> {
        if events.is_empty() {
            return Err(IntakeError::NoEvent.into());
        }
        let event_ids: Vec<String> = events.iter().map(|e| e.event_id.to_string()).collect();
        let seen = Seen {
            event_id: Some(event_ids.join(",")),
            kind: None,
        };
        let refuse = |error: IntakeError| Refused {
            error,
            seen: seen.clone(),
        };
        let outcomes = self
            .ingester
            .ingest_all_keeping_conflicts(events, verified)
            .await
            .map_err(|e| refuse(e.into()))?;
        let count = |recorded: fn(&Recorded) -> bool| {
            outcomes.iter().filter(|o| recorded(&o.recorded)).count()
        };
        let duplicates = count(|r| matches!(r, Recorded::Duplicate { .. }));
        let conflicts = count(|r| matches!(r, Recorded::Conflict));
        Ok(Receipt::Several {
            event_ids,
            duplicates,
            conflicts,
        })
    }
}
