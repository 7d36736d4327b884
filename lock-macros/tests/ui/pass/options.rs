//! Every option and duration form; the client as `LockClient`, `&LockClient`, `Arc<LockClient>`
//! or a method call; `crate = "…"` through a re-export; a `Result` alias as the return type.

use std::sync::Arc;

use lock_runtime::{LockClient, LockError, distributed_lock};

mod platform {
    pub use lock_runtime as locking;
}

type AppResult<T> = Result<T, LockError>;

struct State {
    locks: LockClient,
    shared: Arc<LockClient>,
}

impl State {
    fn client(&self) -> &LockClient {
        &self.locks
    }
}

#[distributed_lock(name = "a:<id>", wait = "250ms", lease = "5s", client = locks, on_lost = abort)]
async fn all_options(locks: &LockClient, id: u32) -> AppResult<u32> {
    Ok(id)
}

#[distributed_lock(name = "b", wait = "0s", lease = "1h2m3s4ms", client = state.shared)]
async fn arc_client(state: &State) -> AppResult<()> {
    Ok(())
}

#[distributed_lock(name = "c", wait = "1m30s", client = state.client())]
async fn method_client(state: &State) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "d", client = state.locks, on_lost = ignore)]
async fn field_client(state: State) -> Result<State, LockError> {
    Ok(state)
}

#[distributed_lock(name = "e", crate = "platform::locking")]
async fn reexported() -> Result<(), LockError> {
    Ok(())
}

#[rustfmt::skip] // the trailing comma is the case
#[distributed_lock(
    name = "literal <<braces>> {and} \"quotes\"",
    crate = "::lock_runtime",
)]
async fn trailing_comma_and_escapes() -> std::result::Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "f:<id>")]
async fn question_mark(id: &str) -> Result<u32, LockError> {
    let n: u32 = id
        .parse()
        .map_err(|_| LockError::InvalidConfig("not a number".into()))?;
    if n == 0 {
        return Err(LockError::InvalidConfig("zero".into()));
    }
    Ok(n)
}

#[allow(dead_code)]
async fn call(locks: &LockClient, state: State) -> AppResult<()> {
    all_options(locks, 1).await?;
    arc_client(&state).await?;
    method_client(&state).await?;
    field_client(state).await?;
    reexported().await?;
    trailing_comma_and_escapes().await?;
    question_mark("1").await?;
    Ok(())
}

pub(super) fn main() {}
