package lockinterop;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.redisson.Redisson;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * Redisson's RLock in the benchmark's scenarios (run by lock-bench, which reads stdout):
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
 */
public final class Bench {
    private static final long LEASE_MS = 10_000;

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
            RLock lock = redisson.getLock("u:redisson:" + w);
            Thread t = new Thread(() -> {
                while (System.nanoTime() < end) {
                    long t0 = System.nanoTime();
                    lock.lock(LEASE_MS, TimeUnit.MILLISECONDS);
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
        RLock warm = redisson.getLock("hot-warm:redisson:" + first);
        for (int i = 0; i < 200; i++) {
            warm.lock(LEASE_MS, TimeUnit.MILLISECONDS);
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
        RLock lock = redisson.getLock("hot:redisson");
        List<Thread> threads = new ArrayList<>();
        List<StringBuilder> outs = new ArrayList<>();
        for (int w = 0; w < tasks; w++) {
            int worker = first + w;
            StringBuilder out = new StringBuilder();
            outs.add(out);
            Thread t = new Thread(() -> {
                while (System.nanoTime() < untilNs) {
                    long t0 = System.nanoTime();
                    lock.lock(LEASE_MS, TimeUnit.MILLISECONDS);
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
        RLock holder = redisson.getLock("wake:redisson");
        for (int c = -20; c < cycles; c++) {
            holder.lock(LEASE_MS, TimeUnit.MILLISECONDS);
            long[] got = new long[1];
            CountDownLatch done = new CountDownLatch(1);
            Thread waiter = new Thread(() -> {
                RLock lock = redisson.getLock("wake:redisson");
                lock.lock(LEASE_MS, TimeUnit.MILLISECONDS);
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
