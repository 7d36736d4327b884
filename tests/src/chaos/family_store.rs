//! The lock family's fenced store (the failover suite's `family` workload): a semaphore of
//! [`crate::family::PERMITS`] permits guards a resource that admits that many occupants at
//! once, in token order, and a read/write lock guards a counter.
//!
//! The semaphore's resource keeps its occupants' tokens (a sorted set): a holder *enters* with
//! its permit's token, which evicts the lowest tokens beyond the capacity (a permit that was
//! lost and granted again carries a larger token, so the older holder is the one fenced off),
//! *uses* the resource only while its token is still inside, and *exits*. Every step is logged
//! (`+t` entered, `x t` evicted, `u t` used, `-t` exited), and
//! [`check_semaphore_log`] replays the
//! log: never more occupants than the capacity, no use by a token that was not inside.
//!
//! The read/write lock's counter: a reader is refused if a writer with a larger token was seen, a
//! writer if any larger token was seen (readers' included, so a writer that lost its lock cannot
//! write after a newer reader read); writers do the chaos store's read-modify-write and log their
//! tokens (checked like [`check`](super::check)'s store: strictly increasing, no lost update).

use std::sync::LazyLock;

/// Keys of the semaphore's resource `name`: occupants, log, uses.
pub fn semaphore_keys(name: &str) -> [String; 3] {
    [
        format!("fstore:{{{name}}}:occupants"),
        format!("fstore:{{{name}}}:log"),
        format!("fstore:{{{name}}}:uses"),
    ]
}

/// Keys of the read/write lock's counter `name`: the largest token seen, the largest writer
/// token seen, the counter, the writers' commit log.
pub fn rw_keys(name: &str) -> [String; 4] {
    [
        format!("fstore:{{{name}}}:seen"),
        format!("fstore:{{{name}}}:writer"),
        format!("fstore:{{{name}}}:value"),
        format!("fstore:{{{name}}}:log"),
    ]
}

/// KEYS: occupants, log. ARGV: token, capacity. Returns 1 if the token is inside.
pub static ENTER: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
        redis.call('ZADD', KEYS[1], ARGV[1], ARGV[1])
        local n = redis.call('ZCARD', KEYS[1])
        local cap = tonumber(ARGV[2])
        if n > cap then
          for _, t in ipairs(redis.call('ZRANGE', KEYS[1], 0, n - cap - 1)) do
            redis.call('RPUSH', KEYS[2], 'x' .. t)
          end
          redis.call('ZREMRANGEBYRANK', KEYS[1], 0, n - cap - 1)
        end
        if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
          redis.call('RPUSH', KEYS[2], '+' .. ARGV[1])
          return 1
        end
        return 0
        ",
    )
});

/// KEYS: occupants, log, uses. ARGV: token. Returns 1 if used (the token was inside).
pub static USE: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
        if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
        redis.call('RPUSH', KEYS[2], 'u' .. ARGV[1])
        redis.call('INCR', KEYS[3])
        return 1
        ",
    )
});

/// KEYS: occupants, log. ARGV: token.
pub static EXIT: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
        if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
          redis.call('RPUSH', KEYS[2], '-' .. ARGV[1])
        end
        return 1
        ",
    )
});

/// KEYS: seen, writer, value. ARGV: token, '1' for a writer. Returns `{1, value}` or
/// `{0, 0}`.
pub static RW_READ: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
        local t = tonumber(ARGV[1])
        local seen = tonumber(redis.call('GET', KEYS[1]) or '0')
        local writer = tonumber(redis.call('GET', KEYS[2]) or '0')
        if ARGV[2] == '1' then
          if t < seen then return {0, 0} end
        elseif t < writer then
          return {0, 0}
        end
        if t > seen then redis.call('SET', KEYS[1], ARGV[1]) end
        return {1, tonumber(redis.call('GET', KEYS[3]) or '0')}
        ",
    )
});

/// KEYS: seen, writer, value, log. ARGV: token, new value. Returns 1 or 0.
pub static RW_WRITE: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
        if tonumber(ARGV[1]) < tonumber(redis.call('GET', KEYS[1]) or '0') then return 0 end
        redis.call('SET', KEYS[1], ARGV[1])
        redis.call('SET', KEYS[2], ARGV[1])
        redis.call('SET', KEYS[3], ARGV[2])
        redis.call('RPUSH', KEYS[4], ARGV[1])
        return 1
        ",
    )
});

/// What replaying a semaphore resource's log found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SemaphoreLog {
    /// Entries.
    pub entered: usize,
    /// Occupants evicted by larger tokens beyond the capacity (fenced off).
    pub evicted: usize,
    /// Uses.
    pub used: usize,
    /// The most occupants at once.
    pub most: usize,
    /// Broken promises: more occupants than the capacity, a use from outside.
    pub violations: Vec<String>,
}

/// Replays a semaphore resource's log (see the module docs).
pub fn check_semaphore_log(log: &[String], capacity: usize) -> SemaphoreLog {
    let mut found = SemaphoreLog::default();
    let mut inside: std::collections::BTreeSet<&str> = Default::default();
    for (i, entry) in log.iter().enumerate() {
        let (op, token) = entry.split_at(1);
        match op {
            "+" => {
                found.entered += 1;
                inside.insert(token);
            }
            "x" => {
                found.evicted += 1;
                inside.remove(token);
            }
            "-" => {
                inside.remove(token);
            }
            "u" => {
                found.used += 1;
                if !inside.contains(token) {
                    found
                        .violations
                        .push(format!("entry {i}: token {token} used from outside"));
                }
            }
            _ => found.violations.push(format!("entry {i}: unknown {entry}")),
        }
        found.most = found.most.max(inside.len());
        if op == "+" && inside.len() > capacity {
            found.violations.push(format!(
                "entry {i}: {} occupants of {capacity}",
                inside.len()
            ));
        }
    }
    found
}
