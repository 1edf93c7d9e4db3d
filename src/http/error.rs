//! The one place where failures become HTTP answers (the receiver's and the admin API's status codes).

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::http::header::{CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use actix_web::middleware::Next;
use actix_web::{HttpResponse, ResponseError, web};
use serde::Serialize;

use super::AppState;
use crate::event::EventError;
use crate::idempotency::rules::{RETRY_AFTER_SECONDS as IN_PROGRESS_RETRY_AFTER, Refusal};
use crate::intake::IntakeError;
use crate::providers::SignatureRefusal;
use crate::signature::SignatureError;
use crate::store::StoreError;

/// Seconds a client should wait before retrying when the database is unavailable.
const RETRY_AFTER_SECONDS: &str = "5";

/// 498 Token Invalid: not a standard status, but the one GoCardless documents
/// for a webhook whose signature is refused.
fn token_invalid() -> StatusCode {
    StatusCode::from_u16(498).unwrap_or(StatusCode::UNAUTHORIZED)
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("unknown source")]
    UnknownSource,
    #[error("payload too large")]
    PayloadTooLarge,
    /// A request carrying more events than hookd takes in one: 413 as for a
    /// body too large, with the reason.
    #[error("{0}")]
    TooManyEvents(String),
    #[error("the body did not arrive in time")]
    RequestTimeout,
    /// Refused as the source's provider wants a bad signature refused.
    #[error("invalid signature: {0}")]
    InvalidSignature(SignatureError, SignatureRefusal),
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error("event id conflict")]
    EventIdConflict,
    #[error("unauthorized")]
    Unauthorized,
    #[error("too many failed attempts; retry in {}s", retry_after_seconds(.0))]
    TooManyRequests(std::time::Duration),
    #[error("forbidden: {0}")]
    Forbidden(String),
    #[error("not found")]
    NotFound,
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("gone: {0}")]
    Gone(String),
    #[error("conflict: {0}")]
    Conflict(&'static str, String),
    /// Another run is sending the event's forwards: a retry may run once they answered.
    #[error("this event's forwards are being sent right now; retry once they have answered")]
    InFlight,
    #[error("idempotency key reused for a different request")]
    IdempotencyKeyReused,
    #[error("{1}")]
    Unprocessable(&'static str, String),
    /// An Idempotency-Key rule answered instead of the work (the gateway's and
    /// `hookd::idempotency`'s): the body is `{"error": code}` alone.
    #[error("{}", .0.code())]
    Idempotency(Refusal),
    #[error("unavailable: {0}")]
    Unavailable(String),
    #[error("internal error: {0}")]
    Internal(String),
}

fn retry_after_seconds(wait: &std::time::Duration) -> u64 {
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
}

impl From<IntakeError> for ApiError {
    fn from(error: IntakeError) -> Self {
        match error {
            IntakeError::Signature(reason, answer) => ApiError::InvalidSignature(reason, answer),
            IntakeError::Event(error) => error.into(),
            IntakeError::NoEvent => ApiError::BadRequest(error.to_string()),
            IntakeError::Unfetched => ApiError::Unavailable(error.to_string()),
            IntakeError::Conflict => ApiError::EventIdConflict,
            IntakeError::Store(error) => error.into(),
        }
    }
}

impl From<EventError> for ApiError {
    fn from(error: EventError) -> Self {
        match error {
            EventError::TooManyEvents(_) => ApiError::TooManyEvents(error.to_string()),
            other => ApiError::BadRequest(other.to_string()),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match error {
            // The database cannot serve it now, a transaction still lost to
            // concurrent ones after hookd's own reruns, or a schema not yet
            // migrated: the client's retry may well succeed.
            StoreError::Unavailable(reason)
            | StoreError::Contention(reason)
            | StoreError::Schema(reason) => ApiError::Unavailable(reason),
            error @ StoreError::Query(_) => ApiError::Internal(error.to_string()),
        }
    }
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

impl ApiError {
    /// The `error` code of the JSON body.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::UnknownSource => "unknown_source",
            ApiError::PayloadTooLarge | ApiError::TooManyEvents(_) => "payload_too_large",
            ApiError::RequestTimeout => "request_timeout",
            ApiError::InvalidSignature(..) => "invalid_signature",
            ApiError::BadRequest(_) => "bad_request",
            ApiError::EventIdConflict => "event_id_conflict",
            ApiError::Unauthorized => "unauthorized",
            ApiError::TooManyRequests(_) => "too_many_requests",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::NotFound => "not_found",
            ApiError::MethodNotAllowed => "method_not_allowed",
            ApiError::Gone(_) => "gone",
            ApiError::Conflict(code, _) => code,
            ApiError::InFlight => "in_flight",
            ApiError::IdempotencyKeyReused => "idempotency_key_reused",
            ApiError::Unprocessable(code, _) => code,
            ApiError::Idempotency(refusal) => refusal.code(),
            ApiError::Unavailable(_) => "unavailable",
            ApiError::Internal(_) => "internal",
        }
    }

    /// The JSON body of the answer.
    pub fn json_body(&self) -> Vec<u8> {
        let body = ErrorBody {
            error: self.code(),
            reason: self.public_reason(),
        };
        serde_json::to_vec(&body).unwrap_or_default()
    }

    /// What the client may read: never database details or secret material.
    fn public_reason(&self) -> Option<String> {
        match self {
            ApiError::InvalidSignature(e, _) => Some(e.to_string()),
            ApiError::BadRequest(reason)
            | ApiError::TooManyEvents(reason)
            | ApiError::Forbidden(reason)
            | ApiError::Gone(reason)
            | ApiError::Conflict(_, reason)
            | ApiError::Unprocessable(_, reason) => Some(reason.clone()),
            ApiError::InFlight => Some(self.to_string()),
            _ => None,
        }
    }

    /// A failure that passes: the same request may be answered otherwise soon,
    /// so its answer is not kept for its Idempotency-Key.
    pub fn passes(&self) -> bool {
        matches!(
            self,
            ApiError::Unavailable(_) | ApiError::Internal(_) | ApiError::InFlight
        )
    }

    /// `Retry-After` seconds, for the failures that pass.
    pub fn retry_after(&self) -> Option<String> {
        match self {
            ApiError::Unavailable(_) => Some(RETRY_AFTER_SECONDS.to_string()),
            ApiError::TooManyRequests(wait) => Some(retry_after_seconds(wait).to_string()),
            ApiError::Idempotency(Refusal::InProgress) => Some(IN_PROGRESS_RETRY_AFTER.to_string()),
            _ => None,
        }
    }

    /// The server's own failures go to the log with their detail, which the
    /// answer never carries.
    pub fn log_failure(&self) {
        match self {
            ApiError::Internal(detail) => log::error!("internal error: {detail}"),
            ApiError::Unavailable(detail) => log::warn!("unavailable: {detail}"),
            _ => {}
        }
    }

    /// One sentence for people (the admin page): the public reason, or a plain
    /// description of the failure that gives away nothing internal.
    pub fn public_message(&self) -> String {
        if let Some(reason) = self.public_reason() {
            return reason;
        }
        match self {
            ApiError::Unavailable(_) => "The database is unavailable; try again shortly.".into(),
            ApiError::Internal(_) => "Something went wrong; the server log has the details.".into(),
            other => other.to_string(),
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            ApiError::UnknownSource => StatusCode::NOT_FOUND,
            ApiError::PayloadTooLarge | ApiError::TooManyEvents(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            ApiError::InvalidSignature(_, SignatureRefusal::Unauthorized) => {
                StatusCode::UNAUTHORIZED
            }
            ApiError::InvalidSignature(_, SignatureRefusal::TokenInvalid) => token_invalid(),
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::EventIdConflict
            | ApiError::IdempotencyKeyReused
            | ApiError::Unprocessable(..) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::TooManyRequests(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Gone(_) => StatusCode::GONE,
            ApiError::Conflict(..) | ApiError::InFlight => StatusCode::CONFLICT,
            ApiError::Idempotency(refusal) => match refusal {
                Refusal::NoRoute => StatusCode::NOT_FOUND,
                Refusal::KeyMissing | Refusal::KeyInvalid | Refusal::ScopeMissing => {
                    StatusCode::BAD_REQUEST
                }
                Refusal::InProgress | Refusal::OutcomeUnknown => StatusCode::CONFLICT,
                Refusal::Reused => StatusCode::UNPROCESSABLE_ENTITY,
                Refusal::UpstreamUnavailable | Refusal::UpstreamOutcomeUnknown => {
                    StatusCode::BAD_GATEWAY
                }
            },
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        self.log_failure();
        let mut response = HttpResponse::build(self.status_code());
        response.insert_header((CONTENT_TYPE, "application/json"));
        if let Some(seconds) = self.retry_after() {
            response.insert_header((RETRY_AFTER, seconds));
        }
        if matches!(self, ApiError::RequestTimeout) {
            // The rest of the body may still be on its way: end the connection.
            response.force_close();
        }
        if matches!(self, ApiError::Unauthorized) {
            response.insert_header((WWW_AUTHENTICATE, "Bearer realm=\"hookd\""));
        }
        response.body(self.json_body())
    }
}

/// Counts every answer 500 of a listener, whichever route gave it
/// (`hookd_internal_errors_total`): each is a bug of hookd's to look into.
pub async fn count_internal_errors(
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let metrics = request
        .app_data::<web::Data<AppState>>()
        .map(|state| state.app.metrics.clone());
    let answered = next.call(request).await;
    let status = match &answered {
        Ok(response) => response.status(),
        Err(error) => error.as_response_error().status_code(),
    };
    if status == StatusCode::INTERNAL_SERVER_ERROR
        && let Some(metrics) = metrics
    {
        metrics.internal_error();
    }
    answered
}
