//! The admin pages' sign-in and sign-out forms, and a signed-in operator's
//! session: its cookie with odd ids, queries and CSRF tokens.

use super::{Cases, Session, get, post, req};

surface!(
    "admin sessions",
    93,
    admin_session_cases_get_answers_below_500_and_store_nothing
);

fn cases(cases: &mut Cases, session: &Session) {
    session_cases(cases, session);
    login_cases(cases);
}

fn session_cases(cases: &mut Cases, session: &Session) {
    let cookie = session.cookie.as_str();
    let csrf = format!("csrf={}", session.csrf);
    let ids = [
        "-1",
        "0",
        "99999999999999999999999",
        "1e3",
        "0x10",
        "%00",
        "..",
        "1",
    ];
    for id in ids {
        let path = format!("/admin/events/{id}/retry");
        cases.authed(
            "POST /admin/events/{id}/retry",
            format!("session: id {id}"),
            post(&path).header("Cookie", cookie).form(&csrf),
        );
        let path = format!("/admin/api/events/{id}/retry");
        cases.authed(
            "POST /admin/api/events/{id}/retry",
            format!("session: id {id}"),
            post(&path)
                .header("Cookie", cookie)
                .header("X-CSRF-Token", &session.csrf),
        );
        cases.authed(
            "GET /admin/events/{id}",
            format!("session: id {id}"),
            get(format!("/admin/events/{id}")).header("Cookie", cookie),
        );
    }
    let family = "POST /admin/events/{id}/retry";
    let retry = || post("/admin/events/1/retry").header("Cookie", cookie);
    cases.authed(family, "session: wrong csrf", retry().form("csrf=00"));
    cases.authed(
        family,
        "session: csrf twice",
        retry().form(format!("{csrf}&{csrf}")),
    );
    cases.authed(
        family,
        "session: Origin of another site",
        retry().header("Origin", "http://evil.example").form(&csrf),
    );
    cases.authed(
        family,
        "session: Referer garbage",
        retry().header("Referer", ":::").form(&csrf),
    );
    cases.authed(
        family,
        "session: Origin non-UTF-8",
        retry()
            .header("Origin", b"http://\xff".as_slice())
            .form(&csrf),
    );
    let family = "POST /admin/api/events/{id}/retry";
    let retry = || post("/admin/api/events/1/retry").header("Cookie", cookie);
    cases.authed(family, "session: no CSRF header", retry());
    cases.authed(
        family,
        "session: garbage CSRF header",
        retry().header("X-CSRF-Token", "garbage"),
    );
    cases.authed(
        family,
        "session: Origin null",
        retry()
            .header("Origin", "null")
            .header("X-CSRF-Token", &session.csrf),
    );
    cases.authed(
        family,
        "session: Host and Origin disagree in case",
        retry()
            .header("Origin", "http://127.0.0.1:1")
            .header("X-CSRF-Token", &session.csrf),
    );
    cases.authed(
        family,
        "session: empty Idempotency-Key",
        retry()
            .header("X-CSRF-Token", &session.csrf)
            .header("Idempotency-Key", ""),
    );
    let family = "POST /admin/logout";
    cases.authed(
        family,
        "session: wrong csrf",
        post("/admin/logout")
            .header("Cookie", cookie)
            .form("csrf=nope"),
    );
    cases.authed(
        family,
        "session: cross-site",
        post("/admin/logout")
            .header("Cookie", cookie)
            .header("Origin", "http://evil.example")
            .form(&csrf),
    );
    cases.authed(
        family,
        "session: no body",
        post("/admin/logout").header("Cookie", cookie),
    );
    for (name, query) in [
        ("q with NUL", "q=%00"),
        ("limit=1e9", "limit=1e9"),
        ("cursor garbage", "cursor=%FF"),
        ("since year 0", "since=0000-01-01T00:00:00Z"),
    ] {
        cases.authed(
            "GET /admin",
            format!("session: {name}"),
            get(format!("/admin?{query}")).header("Cookie", cookie),
        );
        cases.authed(
            "GET /admin/api/events",
            format!("session: {name}"),
            get(format!("/admin/api/events?{query}")).header("Cookie", cookie),
        );
    }
    cases.authed(
        "GET /admin/api/stats",
        "session: window garbage",
        get("/admin/api/stats?window=%FF").header("Cookie", cookie),
    );
    cases.authed(
        "GET /admin/login",
        "session: already signed in",
        get("/admin/login").header("Cookie", cookie),
    );
    cases.authed(
        "GET /admin/",
        "session: cookie and a garbage bearer-less Authorization",
        get("/admin/")
            .header("Cookie", cookie)
            .header("X-Authorization", "Bearer x"),
    );
}

fn login_cases(cases: &mut Cases) {
    let family = "POST /admin/login";
    let login = || post("/admin/login");
    let forms: [(&str, &[u8]); 14] = [
        ("empty token", b"token="),
        ("NUL token", b"token=%00"),
        ("token twice", b"token=a&token=b"),
        ("form of invalid UTF-8", b"token=\xff\xfe\xfd"),
        ("percent garbage", b"token=%ZZ%"),
        ("no equals sign", b"token"),
        ("plus signs", b"token=+++"),
        ("unknown fields", b"user=admin&password=admin"),
        ("JSON body as a form", br#"{"token":"x"}"#),
        ("semicolon separated", b"token=a;token=b"),
        ("10,000 fields", b""),
        ("60 KB token", b""),
        ("65 KB form (over the admin cap)", b""),
        ("whitespace token", b"token=%20%09%0A"),
    ];
    for (name, body) in forms {
        let body = match name {
            "10,000 fields" => (0..10_000)
                .map(|i| format!("f{i}=v"))
                .collect::<Vec<_>>()
                .join("&")
                .into_bytes(),
            "60 KB token" => format!("token={}", "t".repeat(60_000)).into_bytes(),
            "65 KB form (over the admin cap)" => {
                format!("token={}", "t".repeat(65 * 1024)).into_bytes()
            }
            _ => body.to_vec(),
        };
        cases.anon(family, name, login().form(body));
    }
    let jsons: [(&str, &[u8]); 10] = [
        ("JSON null token", br#"{"token":null}"#),
        ("JSON array token", br#"{"token":["a"]}"#),
        ("JSON number token", br#"{"token":1e999999}"#),
        ("JSON lone surrogate", br#"{"token":"\ud800"}"#),
        ("JSON escaped NUL", br#"{"token":"\u0000"}"#),
        ("JSON 10,000 [", b""),
        ("JSON not JSON", b"token=abc"),
        ("JSON duplicate keys", br#"{"token":"a","token":"b"}"#),
        ("JSON invalid UTF-8", b"{\"token\":\"\xff\"}"),
        ("JSON empty", b""),
    ];
    for (name, body) in jsons {
        let body = if name == "JSON 10,000 [" {
            "[".repeat(10_000).into_bytes()
        } else {
            body.to_vec()
        };
        cases.anon(family, name, login().json(body));
    }
    for (name, content_type) in [
        (
            "JSON with latin1 charset",
            "application/json; charset=latin1",
        ),
        ("content type jsonx", "application/jsonx"),
        ("multipart", "multipart/form-data; boundary=x"),
        ("latin-1 content type", "application/json; charset=\u{e9}"),
    ] {
        cases.anon(
            family,
            name,
            login()
                .header("Content-Type", content_type)
                .body(r#"{"token":"x"}"#),
        );
    }
    for (name, header, value) in [
        (
            "Origin of another site",
            "Origin",
            b"http://evil.example".as_slice(),
        ),
        ("Origin null", "Origin", b"null"),
        ("Referer garbage", "Referer", b"::::"),
        ("Origin non-UTF-8", "Origin", b"http://\xff\xfe"),
        ("Origin without a scheme", "Origin", b"127.0.0.1"),
        (
            "Referer of another site",
            "Referer",
            b"https://evil.example/admin",
        ),
    ] {
        cases.anon(family, name, login().header(header, value).form("token=x"));
    }
    cases.anon(
        family,
        "chunked form",
        login()
            .no_length()
            .header("Content-Type", "application/x-www-form-urlencoded")
            .header("Transfer-Encoding", "chunked")
            .body("6\r\ntoken=\r\n1\r\nx\r\n0\r\n\r\n"),
    );
    cases.anon(
        family,
        "truncated form, connection kept",
        login()
            .no_length()
            .header("Content-Length", "100")
            .form("token=x")
            .keep_alive(),
    );
    cases.anon(
        family,
        "truncated form, connection half-closed",
        login()
            .no_length()
            .header("Content-Length", "100")
            .form("token=x")
            .half_close(),
    );
    let family = "POST /admin/logout";
    let logout = || post("/admin/logout");
    cases.anon(family, "csrf junk", logout().form("csrf=%00%FF"));
    cases.anon(
        family,
        "100 KB form",
        logout().form(format!("csrf={}", "c".repeat(100 * 1024))),
    );
    cases.anon(
        family,
        "cross-site with a garbage cookie",
        logout()
            .header("Origin", "http://evil.example")
            .header("Cookie", "hookd_session=a.b.c.d")
            .form("csrf=x"),
    );
    cases.anon(family, "GET instead of POST", get("/admin/logout"));
    cases.anon(family, "JSON body", logout().json("[[[[[["));
    let family = "GET /admin/login";
    cases.anon(
        family,
        "query junk",
        get("/admin/login?next=//evil.example&%ZZ"),
    );
    cases.anon(family, "PUT", req("PUT", "/admin/login").form("token=x"));
    cases.anon(family, "trailing slash", get("/admin/login/"));
}
