//! The admin API and its pages reached with a valid token: absurd filters,
//! windows, cursors and ids, and odd retry requests.

use super::{Cases, OPERATOR, Session, VIEWER, b64, get, post, req};

surface!(
    "admin queries",
    241,
    admin_query_cases_get_answers_below_500_and_store_nothing
);

fn cases(cases: &mut Cases, _: &Session) {
    admin_query_cases(cases);
    admin_id_cases(cases);
}

/// Absurd filter values, with a valid token, on the API and the page.
fn admin_query_cases(cases: &mut Cases) {
    let long_q = "q".repeat(8_000);
    let filters: Vec<(&str, String)> = vec![
        ("limit=-1", "limit=-1".into()),
        ("limit=0", "limit=0".into()),
        ("limit=1e9", "limit=1e9".into()),
        ("limit=501", "limit=501".into()),
        ("limit=abc", "limit=abc".into()),
        ("limit overflows", "limit=99999999999999999999".into()),
        ("limit=0x10", "limit=0x10".into()),
        ("limit twice", "limit=1&limit=2".into()),
        (
            "since=999999999999999999999d",
            "since=999999999999999999999d".into(),
        ),
        ("since=-1d", "since=-1d".into()),
        ("since=1y", "since=1y".into()),
        ("since=36501d", "since=36501d".into()),
        ("since year 0", "since=0000-01-01T00:00:00Z".into()),
        (
            "since year 0 at +23:59",
            "since=0000-01-01T00:00:00%2B23:59".into(),
        ),
        (
            "since year 9999 at -23:59",
            "since=9999-12-31T23:59:59-23:59".into(),
        ),
        ("since a leap second", "since=2016-12-31T23:59:60Z".into()),
        ("since 30 February", "since=2024-02-30T00:00:00Z".into()),
        (
            "since with six-digit year",
            "since=%2B275760-01-01T00:00:00Z".into(),
        ),
        ("since NUL", "since=%00".into()),
        (
            "since with 19 fraction digits",
            "since=2024-01-01T00:00:00.9999999999999999999Z".into(),
        ),
        (
            "since with an offset of 24 hours",
            "since=2024-01-01T00:00:00%2B24:00".into(),
        ),
        (
            "until=999999999999999999999d",
            "until=999999999999999999999d".into(),
        ),
        ("until before since", "since=1h&until=2h".into()),
        ("until garbage", "until=yesterday".into()),
        ("cursor garbage", "cursor=!!!".into()),
        (
            "cursor base64 of garbage",
            format!("cursor={}", b64("garbage")),
        ),
        ("cursor of three parts", format!("cursor={}", b64("1:2:3"))),
        (
            "cursor time overflows",
            format!("cursor={}", b64("99999999999999999999:1")),
        ),
        (
            "cursor id overflows",
            format!("cursor={}", b64("0:99999999999999999999")),
        ),
        (
            "cursor before year 1",
            format!("cursor={}", b64("-62135596800000001:1")),
        ),
        (
            "cursor at i64::MIN",
            format!(
                "cursor={}",
                b64("-9223372036854775808:-9223372036854775808")
            ),
        ),
        (
            "cursor base64 of non-UTF-8",
            format!("cursor={}", b64([0xff, 0x3a, 0x31])),
        ),
        ("cursor 10 KB", format!("cursor={}", "A".repeat(10_000))),
        ("cursor of a well-formed 1:1", "cursor=MTox".into()),
        ("%ZZ", "%ZZ=%ZZ".into()),
        ("only separators", "&&&&;;;===".into()),
        ("8,000-byte q", format!("q={long_q}")),
        ("q of invalid UTF-8", "q=%FF%FE%C0%AF".into()),
        ("q with NUL", "q=evt%00".into()),
        ("source with NUL", "source=stripe%00".into()),
        ("kind with NUL", "kind=%00".into()),
        ("type with NUL", "type=%00".into()),
        ("status not a status", "status=exploded".into()),
        ("status uppercase", "status=PROCESSED".into()),
        ("status with NUL", "status=dead%00".into()),
        ("source twice", "source=a&source=b".into()),
        ("unknown parameter", "evil=1".into()),
        (
            "every filter at once",
            "source=x&kind=y&type=z&status=dead&since=1h&until=1m&q=w&limit=500".into(),
        ),
        ("raw UTF-8 in q", "q=ünï".into()),
    ];
    for (name, query) in &filters {
        cases.authed(
            "GET /admin/api/events",
            *name,
            get(format!("/admin/api/events?{query}")).bearer(VIEWER),
        );
        cases.authed(
            "GET /admin",
            *name,
            get(format!("/admin?{query}")).bearer(VIEWER),
        );
    }
    cases.authed(
        "GET /admin/",
        "page with a cursor",
        get(format!("/admin/?cursor={}", b64("1:1"))).bearer(VIEWER),
    );
    let windows = [
        ("window=-1h", "window=-1h"),
        ("window=1y", "window=1y"),
        (
            "window=999999999999999999999d",
            "window=999999999999999999999d",
        ),
        ("window=0ms", "window=0ms"),
        ("window=36501d", "window=36501d"),
        ("window empty", "window="),
        ("window NUL", "window=%00"),
        ("window twice", "window=1h&window=2h"),
        ("window=1.5h", "window=1.5h"),
        ("window with a space", "window=1%20h"),
        ("window uppercase", "window=1H"),
        ("window arabic digits", "window=%D9%A3h"),
        ("window u64::MAX ms", "window=18446744073709551615ms"),
        ("window %ZZ", "window=%ZZ"),
        (
            "window 10 KB",
            "window=1111111111111111111111111111111111111111111111111111111111111111111111111111h",
        ),
    ];
    for (name, query) in windows {
        cases.authed(
            "GET /admin/api/stats",
            name,
            get(format!("/admin/api/stats?{query}")).bearer(VIEWER),
        );
    }
}

/// Odd ids, and odd retry requests, with a valid token, on every route that
/// takes an id.
fn admin_id_cases(cases: &mut Cases) {
    let long_id = "9".repeat(10_000);
    let ids = [
        ("-1", "-1"),
        ("0", "0"),
        ("huge", "99999999999999999999999"),
        ("1e3", "1e3"),
        ("0x10", "0x10"),
        ("NUL", "%00"),
        ("encoded slash", "1%2F2"),
        ("dot-dot", ".."),
        ("10,000 digits", long_id.as_str()),
        ("plus sign", "+1"),
        ("1.0", "1.0"),
        ("i64::MAX", "9223372036854775807"),
        ("i64::MIN", "-9223372036854775808"),
        ("arabic digit", "%D9%A1"),
        ("encoded digit", "%31"),
        ("space", "%201"),
    ];
    for (name, id) in ids {
        cases.authed(
            "GET /admin/api/events/{id}",
            format!("id {name}"),
            get(format!("/admin/api/events/{id}")).bearer(VIEWER),
        );
        cases.authed(
            "GET /admin/events/{id}",
            format!("id {name}"),
            get(format!("/admin/events/{id}")).bearer(VIEWER),
        );
        cases.authed(
            "POST /admin/api/events/{id}/retry",
            format!("id {name}"),
            post(format!("/admin/api/events/{id}/retry")).bearer(OPERATOR),
        );
        cases.authed(
            "POST /admin/events/{id}/retry",
            format!("id {name}"),
            post(format!("/admin/events/{id}/retry"))
                .bearer(OPERATOR)
                .form("csrf=x"),
        );
    }
    let keys = [
        ("NUL", "%00"),
        ("NUL suffix", "pi_1%00"),
        ("encoded slash", "pi%2F1"),
        ("dot-dot", ".."),
        ("10,000 bytes", long_id.as_str()),
        ("invalid UTF-8", "%FF%FE"),
        ("space", "%20"),
    ];
    for (name, key) in keys {
        for (place, path, family) in [
            (
                "payment id",
                format!("/admin/api/payments/stripe/{key}"),
                "GET /admin/api/payments/{source}/{payment_id}",
            ),
            (
                "source",
                format!("/admin/api/payments/{key}/pi_1"),
                "GET /admin/api/payments/{source}/{payment_id}",
            ),
            (
                "payment id",
                format!("/admin/payments/stripe/{key}"),
                "GET /admin/payments/{source}/{payment_id}",
            ),
            (
                "customer",
                format!("/admin/customers/{key}"),
                "GET /admin/customers/{customer}",
            ),
            (
                "customer",
                format!("/admin/api/payments?customer={key}"),
                "GET /admin/api/payments",
            ),
        ] {
            cases.authed(family, format!("{place} {name}"), get(path).bearer(VIEWER));
        }
    }
    // A cursor this API could never have returned, naming a NUL id.
    let nul_cursor = b64(r#"[1700000000000000,"stripe","a\u0000"]"#);
    for (path, family) in [
        (
            format!("/admin/api/payments?customer=cus_1&cursor={nul_cursor}"),
            "GET /admin/api/payments",
        ),
        (
            format!("/admin/customers/cus_1?cursor={nul_cursor}"),
            "GET /admin/customers/{customer}",
        ),
    ] {
        cases.authed(family, "cursor naming a NUL id", get(path).bearer(VIEWER));
    }
    let family = "GET /admin/events/{id}";
    cases.authed(
        family,
        "retried twice",
        get("/admin/events/1?retried=a&retried=b").bearer(VIEWER),
    );
    cases.authed(
        family,
        "retried junk",
        get("/admin/events/1?retried=%3Cscript%3E%00%FF").bearer(VIEWER),
    );
    cases.authed(
        family,
        "trailing slash",
        get("/admin/events/1/").bearer(VIEWER),
    );
    let family = "POST /admin/api/events/{id}/retry";
    let retry = || post("/admin/api/events/1/retry").bearer(OPERATOR);
    cases.authed(
        family,
        "empty Idempotency-Key",
        retry().header("Idempotency-Key", ""),
    );
    cases.authed(
        family,
        "256-byte Idempotency-Key",
        retry().header("Idempotency-Key", "k".repeat(256)),
    );
    cases.authed(
        family,
        "10 KB Idempotency-Key",
        retry().header("Idempotency-Key", "k".repeat(10_000)),
    );
    cases.authed(
        family,
        "latin-1 Idempotency-Key",
        retry().header("Idempotency-Key", b"k\xe9y".as_slice()),
    );
    cases.authed(
        family,
        "Idempotency-Key and a 100 KB body",
        retry()
            .header("Idempotency-Key", "")
            .json(vec![b'x'; 100 * 1024]),
    );
    cases.authed(family, "100 KB body", retry().json(vec![b'x'; 100 * 1024]));
    cases.authed(
        family,
        "declared 1 GB body",
        retry().no_length().header("Content-Length", "1073741824"),
    );
    cases.authed(
        family,
        "chunked garbage body",
        retry()
            .no_length()
            .header("Transfer-Encoding", "chunked")
            .body("zz\r\nhello\r\n0\r\n\r\n"),
    );
    cases.authed(
        family,
        "viewer token",
        post("/admin/api/events/1/retry").bearer(VIEWER),
    );
    cases.authed(
        family,
        "operator token and a cookie",
        retry().header("Cookie", "hookd_session=a.b.c.d"),
    );
    cases.authed(
        family,
        "GET instead of POST",
        get("/admin/api/events/1/retry").bearer(OPERATOR),
    );
    cases.authed(
        family,
        "cross-site Origin",
        retry().header("Origin", "http://evil.example"),
    );
    let family = "POST /admin/events/{id}/retry";
    cases.authed(
        family,
        "no csrf field",
        post("/admin/events/1/retry").bearer(OPERATOR),
    );
    cases.authed(
        family,
        "100 KB form",
        post("/admin/events/1/retry")
            .bearer(OPERATOR)
            .form(format!("csrf={}", "x".repeat(100 * 1024))),
    );
    cases.authed(
        family,
        "form of invalid UTF-8",
        post("/admin/events/1/retry")
            .bearer(OPERATOR)
            .form(b"csrf=\xff\xfe"),
    );
    cases.authed(
        family,
        "cross-site Origin",
        post("/admin/events/1/retry")
            .bearer(OPERATOR)
            .header("Origin", "http://evil.example")
            .form("csrf=x"),
    );
    cases.authed(
        family,
        "viewer token",
        post("/admin/events/1/retry").bearer(VIEWER).form("csrf=x"),
    );
    let family = "POST /admin/logout";
    cases.authed(
        family,
        "bearer, no session",
        post("/admin/logout").bearer(VIEWER).form("csrf=x"),
    );
    cases.authed(
        "GET /admin/login",
        "already signed in by bearer",
        get("/admin/login").bearer(VIEWER),
    );
    let family = "GET /admin/api/events";
    cases.authed(
        family,
        "bearer and garbage cookie",
        get("/admin/api/events")
            .bearer(VIEWER)
            .header("Cookie", "hookd_session=a.b.c.d.e"),
    );
    cases.authed(
        family,
        "bearer with surrounding spaces",
        get("/admin/api/events").header("Authorization", format!("Bearer   {VIEWER}   ")),
    );
    cases.authed(
        family,
        "HEAD",
        req("HEAD", "/admin/api/events").bearer(VIEWER),
    );
    cases.authed(
        "GET /admin/api/stats",
        "POST instead of GET",
        post("/admin/api/stats").bearer(VIEWER),
    );
}
