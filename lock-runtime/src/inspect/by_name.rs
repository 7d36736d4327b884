//! A lock read and force-unlocked by its name alone, as whatever member of the family the
//! name holds: [`LockClient::info`] and [`LockClient::force_unlock`], what an operator's tool
//! (`lockctl`) needs when it knows a name but not which handle the applications use.
//!
//! In this crate's layout one handle reads and deletes every kind. In Redisson's, each kind
//! is its own data and wakes its waiters its own way: a semaphore is a string (its available
//! count), read through a semaphore handle and force-released back to the count; a read/write
//! lock publishes on its own channel; a fair lock with waiters wakes the first of them on that
//! waiter's channel.

use crate::backend::Reply;
use crate::{LockClient, LockError, LockInfo, LockKind};

/// What [`LockClient::force_unlock_held_by`] did: the lock was freed only if its holders were
/// still the ones the caller had seen.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForceUnlock {
    /// Freed: exactly the given holders held it, and its waiters were woken.
    Freed,
    /// Nobody held it (it was released, or its lease ended): nothing to do.
    NotHeld,
    /// Others hold it than the given holders (it changed hands, or holders came or went):
    /// nothing changed.
    HolderChanged,
}

/// Which handle read a name.
enum Found {
    /// A [`Lock`](crate::Lock) (this handle reads every kind but a Redisson semaphore).
    Lock,
    /// A semaphore handle: a string at the name in Redisson's layout.
    RedissonSemaphore,
}

impl LockClient {
    /// Who holds the lock named `name`, whatever member of the family it is (a mutex, a fair
    /// lock, a read/write lock or a semaphore); `None` when nobody holds it. As
    /// [`Lock::info`](crate::Lock::info) of [`lock(name)`](LockClient::lock), and with
    /// [`Layout::Redisson`](crate::Layout::Redisson) a string at the name is no foreign data but Redisson's semaphore (its
    /// available count), read as one: its leased permits' holders.
    ///
    /// ```no_run
    /// # async fn demo(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// if let Some(info) = locks.info("supplier").await? {
    ///     println!("{} is a {} held by {} holder(s)", info.name, info.kind, info.holder_count);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn info(&self, name: impl AsRef<str>) -> Result<Option<LockInfo>, LockError> {
        Ok(self.read(name.as_ref()).await?.map(|(info, _)| info))
    }

    /// Frees the lock named `name` whoever holds it, the way its kind needs, so that its waiters
    /// (other languages' included) are woken at once rather than when their timers run out.
    /// Returns the lock as it was read just before (its kind, holders, fencing token), or `None`
    /// when nobody held it (or it was released before it could be freed).
    ///
    /// It reads the name first ([`LockClient::info`]) and then frees what it found: in this
    /// crate's layout with [`Lock::force_unlock`](crate::Lock::force_unlock), whatever the kind;
    /// with [`Layout::Redisson`](crate::Layout::Redisson), a semaphore with
    /// [`Semaphore::force_release_all`](crate::Semaphore::force_release_all) (its leased permits
    /// back to the count), a read/write lock through its write side, a fair lock that has waiters
    /// as a [fair lock](LockClient::fair_lock), anything else as a mutex. A lock taken again
    /// between the two steps is freed too. Each holder's guard reports the loss at its next
    /// renewal; [`LockError::ForeignData`] when the key holds data of another type.
    ///
    /// ```no_run
    /// # async fn demo(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// match locks.force_unlock("stock:42").await? {
    ///     Some(was) => println!("freed the {} held by {:?}", was.kind, was.holders),
    ///     None => println!("stock:42 was not locked"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self, name: impl AsRef<str>) -> Result<Option<LockInfo>, LockError> {
        let name = name.as_ref();
        let Some((info, found)) = self.read(name).await? else {
            return Ok(None);
        };
        let freed = match found {
            Found::RedissonSemaphore => self.semaphore(name, 1).force_release_all().await?,
            Found::Lock if self.inner.config.layout.shares_one_hash_across_the_family() => {
                self.redisson_force_unlock(name, &info).await?
            }
            Found::Lock => self.lock(name).force_unlock().await?,
        };
        Ok(freed.then_some(info))
    }

    /// Frees the lock named `name` only if its holders are exactly `holders` (owner ids, as
    /// [`LockInfo::holders`] lists them), checked and deleted in one step on Redis: the
    /// compare-and-delete an operator's tool needs between showing a lock and freeing it, so a
    /// successor that took the lock meanwhile *through Redis* is never freed in its place
    /// ([`ForceUnlock::HolderChanged`]). An owner id names a hold in Redis, which passes among
    /// the tasks of one client in memory with its owner id (see the crate docs, "owner id"): a
    /// task of the same client that took the hold over in memory is freed with it, and told at
    /// its next renewal. Waiters are woken as by
    /// [`Lock::force_unlock`](crate::Lock::force_unlock), and the holders' guards report the
    /// loss at their next renewal.
    ///
    /// This crate's layout only: with [`Layout::Redisson`](crate::Layout::Redisson) it is [`LockError::Unsupported`]
    /// (nothing sent); [`LockError::ForeignData`] when the key holds data of another type.
    ///
    /// ```no_run
    /// # async fn demo(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::ForceUnlock;
    ///
    /// if let Some(info) = locks.info("stock:42").await? {
    ///     let shown: Vec<String> = info.holders.iter().map(|h| h.owner.clone()).collect();
    ///     // … an operator confirms …
    ///     match locks.force_unlock_held_by("stock:42", &shown).await? {
    ///         ForceUnlock::Freed => println!("freed"),
    ///         ForceUnlock::NotHeld => println!("released meanwhile"),
    ///         ForceUnlock::HolderChanged => println!("changed hands meanwhile; left alone"),
    ///         _ => {}
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock_held_by(
        &self,
        name: impl AsRef<str>,
        holders: &[String],
    ) -> Result<ForceUnlock, LockError> {
        let name = name.as_ref();
        let lock = self.lock(name);
        let names = lock.names()?;
        if !names.scheme.force_unlock_compares_holders() {
            return Err(LockError::Unsupported {
                name: name.to_owned(),
                reason: "freeing a lock only while given holders hold it is for this crate's \
                         layout; in Redisson's use force_unlock",
            });
        }
        let reply = self
            .inner
            .backend
            .force_unlock(names, Some(holders))
            .await
            .map_err(|e| LockError::backend("force_unlock", e))?;
        tracing::info!(lock = %name, ?reply, "force unlock of given holders");
        match reply {
            Reply::Done(_) => Ok(ForceUnlock::Freed),
            Reply::NotDone(0) => Ok(ForceUnlock::NotHeld),
            Reply::NotDone(_) => Ok(ForceUnlock::HolderChanged),
            Reply::Foreign(found) => Err(LockError::ForeignData {
                key: names.key.clone(),
                found,
            }),
            other => Err(LockError::Backend {
                op: "force_unlock",
                source: redis::RedisError::from((
                    redis::ErrorKind::Parse,
                    "unexpected force-unlock reply",
                    format!("{other:?}"),
                )),
            }),
        }
    }

    /// The lock named `name` as whatever it is, and which handle read it.
    async fn read(&self, name: &str) -> Result<Option<(LockInfo, Found)>, LockError> {
        match self.lock(name).info().await {
            Err(LockError::ForeignData { found, .. })
                if self.inner.config.layout.counts_permits_at_the_name() && found == "string" =>
            {
                let info = self.semaphore(name, 1).info().await?;
                Ok(info.map(|info| (info, Found::RedissonSemaphore)))
            }
            other => Ok(other?.map(|info| (info, Found::Lock))),
        }
    }

    /// In Redisson's layout a hash at the name is a mutex, a fair lock or a read/write lock, and
    /// each wakes its waiters its own way (the unlock channel; the first queued waiter's own
    /// channel; the read/write channel, waking all): force-unlock it as what it is.
    async fn redisson_force_unlock(&self, name: &str, info: &LockInfo) -> Result<bool, LockError> {
        if info.kind == LockKind::ReadWrite {
            return self.rw_lock(name).write().force_unlock().await;
        }
        let fair = self.fair_lock(name);
        let queued = fair.info().await?.map_or(0, |i| i.waiters.queued);
        if queued > 0 {
            fair.force_unlock().await
        } else {
            self.lock(name).force_unlock().await
        }
    }
}
