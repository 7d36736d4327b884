package lockinterop;

import java.util.concurrent.TimeUnit;

import org.redisson.api.RLock;
import org.redisson.api.RReadWriteLock;
import org.redisson.api.RedissonClient;

/**
 * The {@link Driver} commands of {@code RReadWriteLock}. Each names a worker {@code W} (a Java
 * thread: a Redisson read or write hold belongs to the thread that took it) and runs on it.
 * {@code LEASE_MS} -1 means the watchdog; {@code NANOS} is {@code System.nanoTime()} when the
 * call returned.
 *
 * <pre>
 * T rlock W NAME LEASE_MS                readLock().lock                  -> T ok NANOS
 * T wlock W NAME LEASE_MS                writeLock().lock                 -> T ok NANOS
 * T tryrlock W NAME WAIT_MS LEASE_MS     readLock().tryLock               -> T ok NANOS | T busy
 * T trywlock W NAME WAIT_MS LEASE_MS     writeLock().tryLock              -> T ok NANOS | T busy
 * T runlock W NAME                       readLock().unlock                -> T ok NANOS | T err MSG
 * T wunlock W NAME                       writeLock().unlock               -> T ok NANOS | T err MSG
 * T rforce W NAME                        readLock().forceUnlock           -> T ok true|false
 * T wforce W NAME                        writeLock().forceUnlock          -> T ok true|false
 * T rlocked W NAME                       readLock().isLocked              -> T ok true|false
 * T wlocked W NAME                       writeLock().isLocked             -> T ok true|false
 * T wcontend W NAME KEY N                N times: writeLock().lock; GET KEY; SET KEY value+1;
 *                                        writeLock().unlock               -> T ok N
 * </pre>
 */
final class RwCommands implements Commands {
    private final RedissonClient redisson;

    RwCommands(RedissonClient redisson) {
        this.redisson = redisson;
    }

    @Override
    public String run(String command, String[] w) throws Exception {
        return switch (command) {
            case "rlock" -> lock(read(w[3]), Long.parseLong(w[4]));
            case "wlock" -> lock(write(w[3]), Long.parseLong(w[4]));
            case "tryrlock" -> tryLock(read(w[3]), Long.parseLong(w[4]), Long.parseLong(w[5]));
            case "trywlock" -> tryLock(write(w[3]), Long.parseLong(w[4]), Long.parseLong(w[5]));
            case "runlock" -> unlock(read(w[3]));
            case "wunlock" -> unlock(write(w[3]));
            case "rforce" -> "ok " + read(w[3]).forceUnlock();
            case "wforce" -> "ok " + write(w[3]).forceUnlock();
            case "rlocked" -> "ok " + read(w[3]).isLocked();
            case "wlocked" -> "ok " + write(w[3]).isLocked();
            case "wcontend" -> Counter.contend(redisson, w[4], Long.parseLong(w[5]), write(w[3]));
            default -> null;
        };
    }

    private RLock read(String name) {
        return rw(name).readLock();
    }

    private RLock write(String name) {
        return rw(name).writeLock();
    }

    private RReadWriteLock rw(String name) {
        return redisson.getReadWriteLock(name);
    }

    private static String lock(RLock lock, long leaseMs) {
        if (leaseMs < 0) {
            lock.lock();
        } else {
            lock.lock(leaseMs, TimeUnit.MILLISECONDS);
        }
        return "ok " + System.nanoTime();
    }

    private static String tryLock(RLock lock, long waitMs, long leaseMs) throws InterruptedException {
        boolean got = lock.tryLock(waitMs, leaseMs, TimeUnit.MILLISECONDS);
        return got ? "ok " + System.nanoTime() : "busy";
    }

    private static String unlock(RLock lock) {
        lock.unlock();
        return "ok " + System.nanoTime();
    }
}
