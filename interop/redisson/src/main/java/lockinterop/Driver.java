package lockinterop;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;

import org.redisson.Redisson;
import org.redisson.api.RBucket;
import org.redisson.api.RFencedLock;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;
import org.redisson.config.Config;

/**
 * A Java service with Redisson, scripted by the Rust interop tests over stdin and stdout.
 *
 * <p>Usage: {@code Driver [--watchdog-ms N] (redis://host:port | --cluster url,url,...)}.
 * Prints {@code ready} once connected, then answers each input line with exactly one line.
 *
 * <p>Every command starts with a tag that its reply repeats: {@code <tag> <command> args...}
 * gives {@code <tag> ok [value]}, {@code <tag> busy} or {@code <tag> err <message>}. Commands that
 * name a worker ({@code W}) run on that worker's own thread, in order: Redisson locks belong to
 * threads, so a worker is one Java thread that owns what it locks. Different workers run
 * concurrently, and a reply is written when its command finishes. Times are
 * {@code System.nanoTime()}, which HotSpot on Linux reads from CLOCK_MONOTONIC: comparable with
 * the Rust side's clock on the same machine.
 *
 * <pre>
 * T lock W NAME LEASE_MS            RLock.lock (LEASE_MS -1: the watchdog)   -> T ok NANOS
 * T trylock W NAME WAIT_MS LEASE_MS RLock.tryLock                            -> T ok NANOS | T busy
 * T unlock W NAME                   RLock.unlock                             -> T ok NANOS | T err MSG
 * T fenced W NAME LEASE_MS          RFencedLock.lockAndGetToken              -> T ok TOKEN
 * T funlock W NAME                  RFencedLock.unlock                       -> T ok NANOS | T err MSG
 * T held W NAME                     RLock.isHeldByCurrentThread              -> T ok true|false
 * T force NAME                      RLock.forceUnlock                        -> T ok true|false
 * T locked NAME                     RLock.isLocked                           -> T ok true|false
 * T contend W NAME KEY N            N times: lock; GET KEY; SET KEY value+1; unlock -> T ok N
 * T sell W NAME STOCK SOLD N        N purchases, each under the lock: GET STOCK; if above 0,
 *                                   SET STOCK stock-1, SET SOLD sold+1 and RPUSH ledger:STOCK java
 *                                                                    -> T ok UNITS_SOLD
 * T ping                                                                     -> T pong
 * quit                              shuts Redisson down and exits 0
 * </pre>
 */
public final class Driver {
    private final RedissonClient redisson;
    private final PrintStream out;
    private final Map<String, ExecutorService> workers = new ConcurrentHashMap<>();
    /** The other primitives' commands (see {@link Commands}), tried in turn. */
    private final List<Commands> family;

    private Driver(RedissonClient redisson, PrintStream out) {
        this.redisson = redisson;
        this.out = out;
        this.family = List.of(
            new FairCommands(redisson), new RwCommands(redisson), new SemaphoreCommands(redisson));
    }

    public static void main(String[] args) throws Exception {
        long watchdogMs = 30_000;
        String single = null;
        List<String> cluster = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--watchdog-ms" -> watchdogMs = Long.parseLong(args[++i]);
                case "--cluster" -> cluster.addAll(List.of(args[++i].split(",")));
                default -> single = args[i];
            }
        }
        Config config = new Config();
        config.setLockWatchdogTimeout(watchdogMs);
        if (!cluster.isEmpty()) {
            config.useClusterServers().addNodeAddress(cluster.toArray(new String[0]));
        } else if (single != null) {
            config.useSingleServer().setAddress(single);
        } else {
            System.err.println("usage: Driver [--watchdog-ms N] (redis://host:port | --cluster url,url,...)");
            System.exit(2);
        }
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        Driver driver = new Driver(Redisson.create(config), out);
        out.println("ready");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            if (line.trim().equals("quit")) {
                break;
            }
            driver.dispatch(line.trim().split(" "));
        }
        driver.shutdown();
        System.exit(0);
    }

    private void reply(String tag, String text) {
        synchronized (out) {
            out.println(tag + " " + text);
        }
    }

    private void dispatch(String[] words) {
        String tag = words[0];
        if (words.length < 2) {
            reply(tag, "err no command");
            return;
        }
        String command = words[1];
        try {
            switch (command) {
                case "ping" -> reply(tag, "pong");
                case "force" -> reply(tag, "ok " + redisson.getLock(words[2]).forceUnlock());
                case "locked" -> reply(tag, "ok " + redisson.getLock(words[2]).isLocked());
                case "lock", "trylock", "unlock", "fenced", "funlock", "held", "contend", "sell" ->
                    worker(words[2]).execute(() -> runOnWorker(tag, command, words));
                default -> {
                    if (words.length < 3) {
                        reply(tag, "err unknown command " + command);
                    } else {
                        worker(words[2]).execute(() -> runOnWorker(tag, command, words));
                    }
                }
            }
        } catch (RuntimeException e) {
            reply(tag, "err " + oneLine(e));
        }
    }

    private ExecutorService worker(String name) {
        return workers.computeIfAbsent(name, n -> Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "worker-" + n);
            t.setDaemon(true);
            return t;
        }));
    }

    private void runOnWorker(String tag, String command, String[] w) {
        try {
            String name = w[3];
            switch (command) {
                case "lock" -> {
                    long lease = Long.parseLong(w[4]);
                    RLock lock = redisson.getLock(name);
                    if (lease < 0) {
                        lock.lock();
                    } else {
                        lock.lock(lease, TimeUnit.MILLISECONDS);
                    }
                    reply(tag, "ok " + System.nanoTime());
                }
                case "trylock" -> {
                    long waitMs = Long.parseLong(w[4]);
                    long lease = Long.parseLong(w[5]);
                    boolean got = redisson.getLock(name).tryLock(waitMs, lease, TimeUnit.MILLISECONDS);
                    reply(tag, got ? "ok " + System.nanoTime() : "busy");
                }
                case "unlock" -> {
                    redisson.getLock(name).unlock();
                    reply(tag, "ok " + System.nanoTime());
                }
                case "fenced" -> {
                    long lease = Long.parseLong(w[4]);
                    RFencedLock lock = redisson.getFencedLock(name);
                    Long token = lease < 0 ? lock.lockAndGetToken() : lock.lockAndGetToken(lease, TimeUnit.MILLISECONDS);
                    reply(tag, "ok " + token);
                }
                case "funlock" -> {
                    redisson.getFencedLock(name).unlock();
                    reply(tag, "ok " + System.nanoTime());
                }
                case "held" -> reply(tag, "ok " + redisson.getLock(name).isHeldByCurrentThread());
                case "contend" -> reply(tag, Counter.contend(redisson, w[4], Long.parseLong(w[5]), redisson.getLock(name)));
                case "sell" -> {
                    RBucket<String> stock = redisson.getBucket(w[4], StringCodec.INSTANCE);
                    RBucket<String> sold = redisson.getBucket(w[5], StringCodec.INSTANCE);
                    long n = Long.parseLong(w[6]);
                    RLock lock = redisson.getLock(name);
                    long units = 0;
                    for (long i = 0; i < n; i++) {
                        lock.lock();
                        try {
                            // Load, think, save: a lost update without the lock.
                            String value = stock.get();
                            long left = value == null ? 0 : Long.parseLong(value);
                            if (left > 0) {
                                Thread.sleep(ThreadLocalRandom.current().nextInt(2));
                                stock.set(Long.toString(left - 1));
                                String before = sold.get();
                                sold.set(Long.toString((before == null ? 0 : Long.parseLong(before)) + 1));
                                redisson.getList("ledger:" + w[4], StringCodec.INSTANCE).add("java");
                                units++;
                            }
                        } finally {
                            lock.unlock();
                        }
                    }
                    reply(tag, "ok " + units);
                }
                default -> {
                    for (Commands group : family) {
                        String answer = group.run(command, w);
                        if (answer != null) {
                            reply(tag, answer);
                            return;
                        }
                    }
                    reply(tag, "err unknown command " + command);
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            reply(tag, "err interrupted");
        } catch (Exception e) {
            reply(tag, "err " + oneLine(e));
        }
    }

    private static String oneLine(Throwable e) {
        String message = e.getClass().getSimpleName() + ": " + e.getMessage();
        return message.replace('\n', ' ').replace('\r', ' ');
    }

    private void shutdown() {
        workers.values().forEach(ExecutorService::shutdownNow);
        redisson.shutdown();
    }
}
