//! PayPal's list of event notifications: `GET /v1/notifications/webhooks-events`
//! with `start_time` and `end_time`, newest first, paged on by the `links`
//! entry whose `rel` is `next` (its query, sent to the source's `api_base`).
//! The bearer token comes from the client credentials (`POST /v1/oauth2/token`).

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Deserialize;

use crate::providers::api::{self, ApiError, Call, Client, Lister, Page};

const PATH: &str = "/v1/notifications/webhooks-events";

/// PayPal's list API, as reconcile asks it.
pub static LISTER: Lister = Lister::new("PayPal", "https://api-m.paypal.com", 30, |window| {
    Box::new(Pager::new(window.since, window.until))
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
    pub fn new(since: DateTime<Utc>, until: DateTime<Utc>) -> Self {
        let time = |t: DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Secs, true);
        Pager {
            query: Some(vec![
                ("page_size".into(), "300".into()),
                ("start_time".into(), time(since)),
                ("end_time".into(), time(until)),
            ]),
        }
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
