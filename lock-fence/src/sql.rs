//! What the PostgreSQL and SQLite modules share: token conversion, identifier validation, the
//! description of a token column, and the queries that differ between them only in their SQL.

use std::fmt;

#[cfg(any(feature = "postgres", feature = "sqlite"))]
use sqlx::{Database, Encode, Executor, FromRow, IntoArguments, Type};

use crate::FenceError;

/// The longest identifier accepted: PostgreSQL's limit (`NAMEDATALEN - 1`); longer names would
/// be silently truncated there.
pub const MAX_IDENTIFIER_LEN: usize = 63;

/// The table [`postgres::migrate`](postgres/fn.migrate.html) and
/// [`sqlite::migrate`](sqlite/fn.migrate.html) create: one row per lock name.
pub const FENCE_TABLE: &str = "lock_fences";

/// A fencing token as a SQL `BIGINT` parameter. Tokens from Redis are the server's clock in
/// microseconds, or above 2⁵² behind Sentinel (about 1.8·10¹⁵ and 4.5·10¹⁵ in 2026, see [how
/// large tokens are](crate#how-large-tokens-are)): the column must be a `BIGINT`, never a 32-bit
/// `INTEGER`.
///
/// # Errors
/// [`FenceError::TokenOutOfRange`] above `i64::MAX`.
///
/// ```
/// assert_eq!(lock_fence::sql_token(42).unwrap(), 42_i64);
/// assert_eq!(lock_fence::sql_token(1_795_000_000_000_000).unwrap(), 1_795_000_000_000_000_i64);
/// assert!(lock_fence::sql_token(u64::MAX).is_err());
/// ```
pub fn sql_token(token: u64) -> Result<i64, FenceError> {
    i64::try_from(token).map_err(|_| FenceError::TokenOutOfRange { token })
}

/// A token read back from SQL (a negative one, written by hand, counts as 0).
pub(crate) fn token_from_sql(stored: i64) -> u64 {
    u64::try_from(stored).unwrap_or(0)
}

/// What a fenced `UPDATE` did, as told by [`postgres::check_update`](postgres/fn.check_update.html)
/// or [`sqlite::check_update`](sqlite/fn.check_update.html) (a stale token is
/// [`FenceError::Stale`] instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[must_use = "`NotMatched` means nothing was written"]
pub enum FencedUpdate {
    /// The row was written (its token column now holds this token).
    Applied,
    /// No row has that key, or the row did not match the rest of the `WHERE` clause (such
    /// as `AND qty > 0`); no newer token was found on it. Nothing was written.
    NotMatched,
}

/// A token column on one of your tables: the table, its key column and the `BIGINT` column that
/// holds the token of the last write to each row.
///
/// The names are validated once, here: ASCII letters, digits and `_`, not starting with a
/// digit, at most [`MAX_IDENTIFIER_LEN`] bytes; the table may be qualified by a schema
/// (`inventory.stock`). They are always quoted in the SQL this crate builds, so they are matched
/// exactly as given: PostgreSQL folds unquoted names to lower case, so a table created as
/// `CREATE TABLE Stock` is `stock` here.
///
/// ```
/// use lock_fence::TokenColumn;
///
/// let stock = TokenColumn::new("stock", "sku", "lock_token").unwrap();
/// assert_eq!(stock.to_string(), "stock.lock_token");
/// assert!(TokenColumn::new("stock; DROP TABLE x", "sku", "lock_token").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenColumn {
    table: String,
    key: String,
    column: String,
    /// `"schema"."table"` and `"column"`: ready for SQL.
    quoted_table: String,
    quoted_column: String,
    /// `SELECT "column" FROM "table" WHERE "key" = $1` (PostgreSQL) and `… = ?1` (SQLite),
    /// kept here so that a query can borrow them for as long as its key parameter lives.
    select_dollar: String,
    select_question: String,
}

impl TokenColumn {
    /// Describes `table.column`, keyed by `key_column`.
    ///
    /// # Errors
    /// [`FenceError::InvalidIdentifier`] when a name is empty, too long, or has anything but
    /// ASCII letters, digits and `_` (the table: and one `.` between schema and table).
    pub fn new(table: &str, key_column: &str, column: &str) -> Result<TokenColumn, FenceError> {
        let quoted_table = quote_table(table)?;
        let quoted_key = quote(key_column)?;
        let quoted_column = quote(column)?;
        let select = |placeholder: &str| {
            format!("SELECT {quoted_column} FROM {quoted_table} WHERE {quoted_key} = {placeholder}")
        };
        Ok(TokenColumn {
            select_dollar: select("$1"),
            select_question: select("?1"),
            quoted_table,
            quoted_column,
            table: table.to_string(),
            key: key_column.to_string(),
            column: column.to_string(),
        })
    }

    /// The table, as given.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The key column, as given.
    pub fn key_column(&self) -> &str {
        &self.key
    }

    /// The token column, as given.
    pub fn column(&self) -> &str {
        &self.column
    }

    pub(crate) fn quoted_table(&self) -> &str {
        &self.quoted_table
    }

    pub(crate) fn quoted_column(&self) -> &str {
        &self.quoted_column
    }

    /// `SELECT "column" FROM "table" WHERE "key" = $1` (`?1` unless `dollar`).
    pub(crate) fn select_token_sql(&self, dollar: bool) -> &str {
        if dollar {
            &self.select_dollar
        } else {
            &self.select_question
        }
    }

    /// The schema (if the table was qualified with one) and the table's own name.
    #[cfg(feature = "sqlite")]
    pub(crate) fn schema_and_table(&self) -> (Option<&str>, &str) {
        match self.table.split_once('.') {
            Some((schema, table)) => (Some(schema), table),
            None => (None, &self.table),
        }
    }

    /// The error for a refused write to the row with `key`.
    pub(crate) fn stale(&self, key: &dyn fmt::Display, token: u64, newest: u64) -> FenceError {
        FenceError::Stale {
            name: format!("{}[{key}]", self.table),
            token,
            newest,
        }
    }
}

impl fmt::Display for TokenColumn {
    /// `table.column`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.table, self.column)
    }
}

/// `begin` of either store: runs `begin` (a pool's `begin`) in a Tokio task of its own and
/// waits for it, so that dropping the caller's future cannot cut the start of a transaction in
/// half (see `sqlite::begin` for why). If the caller's future is dropped, the
/// task still completes, and the transaction it began is dropped with the task's output, which
/// rolls it back like any dropped `Transaction`.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) async fn begin_uncut<Tx: Send + 'static>(
    begin: impl Future<Output = Result<Tx, sqlx::Error>> + Send + 'static,
) -> Result<Tx, FenceError> {
    match tokio::spawn(begin).await {
        Ok(begun) => Ok(begun?),
        // The begin panicked: the caller's own code would have panicked in the same place.
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Only a runtime shutting down cancels the task.
        Err(e) => Err(FenceError::Database(sqlx::Error::Io(
            std::io::Error::other(format!("the task beginning the transaction ended: {e}")),
        ))),
    }
}

/// `advance` of either store: `upsert` records `token` for `name` unless a newer one is
/// recorded (returning a row when it did); when it did not, `select_newest` reads the newest
/// token for the error. The caller's transaction must make that read the committed newest.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) async fn advance<DB>(
    conn: &mut DB::Connection,
    upsert: &str,
    select_newest: &str,
    name: &str,
    token: u64,
) -> Result<(), FenceError>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    (i64,): for<'r> FromRow<'r, DB::Row>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
{
    let param = sql_token(token)?;
    let accepted: Option<i64> = sqlx::query_scalar(upsert)
        .bind(name)
        .bind(param)
        .fetch_optional(&mut *conn)
        .await?;
    if accepted.is_some() {
        return Ok(());
    }
    Err(FenceError::Stale {
        name: name.to_string(),
        token,
        newest: select_token(conn, select_newest, name).await?.unwrap_or(0),
    })
}

/// `check_update` of either store; `dollar`: the store numbers parameters `$1` (PostgreSQL),
/// not `?1` (SQLite).
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) async fn check_update<'k, DB, K>(
    conn: &mut DB::Connection,
    column: &'k TokenColumn,
    dollar: bool,
    key: K,
    token: u64,
    rows_affected: u64,
) -> Result<FencedUpdate, FenceError>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    (i64,): for<'r> FromRow<'r, DB::Row>,
    K: Encode<'k, DB> + Type<DB> + fmt::Display + Send + 'k,
{
    sql_token(token)?;
    if rows_affected > 0 {
        return Ok(FencedUpdate::Applied);
    }
    let name = key.to_string();
    match select_token(conn, column.select_token_sql(dollar), key).await? {
        Some(newest) if newest > token => Err(column.stale(&name, token, newest)),
        _ => Ok(FencedUpdate::NotMatched),
    }
}

/// Runs `select`, which selects one token by one key (`$1`/`?1`): the token, if a row has
/// that key.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) async fn select_token<'k, DB, K>(
    conn: &mut DB::Connection,
    select: &'k str,
    key: K,
) -> Result<Option<u64>, FenceError>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    (i64,): for<'r> FromRow<'r, DB::Row>,
    K: Encode<'k, DB> + Type<DB> + Send + 'k,
{
    let stored: Option<i64> = sqlx::query_scalar(select)
        .bind(key)
        .fetch_optional(&mut *conn)
        .await?;
    Ok(stored.map(token_from_sql))
}

/// A table name, optionally schema-qualified, validated and double-quoted.
fn quote_table(table: &str) -> Result<String, FenceError> {
    match table.split_once('.') {
        Some((schema, name)) if !name.contains('.') => {
            // Report the whole name, not the part.
            let whole = |e: FenceError| match e {
                FenceError::InvalidIdentifier { reason, .. } => FenceError::InvalidIdentifier {
                    identifier: table.to_string(),
                    reason,
                },
                other => other,
            };
            Ok(format!(
                "{}.{}",
                quote(schema).map_err(whole)?,
                quote(name).map_err(whole)?
            ))
        }
        Some(_) => Err(invalid(table, "at most one `.` (schema.table) is allowed")),
        None => quote(table),
    }
}

/// One identifier, validated and double-quoted (`stock` → `"stock"`).
pub(crate) fn quote(identifier: &str) -> Result<String, FenceError> {
    let mut bytes = identifier.bytes();
    match bytes.next() {
        None => return Err(invalid(identifier, "it is empty")),
        Some(b) if b.is_ascii_digit() => {
            return Err(invalid(identifier, "it must not start with a digit"));
        }
        Some(_) => {}
    }
    if identifier.len() > MAX_IDENTIFIER_LEN {
        return Err(invalid(identifier, "it is longer than 63 bytes"));
    }
    if !identifier
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        return Err(invalid(
            identifier,
            "only ASCII letters, digits and `_` are allowed",
        ));
    }
    // Nothing to escape: a validated identifier has no quote in it.
    Ok(format!("\"{identifier}\""))
}

fn invalid(identifier: &str, reason: &'static str) -> FenceError {
    FenceError::InvalidIdentifier {
        identifier: identifier.to_string(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(e: Result<impl fmt::Debug, FenceError>) -> &'static str {
        match e {
            Err(FenceError::InvalidIdentifier { reason, .. }) => reason,
            other => panic!("expected InvalidIdentifier, got {other:?}"),
        }
    }

    #[test]
    fn plain_and_qualified_names_are_quoted() {
        assert_eq!(quote("lock_token").unwrap(), "\"lock_token\"");
        assert_eq!(quote("_Stock2").unwrap(), "\"_Stock2\"");
        assert_eq!(
            quote_table("inventory.stock").unwrap(),
            "\"inventory\".\"stock\""
        );
        assert_eq!(quote(&"a".repeat(63)).unwrap().len(), 65);
    }

    #[test]
    fn hostile_or_malformed_names_are_rejected() {
        assert_eq!(reason(quote("")), "it is empty");
        assert_eq!(reason(quote("1st")), "it must not start with a digit");
        assert_eq!(reason(quote(&"a".repeat(64))), "it is longer than 63 bytes");
        for hostile in [
            "stock; DROP TABLE x",
            "stock\"",
            "\"stock\"",
            "st'ock",
            "stock--",
            "stöck",
            "stock ",
            "a.b",
        ] {
            assert_eq!(
                reason(quote(hostile)),
                "only ASCII letters, digits and `_` are allowed",
                "{hostile:?}"
            );
        }
        assert_eq!(
            reason(quote_table("a.b.c")),
            "at most one `.` (schema.table) is allowed"
        );
        assert_eq!(reason(quote_table(".stock")), "it is empty");
        match quote_table("inventory.st\"ock") {
            Err(FenceError::InvalidIdentifier { identifier, .. }) => {
                assert_eq!(identifier, "inventory.st\"ock")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn tokens_beyond_bigint_are_out_of_range() {
        assert_eq!(sql_token(i64::MAX as u64).unwrap(), i64::MAX);
        assert!(matches!(
            sql_token(i64::MAX as u64 + 1),
            Err(FenceError::TokenOutOfRange { token }) if token == i64::MAX as u64 + 1
        ));
        assert_eq!(token_from_sql(-5), 0);
        assert_eq!(token_from_sql(7), 7);
    }
}
