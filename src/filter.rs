//! The history's filter language, as people write it in API query strings, on the
//! page and as `hookd events list` flags: exact matches, `since`/`until` as RFC 3339
//! or an age (`24h`), `q` for any id, a limit, and an opaque keyset cursor.

pub mod cursor;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::duration;
use crate::store::StoreError;
use crate::store::events::EventStatus;
use crate::store::history::{self, EventFilter, EventSummary};

/// A filter that cannot be understood; the message says why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FilterError(pub String);

const DEFAULT_LIMIT: i64 = 50;
const MAX_LIMIT: i64 = 500;

/// The filters of a history listing, as given.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ListParams {
    pub source: Option<String>,
    pub kind: Option<String>,
    #[serde(rename = "type")]
    pub event_type: Option<String>,
    pub status: Option<String>,
    pub since: Option<String>,
    pub until: Option<String>,
    pub q: Option<String>,
    pub limit: Option<String>,
    pub cursor: Option<String>,
}

impl ListParams {
    pub fn from_query(query: &str) -> Result<Self, FilterError> {
        actix_web::web::Query::<Self>::from_query(query)
            .map(actix_web::web::Query::into_inner)
            .map_err(|e| FilterError(e.to_string()))
    }

    pub fn to_filter(&self, now: DateTime<Utc>) -> Result<EventFilter, FilterError> {
        let present = |v: &Option<String>| v.clone().filter(|s| !s.trim().is_empty());
        // PostgreSQL text cannot hold NUL, and no stored id or name contains one.
        let fields = [
            ("source", &self.source),
            ("kind", &self.kind),
            ("type", &self.event_type),
            ("status", &self.status),
            ("since", &self.since),
            ("until", &self.until),
            ("q", &self.q),
            ("limit", &self.limit),
            ("cursor", &self.cursor),
        ];
        if let Some((name, _)) = fields
            .iter()
            .find(|(_, value)| value.as_deref().is_some_and(|v| v.contains('\0')))
        {
            return Err(FilterError(format!("{name} contains a NUL character")));
        }
        let status = present(&self.status)
            .map(|status| {
                EventStatus::parse(&status).ok_or_else(|| {
                    FilterError(format!(
                        "status {status:?} is not one of processed, ignored, failed, dead"
                    ))
                })
            })
            .transpose()?;
        let limit = match present(&self.limit) {
            None => DEFAULT_LIMIT,
            Some(text) => match text.parse::<i64>() {
                Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
                _ => {
                    return Err(FilterError(format!(
                        "limit must be a number from 1 to {MAX_LIMIT}"
                    )));
                }
            },
        };
        Ok(EventFilter {
            source: present(&self.source),
            kind: present(&self.kind),
            event_type: present(&self.event_type),
            status,
            since: present(&self.since)
                .map(|t| parse_moment("since", &t, now))
                .transpose()?,
            until: present(&self.until)
                .map(|t| parse_moment("until", &t, now))
                .transpose()?,
            q: present(&self.q).map(|q| q.trim().to_string()),
            limit,
            after: present(&self.cursor)
                .map(|c| cursor::decode(&c))
                .transpose()?,
        })
    }
}

/// RFC 3339, or an age such as `24h` meaning that long before `now`.
pub fn parse_moment(
    name: &str,
    text: &str,
    now: DateTime<Utc>,
) -> Result<DateTime<Utc>, FilterError> {
    if let Ok(moment) = DateTime::parse_from_rfc3339(text) {
        return Ok(moment.with_timezone(&Utc));
    }
    let bad = || {
        FilterError(format!(
            "{name} must be an RFC 3339 time or an age like 24h or 7d"
        ))
    };
    let age = duration::parse(text).map_err(|_| bad())?;
    duration::before(now, age).ok_or_else(bad)
}

/// A page of the history and the cursor of the next one.
pub async fn history_page(
    client: &impl crate::store::sql::Session,
    mut filter: EventFilter,
) -> Result<(Vec<EventSummary>, Option<String>), StoreError> {
    let limit = filter.limit;
    filter.limit = limit + 1;
    let mut events = history::list_events(client, &filter).await?;
    let next = if events.len() as i64 > limit {
        events.truncate(usize::try_from(limit).unwrap_or(0));
        events
            .last()
            .map(|e| cursor::encode(&(e.received_at, e.id)))
    } else {
        None
    };
    Ok((events, next))
}
