//! GoCardless's list of events: `GET /events` with `created_at[gte]`
//! (`GoCardless-Version: 2015-07-06`), newest first, 500 a page, paged on with
//! the `after` cursor of `meta.cursors.after` until it is null.

use chrono::SecondsFormat;
use serde::Deserialize;

use crate::providers::api::{GetList, Listed, Lister, Page};

/// GoCardless's list API, as reconcile asks it.
pub static LISTER: Lister = Lister::new("GoCardless", "https://api.gocardless.com", 30, |window| {
    let since = window.since;
    GetList {
        path: "/events",
        query: vec![
            ("limit", "500".to_string()),
            (
                "created_at[gte]",
                since.to_rfc3339_opts(SecondsFormat::Millis, true),
            ),
        ],
        cursor: "after",
        headers: &[("GoCardless-Version", "2015-07-06")],
        since,
        read: |list: List, _, _| {
            Ok(Listed {
                next: list.meta.cursors.after.filter(|a| !a.is_empty()),
                last: list.events.is_empty(),
                events: list.events,
            })
        },
    }
    .pager()
});

#[derive(Deserialize)]
struct List {
    events: Page,
    meta: Meta,
}

#[derive(Deserialize)]
struct Meta {
    cursors: Cursors,
}

#[derive(Deserialize)]
struct Cursors {
    after: Option<String>,
}
