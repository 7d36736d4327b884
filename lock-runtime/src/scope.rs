//! The reentrancy scope: which locks the *enclosing* code of the current task holds.
//!
//! Ownership follows structure, not threads (Redisson's thread-id ownership breaks async code):
//! a future run with [`LockGuard::scope`](crate::LockGuard::scope) sees the guard's lock as held,
//! so taking the same lock inside it re-enters at once, with no round trip and no deadlock.
//! Everything else is a new owner: a spawned task (task-locals are not inherited), and two
//! `join!`ed branches that each take the lock (neither runs inside the other's scope).

use std::future::Future;
use std::sync::Arc;

use crate::hold::Held;

tokio::task_local! {
    static SCOPE: Frame;
}

/// The innermost held lock of a scope, linked to the enclosing ones.
#[derive(Clone, Default)]
struct Frame(Option<Arc<Node>>);

struct Node {
    held: Arc<Held>,
    parent: Frame,
}

/// The hold on `key` of client `client_id` that an enclosing scope has, if any.
pub(crate) fn find(client_id: &str, key: &str) -> Option<Arc<Held>> {
    SCOPE
        .try_with(|frame| {
            let mut node = frame.0.as_ref();
            while let Some(n) = node {
                if n.held.names.key == key && &*n.held.client.inner.id == client_id {
                    return Some(n.held.clone());
                }
                node = n.parent.0.as_ref();
            }
            None
        })
        .ok()
        .flatten()
}

/// Every hold of the running task's scope, innermost first (none outside any scope).
pub(crate) fn holds() -> Vec<Arc<Held>> {
    SCOPE
        .try_with(|frame| {
            let mut holds = Vec::new();
            let mut node = frame.0.as_ref();
            while let Some(n) = node {
                holds.push(n.held.clone());
                node = n.parent.0.as_ref();
            }
            holds
        })
        .unwrap_or_default()
}

/// The current scope (of the running task) with `helds` added.
fn current_with(helds: impl IntoIterator<Item = Arc<Held>>) -> Frame {
    let mut frame = SCOPE.try_with(Frame::clone).unwrap_or_default();
    for held in helds {
        frame = Frame(Some(Arc::new(Node {
            held,
            parent: frame,
        })));
    }
    frame
}

/// Runs `fut` with `held` added to the scope that is current when it *runs* (not when this is
/// called), so a scoped future built outside and awaited inside another scope sees both.
pub(crate) async fn enter<F: Future>(held: Arc<Held>, fut: F) -> F::Output {
    enter_all([held], fut).await
}

/// Runs `fut` with every hold of `helds` added to the scope that is current when it runs, in
/// one task-local scope (no nesting, so the body need not be `Send` and the stack does not grow
/// with the number of holds): what a [`MultiLockGuard`](crate::MultiLockGuard) holds.
pub(crate) async fn enter_all<F: Future>(
    helds: impl IntoIterator<Item = Arc<Held>>,
    fut: F,
) -> F::Output {
    SCOPE.scope(current_with(helds), fut).await
}

/// Runs `f` with `held` added to the current scope, synchronously: for poll-based code (a
/// `Body` or `Stream` implementation) that polls its inner future or stream inside the scope.
pub(crate) fn enter_sync<R>(held: Arc<Held>, f: impl FnOnce() -> R) -> R {
    enter_sync_all([held], f)
}

/// [`enter_sync`] for several holds, in one scope.
pub(crate) fn enter_sync_all<R>(
    helds: impl IntoIterator<Item = Arc<Held>>,
    f: impl FnOnce() -> R,
) -> R {
    SCOPE.sync_scope(current_with(helds), f)
}
