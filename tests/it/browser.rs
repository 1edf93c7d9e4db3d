//! The admin page in a real browser: headless Chromium, driven through
//! chromedriver's WebDriver protocol (a few calls, made with reqwest). Sign in,
//! search a payment id, open the payment, open its dead event, retry it, see it
//! processed, sign out — with no console error, and every page fitting a
//! 1280-pixel-wide window, and no browser process left behind. Needs Debian's
//! `chromium` and `chromium-driver` (CI installs them).

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hookd::handlers::{Event, Handler, HandlerError, Registry};
use serde_json::{Value, json};

use crate::support::{
    OPERATOR, Spawn, TestApp, VIEWER, shipped_settings, spawn, spawn_app, stripe_event,
};

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A chromedriver process (leading a process group of its own) and one browser
/// session in it; the whole group, Chromium included, ends when dropped, also
/// when a test fails.
struct Browser {
    driver: Child,
    base: String,
    session: String,
    http: reqwest::Client,
    profile: std::path::PathBuf,
}

impl Drop for Browser {
    fn drop(&mut self) {
        use nix::sys::signal::{Signal, kill, killpg};
        use nix::unistd::Pid;
        let _ = killpg(Pid::from_raw(self.driver.id() as i32), Signal::SIGKILL);
        let _ = self.driver.wait();
        // A browser process that left the group still names its profile.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = processes_using(&self.profile);
            if left.is_empty() || Instant::now() > deadline {
                break;
            }
            for pid in left {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// The live processes whose command line names `profile` (from /proc; zombies,
/// whose command line is empty, are gone already).
fn processes_using(profile: &std::path::Path) -> Vec<i32> {
    let needle = profile.to_string_lossy().into_owned();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(&needle))
        })
        .collect()
}

impl Browser {
    async fn start() -> Browser {
        let driver_path = ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .expect(
                "the browser test needs Chromium and its driver: \
                 apt-get install chromium chromium-driver (CI installs them)",
            );
        let port = hookd_kit::pooler::free_port();
        let driver = Command::new(driver_path)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("chromedriver");
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !matches!(http.get(format!("{base}/status")).send().await, Ok(r) if r.status() == 200)
        {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // One profile per browser: the tests of this file may run at once.
        static BROWSERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let profile = std::env::temp_dir().join(format!(
            "hookd-chromium-{}-{}",
            std::process::id(),
            BROWSERS.fetch_add(1, Ordering::Relaxed)
        ));
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--disable-quic", "--no-first-run", "--disable-background-networking",
                         "--disable-component-update", "--disable-sync", "--window-size=1280,900",
                         format!("--user-data-dir={}", profile.display())]
            },
            "goog:loggingPrefs": {"browser": "ALL"}
        }}});
        let created: Value = http
            .post(format!("{base}/session"))
            .json(&capabilities)
            .send()
            .await
            .expect("new session")
            .json()
            .await
            .expect("session json");
        let session = created["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {created}"))
            .to_string();
        Browser {
            driver,
            base,
            session,
            http,
            profile,
        }
    }

    async fn call(&self, method: &str, path: &str, body: Value) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let request = match method {
            "GET" => self.http.get(url),
            _ => self.http.post(url).json(&body),
        };
        let answer: Value = request
            .send()
            .await
            .expect("webdriver")
            .json()
            .await
            .expect("webdriver json");
        if answer["value"].get("error").is_some() {
            panic!("{method} {path}: {answer}");
        }
        answer["value"].clone()
    }

    async fn go(&self, url: &str) {
        self.call("POST", "/url", json!({"url": url})).await;
    }

    async fn find(&self, css: &str) -> String {
        let found = self
            .call(
                "POST",
                "/element",
                json!({"using": "css selector", "value": css}),
            )
            .await;
        found[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("no element {css}: {found}"))
            .to_string()
    }

    /// Clicks a link or a form's button and waits until the next page has loaded:
    /// a form submission returns from the click before the browser has left the
    /// page, so reading the page at once would read the old one.
    async fn click(&self, css: &str) {
        let element = self.find(css).await;
        self.script("window.hookdOldPage = true").await;
        self.call("POST", &format!("/element/{element}/click"), json!({}))
            .await;
        let deadline = Instant::now() + Duration::from_secs(30);
        while self
            .script("return window.hookdOldPage === true || document.readyState !== 'complete'")
            .await
            != Value::Bool(false)
        {
            assert!(
                Instant::now() < deadline,
                "clicking {css} did not load another page within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn script(&self, script: &str) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            json!({"script": script, "args": []}),
        )
        .await
    }

    async fn type_into(&self, css: &str, text: &str) {
        let element = self.find(css).await;
        self.call(
            "POST",
            &format!("/element/{element}/value"),
            json!({"text": text}),
        )
        .await;
    }

    async fn url(&self) -> String {
        self.call("GET", "/url", Value::Null)
            .await
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    async fn text(&self) -> String {
        self.script("return document.body.innerText")
            .await
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// The page's width against the window's: no horizontal scrolling.
    async fn assert_fits(&self) {
        let widths = self
            .script("return [document.documentElement.scrollWidth, window.innerWidth]")
            .await;
        let (page, window) = (
            widths[0].as_i64().unwrap_or(0),
            widths[1].as_i64().unwrap_or(0),
        );
        assert!(
            window <= 1280 && page <= window,
            "{}: {page} px wide in {window}",
            self.url().await
        );
    }

    /// Console errors (and failed loads) since the last call.
    async fn errors(&self) -> Vec<String> {
        let entries = self
            .call("POST", "/se/log", json!({"type": "browser"}))
            .await;
        entries
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| e["message"].as_str().unwrap_or_default().to_string())
            .collect()
    }
}

/// Fails for good until switched on: makes an event dead, then lets a retry apply it.
struct Switch(Arc<AtomicBool>);

#[async_trait::async_trait]
impl Handler for Switch {
    async fn apply(
        &self,
        _tx: &deadpool_postgres::Transaction<'_>,
        _event: &Event<'_>,
    ) -> Result<(), HandlerError> {
        if self.0.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(HandlerError::Permanent("the switch is off".into()))
        }
    }
}

async fn desk_with_a_dead_event(switch: Arc<AtomicBool>) -> TestApp {
    let mut settings = shipped_settings();
    settings.sources[0]
        .event_types
        .insert("charge.dispute.updated".into(), "test_switch".into());
    let mut registry = Registry::builtin();
    registry.register("test_switch", Arc::new(Switch(switch)));
    let app = spawn(Spawn {
        settings,
        registry,
        ..Spawn::default()
    })
    .await;
    let paid = stripe_event(
        "evt_browser_paid",
        "payment_intent.succeeded",
        json!({"id": "pi_browser", "object": "payment_intent", "amount": 4200, "currency": "usd",
               "customer": "cus_browser"}),
    );
    let disputed = stripe_event(
        "evt_browser_dispute",
        "charge.dispute.updated",
        json!({"id": "dp_browser", "object": "dispute", "payment_intent": "pi_browser",
               "amount": 4200}),
    );
    for event in [paid, disputed] {
        assert_eq!(app.deliver("stripe", &event).await.status, 200);
    }
    app
}

#[tokio::test]
async fn slow_support_staff_find_a_payment_and_retry_its_dead_event_in_a_real_browser() {
    let switch = Arc::new(AtomicBool::new(false));
    let app = desk_with_a_dead_event(switch.clone()).await;
    let browser = Browser::start().await;
    let mut errors = Vec::new();

    browser.go(&format!("{}/admin", app.base)).await;
    assert!(
        browser.url().await.ends_with("/admin/login"),
        "sent to sign in"
    );
    browser.assert_fits().await;
    browser.type_into("input[name=token]", OPERATOR).await;
    browser.click("form[action='/admin/login'] button").await;
    assert!(
        browser.url().await.ends_with("/admin"),
        "{}",
        browser.url().await
    );
    browser.assert_fits().await;
    errors.extend(browser.errors().await);

    browser.type_into("input[name=q]", "pi_browser").await;
    browser.click("form.filters button").await;
    assert!(browser.url().await.contains("q=pi_browser"));
    browser.assert_fits().await;
    browser
        .click("a[href='/admin/payments/stripe/pi_browser']")
        .await;
    assert!(
        browser
            .url()
            .await
            .ends_with("/admin/payments/stripe/pi_browser")
    );
    let payment = browser.text().await;
    assert!(
        payment.contains("succeeded") && payment.contains("42.00 USD"),
        "{payment}"
    );
    assert!(
        payment.contains("dead"),
        "the timeline shows the dead event"
    );
    browser.assert_fits().await;
    errors.extend(browser.errors().await);

    browser
        .click("section.event a[href^='/admin/events/']:not([href$='/1'])")
        .await;
    let detail = browser.text().await;
    assert!(
        detail.contains("charge.dispute.updated") && detail.contains("dead"),
        "{detail}"
    );
    browser.assert_fits().await;
    switch.store(true, Ordering::SeqCst);
    browser.click("form[action$='/retry'] button").await;
    let after = browser.text().await;
    assert!(after.contains("Retried: processed"), "{after}");
    assert_eq!(
        app.strings(
            "SELECT status FROM webhook_events WHERE event_id = 'evt_browser_dispute'",
            &[]
        )
        .await,
        ["processed"]
    );
    errors.extend(browser.errors().await);

    browser.click("form[action='/admin/logout'] button").await;
    assert!(browser.url().await.ends_with("/admin/login"));
    browser.go(&format!("{}/admin", app.base)).await;
    assert!(browser.url().await.ends_with("/admin/login"), "signed out");
    errors.extend(browser.errors().await);
    assert!(errors.is_empty(), "console errors: {errors:#?}");

    let profile = browser.profile.clone();
    assert!(
        !processes_using(&profile).is_empty(),
        "the scan finds the running browser"
    );
    drop(browser);
    let left = processes_using(&profile);
    assert!(left.is_empty(), "browser processes left running: {left:?}");
}

/// How the events list lays out, measured in the browser: every cell on one
/// line, ids in a monospace face, whole in the page, cut only on screen.
const LIST_LAYOUT: &str = "
    // The lines the text of `el` is laid out on: the tops of its text's boxes,
    // a line apart (a smaller face on the same line sits a pixel or two lower).
    const lines = el => {
        const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
        const tops = [];
        for (let node = walk.nextNode(); node; node = walk.nextNode()) {
            const range = document.createRange();
            range.selectNodeContents(node);
            for (const r of range.getClientRects()) tops.push(r.top);
        }
        tops.sort((a, b) => a - b);
        return tops.filter((t, i) => i === 0 || t - tops[i - 1] > 6).length;
    };
    const cells = [...document.querySelectorAll('table.events td')];
    const ids = [...document.querySelectorAll('table.events td .id')];
    const long = ids.find(e => e.textContent.startsWith('evt_bench_1835'));
    const label = document.querySelector('table.events .label.status-dead');
    return {
        rows: document.querySelectorAll('table.events tr').length - 1,
        wrapped: cells.filter(c => lines(c) > 1).map(c => c.textContent),
        split_ids: ids.filter(e => lines(e) > 1).map(e => e.textContent),
        monospace: ids.every(e => getComputedStyle(e).fontFamily.includes('monospace')),
        long_id: long ? [long.textContent, long.title] : null,
        long_cut: long ? long.closest('td').scrollWidth > long.closest('td').clientWidth : null,
        dead_label: label ? getComputedStyle(label).backgroundColor : null,
        kinds: [...document.querySelectorAll('table.events tr')].slice(1)
            .map(r => r.children[4].textContent),
    };";

/// The charts as a screen reader meets them: the SVG's role, the title and
/// description it is labelled by, its bars, and the table of the numbers.
const CHARTS: &str = "
    return [...document.querySelectorAll('figure.chart')].map(f => {
        const svg = f.querySelector('svg');
        const named = (svg.getAttribute('aria-labelledby') || '').split(' ')
            .map(id => (document.getElementById(id) || {}).textContent || '');
        return {
            id: f.id,
            role: svg.getAttribute('role'),
            named,
            bars: svg.querySelectorAll('rect').length,
            table_rows: f.querySelectorAll('details table tr').length,
            fits: svg.getBoundingClientRect().right <= document.documentElement.clientWidth,
        };
    });";

#[tokio::test]
async fn slow_the_list_reads_at_1280_px_and_the_dashboard_draws_its_charts() {
    let app = spawn_app().await;
    let long_id = "evt_bench_1835_0123456789_abcdefghijklmnopqrstuvwxyz";
    let events = [
        stripe_event(
            long_id,
            "payment_intent.payment_failed",
            json!({"id": "pi_3QbrowserLongPaymentIdentifier0001", "object": "payment_intent",
                   "amount": 4200, "customer": "cus_browserLongCustomerIdentifier"}),
        ),
        stripe_event(
            "evt_browser_ignored",
            "customer.created",
            json!({"id": "cus_1", "object": "customer"}),
        ),
        // No payment id: dead at once.
        stripe_event(
            "evt_browser_dead",
            "payment_intent.succeeded",
            json!({"amount": 1}),
        ),
    ];
    for event in events {
        assert_eq!(app.deliver("stripe", &event).await.status, 200);
    }
    let browser = Browser::start().await;
    browser.go(&format!("{}/admin/login", app.base)).await;
    browser.type_into("input[name=token]", VIEWER).await;
    browser.click("form[action='/admin/login'] button").await;
    assert!(browser.url().await.ends_with("/admin"));
    browser.assert_fits().await;

    let layout = browser.script(LIST_LAYOUT).await;
    assert_eq!(layout["rows"], 3, "{layout}");
    assert_eq!(
        layout["wrapped"],
        json!([]),
        "cells over two lines: {layout}"
    );
    assert_eq!(
        layout["split_ids"],
        json!([]),
        "ids split over lines: {layout}"
    );
    assert_eq!(layout["monospace"], true, "{layout}");
    assert_eq!(
        layout["long_id"],
        json!([long_id, long_id]),
        "whole in the page"
    );
    assert_eq!(
        layout["long_cut"], true,
        "the long id is cut on screen: {layout}"
    );
    assert!(
        layout["dead_label"]
            .as_str()
            .is_some_and(|c| c != "rgba(0, 0, 0, 0)"),
        "a coloured label: {layout}"
    );
    assert!(
        layout["kinds"]
            .as_array()
            .is_some_and(|k| k.contains(&json!("—"))),
        "no kind shows as a dash: {layout}"
    );

    let charts = browser.script(CHARTS).await;
    let charts = charts.as_array().expect("charts");
    assert_eq!(charts.len(), 2, "{charts:?}");
    for (chart, title, rows) in [
        (&charts[0], "Events per hour, last 24 hours (UTC)", 25),
        (
            &charts[1],
            "Failed and dead events per day, last 7 days (UTC)",
            8,
        ),
    ] {
        assert_eq!(chart["role"], "img", "{chart}");
        assert_eq!(chart["named"][0], title, "{chart}");
        assert!(
            chart["named"][1]
                .as_str()
                .is_some_and(|d| d.contains("Stacked bars")),
            "{chart}"
        );
        assert!(
            chart["bars"].as_u64().unwrap_or(0) > 0,
            "bars drawn: {chart}"
        );
        assert_eq!(chart["table_rows"], rows, "{chart}");
        assert_eq!(chart["fits"], true, "{chart}");
    }

    // A natural guess that is no page: a page says so, with a way back.
    browser.go(&format!("{}/admin/events", app.base)).await;
    assert!(browser.text().await.contains("There is no such page."));
    browser.assert_fits().await;
    browser.click("main a[href='/admin']").await;
    assert!(browser.url().await.ends_with("/admin"));
    let errors = browser.errors().await;
    // The 404 page's own load is the one failed load.
    assert!(
        errors
            .iter()
            .all(|e| e.contains("/admin/events") && e.contains("404")),
        "console errors: {errors:#?}"
    );
}

/// Signs in through the page's form, as a person would.
async fn sign_in(browser: &Browser, app: &TestApp, token: &str) {
    browser.go(&format!("{}/admin/login", app.base)).await;
    browser.type_into("input[name=token]", token).await;
    browser.click("form[action='/admin/login'] button").await;
    assert!(browser.url().await.ends_with("/admin"), "signed in");
}

#[tokio::test]
async fn slow_a_viewer_sees_an_email_masked_and_an_operator_reveals_it_in_a_real_browser() {
    let app = spawn_app().await;
    let email = "jenny.rosen@example.com";
    let paid = stripe_event(
        "evt_browser_masked",
        "payment_intent.succeeded",
        json!({"id": "pi_masked", "object": "payment_intent", "amount": 1500, "currency": "eur",
               "customer": "cus_masked", "receipt_email": email}),
    );
    assert_eq!(app.deliver("stripe", &paid).await.status, 200);
    let id = app.event_row_id("evt_browser_masked").await;
    let page = format!("{}/admin/events/{id}", app.base);
    let browser = Browser::start().await;

    sign_in(&browser, &app, VIEWER).await;
    browser.go(&page).await;
    let masked = browser.text().await;
    assert!(masked.contains("•••@example.com"), "{masked}");
    assert!(
        !masked.contains(email),
        "a viewer sees the address: {masked}"
    );
    assert!(
        !masked.contains("Reveal personal data"),
        "a viewer has no reveal button"
    );
    browser.assert_fits().await;
    browser.click("form[action='/admin/logout'] button").await;

    sign_in(&browser, &app, OPERATOR).await;
    browser.go(&page).await;
    assert!(
        !browser.text().await.contains(email),
        "masked until revealed"
    );
    browser.click("form[action$='/reveal'] button").await;
    let revealed = browser.text().await;
    assert!(revealed.contains(email), "{revealed}");
    browser.assert_fits().await;
    assert_eq!(
        app.strings(
            "SELECT who FROM admin_audit WHERE action = 'revealed_payload' AND webhook_event_id = $1",
            &[&id]
        )
        .await,
        ["operator"]
    );
    browser.go(&format!("{}/admin/audit", app.base)).await;
    let audit = browser.text().await;
    assert!(audit.contains("revealed_payload"), "{audit}");
    let errors = browser.errors().await;
    assert!(errors.is_empty(), "console errors: {errors:#?}");
}
