//! [`Idempotent`]: the gateway's rules around a handler of a team's own
//! actix-web service, over the same table. The key is claimed first (committed
//! on its own); the handler then runs once per key in a transaction of its own,
//! where it writes its effects, and its answer is stored in that same
//! transaction — effects and answer commit together or not at all. Copies get
//! the stored answer, and the same refusals as the gateway's.
//!
//! ```no_run
//! use actix_web::{HttpRequest, HttpResponse, web};
//! use hookd::idempotency::{Idempotent, Rules};
//!
//! async fn pay(
//!     idempotent: web::Data<Idempotent>,
//!     request: HttpRequest,
//!     body: web::Bytes,
//! ) -> HttpResponse {
//!     let amount = body.len() as i64; // parse the order from `body` here
//!     idempotent
//!         .run(&request, body, move |op| {
//!             Box::pin(async move {
//!                 // `op.id()` is the operation id to pass to the bank.
//!                 let written = op
//!                     .transaction()
//!                     .execute("INSERT INTO charges (operation, amount) VALUES ($1, $2)", &[&op.id(), &amount])
//!                     .await;
//!                 match written {
//!                     Ok(_) => HttpResponse::Created().json(serde_json::json!({"operation": op.id()})),
//!                     Err(_) => HttpResponse::ServiceUnavailable().finish(),
//!                 }
//!             })
//!         })
//!         .await
//! }
//! # let _ = (pay, Rules::new("payments"));
//! ```

use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, HttpResponseBuilder, ResponseError, web};
use deadpool_postgres::Pool;
use futures_util::future::LocalBoxFuture;

use super::rules::{
    self, BODY_OMITTED_HEADER, MAX_STORED_BODY, OPERATION_HEADER, REPLAYED_HEADER, Refusal, Rules,
    Settle,
};
use super::{Claim, Claimed, Request, StoredAnswer};
use crate::http::error::ApiError;
use crate::store::{self, StoreError};

/// One run of the wrapped handler: its transaction and the operation id.
pub struct Operation<'a> {
    transaction: deadpool_postgres::Transaction<'a>,
    id: String,
    runs: i32,
}

impl<'a> Operation<'a> {
    /// The stable id of this key's operation (`op_<uuid>`): the same on every
    /// run of the key, for the bank or any other service to dedupe on.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The handler's transaction: what it writes here commits with its answer.
    pub fn transaction(&self) -> &deadpool_postgres::Transaction<'a> {
        &self.transaction
    }

    /// Whether the key ran before (released, or its outcome unknown).
    pub fn is_resend(&self) -> bool {
        self.runs > 1
    }

    fn into_transaction(self) -> deadpool_postgres::Transaction<'a> {
        self.transaction
    }
}

/// The rules of one route of a team's service, over its pool.
#[derive(Clone)]
pub struct Idempotent {
    pool: Pool,
    rules: Arc<Rules>,
}

/// What a handler returns: its answer, borrowing its [`Operation`].
pub type Handled<'c> = LocalBoxFuture<'c, HttpResponse>;

impl Idempotent {
    /// `rules` on `pool`, whose database has hookd's migrations applied
    /// (`hookd::store::migrate`: the table is `api_idempotency_keys`).
    pub fn new(pool: Pool, rules: Rules) -> Self {
        Idempotent {
            pool,
            rules: Arc::new(rules),
        }
    }

    pub fn rules(&self) -> &Rules {
        &self.rules
    }

    /// Runs `handler` once per `Idempotency-Key` of `request` (with `body`,
    /// the request's body, for the fingerprint), or answers for it: the stored
    /// answer to a copy, 400, 409 or 422 as the gateway does. Once claimed, the
    /// run goes on to its end even if the client leaves.
    pub async fn run<H>(&self, request: &HttpRequest, body: web::Bytes, handler: H) -> HttpResponse
    where
        H: for<'c, 't> FnOnce(&'c Operation<'t>) -> Handled<'c> + 'static,
    {
        let rules = &self.rules;
        let keyed = match rules::key_and_scope(rules, request.headers()) {
            Ok(keyed) => keyed,
            Err(refusal) => return refused(refusal),
        };
        let fingerprint = super::fingerprint(
            request.method().as_str(),
            request.path(),
            request.query_string(),
            &body,
            &rules.fingerprint_ignore,
        );
        let method = request.method().as_str().to_string();
        let target = request
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let this = self.clone();
        let work = async move {
            let answered = match keyed {
                None => this.unkeyed(handler).await,
                Some((key, scope)) => {
                    let request = Request {
                        rules: &this.rules,
                        scope: &scope,
                        key: &key,
                        fingerprint: &fingerprint,
                        method: &method,
                        target: &target,
                    };
                    this.keyed(&request, handler).await
                }
            };
            answered.unwrap_or_else(|error| ApiError::from(error).error_response())
        };
        match actix_web::rt::spawn(work).await {
            Ok(response) => response,
            Err(error) => {
                ApiError::Internal(format!("an idempotent run stopped: {error}")).error_response()
            }
        }
    }

    async fn keyed<H>(&self, request: &Request<'_>, handler: H) -> Result<HttpResponse, StoreError>
    where
        H: for<'c, 't> FnOnce(&'c Operation<'t>) -> Handled<'c>,
    {
        let client = self.pool.get().await?;
        let claim = match super::claim(&client, request).await {
            Ok(claim) => claim,
            Err(error) => return store::give_back(client, Err(error)),
        };
        match claim {
            Claim::Refused(refusal, None) => Ok(refused(refusal)),
            Claim::Refused(refusal, Some(operation)) => Ok(refused_for(refusal, &operation)),
            Claim::Replay(answer, operation) => Ok(replay(answer, &operation)),
            // On the session that claimed it: the claim's lock runs from its
            // statement, so no wait for a pooled session may eat into it.
            Claim::Run(claimed) => self.execute(client, claimed, handler).await,
        }
    }

    /// The claimed run: the handler in its transaction, its answer stored there.
    async fn execute<H>(
        &self,
        mut client: deadpool_postgres::Object,
        claimed: Claimed,
        handler: H,
    ) -> Result<HttpResponse, StoreError>
    where
        H: for<'c, 't> FnOnce(&'c Operation<'t>) -> Handled<'c>,
    {
        let id = claimed.operation_id.clone();
        let (transaction, ran) = self
            .in_transaction(&mut client, id, claimed.runs, handler)
            .await?;
        let answer = match ran {
            Some(response) => read_answer(response).await,
            None => None,
        };
        let Some((head, body)) = answer else {
            // No answer in time (or none readable): what the handler did
            // outside its transaction is unknown.
            drop(transaction);
            self.mark_unknown(&claimed).await;
            return Ok(refused_for(
                Refusal::UpstreamOutcomeUnknown,
                &claimed.operation_id,
            ));
        };
        let status = head.status().as_u16();
        if rules::settle(status) == Settle::Release {
            transaction.rollback().await?;
            super::release(&client, &claimed).await?;
            return Ok(with_operation(head, body, &claimed.operation_id));
        }
        let stored = self.stored(&head, &body);
        if !super::complete(&transaction, &claimed, &stored).await? {
            // Taken over meanwhile (this run outlived its lock): the other run's
            // effects stand, not these.
            transaction.rollback().await?;
            return Ok(refused_for(Refusal::InProgress, &claimed.operation_id));
        }
        let committed = transaction.commit().await;
        if let Err(error) = committed {
            log::error!(
                "idempotency: the commit of {} failed: {error}",
                claimed.operation_id
            );
            drop(client);
            self.mark_unknown(&claimed).await;
            return Ok(refused_for(
                Refusal::UpstreamOutcomeUnknown,
                &claimed.operation_id,
            ));
        }
        Ok(with_operation(head, body, &claimed.operation_id))
    }

    /// A request without a key, where the rules allow it: the handler in its
    /// transaction, nothing stored.
    async fn unkeyed<H>(&self, handler: H) -> Result<HttpResponse, StoreError>
    where
        H: for<'c, 't> FnOnce(&'c Operation<'t>) -> Handled<'c>,
    {
        let mut client = self.pool.get().await?;
        let id = rules::new_operation_id();
        let (transaction, ran) = self.in_transaction(&mut client, id, 1, handler).await?;
        let Some(response) = ran else {
            return Ok(refused(Refusal::UpstreamOutcomeUnknown));
        };
        if rules::settle(response.status().as_u16()) == Settle::Release {
            transaction.rollback().await?;
        } else {
            transaction.commit().await?;
        }
        Ok(response)
    }

    /// Begins the handler's transaction and runs the handler in it, for the
    /// rules' timeout at most (`None`: it took longer, and was dropped).
    async fn in_transaction<'a, H>(
        &self,
        client: &'a mut deadpool_postgres::Object,
        id: String,
        runs: i32,
        handler: H,
    ) -> Result<(deadpool_postgres::Transaction<'a>, Option<HttpResponse>), StoreError>
    where
        H: for<'c, 't> FnOnce(&'c Operation<'t>) -> Handled<'c>,
    {
        let transaction = store::begin(client).await?;
        let operation = Operation {
            transaction,
            id,
            runs,
        };
        let ran = tokio::time::timeout(self.rules.timeout, handler(&operation)).await;
        Ok((operation.into_transaction(), ran.ok()))
    }

    /// What copies get: the status, the headers the rules keep, and the body
    /// unless it is over 1 MiB.
    fn stored(&self, head: &HttpResponse<()>, body: &web::Bytes) -> StoredAnswer {
        let headers = head
            .headers()
            .iter()
            .filter(|(name, _)| self.rules.keeps_header(name.as_str()))
            .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_string())))
            .collect();
        let omitted = body.len() > MAX_STORED_BODY;
        StoredAnswer {
            status: head.status().as_u16(),
            headers,
            body: if omitted { Vec::new() } else { body.to_vec() },
            body_omitted: omitted,
        }
    }

    async fn mark_unknown(&self, claimed: &Claimed) {
        let marked = async {
            let client = self.pool.get().await?;
            let done = super::outcome_unknown(&client, claimed).await;
            store::give_back(client, done)
        }
        .await;
        if let Err(error) = marked {
            log::error!(
                "idempotency: cannot mark {} unknown: {error}; its lock's end does",
                claimed.operation_id
            );
        }
    }
}

/// The handler's answer, read whole.
async fn read_answer(response: HttpResponse) -> Option<(HttpResponse<()>, web::Bytes)> {
    let (head, body) = response.into_parts();
    let body = actix_web::body::to_bytes(body).await.ok()?;
    Some((head, body))
}

fn with_operation(head: HttpResponse<()>, body: web::Bytes, operation: &str) -> HttpResponse {
    let mut response = head.set_body(body).map_into_boxed_body();
    if let Some((name, value)) = header(OPERATION_HEADER, operation) {
        response.headers_mut().insert(name, value);
    }
    response
}

fn refused(refusal: Refusal) -> HttpResponse {
    ApiError::Idempotency(refusal).error_response()
}

/// A refusal naming the key's operation id: what the client quotes when it
/// asks what became of it (the gateway's answer too).
pub fn refused_for(refusal: Refusal, operation: &str) -> HttpResponse {
    let mut response = refused(refusal);
    if let Some((name, value)) = header(OPERATION_HEADER, operation) {
        response.headers_mut().insert(name, value);
    }
    response
}

fn header(name: &str, value: &str) -> Option<(HeaderName, HeaderValue)> {
    Some((
        HeaderName::from_bytes(name.as_bytes()).ok()?,
        HeaderValue::from_str(value).ok()?,
    ))
}

/// A builder of an answer with `status` (502 for one HTTP has no code for).
pub fn answer_with(status: u16) -> HttpResponseBuilder {
    HttpResponse::build(StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY))
}

/// A stored answer given again: its status, headers and body, marked as a
/// replay (and as one without its body when that was too large to keep), with
/// the key's operation id.
pub fn replay(answer: StoredAnswer, operation: &str) -> HttpResponse {
    let mut response = answer_with(answer.status);
    for (name, value) in &answer.headers {
        if let Some(pair) = header(name, value) {
            response.append_header(pair);
        }
    }
    let mut added = vec![(REPLAYED_HEADER, "true"), (OPERATION_HEADER, operation)];
    if answer.body_omitted {
        added.push((BODY_OMITTED_HEADER, "true"));
    }
    for (name, value) in added {
        if let Some(pair) = header(name, value) {
            response.insert_header(pair);
        }
    }
    response.body(answer.body)
}
