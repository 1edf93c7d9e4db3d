//! Forwards: handlers in any other stack. An event a `[[forwards]]` table matches
//! is POSTed to its URL after the delivery was acknowledged, with the provider's
//! body byte for byte, signed as Standard Webhooks with the forward's secret. The
//! `webhook-id` is the same on every retry and differs per event and forward, so
//! the receiver dedupes with any Standard Webhooks library (at-least-once delivery
//! plus an idempotent consumer is exactly one effect).
//!
//! 2xx is done; 408, 429, 5xx, a timeout or a connection error is retried with
//! the dispatcher's backoff; any other answer is permanent (the event goes dead).
//! Of the answer only the first bytes are read (then the connection is dropped),
//! and errors name the URL without its query (see `Forward::endpoint`).

use chrono::Utc;
use sha2::{Digest, Sha256};

use super::HandlerError;
use crate::config::Forward;
use crate::providers::{self, Scheme};
use crate::signature::Envelope;

/// How much of the receiver's answer an attempt keeps.
pub const RESPONSE_EXCERPT: usize = 256;

/// What one run amounted to; a forward's also the receiver's status and answer.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub result: Result<(), HandlerError>,
    pub http_status: Option<i32>,
    /// The first bytes of the answer, as text.
    pub response: Option<String>,
}

/// The event a forward sends.
#[derive(Debug, Clone, Copy)]
pub struct Outgoing<'a> {
    pub source: &'a str,
    pub event_id: &'a str,
    pub event_type: &'a str,
    pub kind: Option<&'a str>,
    /// The provider's body, byte for byte.
    pub body: &'a [u8],
}

/// The stable `webhook-id` of an event at a forward.
pub fn message_id(forward: &str, source: &str, event_id: &str) -> String {
    let digest = Sha256::digest(
        [
            forward.as_bytes(),
            b"\0",
            source.as_bytes(),
            b"\0",
            event_id.as_bytes(),
        ]
        .concat(),
    );
    format!("msg_{}", hex::encode(&digest[..16]))
}

/// POSTs `event` to `forward` and says how it went.
pub async fn send(http: &reqwest::Client, forward: &Forward, event: &Outgoing<'_>) -> RunOutcome {
    let id = message_id(&forward.name, event.source, event.event_id);
    let envelope = Envelope {
        event_id: &id,
        event_type: event.event_type,
        timestamp: Utc::now().timestamp(),
    };
    let signed = match providers::sign(&Scheme::Standard, &forward.secret, event.body, &envelope) {
        Ok(signed) => signed.headers,
        Err(problem) => {
            return RunOutcome {
                result: Err(HandlerError::Permanent(format!("signing: {problem}"))),
                http_status: None,
                response: None,
            };
        }
    };
    let mut request = http
        .post(forward.url.clone())
        .timeout(forward.timeout)
        .header("hookd-source", event.source)
        .header("hookd-event-type", event.event_type)
        .header("hookd-kind", event.kind.unwrap_or_default())
        .body(event.body.to_vec());
    for (name, value) in signed {
        request = request.header(name, value);
    }
    // The forward's span, so the receiver's trace continues it.
    if let Some(traceparent) = crate::traces::traceparent() {
        request = request.header("traceparent", traceparent);
    }
    let endpoint = forward.endpoint();
    match request.send().await {
        Ok(response) => {
            let status = response.status();
            let excerpt = excerpt(&first_bytes(response).await);
            let code = status.as_u16();
            let result = if status.is_success() {
                Ok(())
            } else if code == 408 || code == 429 || status.is_server_error() {
                Err(HandlerError::Retry(format!("{endpoint} answered {code}")))
            } else {
                Err(HandlerError::Permanent(format!(
                    "{endpoint} answered {code}"
                )))
            };
            RunOutcome {
                result,
                http_status: Some(i32::from(code)),
                response: Some(excerpt),
            }
        }
        Err(error) => {
            let why = if error.is_timeout() {
                format!("no answer from {endpoint} within {:?}", forward.timeout)
            } else if error.is_connect() {
                format!("cannot connect to {endpoint}")
            } else {
                // reqwest's message would repeat the whole URL.
                format!("{endpoint}: {}", error.without_url())
            };
            RunOutcome {
                result: Err(HandlerError::Retry(why)),
                http_status: None,
                response: None,
            }
        }
    }
}

/// The first `RESPONSE_EXCERPT` bytes of an answer, read as they come: a
/// receiver streaming without end costs no more. Dropping the rest unread closes
/// the connection.
async fn first_bytes(mut response: reqwest::Response) -> Vec<u8> {
    let mut kept = Vec::with_capacity(RESPONSE_EXCERPT);
    while kept.len() < RESPONSE_EXCERPT {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = RESPONSE_EXCERPT - kept.len();
                kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            // The end, or the body broke off (a timeout): keep what came.
            Ok(None) | Err(_) => break,
        }
    }
    kept
}

/// The first bytes of an answer as text a column can hold, at most
/// `RESPONSE_EXCERPT` bytes of it.
fn excerpt(body: &[u8]) -> String {
    let cut = &body[..body.len().min(RESPONSE_EXCERPT)];
    let mut text = String::from_utf8_lossy(cut).replace('\0', "\u{fffd}");
    // A replacement character is wider than the byte it stands for.
    while text.len() > RESPONSE_EXCERPT {
        text.pop();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_excerpt_holds_at_most_its_bytes_whatever_they_are() {
        assert_eq!(excerpt(b"answer 503"), "answer 503");
        assert_eq!(excerpt(&[b'x'; 1000]).len(), RESPONSE_EXCERPT);
        let invalid = excerpt(&[0xff; 1000]);
        assert!(invalid.len() <= RESPONSE_EXCERPT && !invalid.is_empty());
        assert!(!excerpt(b"a\0b").contains('\0'));
    }

    #[test]
    fn the_message_id_is_stable_and_differs_per_event_and_forward() {
        let a = message_id("billing", "stripe", "evt_1");
        assert_eq!(a, message_id("billing", "stripe", "evt_1"));
        assert_ne!(a, message_id("billing", "stripe", "evt_2"));
        assert_ne!(a, message_id("audit", "stripe", "evt_1"));
        assert_ne!(a, message_id("billing", "shop", "evt_1"));
        assert!(a.starts_with("msg_") && a.len() == 36);
    }
}
