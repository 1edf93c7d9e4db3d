//! Paths hookd does not serve, request targets that are not paths.

use super::{Cases, EVENT, Session, get, post, req};

surface!(
    "unknown paths",
    50,
    unknown_path_cases_get_answers_below_500_and_store_nothing
);

fn cases(cases: &mut Cases, _: &Session) {
    let family = "unknown paths";
    let long = format!("/{}", "a".repeat(60_000));
    for (name, path) in [
        ("root", "/"),
        ("/admin/api", "/admin/api"),
        ("/admin/api/", "/admin/api/"),
        ("retry with a tail", "/admin/api/events/1/retry/x"),
        ("/admin/events", "/admin/events"),
        ("/.env", "/.env"),
        ("raw dot-dot to /etc/passwd", "/../../etc/passwd"),
        ("encoded dot-dot", "/%2e%2e/%2e%2e/etc/passwd"),
        ("favicon", "/favicon.ico"),
        ("/metrics/", "/metrics/"),
        ("/healthz/x", "/healthz/x"),
        ("60 KB path", long.as_str()),
        ("NUL path", "/%00"),
        ("encoded admin", "/%61dmin"),
        ("admin with NUL", "/admin%00"),
        ("api with query only", "/admin/api/events/?"),
        ("server-status", "/server-status"),
        ("wp-login", "/wp-login.php"),
        ("dot segments to admin", "/webhooks/../admin/api/stats"),
        ("uppercase ADMIN", "/ADMIN"),
        ("many slashes", "//////////"),
        ("query only", "/?"),
    ] {
        cases.anon(family, format!("GET {name}"), get(path));
        cases.anon(family, format!("POST {name}"), post(path).json(EVENT));
    }
    cases.anon(
        family,
        "GET raw UTF-8 path",
        get("/ädmin/ünknown".as_bytes()),
    );
    cases.anon(
        family,
        "GET raw control byte in path",
        get(b"/a\x01b".as_slice()),
    );
    cases.anon(family, "OPTIONS *", req("OPTIONS", "*"));
    cases.anon(family, "GET *", get("*"));
    cases.anon(family, "authority-form GET", get("127.0.0.1:80"));
    cases.anon(family, "empty target", get(""));
}
