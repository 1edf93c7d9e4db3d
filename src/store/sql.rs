//! How every statement of hookd's reaches the server. Each parameter carries its
//! PostgreSQL type, taken from its Rust type, so a statement can be sent two ways
//! with the same meaning:
//! - prepared once per connection and cached (the default: the server plans it
//!   once);
//! - unnamed, parsed and run in one round trip (`query_typed`), when a
//!   transaction-mode pooler (PgBouncer, RDS Proxy, Supavisor, PgCat) sits in
//!   front of the database: it hands each transaction to any server connection,
//!   where a statement prepared on another one does not exist. No session
//!   setting holds there either: a statement outside a transaction goes in one
//!   of its own that sets hookd's limits (`bounded`).
//!
//! The direct path declares the same types, so every test run proves the types
//! the pooled path sends.

use std::sync::atomic::{AtomicBool, Ordering};

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Error, Row, Statement};

use super::StoreError;

/// A statement parameter and the type it is sent as.
pub type Param<'a> = (&'a (dyn ToSql + Sync), Type);

/// A parameter, typed by its Rust type.
pub fn param<T: PgType + ToSql + Sync>(value: &T) -> Param<'_> {
    (value, T::TYPE)
}

/// `params![&a, &b]`: the typed parameters of a statement.
#[doc(hidden)]
#[macro_export]
macro_rules! params {
    ($($value:expr),* $(,)?) => {
        &[$($crate::store::sql::param($value)),*]
    };
}
pub use crate::params;

/// `numbered!(TEMPLATE)`: a statement written with `$?` for each parameter, as
/// a `&'static str` whose parameters are numbered `$1`, `$2`, … in the order
/// they appear — the order they are bound in. A statement assembled from parts
/// (a CTE's columns, then another's) so never numbers one by hand; a `$`
/// followed by a digit in the template fails the build.
macro_rules! numbered {
    ($template:expr) => {{
        const TEMPLATE: &str = $template;
        const BYTES: [u8; $crate::store::sql::numbered_len(TEMPLATE)] =
            $crate::store::sql::number_markers(TEMPLATE);
        match std::str::from_utf8(&BYTES) {
            Ok(sql) => sql,
            Err(_) => panic!("a numbered statement is UTF-8"),
        }
    }};
}
pub(crate) use numbered;

/// Whether `bytes[at..]` starts a parameter marker, `$?`, of `numbered!`.
const fn marker(bytes: &[u8], at: usize) -> bool {
    bytes[at] == b'$' && at + 1 < bytes.len() && bytes[at + 1] == b'?'
}

/// How many digits `n` is written with.
const fn digits(mut n: usize) -> usize {
    let mut count = 1;
    while n >= 10 {
        n /= 10;
        count += 1;
    }
    count
}

/// The length of `template` once `numbered`.
pub(crate) const fn numbered_len(template: &str) -> usize {
    let bytes = template.as_bytes();
    let (mut at, mut number, mut len) = (0, 0, 0);
    while at < bytes.len() {
        if marker(bytes, at) {
            number += 1;
            len += 1 + digits(number);
            at += 2;
        } else {
            assert!(
                !(bytes[at] == b'$' && at + 1 < bytes.len() && bytes[at + 1].is_ascii_digit()),
                "a numbered statement writes each parameter as `$?`"
            );
            len += 1;
            at += 1;
        }
    }
    len
}

/// `template` with each `$?` numbered in order from `$1` (`numbered!`).
pub(crate) const fn number_markers<const N: usize>(template: &str) -> [u8; N] {
    let bytes = template.as_bytes();
    let mut out = [0u8; N];
    let (mut at, mut to, mut number) = (0, 0, 0);
    while at < bytes.len() {
        if marker(bytes, at) {
            number += 1;
            out[to] = b'$';
            let width = digits(number);
            let (mut left, mut rest) = (width, number);
            while left > 0 {
                out[to + left] = b'0' + (rest % 10) as u8;
                rest /= 10;
                left -= 1;
            }
            to += 1 + width;
            at += 2;
        } else {
            out[to] = bytes[at];
            to += 1;
            at += 1;
        }
    }
    out
}

/// Set once any pool of this process goes through a transaction-mode pooler,
/// never cleared: an unnamed statement is correct on any connection, a prepared
/// one is only faster.
static UNNAMED: AtomicBool = AtomicBool::new(false);

pub(super) fn send_unnamed() {
    UNNAMED.store(true, Ordering::Relaxed);
}

/// Whether statements go unnamed (and transactions set their own limits).
pub fn unnamed() -> bool {
    UNNAMED.load(Ordering::Relaxed)
}

/// A session hookd runs statements on: a pooled connection or a transaction.
/// Its `*_unnamed` methods send a statement without preparing it first.
pub trait Session: GenericClient {
    /// The connection, when a statement sent on it is not inside a transaction
    /// of hookd's (`None` for a transaction).
    fn outside_transaction(&self) -> Option<&tokio_postgres::Client>;

    fn query_unnamed(
        &self,
        sql: &str,
        params: &[Param<'_>],
    ) -> impl Future<Output = Result<Vec<Row>, Error>> + Send;
    fn query_one_unnamed(
        &self,
        sql: &str,
        params: &[Param<'_>],
    ) -> impl Future<Output = Result<Row, Error>> + Send;
    fn query_opt_unnamed(
        &self,
        sql: &str,
        params: &[Param<'_>],
    ) -> impl Future<Output = Result<Option<Row>, Error>> + Send;
    fn execute_unnamed(
        &self,
        sql: &str,
        params: &[Param<'_>],
    ) -> impl Future<Output = Result<u64, Error>> + Send;
}

macro_rules! session {
    ($client:ty, $inner:ty, $outside:expr) => {
        impl Session for $client {
            fn outside_transaction(&self) -> Option<&tokio_postgres::Client> {
                $outside(self)
            }
            fn query_unnamed(
                &self,
                sql: &str,
                params: &[Param<'_>],
            ) -> impl Future<Output = Result<Vec<Row>, Error>> + Send {
                <$inner>::query_typed(self, sql, params)
            }
            fn query_one_unnamed(
                &self,
                sql: &str,
                params: &[Param<'_>],
            ) -> impl Future<Output = Result<Row, Error>> + Send {
                <$inner>::query_typed_one(self, sql, params)
            }
            fn query_opt_unnamed(
                &self,
                sql: &str,
                params: &[Param<'_>],
            ) -> impl Future<Output = Result<Option<Row>, Error>> + Send {
                <$inner>::query_typed_opt(self, sql, params)
            }
            fn execute_unnamed(
                &self,
                sql: &str,
                params: &[Param<'_>],
            ) -> impl Future<Output = Result<u64, Error>> + Send {
                <$inner>::execute_typed(self, sql, params)
            }
        }
    };
}

session!(
    deadpool_postgres::Client,
    tokio_postgres::Client,
    connection
);
session!(
    deadpool_postgres::Transaction<'_>,
    tokio_postgres::Transaction<'_>,
    |_| None
);

fn connection(client: &deadpool_postgres::Client) -> Option<&tokio_postgres::Client> {
    let connection: &tokio_postgres::Client = client;
    Some(connection)
}

/// `statement`, sent on `client`. Behind a transaction-mode pooler no session
/// setting holds, so one outside a transaction goes in a transaction of its own
/// that sets hookd's limits: `BEGIN` with them, the statement and `COMMIT`, sent
/// together (one round trip). `statement` puts itself on the wire when first
/// polled, as unnamed statements do.
async fn bounded<T>(
    client: &impl Session,
    statement: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match client.outside_transaction() {
        Some(connection) if unnamed() => {
            let (done, committed) = super::one_statement_transaction(connection, statement).await;
            let value = done?;
            committed?;
            Ok(value)
        }
        _ => statement.await,
    }
}

/// The statement prepared with the parameters' types (cached per connection),
/// and the values to bind.
async fn prepared<'p>(
    client: &impl Session,
    sql: &str,
    params: &[Param<'p>],
) -> Result<(Statement, Vec<&'p (dyn ToSql + Sync)>), Error> {
    let types: Vec<Type> = params.iter().map(|(_, ty)| ty.clone()).collect();
    let statement = client.prepare_typed_cached(sql, &types).await?;
    Ok((statement, params.iter().map(|(value, _)| *value).collect()))
}

/// Every row `sql` returns.
pub async fn query(
    client: &impl Session,
    sql: &str,
    params: &[Param<'_>],
) -> Result<Vec<Row>, StoreError> {
    bounded(client, async {
        ready(client, sql, params).await?.query(client).await
    })
    .await
}

/// The one row `sql` returns.
pub async fn query_one(
    client: &impl Session,
    sql: &str,
    params: &[Param<'_>],
) -> Result<Row, StoreError> {
    if unnamed() {
        return bounded(client, async {
            Ok(client.query_one_unnamed(sql, params).await?)
        })
        .await;
    }
    let (statement, values) = prepared(client, sql, params).await?;
    Ok(client.query_one(&statement, &values).await?)
}

/// The row `sql` returns, if any.
pub async fn query_opt(
    client: &impl Session,
    sql: &str,
    params: &[Param<'_>],
) -> Result<Option<Row>, StoreError> {
    if unnamed() {
        return bounded(client, async {
            Ok(client.query_opt_unnamed(sql, params).await?)
        })
        .await;
    }
    let (statement, values) = prepared(client, sql, params).await?;
    Ok(client.query_opt(&statement, &values).await?)
}

/// Runs `sql`; returns how many rows it changed.
pub async fn execute(
    client: &impl Session,
    sql: &str,
    params: &[Param<'_>],
) -> Result<u64, StoreError> {
    bounded(client, async {
        ready(client, sql, params).await?.execute(client).await
    })
    .await
}

/// A statement with its values, ready to send: `execute` and `query` put it on
/// the wire on their first poll, so statements made ready first and then sent
/// together (`join!`) run in the order they are polled — one round trip, a
/// known order.
pub struct Ready<'p> {
    sql: &'p str,
    /// Borrowed from the caller, or owned by a statement that gathers its own.
    params: std::borrow::Cow<'p, [Param<'p>]>,
    /// Prepared, unless statements go unnamed.
    prepared: Option<(Statement, Vec<&'p (dyn ToSql + Sync)>)>,
}

/// `sql` with `params`, prepared now when statements are prepared.
pub async fn ready<'p>(
    client: &impl Session,
    sql: &'p str,
    params: impl Into<std::borrow::Cow<'p, [Param<'p>]>>,
) -> Result<Ready<'p>, StoreError> {
    let params = params.into();
    let prepared = if unnamed() {
        None
    } else {
        Some(prepared(client, sql, &params).await?)
    };
    Ok(Ready {
        sql,
        params,
        prepared,
    })
}

impl Ready<'_> {
    /// Runs the statement; returns how many rows it changed.
    pub async fn execute(&self, client: &impl Session) -> Result<u64, StoreError> {
        Ok(match &self.prepared {
            Some((statement, values)) => client.execute(statement, values).await?,
            None => client.execute_unnamed(self.sql, &self.params).await?,
        })
    }

    /// Runs the statement; returns every row.
    pub async fn query(&self, client: &impl Session) -> Result<Vec<Row>, StoreError> {
        Ok(match &self.prepared {
            Some((statement, values)) => client.query(statement, values).await?,
            None => client.query_unnamed(self.sql, &self.params).await?,
        })
    }
}

/// The PostgreSQL type a Rust value is sent as.
pub trait PgType {
    const TYPE: Type;
}

/// A type that can be an array's element, and the array type it makes.
pub trait PgElement: PgType {
    const ARRAY: Type;
}

macro_rules! pg_types {
    ($($rust:ty => $pg:ident, $array:ident;)*) => {
        $(
            impl PgType for $rust {
                const TYPE: Type = Type::$pg;
            }
            impl PgElement for $rust {
                const ARRAY: Type = Type::$array;
            }
        )*
    };
}

pg_types! {
    str => TEXT, TEXT_ARRAY;
    String => TEXT, TEXT_ARRAY;
    crate::event::SourceName => TEXT, TEXT_ARRAY;
    crate::event::EventId => TEXT, TEXT_ARRAY;
    crate::event::EventType => TEXT, TEXT_ARRAY;
    crate::event::Kind => TEXT, TEXT_ARRAY;
    bool => BOOL, BOOL_ARRAY;
    i16 => INT2, INT2_ARRAY;
    i32 => INT4, INT4_ARRAY;
    i64 => INT8, INT8_ARRAY;
    f64 => FLOAT8, FLOAT8_ARRAY;
    [u8] => BYTEA, BYTEA_ARRAY;
    Vec<u8> => BYTEA, BYTEA_ARRAY;
    serde_json::Value => JSONB, JSONB_ARRAY;
    DateTime<Utc> => TIMESTAMPTZ, TIMESTAMPTZ_ARRAY;
}

impl<const N: usize> PgType for [u8; N] {
    const TYPE: Type = Type::BYTEA;
}

impl<T: PgType + ?Sized> PgType for &T {
    const TYPE: Type = T::TYPE;
}

impl<T: PgElement + ?Sized> PgElement for &T {
    const ARRAY: Type = T::ARRAY;
}

impl<T: PgType> PgType for Option<T> {
    const TYPE: Type = T::TYPE;
}

impl<T: PgElement> PgElement for Option<T> {
    const ARRAY: Type = T::ARRAY;
}

impl<T: PgElement> PgType for Vec<T> {
    const TYPE: Type = T::ARRAY;
}

impl<T: PgElement> PgType for [T] {
    const TYPE: Type = T::ARRAY;
}

/// A jsonb value sent as the JSON text the caller already has (jsonb's binary
/// form is a version byte and that text: the server parses it), or as a value
/// to serialise.
#[derive(Debug)]
pub enum Jsonb<'a> {
    Text(&'a [u8]),
    Value(std::borrow::Cow<'a, serde_json::Value>),
}

impl ToSql for Jsonb<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Jsonb::Text(text) => {
                // jsonb's binary format, version 1.
                out.extend_from_slice(&[1]);
                out.extend_from_slice(text);
                Ok(tokio_postgres::types::IsNull::No)
            }
            Jsonb::Value(value) => value.as_ref().to_sql(ty, out),
        }
    }

    tokio_postgres::types::accepts!(JSONB);
    tokio_postgres::types::to_sql_checked!();
}

impl PgType for Jsonb<'_> {
    const TYPE: Type = Type::JSONB;
}

impl PgElement for Jsonb<'_> {
    const ARRAY: Type = Type::JSONB_ARRAY;
}
