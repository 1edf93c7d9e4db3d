//! What upstream is told of the client, as a reverse proxy tells it: the
//! `X-Forwarded-*` headers and `X-Real-IP`. A caller in `[gateway]
//! trusted_proxies` is believed about its client; any other is taken at its
//! address, whatever it wrote.

use std::net::IpAddr;

use actix_web::HttpRequest;
use reqwest::header::{HeaderName, HeaderValue};

use crate::cidr::Cidr;
use crate::http::client;

/// The headers hookd sets on every request it sends upstream, whatever the
/// caller sent in them.
pub const SET_HERE: [&str; 4] = [
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "x-real-ip",
];

/// What a request's forwarding headers say upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forwarding {
    /// `X-Forwarded-For`: the addresses the request came through, the peer's
    /// last (none known: an empty chain).
    pub chain: Vec<String>,
    /// `X-Real-IP`: the client, found as `client::client_ip` finds it.
    pub client: Option<IpAddr>,
    /// `X-Forwarded-Proto`.
    pub proto: String,
    /// `X-Forwarded-Host`: the host the client asked for.
    pub host: Option<String>,
    /// Whether the peer is a trusted proxy: its other forwarding headers
    /// (`Forwarded`, `X-Forwarded-Port`, …) are then passed on; anyone else's
    /// are the client's to invent, and stay behind.
    pub trusted: bool,
}

impl Forwarding {
    /// For `request`: a trusted peer's `X-Forwarded-For` with the peer's address
    /// added, its `X-Forwarded-Proto` and `X-Forwarded-Host` kept; from anyone
    /// else, the peer's address alone, `http` (hookd listens without TLS) and
    /// the `Host` it wrote.
    pub fn of(request: &HttpRequest, trusted: &[Cidr]) -> Self {
        let peer = client::peer(request);
        let from_a_proxy = client::is_trusted(peer, trusted);
        let mut chain = if from_a_proxy {
            client::forwarded_for(request)
        } else {
            Vec::new()
        };
        chain.extend(peer.map(|address| address.to_string()));
        let proto = from_a_proxy
            .then(|| request.headers().get("X-Forwarded-Proto"))
            .flatten()
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .unwrap_or("http");
        let host = client::requested_host(request, trusted).trim();
        Forwarding {
            chain,
            client: client::client_ip(request, trusted),
            proto: proto.to_string(),
            host: (!host.is_empty()).then(|| host.to_string()),
            trusted: from_a_proxy,
        }
    }

    /// The headers in `SET_HERE` as this says them, into `headers` (one with
    /// nothing to say, or a value a header cannot hold, is left out).
    pub fn set(&self, headers: &mut reqwest::header::HeaderMap) {
        let values = [
            (!self.chain.is_empty()).then(|| self.chain.join(", ")),
            Some(self.proto.clone()),
            self.host.clone(),
            self.client.map(|ip| ip.to_string()),
        ];
        for (name, value) in SET_HERE.into_iter().zip(values) {
            if let Some(value) = value.and_then(|v| HeaderValue::from_str(&v).ok()) {
                headers.insert(HeaderName::from_static(name), value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use actix_web::test::TestRequest;

    use super::*;

    const LOOPBACK: [Cidr; 2] = [Cidr::LOOPBACK_V4, Cidr::LOOPBACK_V6];

    fn ip(text: &str) -> Option<IpAddr> {
        Some(text.parse().expect("ip"))
    }

    #[test]
    fn a_trusted_proxy_s_chain_is_carried_on_with_its_address_added() {
        let request = TestRequest::default()
            .peer_addr("127.0.0.1:5000".parse().expect("addr"))
            .insert_header(("Host", "gateway.internal"))
            .append_header(("X-Forwarded-For", "198.51.100.1, 203.0.113.9"))
            .append_header(("X-Forwarded-For", "192.0.2.44"))
            .insert_header(("X-Forwarded-Proto", "https"))
            .insert_header(("X-Forwarded-Host", "pay.example"))
            .to_http_request();
        assert_eq!(
            Forwarding::of(&request, &LOOPBACK),
            Forwarding {
                chain: ["198.51.100.1", "203.0.113.9", "192.0.2.44", "127.0.0.1"]
                    .map(String::from)
                    .to_vec(),
                client: ip("192.0.2.44"),
                proto: "https".into(),
                host: Some("pay.example".into()),
                trusted: true,
            }
        );
    }

    #[test]
    fn anyone_else_is_told_as_its_address_whatever_it_wrote() {
        let request = TestRequest::default()
            .peer_addr("[::ffff:203.0.113.7]:5000".parse().expect("addr"))
            .insert_header(("Host", "gateway.internal"))
            .insert_header(("X-Forwarded-For", "10.0.0.1"))
            .insert_header(("X-Forwarded-Proto", "https"))
            .insert_header(("X-Forwarded-Host", "admin.example"))
            .to_http_request();
        assert_eq!(
            Forwarding::of(&request, &LOOPBACK),
            Forwarding {
                chain: vec!["203.0.113.7".into()],
                client: ip("203.0.113.7"),
                proto: "http".into(),
                host: Some("gateway.internal".into()),
                trusted: false,
            }
        );
    }

    #[test]
    fn a_peer_without_an_address_is_never_trusted_nor_named() {
        let request = TestRequest::default()
            .insert_header(("X-Forwarded-For", "10.0.0.1"))
            .to_http_request();
        let everyone: [Cidr; 1] = ["0.0.0.0/0".parse().expect("cidr")];
        let forwarding = Forwarding::of(&request, &everyone);
        assert!(!forwarding.trusted && forwarding.chain.is_empty());
        assert_eq!(forwarding.client, None);
        let mut headers = reqwest::header::HeaderMap::new();
        forwarding.set(&mut headers);
        assert!(headers.get("x-forwarded-for").is_none() && headers.get("x-real-ip").is_none());
        assert_eq!(
            headers.get("x-forwarded-proto").map(|v| v.as_bytes()),
            Some(&b"http"[..])
        );
    }
}
