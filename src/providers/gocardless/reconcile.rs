//! GoCardless's list of events: `GET /events` with `created_at[gte]`
//! (`GoCardless-Version: 2015-07-06`), newest first, 500 a page, paged on with
//! the `after` cursor of `meta.cursors.after` until it is null.

use std::time::Duration;

use chrono::SecondsFormat;
use serde::Deserialize;

use crate::providers::api::{ApiError, Call, Client, CursorList, Cursored, Listed, Lister, Page};

const PATH: &str = "/events";

/// GoCardless's list API, as reconcile asks it.
pub static LISTER: Lister = Lister {
    title: "GoCardless",
    default_base: "https://api.gocardless.com",
    max_window: Duration::from_secs(30 * 24 * 3600),
    newest_first: true,
    token_path: None,
    pager: |since, _until| {
        Box::new(Cursored::new(Events {
            since: since.to_rfc3339_opts(SecondsFormat::Millis, true),
        }))
    },
};
const VERSION: (&str, &str) = ("GoCardless-Version", "2015-07-06");

struct Events {
    since: String,
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

#[async_trait::async_trait]
impl CursorList for Events {
    async fn page(&self, api: &mut dyn Client, after: Option<&str>) -> Result<Listed, ApiError> {
        let mut query = vec![
            ("limit", "500".to_string()),
            ("created_at[gte]", self.since.clone()),
        ];
        if let Some(after) = after {
            query.push(("after", after.to_string()));
        }
        let mut call = Call::get(PATH, query);
        call.headers = &[VERSION];
        let body = api.send(&call).await?;
        let list: List = serde_json::from_slice(&body).map_err(|e| api.malformed(PATH, &e))?;
        Ok(Listed {
            next: list.meta.cursors.after.filter(|a| !a.is_empty()),
            last: list.events.is_empty(),
            events: list.events,
        })
    }
}
