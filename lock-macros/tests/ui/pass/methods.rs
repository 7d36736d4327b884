//! Methods: `&self`, `&mut self`, `self: Arc<Self>`, `self` by value, `Self` in the body,
//! `self` fields in the name and `client = self.locks`; also in a trait impl.

use std::sync::Arc;

use lock_runtime::{LockClient, LockError, distributed_lock};

struct Inventory {
    locks: LockClient,
    warehouse: String,
    count: u32,
}

impl Inventory {
    #[distributed_lock(name = "stock:<self.warehouse>:<sku>", client = self.locks)]
    async fn by_ref(&self, sku: &str) -> Result<u32, LockError> {
        Ok(self.count + sku.len() as u32)
    }

    #[distributed_lock(name = "stock:<self.warehouse>", client = self.locks)]
    async fn by_mut(&mut self, n: u32) -> Result<u32, LockError> {
        self.count += n;
        Ok(self.count)
    }

    #[distributed_lock(name = "stock:<self.warehouse>", client = self.locks)]
    async fn by_arc(self: Arc<Self>) -> Result<Arc<Self>, LockError> {
        Ok(self)
    }

    #[distributed_lock(name = "stock:<self.warehouse>", client = self.locks)]
    async fn by_value(self) -> Result<Self, LockError> {
        Ok(Self { ..self })
    }

    #[distributed_lock(name = "stock:<self.warehouse>")]
    async fn default_client(&self) -> Result<(), LockError> {
        Ok(())
    }
}

trait Reserve {
    async fn reserve(&self, id: u64) -> Result<u64, LockError>;
}

impl Reserve for Inventory {
    #[distributed_lock(name = "reserve:<id>", client = self.locks)]
    async fn reserve(&self, id: u64) -> Result<u64, LockError> {
        Ok(id)
    }
}

#[allow(dead_code)]
async fn call(mut inv: Inventory) -> Result<(), LockError> {
    inv.by_ref("sku").await?;
    inv.by_mut(1).await?;
    inv.default_client().await?;
    inv.reserve(1).await?;
    let inv = Arc::new(inv).by_arc().await?;
    let inv = Arc::into_inner(inv).unwrap();
    let _: Inventory = inv.by_value().await?;
    Ok(())
}

pub(super) fn main() {}
