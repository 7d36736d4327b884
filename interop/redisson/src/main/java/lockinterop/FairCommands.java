package lockinterop;

import java.util.concurrent.TimeUnit;

import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;

/**
 * {@link Driver} commands for Redisson's fair lock ({@code RedissonClient.getFairLock}). Each
 * runs on worker {@code W}'s own thread (a fair lock belongs to a thread, and a waiting
 * {@code lock()} blocks that worker only):
 *
 * <pre>
 * T fairlock W NAME LEASE_MS             RFairLock.lock (LEASE_MS -1: the watchdog)  -> T ok NANOS
 * T fairtry W NAME WAIT_MS LEASE_MS      RFairLock.tryLock                           -> T ok NANOS | T busy
 * T fairunlock W NAME                    RFairLock.unlock                            -> T ok NANOS | T err MSG
 * T fairforce W NAME                     RFairLock.forceUnlock                       -> T ok true|false
 * T fairlocked W NAME                    RFairLock.isLocked                          -> T ok true|false
 * T fairheld W NAME                      RFairLock.isHeldByCurrentThread             -> T ok true|false
 * T faircontend W NAME KEY N             N times: lock; GET KEY; SET KEY value+1; unlock -> T ok N
 * </pre>
 */
final class FairCommands implements Commands {
    private final RedissonClient redisson;

    FairCommands(RedissonClient redisson) {
        this.redisson = redisson;
    }

    @Override
    public String run(String command, String[] w) throws Exception {
        switch (command) {
            case "fairlock" -> {
                long lease = Long.parseLong(w[4]);
                RLock lock = redisson.getFairLock(w[3]);
                if (lease < 0) {
                    lock.lock();
                } else {
                    lock.lock(lease, TimeUnit.MILLISECONDS);
                }
                return "ok " + System.nanoTime();
            }
            case "fairtry" -> {
                long waitMs = Long.parseLong(w[4]);
                long lease = Long.parseLong(w[5]);
                boolean got = redisson.getFairLock(w[3]).tryLock(waitMs, lease, TimeUnit.MILLISECONDS);
                return got ? "ok " + System.nanoTime() : "busy";
            }
            case "fairunlock" -> {
                redisson.getFairLock(w[3]).unlock();
                return "ok " + System.nanoTime();
            }
            case "fairforce" -> {
                return "ok " + redisson.getFairLock(w[3]).forceUnlock();
            }
            case "fairlocked" -> {
                return "ok " + redisson.getFairLock(w[3]).isLocked();
            }
            case "fairheld" -> {
                return "ok " + redisson.getFairLock(w[3]).isHeldByCurrentThread();
            }
            case "faircontend" -> {
                return Counter.contend(redisson, w[4], Long.parseLong(w[5]), redisson.getFairLock(w[3]));
            }
            default -> {
                return null;
            }
        }
    }
}
