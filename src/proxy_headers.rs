//! The headers proxies set to say who a client was and how it called, which
//! frameworks behind them read: believed only from a trusted proxy.

/// Headers, besides `X-Forwarded-*`, by which proxies tell the service behind
/// them who the client was or how it called (frameworks read them): from a
/// caller that is no trusted proxy, its own invention.
const CLIENT_HEADERS: [&str; 9] = [
    "forwarded",
    "x-real-ip",
    "true-client-ip",
    "x-client-ip",
    "x-cluster-client-ip",
    "cf-connecting-ip",
    "fastly-client-ip",
    "front-end-https",
    "x-url-scheme",
];

/// Whether `name` (lower case) is a header proxies set to say who the client
/// was or how it called: `X-Forwarded-*`, `X-Original-*` and `CLIENT_HEADERS`.
pub fn is_forwarding_header(name: &str) -> bool {
    name.starts_with("x-forwarded-")
        || name.starts_with("x-original-")
        || CLIENT_HEADERS.contains(&name)
}
