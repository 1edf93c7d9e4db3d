//! Stripe's list of events: `GET /v1/events` with `created[gte]`, newest
//! first, 100 a page, paged on with `starting_after` (the last id) while
//! `has_more`. Stripe lists the last 30 days.

use std::time::Duration;

use serde::Deserialize;

use crate::providers::api::{
    ApiError, Call, Client, CursorList, Cursored, Listed, Lister, Page, last_field,
};

const PATH: &str = "/v1/events";

/// Stripe's list API, as reconcile asks it.
pub static LISTER: Lister = Lister {
    title: "Stripe",
    default_base: "https://api.stripe.com",
    max_window: Duration::from_secs(30 * 24 * 3600),
    newest_first: true,
    token_path: None,
    pager: |since, _until| {
        Box::new(Cursored::new(Events {
            since: since.timestamp(),
        }))
    },
};

struct Events {
    since: i64,
}

#[derive(Deserialize)]
struct List {
    data: Page,
    has_more: bool,
}

#[async_trait::async_trait]
impl CursorList for Events {
    async fn page(&self, api: &mut dyn Client, after: Option<&str>) -> Result<Listed, ApiError> {
        let mut query = vec![
            ("limit", "100".to_string()),
            ("created[gte]", self.since.to_string()),
        ];
        if let Some(after) = after {
            query.push(("starting_after", after.to_string()));
        }
        let body = api.send(&Call::get(PATH, query)).await?;
        let list: List = serde_json::from_slice(&body).map_err(|e| api.malformed(PATH, &e))?;
        Ok(Listed {
            next: last_field(&list.data, "id"),
            last: !list.has_more,
            events: list.data,
        })
    }
}
