//! The call to upstream: the request as the client sent it (but the hop-by-hop
//! headers, with `Idempotency-Operation`, `traceparent` and the forwarding
//! headers set by hookd, as a reverse proxy sets them), and
//! its answer read into memory up to `MAX_STORED_BODY`, the rest streamed on.
//! A failure is sorted by what upstream may have seen: nothing (the connection
//! was never made), or possibly all of it.

use std::sync::LazyLock;

use actix_web::HttpRequest;
use actix_web::http::header::HeaderMap;
use reqwest::header::{HeaderName, HeaderValue};

use super::config::{MAX_TIMEOUT, Route, is_hop_by_hop};
use super::forwarding::{Forwarding, SET_HERE};
use crate::idempotency::{MAX_STORED_BODY, OPERATION_HEADER};

/// One client for every route: connections to each upstream are reused.
static CLIENT: LazyLock<Result<reqwest::Client, crate::outbound::ClientError>> =
    LazyLock::new(|| crate::outbound::transparent_client(MAX_TIMEOUT));

/// Upstream's answer.
pub struct Answer {
    pub status: u16,
    /// Its headers but the hop-by-hop ones and `Content-Length`.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Body,
}

pub enum Body {
    Whole(Vec<u8>),
    /// Over `MAX_STORED_BODY`: the bytes read so far, and the rest to stream.
    Large {
        head: Vec<u8>,
        rest: reqwest::Response,
    },
}

/// Why no answer came.
#[derive(Debug)]
pub enum Failure {
    /// The connection could not be made: upstream saw nothing.
    NothingSent(String),
    /// The request may have reached upstream (a timeout, a reset, a body cut
    /// short): upstream may have done the work.
    NoAnswer(String),
}

/// Sends `request` (with `body`) to `route`'s upstream; `operation` goes as
/// `Idempotency-Operation`, `forwarding` (when hookd speaks as a proxy: `[gateway]
/// trusted_proxies` is set) as the `X-Forwarded-*` headers. Waits
/// `route`'s timeout at most, for the answer and its first `MAX_STORED_BODY`
/// bytes.
pub async fn send(
    route: &Route,
    request: &HttpRequest,
    forwarding: Option<&Forwarding>,
    body: Vec<u8>,
    operation: Option<&str>,
) -> Result<Answer, Failure> {
    let client = CLIENT
        .as_ref()
        .map_err(|e| Failure::NothingSent(e.to_string()))?;
    let target = request.uri().path_and_query().map_or("/", |p| p.as_str());
    let url = route.upstream_url(target);
    let method = reqwest::Method::from_bytes(request.method().as_str().as_bytes())
        .map_err(|e| Failure::NothingSent(e.to_string()))?;
    let traceparent = crate::traces::traceparent();
    let mut headers = passed_on(request.headers(), traceparent.is_some(), forwarding);
    if let Some(forwarding) = forwarding {
        forwarding.set(&mut headers);
    }
    if let Some(operation) = operation.and_then(|o| HeaderValue::from_str(o).ok()) {
        headers.insert(HeaderName::from_static(OPERATION_HEADER), operation);
    }
    if let Some(value) = traceparent.and_then(|t| HeaderValue::from_str(&t).ok()) {
        headers.insert(HeaderName::from_static("traceparent"), value);
    }
    let sent = client
        .request(method, url)
        .timeout(route.rules.timeout)
        .headers(headers)
        .body(body)
        .send()
        .await;
    let mut response = match sent {
        Ok(response) => response,
        Err(error) if error.is_connect() => {
            return Err(Failure::NothingSent(format!(
                "cannot connect to {}: {}",
                route.upstream,
                error.without_url()
            )));
        }
        Err(error) => return Err(Failure::NoAnswer(describe(route, &error))),
    };
    let status = response.status().as_u16();
    let headers = answered(response.headers());
    let mut head = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                head.extend_from_slice(&chunk);
                if head.len() > MAX_STORED_BODY {
                    let body = Body::Large {
                        head,
                        rest: response,
                    };
                    return Ok(Answer {
                        status,
                        headers,
                        body,
                    });
                }
            }
            Ok(None) => {
                let body = Body::Whole(head);
                return Ok(Answer {
                    status,
                    headers,
                    body,
                });
            }
            Err(error) => return Err(Failure::NoAnswer(describe(route, &error))),
        }
    }
}

fn describe(route: &Route, error: &reqwest::Error) -> String {
    if error.is_timeout() {
        format!(
            "no answer from {} within {}",
            route.upstream,
            crate::duration::format(route.rules.timeout)
        )
    } else {
        format!(
            "{}: {}",
            route.upstream,
            std::error::Error::source(error)
                .map_or_else(|| error.to_string(), |source| source.to_string(),)
        )
    }
}

/// The names a `Connection` header lists: hop-by-hop for this message only.
fn connection_names<'a>(values: impl Iterator<Item = &'a [u8]>) -> Vec<String> {
    values
        .filter_map(|v| std::str::from_utf8(v).ok())
        .flat_map(|v| v.split(','))
        .map(|name| name.trim().to_ascii_lowercase())
        .filter(|name| !name.is_empty())
        .collect()
}

/// Whether a header belongs to one connection (or to a proxy) and stays here.
fn hop_by_hop(name: &str, named: &[String]) -> bool {
    is_hop_by_hop(name) || named.iter().any(|n| n == name)
}

/// The client's headers upstream gets: all but the hop-by-hop ones, `Expect`,
/// any `Idempotency-Operation` of the client's (hookd sets it), the client's
/// `traceparent` when hookd's span continues the trace instead; and when
/// hookd speaks as a proxy (`forwarding`), the forwarding headers it sets
/// (`SET_HERE`) and, unless the peer is a trusted proxy, the other forwarding
/// headers (the client's to invent).
fn passed_on(
    headers: &HeaderMap,
    own_traceparent: bool,
    forwarding: Option<&Forwarding>,
) -> reqwest::header::HeaderMap {
    let replaced = |name: &str| {
        forwarding.is_some_and(|f| {
            SET_HERE.contains(&name)
                || (!f.trusted && crate::proxy_headers::is_forwarding_header(name))
        })
    };
    let named = connection_names(headers.get_all("connection").map(|v| v.as_bytes()));
    let mut out = reqwest::header::HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let name = name.as_str();
        if hop_by_hop(name, &named)
            || name == "expect"
            || name == OPERATION_HEADER
            || (own_traceparent && name == "traceparent")
            || replaced(name)
        {
            continue;
        }
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(value.as_bytes()),
        ) {
            out.append(name, value);
        }
    }
    out
}

/// Upstream's headers the client gets: all but the hop-by-hop ones (the
/// length is the client connection's to state).
fn answered(headers: &reqwest::header::HeaderMap) -> Vec<(HeaderName, HeaderValue)> {
    let named = connection_names(headers.get_all("connection").iter().map(|v| v.as_bytes()));
    headers
        .iter()
        .filter(|(name, _)| !hop_by_hop(name.as_str(), &named))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_and_those_connection_names_stay_behind() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("connection", "keep-alive, X-Secret-Hop"),
            ("x-secret-hop", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-authorization", "Basic x"),
            ("te", "trailers"),
            ("upgrade", "h2c"),
            ("host", "gateway.local"),
            ("content-length", "12"),
            ("expect", "100-continue"),
            ("idempotency-operation", "op_forged"),
            (
                "traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            ),
            ("authorization", "Bearer sk"),
            ("idempotency-key", "k1"),
            ("content-type", "application/json"),
        ] {
            headers.append(
                actix_web::http::header::HeaderName::from_static(name),
                actix_web::http::header::HeaderValue::from_static(value),
            );
        }
        let names = |map: &reqwest::header::HeaderMap| {
            let mut names: Vec<String> = map.keys().map(|k| k.to_string()).collect();
            names.sort();
            names
        };
        let passed = passed_on(&headers, false, None);
        assert_eq!(
            names(&passed),
            [
                "authorization",
                "content-type",
                "idempotency-key",
                "traceparent"
            ]
        );
        assert!(!names(&passed_on(&headers, true, None)).contains(&"traceparent".to_string()));
    }

    #[test]
    fn forwarding_headers_go_as_they_came_unless_hookd_speaks_as_a_proxy() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("x-forwarded-for", "10.0.0.1"),
            ("x-forwarded-prefix", "/admin"),
            ("x-original-url", "/admin"),
            ("forwarded", "for=10.0.0.1"),
            ("x-real-ip", "10.0.0.1"),
            ("true-client-ip", "10.0.0.1"),
            ("authorization", "Bearer sk"),
        ] {
            headers.append(
                actix_web::http::header::HeaderName::from_static(name),
                actix_web::http::header::HeaderValue::from_static(value),
            );
        }
        let kept = |forwarding: Option<&Forwarding>| -> Vec<String> {
            let mut names: Vec<String> = passed_on(&headers, false, forwarding)
                .keys()
                .map(|k| k.to_string())
                .collect();
            names.sort();
            names
        };
        let speaking = |trusted| Forwarding {
            chain: vec!["203.0.113.7".into()],
            client: "203.0.113.7".parse().ok(),
            proto: "http".into(),
            host: None,
            trusted,
        };
        assert_eq!(kept(Some(&speaking(false))), ["authorization"]);
        // A trusted proxy's pass, but those hookd sets itself.
        assert_eq!(
            kept(Some(&speaking(true))),
            [
                "authorization",
                "forwarded",
                "true-client-ip",
                "x-forwarded-prefix",
                "x-original-url"
            ]
        );
        // Without [gateway] trusted_proxies hookd does not speak as a proxy:
        // every one goes as it came.
        assert_eq!(
            kept(None),
            [
                "authorization",
                "forwarded",
                "true-client-ip",
                "x-forwarded-for",
                "x-forwarded-prefix",
                "x-original-url",
                "x-real-ip"
            ]
        );
    }
}
