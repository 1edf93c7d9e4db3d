//! Paddle's list of events: `GET /events`, newest first (`order_by=id[DESC]`),
//! 200 a page, paged on with the `after` cursor its `meta.pagination.next`
//! names while `has_more`; the list has no time filter, so paging stops at the
//! first event that `occurred_at` before the window. Paddle lists 90 days. A
//! source taking only some exact types asks for those alone (`event_type`,
//! comma-separated).

use serde::Deserialize;

use crate::providers::api::{self, GetList, Listed, Lister, Page};

const PATH: &str = "/events";

/// Paddle's list API, as reconcile asks it.
pub static LISTER: Lister = Lister::new("Paddle", "https://api.paddle.com", 90, |window| {
    let since = window.since;
    let mut query = vec![
        ("order_by", "id[DESC]".to_string()),
        ("per_page", "200".to_string()),
    ];
    if !window.exact_types.is_empty() {
        query.push(("event_type", window.exact_types.join(",")));
    }
    GetList {
        path: PATH,
        query,
        cursor: "after",
        headers: &[],
        since,
        read: |list: List, since, api| {
            let (events, older) = api::newer_than(list.data, since, "occurred_at", api, PATH)?;
            let pagination = list.meta.pagination;
            Ok(Listed {
                events,
                next: pagination
                    .next
                    .as_deref()
                    .and_then(|next| api::cursor(next, "after")),
                last: older || !pagination.has_more,
            })
        },
    }
    .pager()
});

#[derive(Deserialize)]
struct List {
    data: Page,
    meta: Meta,
}

#[derive(Deserialize)]
struct Meta {
    pagination: Pagination,
}

#[derive(Deserialize)]
struct Pagination {
    next: Option<String>,
    #[serde(default)]
    has_more: bool,
}
