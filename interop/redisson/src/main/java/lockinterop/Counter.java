package lockinterop;

import java.util.concurrent.ThreadLocalRandom;

import org.redisson.api.RBucket;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;

/**
 * The {@code …contend} commands' loop: a counter incremented by a deliberately non-atomic GET
 * and SET, each round under a guard (a lock, the write side of a read/write lock, a permit).
 */
final class Counter {
    /** Takes the guard, waiting as long as it must; returns what gives it back. */
    interface Guard {
        Runnable acquire() throws InterruptedException;
    }

    private Counter() {
    }

    /** {@code rounds} times: take {@code guard}; GET {@code key}; SET it to value+1; give the guard back. */
    static String contend(RedissonClient redisson, String key, long rounds, Guard guard) throws InterruptedException {
        RBucket<String> counter = redisson.getBucket(key, StringCodec.INSTANCE);
        for (long i = 0; i < rounds; i++) {
            Runnable release = guard.acquire();
            try {
                String value = counter.get();
                long next = (value == null ? 0 : Long.parseLong(value)) + 1;
                // A deliberately non-atomic increment: only the guard keeps it right.
                if (ThreadLocalRandom.current().nextBoolean()) {
                    Thread.sleep(1);
                }
                counter.set(Long.toString(next));
            } finally {
                release.run();
            }
        }
        return "ok " + rounds;
    }

    /** {@link #contend(RedissonClient, String, long, Guard)} under {@code lock.lock()}. */
    static String contend(RedissonClient redisson, String key, long rounds, RLock lock) throws InterruptedException {
        return contend(redisson, key, rounds, () -> {
            lock.lock();
            return lock::unlock;
        });
    }
}
