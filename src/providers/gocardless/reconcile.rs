//! GoCardless's list of events: `GET /events` with `created_at[gte]`
//! (`GoCardless-Version: 2015-07-06`), newest first, 500 a page, paged on with
//! the `after` cursor of `meta.cursors.after` until it is null.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Deserialize;

use crate::providers::api::{self, ApiError, Call, Client, Lister, Page};

const PATH: &str = "/events";

/// GoCardless's list API, as reconcile asks it.
pub static LISTER: Lister = Lister {
    title: "GoCardless",
    default_base: "https://api.gocardless.com",
    max_window: Duration::from_secs(30 * 24 * 3600),
    newest_first: true,
    token_path: None,
    pager: |since, _until| Box::new(Pager::new(since)),
};
const VERSION: (&str, &str) = ("GoCardless-Version", "2015-07-06");

pub struct Pager {
    since: String,
    after: Option<String>,
    done: bool,
}

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

impl Pager {
    pub fn new(since: DateTime<Utc>) -> Self {
        Pager {
            since: since.to_rfc3339_opts(SecondsFormat::Millis, true),
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
            ("limit", "500".to_string()),
            ("created_at[gte]", self.since.clone()),
        ];
        if let Some(after) = &self.after {
            query.push(("after", after.clone()));
        }
        let mut call = Call::get(PATH, query);
        call.headers = &[VERSION];
        let body = api.send(&call).await?;
        let list: List = serde_json::from_slice(&body).map_err(|e| api.malformed(PATH, &e))?;
        self.after = list.meta.cursors.after.filter(|a| !a.is_empty());
        self.done = self.after.is_none() || list.events.is_empty();
        Ok(Some(list.events))
    }
}
