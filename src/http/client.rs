//! Who sent a request, as far as hookd can tell. A peer in the trusted list it
//! is given (`trusted_proxies`: by default a reverse proxy on this machine) is
//! believed about who its client was and which host it was asked for; anyone
//! else is taken at its address.

use std::net::{IpAddr, SocketAddr};

use actix_web::HttpRequest;
use actix_web::http::header::HOST;

use crate::cidr::Cidr;

/// The peer's address, IPv4-mapped IPv6 addresses as IPv4; `None` when the
/// connection has none (not a TCP one).
pub(crate) fn peer(request: &HttpRequest) -> Option<IpAddr> {
    request.peer_addr().map(|a| a.ip().to_canonical())
}

/// Whether `address` is in one of the `trusted` blocks (an unknown one never is).
pub(crate) fn is_trusted(address: Option<IpAddr>, trusted: &[Cidr]) -> bool {
    address.is_some_and(|address| trusted.iter().any(|block| block.contains(address)))
}

/// Headers a proxy adds that name where a request came from; their presence
/// means it came from beyond the proxy. (Not every header proxies set: a TLS
/// terminator on this machine says `X-Forwarded-Proto` of a local client.)
const FORWARDING_HEADERS: [&str; 4] = [
    "X-Forwarded-For",
    "Forwarded",
    "X-Real-IP",
    "X-Forwarded-Host",
];

/// Whether a proxy forwarded the request (it then came from beyond this machine,
/// whatever address hookd listens on).
pub fn is_forwarded(request: &HttpRequest) -> bool {
    FORWARDING_HEADERS
        .iter()
        .any(|name| request.headers().contains_key(*name))
}

/// The client the failure limits count: `client_ip`, IPv6 clients per /64,
/// the block one subscriber usually holds. A peer without an address counts as
/// `0.0.0.0`, one client for all such.
pub fn address(request: &HttpRequest, trusted: &[Cidr]) -> IpAddr {
    match client_ip(request, trusted).unwrap_or(IpAddr::from([0, 0, 0, 0])) {
        IpAddr::V6(v6) => {
            let mut segments = v6.segments();
            segments[4..].fill(0);
            IpAddr::from(segments)
        }
        v4 => v4,
    }
}

/// The client's address. From a trusted peer, `X-Forwarded-For` is walked from
/// the right (the last entry of the last such header is what the nearest proxy
/// appended) past every trusted proxy to the first address that is not one:
/// entries left of it are that client's to invent. An entry that is not an
/// address ends the walk at the proxy that passed it on. Any other peer is
/// taken at its address.
pub(crate) fn client_ip(request: &HttpRequest, trusted: &[Cidr]) -> Option<IpAddr> {
    let mut client = peer(request)?;
    if is_trusted(Some(client), trusted) {
        for hop in forwarded_for(request).iter().rev() {
            let Some(hop) = hop_address(hop) else {
                break;
            };
            client = hop;
            if !is_trusted(Some(hop), trusted) {
                break;
            }
        }
    }
    Some(client)
}

/// The entries of the request's `X-Forwarded-For` headers, in order, trimmed,
/// empty ones left out.
pub(crate) fn forwarded_for(request: &HttpRequest) -> Vec<String> {
    request
        .headers()
        .get_all("X-Forwarded-For")
        .flat_map(|value| {
            String::from_utf8_lossy(value.as_bytes())
                .split(',')
                .map(str::trim)
                .filter(|entry| !entry.is_empty())
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// An `X-Forwarded-For` entry's address: `IP`, or `IP:port` / `[IPv6]:port` as
/// some balancers write it.
fn hop_address(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim();
    let ip = entry
        .parse::<IpAddr>()
        .ok()
        .or_else(|| entry.parse::<SocketAddr>().ok().map(|a| a.ip()))
        .or_else(|| {
            let inner = entry.strip_prefix('[')?.strip_suffix(']')?;
            inner.parse::<IpAddr>().ok()
        })?;
    Some(ip.to_canonical())
}

/// Whether a trusted proxy says its client spoke plain HTTP (`X-Forwarded-Proto: http`).
pub fn proxy_says_plain_http(request: &HttpRequest, trusted: &[Cidr]) -> bool {
    is_trusted(peer(request), trusted)
        && request
            .headers()
            .get("X-Forwarded-Proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|proto| proto.trim().eq_ignore_ascii_case("http"))
}

/// The host the client asked for: `Host`, or behind a trusted proxy the
/// `X-Forwarded-Host` it sets when it rewrites `Host`.
pub fn requested_host<'r>(request: &'r HttpRequest, trusted: &[Cidr]) -> &'r str {
    let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok());
    is_trusted(peer(request), trusted)
        .then(|| header("X-Forwarded-Host"))
        .flatten()
        .or_else(|| header(HOST.as_str()))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use actix_web::test::TestRequest;

    use super::*;

    const LOOPBACK: [Cidr; 2] = [Cidr::LOOPBACK_V4, Cidr::LOOPBACK_V6];

    fn from(peer: &str, forwarded_for: &[&str]) -> HttpRequest {
        let mut request = TestRequest::default().peer_addr(peer.parse().expect("peer address"));
        for value in forwarded_for {
            request = request.append_header(("X-Forwarded-For", *value));
        }
        request.to_http_request()
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("ip")
    }

    #[test]
    fn behind_a_local_proxy_the_last_forwarded_address_counts() {
        let request = TestRequest::default()
            .peer_addr("127.0.0.1:5000".parse().expect("addr"))
            .append_header(("X-Forwarded-For", "198.51.100.1, 203.0.113.9"))
            .append_header(("X-Forwarded-For", "192.0.2.44"))
            .to_http_request();
        assert_eq!(address(&request, &LOOPBACK), IpAddr::from([192, 0, 2, 44]));
        assert!(is_forwarded(&request));
    }

    #[test]
    fn the_walk_passes_trusted_proxies_only() {
        let balancers: Vec<Cidr> = ["127.0.0.0/8", "10.0.0.0/8"]
            .iter()
            .map(|c| c.parse().expect("cidr"))
            .collect();
        let cases: [(&str, &[&str], &[Cidr], &str); 9] = [
            // A balancer in front of the local proxy: the client before it.
            (
                "127.0.0.1:1",
                &["198.51.100.1, 10.0.0.5"],
                &balancers,
                "198.51.100.1",
            ),
            // Without trusting the balancer, the balancer is the client.
            (
                "127.0.0.1:1",
                &["198.51.100.1, 10.0.0.5"],
                &LOOPBACK,
                "10.0.0.5",
            ),
            // A forged chain left of the real client is the client's own.
            (
                "127.0.0.1:1",
                &["10.9.9.9, 192.0.2.1, 198.51.100.1, 10.0.0.5"],
                &balancers,
                "198.51.100.1",
            ),
            // A balancer that is the peer itself, ports written in.
            (
                "10.0.0.5:1",
                &["198.51.100.1:4711"],
                &balancers,
                "198.51.100.1",
            ),
            (
                "10.0.0.5:1",
                &["[2001:db8::7]:4711"],
                &balancers,
                "2001:db8::",
            ),
            // A chain all trusted: the furthest hop.
            (
                "127.0.0.1:1",
                &["10.0.0.7, 10.0.0.5"],
                &balancers,
                "10.0.0.7",
            ),
            // Garbage ends the walk at the proxy that passed it on.
            (
                "127.0.0.1:1",
                &["198.51.100.1, nonsense, 10.0.0.5"],
                &balancers,
                "10.0.0.5",
            ),
            ("127.0.0.1:1", &["nonsense"], &balancers, "127.0.0.1"),
            // An untrusted peer is its own address, whatever it says.
            ("198.51.100.1:1", &["10.0.0.5"], &balancers, "198.51.100.1"),
        ];
        for (peer, forwarded_for, trusted, client) in cases {
            let request = from(peer, forwarded_for);
            assert_eq!(
                address(&request, trusted),
                ip(client),
                "{peer} {forwarded_for:?}"
            );
        }
    }

    #[test]
    fn a_remote_peer_cannot_choose_its_address() {
        let request = TestRequest::default()
            .peer_addr("203.0.113.7:5000".parse().expect("addr"))
            .append_header(("X-Forwarded-For", "192.0.2.44"))
            .append_header(("X-Forwarded-Host", "evil.example"))
            .append_header(("Host", "hookd.example"))
            .to_http_request();
        assert_eq!(address(&request, &LOOPBACK), IpAddr::from([203, 0, 113, 7]));
        assert_eq!(requested_host(&request, &LOOPBACK), "hookd.example");
    }

    #[test]
    fn mapped_loopback_is_loopback_and_ipv6_counts_per_64() {
        let request = TestRequest::default()
            .peer_addr("[::ffff:127.0.0.1]:5000".parse().expect("addr"))
            .append_header(("X-Forwarded-For", "2001:db8:1:2:aaaa::1"))
            .append_header(("X-Forwarded-Host", "hookd.example"))
            .to_http_request();
        assert_eq!(
            address(&request, &LOOPBACK),
            "2001:db8:1:2::".parse::<IpAddr>().expect("ip")
        );
        assert_eq!(requested_host(&request, &LOOPBACK), "hookd.example");
        let direct = TestRequest::default()
            .peer_addr("[2001:db8:1:2:bbbb::9]:5000".parse().expect("addr"))
            .to_http_request();
        assert_eq!(address(&direct, &LOOPBACK), address(&request, &LOOPBACK));
        assert!(!is_forwarded(&direct));
    }
}
