//! A provider's API as its folder speaks it, without HTTP: a request ([`Call`])
//! sent through a [`Client`] that the shared HTTP client implements (TLS, no
//! redirect, a bounded answer, 429 waited out; see `reconcile::api`), and a
//! provider's list of past events as data ([`Lister`], [`Pager`]).

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::Method;
use serde_json::value::RawValue;

/// Why a request to the API failed: one line, without the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ApiError(pub String);

/// A request's method, path, query, JSON body (if any) and extra headers.
pub struct Call<'a> {
    pub method: Method,
    pub path: &'a str,
    pub query: Vec<(&'a str, String)>,
    pub json: Option<serde_json::Value>,
    pub headers: &'a [(&'a str, &'a str)],
}

impl<'a> Call<'a> {
    pub fn get(path: &'a str, query: Vec<(&'a str, String)>) -> Self {
        Call {
            method: Method::GET,
            path,
            query,
            json: None,
            headers: &[],
        }
    }
}

/// The provider's API with a source's credential.
#[async_trait::async_trait]
pub trait Client: Send {
    /// The answer's body to `call`, a 2xx.
    async fn send(&mut self, call: &Call<'_>) -> Result<Vec<u8>, ApiError>;

    /// An answer that is not the one expected.
    fn malformed(&self, path: &str, problem: &dyn std::fmt::Display) -> ApiError;
}

/// Where the event a delivery only names is read (Stripe's thin events): a
/// GET of `path` with `headers`, on the source's API with its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetch {
    pub path: String,
    pub headers: Vec<(&'static str, String)>,
    /// Whether an event read without a `data.object` gets, as its
    /// `data.object`, the resource its `related_object.url` names, read too
    /// (Stripe's v2 events name a v1 resource without carrying it).
    pub related_object: bool,
}

impl Fetch {
    /// A GET of `prefix` and `id`, when the id is one path segment (letters,
    /// digits, `_` and `-`); the error says why it cannot be asked for.
    pub fn of(
        prefix: &str,
        id: &str,
        headers: Vec<(&'static str, String)>,
    ) -> Result<Fetch, super::FetchError> {
        if !plain_segment(id) {
            return Err(super::FetchError::Unaskable(id.to_string()));
        }
        Ok(Fetch {
            path: format!("{prefix}{id}"),
            headers,
            related_object: false,
        })
    }

    /// What the API answers for it, as JSON (with the related object, when
    /// `related_object` asks for it).
    pub async fn send(&self, api: &mut dyn Client) -> Result<serde_json::Value, ApiError> {
        let mut event: serde_json::Value = self.get(api, &self.path).await?;
        if !self.related_object || event.pointer("/data/object").is_some() {
            return Ok(event);
        }
        let url = event
            .pointer("/related_object/url")
            .and_then(|u| u.as_str());
        let Some(url) = url.map(str::to_string) else {
            return Ok(event);
        };
        // Nothing but a plain path of the source's own API is asked for.
        let plain = url
            .strip_prefix('/')
            .is_some_and(|rest| rest.split('/').all(plain_segment));
        if !plain {
            return Err(api.malformed(&self.path, &format!("related_object.url {url:?}")));
        }
        let object = self.get(api, &url).await?;
        if !event["data"].is_object() {
            event["data"] = serde_json::json!({});
        }
        event["data"]["object"] = object;
        Ok(event)
    }

    async fn get(&self, api: &mut dyn Client, path: &str) -> Result<serde_json::Value, ApiError> {
        let mut call = Call::get(path, Vec::new());
        let headers: Vec<(&str, &str)> =
            self.headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        call.headers = &headers;
        ask(api, &call).await
    }
}

/// A path segment asked for as it is: letters, digits, `_` and `-`.
fn plain_segment(segment: &str) -> bool {
    !segment.is_empty()
        && segment
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// One page's events, each as the API wrote it.
pub type Page = Vec<Box<RawValue>>;

/// A provider's list of past events, page by page.
#[async_trait::async_trait]
pub trait Pager: Send {
    /// The next page, or `None` after the last.
    async fn next(&mut self, api: &mut dyn Client) -> Result<Option<Page>, ApiError>;
}

/// One page of a list paged on a cursor: its events, the cursor of the page
/// after it, and whether it says it is the last.
pub struct Listed {
    pub events: Page,
    pub next: Option<String>,
    pub last: bool,
}

/// A provider's list paged on a cursor, as [`Cursored`] asks it.
#[async_trait::async_trait]
pub trait CursorList: Send + Sync {
    /// The page after `cursor` (the first for `None`).
    async fn page(&self, api: &mut dyn Client, cursor: Option<&str>) -> Result<Listed, ApiError>;
}

/// What the API answers to `call`, read as JSON of the shape `T`.
pub async fn ask<T: serde::de::DeserializeOwned>(
    api: &mut dyn Client,
    call: &Call<'_>,
) -> Result<T, ApiError> {
    let body = api.send(call).await?;
    serde_json::from_slice(&body).map_err(|e| api.malformed(call.path, &e))
}

/// A list paged on a cursor, asked with a GET of `path`: the query every page
/// is asked with, the parameter the cursor of the page after goes in, and how
/// an answer (of the shape `T`) reads as a page, given the window's start.
pub struct GetList<T> {
    pub path: &'static str,
    pub query: Vec<(&'static str, String)>,
    pub cursor: &'static str,
    pub headers: &'static [(&'static str, &'static str)],
    pub since: DateTime<Utc>,
    pub read: fn(T, DateTime<Utc>, &dyn Client) -> Result<Listed, ApiError>,
}

impl<T: serde::de::DeserializeOwned + Send + 'static> GetList<T> {
    /// The list as reconcile asks it, page after page.
    pub fn pager(self) -> Box<dyn Pager> {
        Box::new(Cursored::new(self))
    }
}

#[async_trait::async_trait]
impl<T: serde::de::DeserializeOwned + Send + 'static> CursorList for GetList<T> {
    async fn page(&self, api: &mut dyn Client, cursor: Option<&str>) -> Result<Listed, ApiError> {
        let mut query = self.query.clone();
        if let Some(cursor) = cursor {
            query.push((self.cursor, cursor.to_string()));
        }
        let mut call = Call::get(self.path, query);
        call.headers = self.headers;
        let list = ask(api, &call).await?;
        (self.read)(list, self.since, api)
    }
}

/// A list asked page after page with the cursor the page before gave, until
/// a page is the last or gives none.
pub struct Cursored<L> {
    list: L,
    cursor: Option<String>,
    done: bool,
}

impl<L: CursorList> Cursored<L> {
    pub fn new(list: L) -> Self {
        Cursored {
            list,
            cursor: None,
            done: false,
        }
    }
}

#[async_trait::async_trait]
impl<L: CursorList> Pager for Cursored<L> {
    async fn next(&mut self, api: &mut dyn Client) -> Result<Option<Page>, ApiError> {
        if self.done {
            return Ok(None);
        }
        let listed = self.list.page(api, self.cursor.as_deref()).await?;
        self.cursor = listed.next;
        self.done = listed.last || self.cursor.is_none();
        Ok(Some(listed.events))
    }
}

/// A provider's API listing its past events, as data: reconcile asks it
/// through [`Lister::pager`] on the shared client, knowing no provider.
#[derive(Debug)]
pub struct Lister {
    /// The provider's name, as messages say it.
    pub title: &'static str,
    /// The provider's own API, where `api_base` is not set.
    pub default_base: &'static str,
    /// How far back the provider lists events.
    pub max_window: Duration,
    /// Whether the list is newest first (the missing events are then applied
    /// in reverse, in the order they happened).
    pub newest_first: bool,
    /// Where OAuth 2 client credentials (`client_id`, `client_secret`) are
    /// exchanged for a token, for a provider whose API takes them instead of
    /// an `api_key`.
    pub token_path: Option<&'static str>,
    /// The list of a window, page by page.
    pub pager: fn(&Window<'_>) -> Box<dyn Pager>,
}

/// What a pass asks a provider's list for: the events from `since` to
/// `until`, and, when the source takes only some exact types, those types (a
/// list API that can filter by them is asked to; whatever it lists, reconcile
/// keeps only the types the source takes).
pub struct Window<'a> {
    pub since: DateTime<Utc>,
    pub until: DateTime<Utc>,
    /// Empty: every type.
    pub exact_types: &'a [String],
}

impl Lister {
    /// The API of `title` at `default_base`, listing the last `days` newest
    /// first, with an `api_key`.
    pub const fn new(
        title: &'static str,
        default_base: &'static str,
        days: u64,
        pager: fn(&Window<'_>) -> Box<dyn Pager>,
    ) -> Lister {
        Lister {
            title,
            default_base,
            max_window: Duration::from_secs(days * 24 * 3600),
            newest_first: true,
            token_path: None,
            pager,
        }
    }

    /// The same list, oldest first.
    pub const fn oldest_first(self) -> Lister {
        Lister {
            newest_first: false,
            ..self
        }
    }

    /// The same API, taking client credentials exchanged at `token_path`.
    pub const fn with_token(self, token_path: &'static str) -> Lister {
        Lister {
            token_path: Some(token_path),
            ..self
        }
    }

    /// What a scheme without a list API says when `reconcile = true` asks for one.
    pub const NONE: &'static str = "this scheme's provider has no API listing past events";

    /// The lister of the scheme named `scheme`, or what its provider offers instead.
    pub fn of(scheme: &str) -> Result<&'static Lister, &'static str> {
        super::named(scheme).map_or(Err(Lister::NONE), |p| p.lister())
    }

    /// The provider's own API, where `api_base` is not set.
    pub fn default_base(&self) -> &'static str {
        self.default_base
    }

    /// How far back the provider lists events.
    pub fn max_window(&self) -> Duration {
        self.max_window
    }

    /// The provider's name, as messages say it.
    pub fn title(&self) -> &'static str {
        self.title
    }

    /// Whether its API takes client credentials instead of an `api_key`.
    pub fn takes_client(&self) -> bool {
        self.token_path.is_some()
    }

    /// The scheme whose API takes client credentials, as messages name it.
    pub fn client_scheme() -> &'static str {
        super::REGISTRY
            .iter()
            .find(|e| e.provider.lister().is_ok_and(Lister::takes_client))
            .map_or("", |e| e.provider.name())
    }
}

/// The items of a newest-first page that happened since `since` (the time at
/// each item's `field`, RFC 3339), and whether an older one ended the list:
/// for a list API without a time filter.
pub fn newer_than(
    items: Page,
    since: DateTime<Utc>,
    field: &str,
    api: &dyn Client,
    path: &str,
) -> Result<(Page, bool), ApiError> {
    let mut page = Vec::with_capacity(items.len());
    for item in items {
        let value: serde_json::Value =
            serde_json::from_str(item.get()).map_err(|e| api.malformed(path, &e))?;
        let at = value
            .get(field)
            .and_then(serde_json::Value::as_str)
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .ok_or_else(|| api.malformed(path, &format!("an item has no {field} time")))?;
        if at < since {
            return Ok((page, true));
        }
        page.push(item);
    }
    Ok((page, false))
}

/// The `id`-like field of the last item of a page, to page on from it.
pub fn last_field(items: &[Box<RawValue>], field: &str) -> Option<String> {
    let last = items.last()?;
    let value: serde_json::Value = serde_json::from_str(last.get()).ok()?;
    value.get(field)?.as_str().map(String::from)
}

/// The value of `name` in the query of a next-page link (absolute or not): the
/// link's host is never asked, only the source's `api_base`.
pub fn cursor(link: &str, name: &str) -> Option<String> {
    let query = link.split_once('?')?.1;
    form_urlencoded::parse(query.as_bytes())
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
}

/// The ids a list gave last, `capacity` at most: what a reconcile pass
/// remembers to count an event listed twice once (a list that changes while
/// it is paged shows an event again a page or so later), and what a lister
/// remembers not to read one thing twice. Bounded, so a pass over millions of
/// events keeps a few MB rather than every id; one given again beyond them is
/// new again. The set and the order share each id's one copy.
pub struct RecentIds {
    ids: HashSet<Arc<str>>,
    order: VecDeque<Arc<str>>,
    capacity: usize,
}

impl RecentIds {
    pub fn new(capacity: usize) -> Self {
        RecentIds {
            ids: HashSet::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// Whether `id` is new among the remembered; it is remembered now.
    pub fn insert(&mut self, id: &str) -> bool {
        if self.ids.contains(id) {
            return false;
        }
        if self.order.len() == self.capacity
            && let Some(oldest) = self.order.pop_front()
        {
            self.ids.remove(&oldest);
        }
        let id: Arc<str> = Arc::from(id);
        self.ids.insert(Arc::clone(&id));
        self.order.push_back(id);
        true
    }
}

#[cfg(test)]
mod recent_ids_tests {
    use super::RecentIds;

    #[test]
    fn an_id_listed_again_is_new_only_once_it_is_forgotten() {
        let mut seen = RecentIds::new(3);
        assert!(seen.insert("evt_1"));
        assert!(!seen.insert("evt_1"), "listed again a page later");
        assert!(seen.insert("evt_2") && seen.insert("evt_3"));
        // A fourth id forgets the oldest; the rest are still known.
        assert!(seen.insert("evt_4"));
        assert!(!seen.insert("evt_3") && !seen.insert("evt_4"));
        assert!(seen.insert("evt_1"), "forgotten: new again");
        assert_eq!((seen.ids.len(), seen.order.len()), (3, 3));
        // One copy of each id, shared by the set and the order.
        assert!(
            seen.order
                .iter()
                .all(|id| std::sync::Arc::strong_count(id) == 2)
        );
    }
}
