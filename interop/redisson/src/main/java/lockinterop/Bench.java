package lockinterop;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.redisson.Redisson;
import org.redisson.api.RFencedLock;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * Redisson's RLock, or its RFencedLock, in the benchmark's scenarios (run by lock-bench, which
 * reads stdout):
 *
 * <pre>
 * Bench URL uncontended WORKERS RUN_MS       prints "start" after a warm-up, then
 *                                            "result PAIRS ELAPSED_NS P50_NS P99_NS"
 * Bench URL hot TASKS FIRST                 prints "ready" after a warm-up, reads "go BEGIN_NS UNTIL_NS",
 *                                            then one line "AT_NS WORKER WAIT_NS" per acquisition
 * Bench URL wake CYCLES                      one line "WAKE_NS" per cycle
 * </pre>
 *
 * Leases are 10 s, as for every lock in the benchmark; times are System.nanoTime()
 * (CLOCK_MONOTONIC on Linux, shared with the Rust processes).
 *
 * <p>The lock is RLock ({@code lock(lease)}) unless the JVM runs with
 * {@code -Dlockinterop.bench.lock=fenced}: then RFencedLock, every grant through
 * {@code lockAndGetToken(lease)}, which issues and returns a fencing token each time. The
 * scenarios, names and output are the same either way.
 */
public final class Bench {
    private static final long LEASE_MS = 10_000;
    /** Whether every lock is an RFencedLock taken with its token (system property, see above). */
    private static final boolean FENCED = fenced(System.getProperty("lockinterop.bench.lock", "lock"));

    /** {@code lock} (RLock) or {@code fenced} (RFencedLock); anything else is refused. */
    private static boolean fenced(String lock) {
        return switch (lock) {
            case "lock" -> false;
            case "fenced" -> true;
            default -> throw new IllegalArgumentException("lockinterop.bench.lock: lock or fenced, not " + lock);
        };
    }

    /** The lock of this run's type named {@code name}. */
    private static RLock lockNamed(RedissonClient redisson, String name) {
        return FENCED ? redisson.getFencedLock(name) : redisson.getLock(name);
    }

    /** Waits until {@code lock} is held for the lease; a fenced lock gets its token with the grant. */
    private static void acquire(RLock lock) {
        if (FENCED) {
            if (((RFencedLock) lock).lockAndGetToken(LEASE_MS, TimeUnit.MILLISECONDS) == null) {
                throw new IllegalStateException("lockAndGetToken returned no token");
            }
        } else {
            lock.lock(LEASE_MS, TimeUnit.MILLISECONDS);
        }
    }

    public static void main(String[] args) throws Exception {
        Config config = new Config();
        config.useSingleServer().setAddress(args[0])
            .setConnectionPoolSize(128).setConnectionMinimumIdleSize(8);
        RedissonClient redisson = Redisson.create(config);
        try {
            switch (args[1]) {
                case "uncontended" -> uncontended(redisson, Integer.parseInt(args[2]), Long.parseLong(args[3]));
                case "hot" -> hot(redisson, Integer.parseInt(args[2]), Integer.parseInt(args[3]));
                case "wake" -> wake(redisson, Integer.parseInt(args[2]));
                default -> throw new IllegalArgumentException("unknown scenario " + args[1]);
            }
        } finally {
            System.out.flush();
            redisson.shutdown();
        }
    }

    private static void pairs(RedissonClient redisson, int workers, long runNs, List<Long> samples)
            throws InterruptedException {
        long end = System.nanoTime() + runNs;
        List<Thread> threads = new ArrayList<>();
        List<List<Long>> perThread = new ArrayList<>();
        for (int w = 0; w < workers; w++) {
            List<Long> local = new ArrayList<>();
            perThread.add(local);
            RLock lock = lockNamed(redisson, "u:redisson:" + w);
            Thread t = new Thread(() -> {
                while (System.nanoTime() < end) {
                    long t0 = System.nanoTime();
                    acquire(lock);
                    lock.unlock();
                    local.add(System.nanoTime() - t0);
                }
            });
            threads.add(t);
            t.start();
        }
        for (Thread t : threads) {
            t.join();
        }
        perThread.forEach(samples::addAll);
    }

    private static void uncontended(RedissonClient redisson, int workers, long runMs) throws InterruptedException {
        // Warm the JIT and the connection pool before the measured run.
        pairs(redisson, workers, 1_000_000_000L, new ArrayList<>());
        System.out.println("start");
        System.out.flush();
        List<Long> samples = new ArrayList<>();
        long t0 = System.nanoTime();
        pairs(redisson, workers, runMs * 1_000_000L, samples);
        long elapsed = System.nanoTime() - t0;
        Collections.sort(samples);
        System.out.println("result " + samples.size() + " " + elapsed + " " + quantile(samples, 0.5) + " "
            + quantile(samples, 0.99));
    }

    private static long quantile(List<Long> sorted, double q) {
        if (sorted.isEmpty()) {
            return 0;
        }
        int i = (int) Math.min(sorted.size() - 1, Math.round(q * (sorted.size() - 1)));
        return sorted.get(i);
    }

    private static void hot(RedissonClient redisson, int tasks, int first) throws Exception {
        RLock warm = lockNamed(redisson, "hot-warm:redisson:" + first);
        for (int i = 0; i < 200; i++) {
            acquire(warm);
            warm.unlock();
        }
        // Every process starts at the same instant, once all of them are up.
        System.out.println("ready");
        System.out.flush();
        String[] go = new java.io.BufferedReader(new java.io.InputStreamReader(System.in)).readLine().split(" ");
        long beginNs = Long.parseLong(go[1]);
        long untilNs = Long.parseLong(go[2]);
        long sleep = beginNs - System.nanoTime();
        if (sleep > 0) {
            Thread.sleep(sleep / 1_000_000, (int) (sleep % 1_000_000));
        }
        RLock lock = lockNamed(redisson, "hot:redisson");
        List<Thread> threads = new ArrayList<>();
        List<StringBuilder> outs = new ArrayList<>();
        for (int w = 0; w < tasks; w++) {
            int worker = first + w;
            StringBuilder out = new StringBuilder();
            outs.add(out);
            Thread t = new Thread(() -> {
                while (System.nanoTime() < untilNs) {
                    long t0 = System.nanoTime();
                    acquire(lock);
                    long at = System.nanoTime();
                    if (at < untilNs) {
                        out.append(at).append(' ').append(worker).append(' ').append(at - t0).append('\n');
                    }
                    lock.unlock();
                }
            });
            threads.add(t);
            t.start();
        }
        for (Thread t : threads) {
            t.join();
        }
        outs.forEach(System.out::print);
    }

    private static void wake(RedissonClient redisson, int cycles) throws Exception {
        RLock holder = lockNamed(redisson, "wake:redisson");
        for (int c = -20; c < cycles; c++) {
            acquire(holder);
            long[] got = new long[1];
            CountDownLatch done = new CountDownLatch(1);
            Thread waiter = new Thread(() -> {
                RLock lock = lockNamed(redisson, "wake:redisson");
                acquire(lock);
                got[0] = System.nanoTime();
                lock.unlock();
                done.countDown();
            });
            waiter.start();
            Thread.sleep(50);
            holder.unlock();
            long released = System.nanoTime();
            done.await();
            if (c >= 0) {
                System.out.println(Math.max(0, got[0] - released));
            }
        }
    }
}
