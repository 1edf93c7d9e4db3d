//! Stripe's list of events: `GET /v1/events` with `created[gte]`, newest
//! first, 100 a page, paged on with `starting_after` (the last id) while
//! `has_more`. Stripe lists the last 30 days.

use serde::Deserialize;

use crate::providers::api::{GetList, Listed, Lister, Page, last_field};

/// Stripe's list API, as reconcile asks it.
pub static LISTER: Lister = Lister::new("Stripe", "https://api.stripe.com", 30, |since, _| {
    GetList {
        path: "/v1/events",
        query: vec![
            ("limit", "100".to_string()),
            ("created[gte]", since.timestamp().to_string()),
        ],
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
