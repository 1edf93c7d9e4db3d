//! `X-Request-Id` on every answer of both listeners: the caller's own id when it
//! is a sane token (a proxy's or a load balancer's, so one id follows a request
//! through every log), else a fresh one. The log lines of a request name it.

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{HttpMessage, HttpRequest};

pub const HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// The longest id taken from a request.
const MAX_LEN: usize = 128;

/// A request's id, kept in its extensions.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// The id of `request` (`-` outside the middleware, as in unit tests).
pub fn of_request(request: &HttpRequest) -> String {
    request
        .extensions()
        .get::<RequestId>()
        .map_or_else(|| "-".to_string(), |id| id.0.clone())
}

/// Visible ASCII only (no spaces, quotes or control characters a log could be
/// forged with), 1 to 128 of them.
fn sane(value: &HeaderValue) -> Option<&str> {
    let bytes = value.as_bytes();
    let ok = !bytes.is_empty()
        && bytes.len() <= MAX_LEN
        && bytes
            .iter()
            .all(|b| b.is_ascii_graphic() && *b != b'"' && *b != b'\\');
    ok.then(|| value.to_str().ok()).flatten()
}

/// 16 random bytes in hex.
pub fn generate() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}

/// The id a request's answer carries: the caller's when it is sane, else a
/// fresh one.
pub fn taken_or_new(headers: &actix_web::http::header::HeaderMap) -> String {
    headers
        .get(&HEADER)
        .and_then(sane)
        .map_or_else(generate, str::to_string)
}

pub async fn middleware(
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let id = taken_or_new(request.headers());
    request.extensions_mut().insert(RequestId(id.clone()));
    // Handlers and extractors turn their failures into answers, which pass here.
    // (The request cannot be kept for an `Err`: routing needs it unshared.)
    let mut response = next.call(request).await?.map_into_boxed_body();
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(HEADER, value);
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_visible_tokens_of_reasonable_length_are_taken() {
        let take = |v: &[u8]| {
            HeaderValue::from_bytes(v)
                .ok()
                .and_then(|v| sane(&v).map(String::from))
        };
        assert_eq!(take(b"req-42_a.b:c/d").as_deref(), Some("req-42_a.b:c/d"));
        assert_eq!(take(&[b'a'; 128]).map(|v| v.len()), Some(128));
        for bad in [
            &b""[..],
            &[b'a'; 129],
            b"two words",
            b"quo\"te",
            b"back\\slash",
            b"caf\xc3\xa9",
            b"tab\there",
        ] {
            assert_eq!(take(bad), None, "{bad:?}");
        }
        let fresh = generate();
        assert_eq!(fresh.len(), 32);
        assert!(fresh.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(fresh, generate());
    }
}
