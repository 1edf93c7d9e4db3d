//! Stripe's list of events: `GET /v1/events` with `created[gte]`, newest
//! first, 100 a page, paged on with `starting_after` (the last id) while
//! `has_more`. Stripe lists the last 30 days.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::providers::api::{self, ApiError, Call, Client, Lister, Page, last_field};

const PATH: &str = "/v1/events";

/// Stripe's list API, as reconcile asks it.
pub static LISTER: Lister = Lister {
    title: "Stripe",
    default_base: "https://api.stripe.com",
    max_window: Duration::from_secs(30 * 24 * 3600),
    newest_first: true,
    token_path: None,
    pager: |since, _until| Box::new(Pager::new(since)),
};

pub struct Pager {
    since: i64,
    after: Option<String>,
    done: bool,
}

#[derive(Deserialize)]
struct List {
    data: Page,
    has_more: bool,
}

impl Pager {
    pub fn new(since: DateTime<Utc>) -> Self {
        Pager {
            since: since.timestamp(),
            after: None,
            done: false,
        }
    }
}

#[async_trait::async_trait]
impl api::Pager for Pager {
    async fn next(&mut self, api: &mut dyn Client) -> Result<Option<Page>, ApiError> {
        if self.done {
            return Ok(None);
        }
        let mut query = vec![
            ("limit", "100".to_string()),
            ("created[gte]", self.since.to_string()),
        ];
        if let Some(after) = &self.after {
            query.push(("starting_after", after.clone()));
        }
        let body = api.send(&Call::get(PATH, query)).await?;
        let list: List = serde_json::from_slice(&body).map_err(|e| api.malformed(PATH, &e))?;
        self.after = last_field(&list.data, "id");
        self.done = !list.has_more || self.after.is_none();
        Ok(Some(list.data))
    }
}
