//! Paddle's list of events: `GET /events`, newest first (`order_by=id[DESC]`),
//! 200 a page, paged on with the `after` cursor its `meta.pagination.next`
//! names while `has_more`; the list has no time filter, so paging stops at the
//! first event that `occurred_at` before the window. Paddle lists 90 days.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::providers::api::{
    self, ApiError, Call, Client, CursorList, Cursored, Listed, Lister, Page,
};

const PATH: &str = "/events";

/// Paddle's list API, as reconcile asks it.
pub static LISTER: Lister = Lister {
    title: "Paddle",
    default_base: "https://api.paddle.com",
    max_window: Duration::from_secs(90 * 24 * 3600),
    newest_first: true,
    token_path: None,
    pager: |since, _until| Box::new(Cursored::new(Events { since })),
};

struct Events {
    since: DateTime<Utc>,
}

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

#[async_trait::async_trait]
impl CursorList for Events {
    async fn page(&self, api: &mut dyn Client, after: Option<&str>) -> Result<Listed, ApiError> {
        let mut query = vec![
            ("order_by", "id[DESC]".to_string()),
            ("per_page", "200".to_string()),
        ];
        if let Some(after) = after {
            query.push(("after", after.to_string()));
        }
        let body = api.send(&Call::get(PATH, query)).await?;
        let list: List = serde_json::from_slice(&body).map_err(|e| api.malformed(PATH, &e))?;
        let (events, older) = api::newer_than(list.data, self.since, "occurred_at", api, PATH)?;
        let pagination = list.meta.pagination;
        Ok(Listed {
            events,
            next: pagination
                .next
                .as_deref()
                .and_then(|next| api::cursor(next, "after")),
            last: older || !pagination.has_more,
        })
    }
}
