//! Who sent a request, as far as hookd can tell. A reverse proxy on this machine
//! (a loopback peer) is trusted to say who its client was and which host it was
//! asked for; anyone else is taken at its address.

use std::net::IpAddr;

use actix_web::HttpRequest;
use actix_web::http::header::HOST;

/// Headers a proxy adds; their presence means the request came from beyond it.
const FORWARDING_HEADERS: [&str; 4] = [
    "X-Forwarded-For",
    "Forwarded",
    "X-Real-IP",
    "X-Forwarded-Host",
];

/// The peer's address, IPv4-mapped IPv6 addresses as IPv4.
fn peer(request: &HttpRequest) -> IpAddr {
    request
        .peer_addr()
        .map_or(IpAddr::from([0, 0, 0, 0]), |a| a.ip().to_canonical())
}

fn through_local_proxy(request: &HttpRequest) -> bool {
    peer(request).is_loopback()
}

/// Whether a proxy forwarded the request (it then came from beyond this machine,
/// whatever address hookd listens on).
pub fn is_forwarded(request: &HttpRequest) -> bool {
    FORWARDING_HEADERS
        .iter()
        .any(|name| request.headers().contains_key(*name))
}

/// The client the failure limits count: the peer, or — behind a proxy on this
/// machine — the address that proxy appended last to `X-Forwarded-For` (the last
/// entry of the last such header: earlier ones are the client's to invent). IPv6
/// clients count per /64, the block one subscriber usually holds.
pub fn address(request: &HttpRequest) -> IpAddr {
    let peer = peer(request);
    let client = if peer.is_loopback() {
        request
            .headers()
            .get_all("X-Forwarded-For")
            .last()
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.rsplit(',').next())
            .and_then(|last| last.trim().parse::<IpAddr>().ok())
            .map_or(peer, |ip| ip.to_canonical())
    } else {
        peer
    };
    match client {
        IpAddr::V6(v6) => {
            let mut segments = v6.segments();
            segments[4..].fill(0);
            IpAddr::from(segments)
        }
        v4 => v4,
    }
}

/// Whether a trusted proxy says its client spoke plain HTTP (`X-Forwarded-Proto: http`).
pub fn proxy_says_plain_http(request: &HttpRequest) -> bool {
    through_local_proxy(request)
        && request
            .headers()
            .get("X-Forwarded-Proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|proto| proto.trim().eq_ignore_ascii_case("http"))
}

/// The host the client asked for: `Host`, or behind a proxy on this machine the
/// `X-Forwarded-Host` it sets when it rewrites `Host`.
pub fn requested_host(request: &HttpRequest) -> &str {
    let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok());
    through_local_proxy(request)
        .then(|| header("X-Forwarded-Host"))
        .flatten()
        .or_else(|| header(HOST.as_str()))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use actix_web::test::TestRequest;

    use super::*;

    #[test]
    fn behind_a_local_proxy_the_last_forwarded_address_counts() {
        let request = TestRequest::default()
            .peer_addr("127.0.0.1:5000".parse().expect("addr"))
            .append_header(("X-Forwarded-For", "198.51.100.1, 203.0.113.9"))
            .append_header(("X-Forwarded-For", "192.0.2.44"))
            .to_http_request();
        assert_eq!(address(&request), IpAddr::from([192, 0, 2, 44]));
        assert!(is_forwarded(&request));
    }

    #[test]
    fn a_remote_peer_cannot_choose_its_address() {
        let request = TestRequest::default()
            .peer_addr("203.0.113.7:5000".parse().expect("addr"))
            .append_header(("X-Forwarded-For", "192.0.2.44"))
            .append_header(("X-Forwarded-Host", "evil.example"))
            .append_header(("Host", "hookd.example"))
            .to_http_request();
        assert_eq!(address(&request), IpAddr::from([203, 0, 113, 7]));
        assert_eq!(requested_host(&request), "hookd.example");
    }

    #[test]
    fn mapped_loopback_is_loopback_and_ipv6_counts_per_64() {
        let request = TestRequest::default()
            .peer_addr("[::ffff:127.0.0.1]:5000".parse().expect("addr"))
            .append_header(("X-Forwarded-For", "2001:db8:1:2:aaaa::1"))
            .append_header(("X-Forwarded-Host", "hookd.example"))
            .to_http_request();
        assert_eq!(
            address(&request),
            "2001:db8:1:2::".parse::<IpAddr>().expect("ip")
        );
        assert_eq!(requested_host(&request), "hookd.example");
        let direct = TestRequest::default()
            .peer_addr("[2001:db8:1:2:bbbb::9]:5000".parse().expect("addr"))
            .to_http_request();
        assert_eq!(address(&direct), address(&request));
        assert!(!is_forwarded(&direct));
    }
}
