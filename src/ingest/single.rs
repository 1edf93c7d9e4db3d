//! A delivery stored in a transaction of its own: a lone one, or one of a batch
//! that had to be undone. Its handler runs in a savepoint, so its failure is
//! recorded at once.

use chrono::Utc;
use deadpool_postgres::Object;
use serde_json::Value;
use tracing::Instrument;

use super::batch::batch_span;
use super::{GroupCommit, Ingested, Job, first_write_for, forward_names};
use crate::event::IncomingEvent;
use crate::handlers::HandlerError;
use crate::ledger::Run;
use crate::runner::{Ran, Step};
use crate::signature::Verified;
use crate::store::events::{self, EventStatus, FirstWrite, Recorded};
use crate::store::{self, StoreError};

impl GroupCommit {
    /// Each delivery in a transaction of its own, at once as far as
    /// `max_sessions` allows.
    pub(super) async fn one_by_one(&self, jobs: Vec<Job>) {
        let stores = jobs.into_iter().map(|job| async move {
            let _session = self.sessions.acquire().await;
            let result = self
                .ingest_one(&job.event, job.verified, None)
                .instrument(batch_span(&job.span, 1))
                .await;
            if result.is_ok() {
                self.note_commit();
            }
            let _ = job.reply.send(result);
        });
        futures_util::future::join_all(stores).await;
    }
    /// Stores a verified delivery once and, when it is new, runs its own handler in
    /// a savepoint — one transaction, committed before this returns (run again
    /// if it lost to a concurrent one). `read_first`: the event the delivery
    /// names, read before (see `Runner::read_named`).
    pub(super) async fn ingest_one(
        &self,
        event: &IncomingEvent,
        verified: Verified,
        read_first: Option<&Result<Value, HandlerError>>,
    ) -> Result<Ingested, StoreError> {
        // A body-keyed delivery that met a concurrent one of its id under another
        // body is decided again once that one has committed (a few times at most:
        // each time, another delivery committed).
        let mut races = 0;
        loop {
            match self.ingest_once(event, verified, read_first).await {
                Err(error) if events::lost_id_race(&error) && races < 3 => races += 1,
                result => return result,
            }
        }
    }

    async fn ingest_once(
        &self,
        event: &IncomingEvent,
        verified: Verified,
        read_first: Option<&Result<Value, HandlerError>>,
    ) -> Result<Ingested, StoreError> {
        let runner = &self.runner;
        let settings = runner.settings();
        let plan = runner.plan(
            &settings,
            &event.source,
            &event.event_type,
            event.kind.as_deref(),
        );
        let mut client = self.pool.get().await?;
        let mut runs = 0;
        let mut cut = None;
        let outcome = loop {
            runs += 1;
            let outcome = self
                .store_one(
                    &mut client,
                    event,
                    verified,
                    &plan,
                    cut.as_ref(),
                    read_first,
                )
                .await;
            match outcome {
                // Cut at `handler_timeout`: the cancel sent for its statement
                // may land late on whatever the session runs next, so the
                // session is closed (its transaction with it) and the delivery
                // stored on another, with the run as it ended.
                Ok(Stored::Cut(run)) => {
                    store::discard(client);
                    client = self.pool.get().await?;
                    cut = Some(run);
                    runs -= 1;
                }
                Ok(Stored::Done(ingested)) => break Ok(ingested),
                Err(error) if error.runs_again(runs) => {
                    log::debug!("storing {:?} again: {error}", event.event_id);
                }
                Err(error) => break Err(error),
            }
        };
        let ingested = store::give_back(client, outcome)?;
        if let Some(status) = ingested.status {
            runner.count_status(event.kind.as_deref(), status);
            runner.wake_forwards(&plan);
        }
        Ok(ingested)
    }

    /// One run of `ingest_one`'s transaction on `client`; a new event's handler
    /// runs in it, unless its run was `cut` already (then that run is recorded).
    async fn store_one(
        &self,
        client: &mut Object,
        event: &IncomingEvent,
        verified: Verified,
        plan: &[Step<'_>],
        cut: Option<&Run>,
        read_first: Option<&Result<Value, HandlerError>>,
    ) -> Result<Stored, StoreError> {
        let runner = &self.runner;
        if plan.is_empty() && event.request.is_none() {
            // Nothing to apply: the one statement is the whole transaction.
            let ignored = FirstWrite {
                status: EventStatus::Ignored,
                attempts: 0,
            };
            let recorded =
                events::record_delivery(&*client, event, verified.signed_with, ignored).await?;
            let status = matches!(recorded, Recorded::New { .. }).then_some(EventStatus::Ignored);
            return Ok(Stored::Done(Ingested { recorded, status }));
        }
        let local = plan.iter().find(|s| matches!(s, Step::Local { .. }));
        let forwards = forward_names(plan);
        let expected = first_write_for(plan);
        let tx = crate::store::begin(client).await?;
        let recorded = events::record_delivery(&tx, event, verified.signed_with, expected).await?;
        let status = match recorded {
            Recorded::New { id } => {
                let planned: Vec<(i64, &str)> = forwards.iter().map(|name| (id, *name)).collect();
                store::forwards::plan(&tx, &planned).await?;
                match local {
                    Some(step @ Step::Local { handler, .. }) => {
                        let run = match cut {
                            Some(run) => run.clone(),
                            None => {
                                let view = runner.view_received(event, id, Utc::now());
                                let ran = runner
                                    .run_step_or_cut(&tx, step, handler, &view, read_first)
                                    .await?;
                                match ran {
                                    Ran::Ended(run) => run,
                                    Ran::Cut(run) => return Ok(Stored::Cut(run)),
                                }
                            }
                        };
                        Some(
                            runner
                                .record_first(&tx, id, run, &forwards, expected.status)
                                .await?,
                        )
                    }
                    _ => Some(expected.status),
                }
            }
            Recorded::Duplicate { .. } | Recorded::Conflict => None,
        };
        tx.commit()
            .instrument(tracing::trace_span!("commit"))
            .await?;
        Ok(Stored::Done(Ingested { recorded, status }))
    }
}
/// How a transaction of `store_one` ended.
enum Stored {
    Done(Ingested),
    /// Its handler was cut at `handler_timeout`: nothing of it is to be kept,
    /// and its session is to be closed (see `Ran::Cut`).
    Cut(Run),
}
