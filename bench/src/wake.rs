//! Wake-up: the delay from `release` returning to the waiting task holding the lock.

use std::time::{Duration, Instant};

use crate::impls::{Kind, Locker};
use crate::stats::{self, quantile};

/// Wake-up: delay from `release` returning to the (already waiting) waiter holding the lock.
#[derive(Debug, Clone, Default)]
pub(crate) struct Wake {
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) cycles: usize,
}

pub(crate) async fn wake(kind: Kind, url: &str, cycles: usize) -> Wake {
    let holder = Locker::connect(kind, url).await;
    let waiter = Locker::connect(kind, url).await;
    let key = "wake";
    let mut delays = Vec::new();
    for _ in 0..cycles {
        let held = holder.acquire(key).await;
        let acquired = Instant::now();
        let w = waiter.clone();
        let task = tokio::spawn(async move {
            let g = w.acquire(key).await;
            let got = Instant::now();
            w.release(g).await;
            got
        });
        tokio::time::sleep(Duration::from_millis(50).saturating_sub(acquired.elapsed())).await;
        holder.release(held).await;
        let released = Instant::now();
        let got = task.await.unwrap();
        delays.push(got.saturating_duration_since(released));
    }
    Wake {
        p50_us: stats::us(quantile(&mut delays, 0.5)),
        p99_us: stats::us(quantile(&mut delays, 0.99)),
        cycles,
    }
}
