//! `/healthz`, `/readyz` and `/metrics` asked in odd ways.

use super::{Cases, EVENT, Session, get, req};

surface!("ops", 54, ops_cases_get_answers_below_500_and_store_nothing);

/// Odd methods, targets, bodies and credentials on each operations route.
fn cases(cases: &mut Cases, _: &Session) {
    for (family, path) in [
        ("GET /healthz", "/healthz"),
        ("GET /readyz", "/readyz"),
        ("GET /metrics", "/metrics"),
    ] {
        for method in ["POST", "PUT", "DELETE", "OPTIONS", "TRACE", "HEAD", "BREW"] {
            cases.anon(family, format!("method {method}"), req(method, path));
        }
        let long_query = format!("{path}?{}", "q=x&".repeat(10_000));
        for (name, target) in [
            ("junk query", format!("{path}?%ZZ&&==&a=%00&b=%FF")),
            ("40 KB query", long_query),
            ("trailing slash", format!("{path}/")),
            ("NUL suffix", format!("{path}%00")),
            ("double slash", format!("/{path}")),
            (
                "encoded path",
                format!("/%{:02X}{}", path.as_bytes()[1], &path[2..]),
            ),
        ] {
            cases.anon(family, name, get(target));
        }
        cases.anon(family, "GET with a body", get(path).json(EVENT));
        cases.anon(
            family,
            "GET with a chunked body",
            get(path)
                .no_length()
                .header("Transfer-Encoding", "chunked")
                .body("5\r\nhello\r\n0\r\n\r\n"),
        );
        cases.anon(
            family,
            "garbage credentials",
            get(path)
                .header("Authorization", "Bearer nope")
                .header("Cookie", "hookd_session=x.y.z.w"),
        );
        cases.anon(family, "HTTP/1.0", get(path).version("HTTP/1.0").no_host());
        cases.anon(family, "raw UTF-8 query", get(format!("{path}?q=ünï")));
    }
}
