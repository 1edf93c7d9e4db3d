//! Stripe's list of events: `GET /v1/events` with `created[gte]`, newest
//! first, 100 a page, paged on with `starting_after` (the last id) while
//! `has_more`. Stripe lists the last 30 days. A source taking only some exact
//! types (up to 20, what `types[]` takes) asks for those alone.

use serde::Deserialize;

use crate::providers::api::{GetList, Listed, Lister, Page, last_field};

/// The most types Stripe's `types[]` takes.
const MAX_TYPES: usize = 20;

/// Stripe's list API, as reconcile asks it.
pub static LISTER: Lister = Lister::new("Stripe", "https://api.stripe.com", 30, |window| {
    let since = window.since;
    let mut query = vec![
        ("limit", "100".to_string()),
        ("created[gte]", since.timestamp().to_string()),
    ];
    if (1..=MAX_TYPES).contains(&window.exact_types.len()) {
        query.extend(window.exact_types.iter().map(|t| ("types[]", t.clone())));
    }
    GetList {
        path: "/v1/events",
        query,
        cursor: "starting_after",
        headers: &[],
        since,
        read: |list: List, _, _| {
            Ok(Listed {
                next: last_field(&list.data, "id"),
                last: !list.has_more,
                events: list.data,
            })
        },
    }
    .pager()
});

#[derive(Deserialize)]
struct List {
    data: Page,
    has_more: bool,
}
