//! The shared behaviour tests (`behaviour/mod.rs`) against a real `redis-server`, in real time.

#[macro_use]
mod behaviour;

use std::time::Duration;

use lock_runtime::LockClient;
use lock_tests::RedisServer;

/// One `redis-server` per test, on a free loopback port.
struct Redis(RedisServer);

impl behaviour::Fixture for Redis {
    async fn client_with_watchdog(&self, watchdog: Duration) -> LockClient {
        // A script call first, by a client of its own, so that the library of functions is
        // loaded before a test counts round trips (an uncontended acquire is a plain `SET`,
        // which loads nothing).
        let warm = lock_tests::client(&self.0).await;
        let held = warm
            .lock("fixture:warm-up")
            .fenced()
            .acquire()
            .await
            .unwrap();
        held.release().await.unwrap();
        lock_tests::client_with(&self.0, |b| b.watchdog_timeout(watchdog)).await
    }

    fn take_away(&self, name: &str) {
        self.0.cmd(&["DEL", &format!("lock:{{{name}}}")]);
    }

    fn leftovers(&self, name: &str) -> Vec<String> {
        let mut keys = self.0.keys(&format!("lock:{{{name}}}*"));
        keys.retain(|k| !k.ends_with(":fence"));
        keys
    }

    fn lock_round_trips(&self) -> Option<u64> {
        Some(self.0.script_calls())
    }
}

behaviour_tests!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    Redis(RedisServer::start())
);
