//! PayPal's list of event notifications: `GET /v1/notifications/webhooks-events`
//! with `start_time` and `end_time`, newest first, paged on by the `links`
//! entry whose `rel` is `next` (its query, sent to the source's `api_base`).
//! The bearer token comes from the client credentials (`POST /v1/oauth2/token`).
//! PayPal filters the list on one `event_type`: a source taking one exact
//! type asks for it alone.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Deserialize;

use crate::providers::api::{self, ApiError, Call, Client, Lister, Page};

const PATH: &str = "/v1/notifications/webhooks-events";

/// PayPal's list API, as reconcile asks it.
pub static LISTER: Lister = Lister::new("PayPal", "https://api-m.paypal.com", 30, |window| {
    Box::new(Pager::new(window.since, window.until, window.exact_types))
})
.with_token("/v1/oauth2/token");

pub struct Pager {
    /// The next request's query; `None` once the last page was read.
    query: Option<Vec<(String, String)>>,
}

#[derive(Deserialize)]
struct List {
    #[serde(default)]
    events: Page,
    #[serde(default)]
    links: Vec<Link>,
}

#[derive(Deserialize)]
struct Link {
    href: String,
    rel: String,
}

impl Pager {
    /// The list of `[since, until]`; of `exact_types`' only type when there
    /// is one (empty: every type).
    pub fn new(since: DateTime<Utc>, until: DateTime<Utc>, exact_types: &[String]) -> Self {
        let time = |t: DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Secs, true);
        let mut query = vec![
            ("page_size".into(), "300".into()),
            ("start_time".into(), time(since)),
            ("end_time".into(), time(until)),
        ];
        if let [only] = exact_types {
            query.push(("event_type".into(), only.clone()));
        }
        Pager { query: Some(query) }
    }
}

#[async_trait::async_trait]
impl api::Pager for Pager {
    async fn next(&mut self, api: &mut dyn Client) -> Result<Option<Page>, ApiError> {
        let Some(query) = self.query.take() else {
            return Ok(None);
        };
        let pairs = query.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
        let list: List = api::ask(api, &Call::get(PATH, pairs)).await?;
        self.query = list
            .links
            .iter()
            .find(|link| link.rel == "next")
            .and_then(|link| link.href.split_once('?'))
            .map(|(_, query)| {
                form_urlencoded::parse(query.as_bytes())
                    .into_owned()
                    .collect()
            })
            .filter(|next: &Vec<(String, String)>| !list.events.is_empty() && *next != query);
        Ok(Some(list.events))
    }
}
