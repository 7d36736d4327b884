//! Lock names over a collection (`[]`): every collection shape (fields of a parameter, slices,
//! `Vec`s by value, sets, maps, smart pointers, `&mut`, arrays, the receiver), next to scalar
//! placeholders, with every kind that can be taken together and every option; the futures
//! stay `Send` whenever the body's is, and non-`Send` bodies still compile. No warnings.
#![deny(warnings)]

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;

use lock_runtime::{LockClient, LockError, distributed_lock};

fn require_send<F: Future + Send>(fut: F) -> F {
    fut
}

pub struct Item {
    pub sku: String,
    pub qty: u32,
}

pub struct Cart {
    pub id: u64,
    pub items: Vec<Item>,
}

#[distributed_lock(name = "stock:<cart.items[].sku>", client = locks, wait = "5s")]
async fn checkout(locks: &LockClient, cart: &Cart) -> Result<u32, LockError> {
    Ok(cart.items.iter().map(|item| item.qty).sum())
}

#[distributed_lock(name = "stock:<skus[]>", client = locks, mode = "read")]
async fn slice(locks: &LockClient, skus: &[String]) -> Result<usize, LockError> {
    Ok(skus.len())
}

#[distributed_lock(name = "id:<ids[]>", client = locks, mode = "write", max_names = 3)]
async fn by_value(locks: LockClient, ids: Vec<u64>) -> Result<Vec<u64>, LockError> {
    Ok(ids)
}

#[distributed_lock(name = "set:<skus[]>", client = locks, mode = "fair", max_names = 1000)]
async fn set(locks: &LockClient, skus: &HashSet<String>) -> Result<(), LockError> {
    Ok(())
}

// A map iterates as `(key, value)` pairs: `.0` is the key (`.1` the value).
#[distributed_lock(name = "price:<prices[].0>", client = locks)]
async fn map(locks: &LockClient, prices: BTreeMap<String, u32>) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "arc:<ids[]>", client = locks, lease = "10s", max_hold = "1m")]
async fn arc(locks: &LockClient, ids: Arc<Vec<u32>>) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "mut:<ids[]>", client = locks, on_lost = ignore)]
async fn mutable(locks: &LockClient, ids: &mut Vec<u32>) -> Result<(), LockError> {
    ids.push(1);
    Ok(())
}

#[distributed_lock(name = "array:<pairs[].0.1>", client = locks)]
async fn array(locks: &LockClient, pairs: [((u8, u8), u8); 2]) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(
    name = "cart:<cart.id>:<cart.items[].sku>:<n>",
    crate = "::lock_runtime"
)]
async fn with_scalars(cart: &Cart, n: u8) -> Result<(), LockError> {
    Ok(())
}

pub struct Warehouse {
    pub locks: LockClient,
    pub name: String,
    pub items: Vec<Item>,
}

impl Warehouse {
    #[distributed_lock(name = "stock:<self.name>:<self.items[].sku>", client = self.locks)]
    pub async fn reserve_all(&self) -> Result<usize, LockError> {
        Ok(self.items.len())
    }

    #[distributed_lock(name = "stock:<self.name>:<skus[]>", client = self.locks)]
    pub async fn reserve(&mut self, skus: &[&str]) -> Result<usize, LockError> {
        self.name.push('!');
        Ok(skus.len())
    }
}

// A body that is not `Send` still compiles (its future is not `Send`, as with one name).
#[distributed_lock(name = "rc:<ids[]>", client = locks)]
async fn not_send(locks: &LockClient, ids: &[u8]) -> Result<usize, LockError> {
    let rc = Rc::new(ids.len());
    tokio::task::yield_now().await;
    Ok(*rc)
}

pub(super) fn main() {
    let _ = |locks: LockClient, cart: Cart, warehouse: Warehouse| {
        let _ = require_send(checkout(&locks, &cart));
        let _ = require_send(slice(&locks, &[]));
        let _ = require_send(by_value(locks.clone(), vec![1]));
        let _ = require_send(set(&locks, &HashSet::new()));
        let _ = require_send(map(&locks, BTreeMap::new()));
        let _ = require_send(arc(&locks, Arc::new(vec![1])));
        let _ = require_send(array(&locks, [((1, 2), 3); 2]));
        let _ = require_send(with_scalars(&cart, 1));
        let _ = require_send(warehouse.reserve_all());
        let _ = not_send(&locks, &[1]);
    };
    let _ = mutable;
}
