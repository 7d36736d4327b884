//! Generics, lifetimes and where-clauses survive, and placeholders may have generic types.

use std::fmt::Display;

use lock_runtime::{LockClient, LockError, distributed_lock};

#[derive(Debug)]
struct AppError;

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        AppError
    }
}

#[distributed_lock(name = "item:<id>")]
async fn generic<T: Display + Send + Sync, const N: usize>(
    id: T,
    buf: [u8; N],
) -> Result<usize, AppError> {
    Ok(buf.len())
}

#[distributed_lock(name = "name:<name>", client = locks)]
async fn lifetimes<'a, 'b: 'a>(locks: &'a LockClient, name: &'b str) -> Result<&'b str, AppError>
where
    'b: 'a,
{
    Ok(name)
}

#[distributed_lock(name = "w:<id>")]
async fn where_clause<T, E>(id: T) -> Result<T, E>
where
    T: Display + Clone + Send + Sync,
    E: From<LockError>,
{
    Ok(id.clone())
}

pub(super) fn main() {
    let _ = generic::<u64, 4>(1, [0; 4]);
    let _ = where_clause::<String, AppError>("x".into());
}

#[allow(dead_code)]
async fn call(locks: &LockClient) -> Result<(), AppError> {
    let name: &'static str = lifetimes(locks, "n").await?;
    assert_eq!(name, "n");
    Ok(())
}
