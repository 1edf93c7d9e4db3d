//! The `Idempotency-Key` rules (after the IETF draft "The Idempotency-Key HTTP
//! Header Field"), shared by the gateway in front of any stack and by
//! [`Idempotent`], the same rules around a handler of a team's own actix-web
//! service. Both keep their keys in `api_idempotency_keys`.
//!
//! A key is claimed first, in a statement committed on its own, so that of any
//! number of concurrent copies (on any number of instances) exactly one runs;
//! the answer is stored after, and copies get it back. A key lives through the
//! states `in_progress → completed | released | unknown`: `released` when the
//! answer says nothing was done (a 5xx, 408 or 429, or nothing was sent), so a
//! retry runs again; `unknown` when something may have been done but no answer
//! came — never taken for new: a copy is sent again with the same operation id
//! (`resend_unknown`), or refused until an operator releases the key. A claim
//! whose instance died is taken over, once its lock (the timeout + 30 s) is
//! over, as `unknown`.

mod faithful;
mod middleware;
pub mod rules;

use sha2::{Digest, Sha256};

use crate::store::StoreError;
use crate::store::api_idempotency::{self as store, ClaimAttempt, KeyState, StoredKey};
use crate::store::sql::Session;

pub use middleware::{Handled, Idempotent, Operation, answer_with, refused_for, replay};
pub use rules::*;
pub use store::StoredAnswer;

/// SHA-256 over the method, path, query and body: the body's canonical JSON
/// (key order and whitespace ignored, `ignore` left out), or the raw bytes when
/// it is not JSON or its canonical form would blur a difference outside `ignore`
/// (a member named twice, a number written with more digits than a double
/// keeps: see `faithful`).
pub fn fingerprint(
    method: &str,
    path: &str,
    query: &str,
    body: &[u8],
    ignore: &[String],
) -> [u8; 32] {
    let mut hash = Sha256::new();
    for part in [method, path, query] {
        hash.update(part.as_bytes());
        hash.update(b"\n");
    }
    match faithful::parsed(body, ignore) {
        Some(json) => {
            hash.update(b"json:");
            hash.update(crate::event::stable_fingerprint(&json, ignore));
        }
        None => {
            hash.update(b"raw:");
            hash.update(Sha256::digest(body));
        }
    }
    hash.finalize().into()
}

/// A key this request now holds: run the work, then settle it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    pub row_id: i64,
    /// This claim's own id: only it may settle the key (a takeover may win).
    pub claim_id: Vec<u8>,
    pub operation_id: String,
    /// How many times the key was claimed to run, this one included (2 and
    /// more: a resend after `released` or `unknown`).
    pub runs: i32,
}

/// What a keyed request gets from its claim.
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    Run(Claimed),
    /// The stored answer, with the key's operation id.
    Replay(StoredAnswer, String),
    /// Refused, with the key's operation id when its row was read: every
    /// answer to a request with a key carries it back.
    Refused(Refusal, Option<String>),
}

/// The request a claim is for.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub rules: &'a Rules,
    pub scope: &'a [u8],
    pub key: &'a str,
    pub fingerprint: &'a [u8],
    pub method: &'a str,
    /// Path and query, for the desk.
    pub target: &'a str,
}

/// Claims the key for `request`, or says what the request gets instead: one
/// autocommitted statement claims a new key (or one a resend may take), and
/// only when it takes nothing is the row read and judged.
pub async fn claim(client: &impl Session, request: &Request<'_>) -> Result<Claim, StoreError> {
    let attempt = attempt(request);
    let taken = store::try_claim(client, &attempt).await?;
    claim_after(client, request, &attempt, taken).await
}

/// A claim of `request`'s key to try, with a fresh claim id and operation id.
pub fn attempt(request: &Request<'_>) -> ClaimAttempt {
    ClaimAttempt {
        route: request.rules.route.clone(),
        scope: request.scope.to_vec(),
        key: request.key.to_string(),
        fingerprint: request.fingerprint.to_vec(),
        operation_id: new_operation_id(),
        claim_id: rand::random::<[u8; 16]>().to_vec(),
        lock: request.rules.lock(),
        retention: request.rules.retention,
        resend_unknown: request.rules.resend_unknown,
        method: request.method.to_string(),
        target: request.target.to_string(),
    }
}

/// What `request` gets once `attempt`'s first statement, committed, took
/// `taken` (the gateway commits many requests' first statements together).
pub async fn claim_after(
    client: &impl Session,
    request: &Request<'_>,
    attempt: &ClaimAttempt,
    mut taken: Option<store::Taken>,
) -> Result<Claim, StoreError> {
    // The operation of the row last read: a refusal names it (the last
    // round's refusal names an earlier round's row when the last read none).
    let mut operation = None;
    // A few times at most: between the claim and the read, the row may be
    // purged, released or taken over.
    for round in 0..3 {
        if let Some(taken) = taken {
            return Ok(Claim::Run(claimed(attempt, taken)));
        }
        if let Some(row) = store::read_key(client, attempt).await? {
            operation = Some(row.operation_id.clone());
            match decide(&row, request.fingerprint, request.rules.resend_unknown) {
                Decision::Answer(claim) => return Ok(claim),
                Decision::MarkUnknown => {
                    store::mark_abandoned_unknown(client, row.id).await?;
                    return Ok(Claim::Refused(Refusal::OutcomeUnknown, operation));
                }
                Decision::ClaimAgain => {}
            }
        }
        if round == 2 {
            break;
        }
        taken = store::try_claim(client, attempt).await?;
    }
    Ok(Claim::Refused(Refusal::InProgress, operation))
}

/// The key `attempt` took.
pub fn claimed(attempt: &ClaimAttempt, (row_id, operation_id, runs): store::Taken) -> Claimed {
    Claimed {
        row_id,
        claim_id: attempt.claim_id.clone(),
        operation_id,
        runs,
    }
}

/// What a key's stored row means for a request that could not claim it.
#[derive(Debug, Clone, PartialEq)]
enum Decision {
    Answer(Claim),
    /// A claim abandoned past its lock, on a route that does not resend: it
    /// becomes `unknown` (and the request is refused as such).
    MarkUnknown,
    /// The row changed since the claim (it may be claimed now).
    ClaimAgain,
}

fn decide(row: &StoredKey, fingerprint: &[u8], resend_unknown: bool) -> Decision {
    let refused =
        |refusal| Decision::Answer(Claim::Refused(refusal, Some(row.operation_id.clone())));
    if row.fingerprint != fingerprint {
        return refused(Refusal::Reused);
    }
    match (row.state, row.locked) {
        (KeyState::Completed, _) => match &row.answer {
            Some(answer) => {
                Decision::Answer(Claim::Replay(answer.clone(), row.operation_id.clone()))
            }
            None => Decision::ClaimAgain,
        },
        (KeyState::InProgress, true) => refused(Refusal::InProgress),
        (KeyState::InProgress, false) if !resend_unknown => Decision::MarkUnknown,
        (KeyState::Unknown, _) if !resend_unknown => refused(Refusal::OutcomeUnknown),
        (KeyState::InProgress | KeyState::Unknown | KeyState::Released, _) => Decision::ClaimAgain,
    }
}

/// Stores the work's answer for copies; `false` when the claim was no longer
/// this request's (taken over meanwhile).
pub async fn complete(
    client: &impl Session,
    claimed: &Claimed,
    answer: &StoredAnswer,
) -> Result<bool, StoreError> {
    store::complete(client, claimed.row_id, &claimed.claim_id, answer).await
}

/// Frees the key: the next copy runs again.
pub async fn release(client: &impl Session, claimed: &Claimed) -> Result<bool, StoreError> {
    store::release(client, claimed.row_id, &claimed.claim_id).await
}

/// The work may have been done but its answer is lost: `unknown`.
pub async fn outcome_unknown(client: &impl Session, claimed: &Claimed) -> Result<bool, StoreError> {
    store::outcome_unknown(client, claimed.row_id, &claimed.claim_id).await
}

#[cfg(test)]
mod tests;
