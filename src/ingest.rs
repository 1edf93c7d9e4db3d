//! Receiving an event into the store: one `INSERT … ON CONFLICT` decides new,
//! duplicate or conflict, and a new event's own handler runs at once, in the same
//! transaction, so the event, its status and its effects commit together (and the
//! provider's 200 follows that commit). Forwards run after the commit: the row
//! says they are due, and the dispatcher is woken.

use chrono::Utc;
use deadpool_postgres::Pool;

use crate::dispatch::{Dispatcher, Standing, Step, attempt_record};
use crate::event::IncomingEvent;
use crate::handlers::Event;
use crate::signature::Verified;
use crate::store::StoreError;
use crate::store::events::{self, EventStatus, Expected, Recorded};

/// Receives verified deliveries.
#[derive(Clone)]
pub struct Ingester {
    pool: Pool,
    dispatcher: Dispatcher,
}

/// The outcome of receiving one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ingested {
    pub recorded: Recorded,
    /// The event's status after its run at receipt (new events only).
    pub status: Option<EventStatus>,
}

impl Ingester {
    pub fn new(pool: Pool, dispatcher: Dispatcher) -> Self {
        Ingester { pool, dispatcher }
    }

    /// Stores a verified delivery once and, when it is new, runs its own handler —
    /// one transaction, committed before this returns.
    pub async fn ingest(
        &self,
        event: &IncomingEvent,
        verified: Verified,
    ) -> Result<Ingested, StoreError> {
        let dispatcher = &self.dispatcher;
        let plan = dispatcher.plan(&event.source, &event.event_type, event.kind.as_deref());
        let mut client = self.pool.get().await?;
        if plan.is_empty() {
            // Nothing to apply: the one statement is the whole transaction.
            let ignored = Expected {
                status: EventStatus::Ignored,
                attempts: 0,
                due_now: false,
            };
            let recorded =
                events::record_delivery(&client, event, verified.signed_with, ignored).await?;
            let status = matches!(recorded, Recorded::New { .. }).then(|| {
                dispatcher.count_status(event.kind.as_deref(), EventStatus::Ignored);
                EventStatus::Ignored
            });
            return Ok(Ingested { recorded, status });
        }
        let local = plan.iter().find(|s| matches!(s, Step::Local { .. }));
        let forwards: Vec<String> = plan
            .iter()
            .filter(|s| matches!(s, Step::Forward(_)))
            .map(Step::name)
            .collect();
        // Written as the run usually ends: done, unless forwards are still to go.
        let expected = Expected {
            status: if forwards.is_empty() {
                EventStatus::Processed
            } else {
                EventStatus::Failed
            },
            attempts: i32::from(local.is_some()),
            due_now: !forwards.is_empty(),
        };
        let tx = client.transaction().await?;
        let recorded = events::record_delivery(&tx, event, verified.signed_with, expected).await?;
        let status = match recorded {
            Recorded::New { id } => {
                let mut status = expected.status;
                if let Some(step) = local {
                    let view = Event {
                        id,
                        source: &event.source,
                        scheme: dispatcher
                            .settings()
                            .source(&event.source)
                            .map_or("", |s| s.scheme.name()),
                        event_id: &event.event_id,
                        event_type: &event.event_type,
                        kind: event.kind.as_deref(),
                        payload: &event.payload,
                        body: &event.body,
                        attempt: 1,
                        received_at: Utc::now(),
                    };
                    let run = dispatcher.run_step(&tx, step, &view).await?;
                    let standing = dispatcher.standing_after(&run, 1);
                    if standing != Standing::Done {
                        let mut standings = vec![(run.handler.clone(), 1, standing.clone())];
                        standings.extend(
                            forwards
                                .iter()
                                .map(|f| (f.clone(), 0, Standing::Again(None))),
                        );
                        let settled = dispatcher.settle(&standings, 1);
                        events::settle(&tx, id, &settled).await?;
                        status = settled.status;
                    }
                    events::append_attempts(&tx, &[attempt_record(id, 1, &run, Some(&standing))])
                        .await?;
                }
                dispatcher.count_status(event.kind.as_deref(), status);
                Some(status)
            }
            Recorded::Duplicate { .. } | Recorded::Conflict => None,
        };
        tx.commit().await?;
        if status.is_some() && !forwards.is_empty() {
            dispatcher.wake();
        }
        Ok(Ingested { recorded, status })
    }
}
