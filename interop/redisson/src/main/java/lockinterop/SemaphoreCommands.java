package lockinterop;

import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.redisson.api.RPermitExpirableSemaphore;
import org.redisson.api.RSemaphore;
import org.redisson.api.RedissonClient;

/**
 * {@link Driver} commands for Redisson's semaphores: {@code RSemaphore} ({@code sem-…}) and
 * {@code RPermitExpirableSemaphore} ({@code psem-…}). Every command runs on worker {@code W}'s
 * thread. ({@code RSemaphore} has no {@code setPermits}: only {@code trySetPermits} and
 * {@code addPermits}.) {@code NANOS} is {@code System.nanoTime()} when the call returned; {@code IDS} are
 * permit ids (32 hex chars) joined by commas.
 *
 * <pre>
 * T sem-tryset W NAME N                 RSemaphore.trySetPermits(N)            -> T ok true|false
 * T sem-acquire W NAME N                RSemaphore.acquire(N) (no timeout)     -> T ok NANOS
 * T sem-tryacquire W NAME N WAIT_MS     RSemaphore.tryAcquire(N, WAIT_MS)      -> T ok NANOS | T busy
 * T sem-release W NAME N                RSemaphore.release(N)                  -> T ok NANOS
 * T sem-available W NAME                RSemaphore.availablePermits()          -> T ok COUNT
 * T sem-add W NAME N                    RSemaphore.addPermits(N)               -> T ok NANOS
 * T sem-contend W NAME KEY ROUNDS       ROUNDS times: acquire(); GET KEY; SET KEY value+1; release() -> T ok ROUNDS
 * T psem-tryset W NAME N                trySetPermits(N)                       -> T ok true|false
 * T psem-acquire W NAME N LEASE_MS      acquire(N, LEASE_MS) (-1: acquire(N), never expires) -> T ok NANOS IDS
 * T psem-tryacquire W NAME N WAIT_MS LEASE_MS  tryAcquire(N, WAIT_MS, LEASE_MS) -> T ok NANOS IDS | T busy
 * T psem-release W NAME IDS             release(id) / release(ids)             -> T ok NANOS | T err MSG
 * T psem-tryrelease W NAME IDS          tryRelease(ids)                        -> T ok RELEASED
 * T psem-available W NAME               availablePermits()                     -> T ok COUNT
 * T psem-permits W NAME                 getPermits()                           -> T ok COUNT
 * T psem-set W NAME N                   setPermits(N)                          -> T ok NANOS
 * T psem-add W NAME N                   addPermits(N)                          -> T ok NANOS
 * T psem-contend W NAME KEY ROUNDS LEASE_MS  ROUNDS times: acquire(LEASE_MS); GET KEY; SET KEY value+1; release(id) -> T ok ROUNDS
 * </pre>
 */
final class SemaphoreCommands implements Commands {
    private final RedissonClient redisson;

    SemaphoreCommands(RedissonClient redisson) {
        this.redisson = redisson;
    }

    @Override
    public String run(String command, String[] w) throws Exception {
        if (!command.startsWith("sem-") && !command.startsWith("psem-")) {
            return null;
        }
        String name = w[3];
        RSemaphore sem = redisson.getSemaphore(name);
        RPermitExpirableSemaphore psem = redisson.getPermitExpirableSemaphore(name);
        switch (command) {
            case "sem-tryset":
                return "ok " + sem.trySetPermits(Integer.parseInt(w[4]));
            case "sem-acquire":
                sem.acquire(Integer.parseInt(w[4]));
                return "ok " + System.nanoTime();
            case "sem-tryacquire": {
                boolean got = sem.tryAcquire(Integer.parseInt(w[4]), Long.parseLong(w[5]), TimeUnit.MILLISECONDS);
                return got ? "ok " + System.nanoTime() : "busy";
            }
            case "sem-release":
                sem.release(Integer.parseInt(w[4]));
                return "ok " + System.nanoTime();
            case "sem-available":
                return "ok " + sem.availablePermits();
            case "sem-add":
                sem.addPermits(Integer.parseInt(w[4]));
                return "ok " + System.nanoTime();
            case "sem-contend":
                return Counter.contend(redisson, w[4], Long.parseLong(w[5]), () -> {
                    sem.acquire();
                    return sem::release;
                });
            case "psem-tryset":
                return "ok " + psem.trySetPermits(Integer.parseInt(w[4]));
            case "psem-acquire": {
                int n = Integer.parseInt(w[4]);
                long lease = Long.parseLong(w[5]);
                List<String> ids = lease < 0 ? psem.acquire(n) : psem.acquire(n, lease, TimeUnit.MILLISECONDS);
                return "ok " + System.nanoTime() + " " + String.join(",", ids);
            }
            case "psem-tryacquire": {
                List<String> ids = psem.tryAcquire(Integer.parseInt(w[4]), Long.parseLong(w[5]),
                        Long.parseLong(w[6]), TimeUnit.MILLISECONDS);
                return ids == null || ids.isEmpty() ? "busy" : "ok " + System.nanoTime() + " " + String.join(",", ids);
            }
            case "psem-release": {
                List<String> ids = Arrays.asList(w[4].split(","));
                if (ids.size() == 1) {
                    psem.release(ids.get(0));
                } else {
                    psem.release(ids);
                }
                return "ok " + System.nanoTime();
            }
            case "psem-tryrelease":
                return "ok " + psem.tryRelease(Arrays.asList(w[4].split(",")));
            case "psem-available":
                return "ok " + psem.availablePermits();
            case "psem-permits":
                return "ok " + psem.getPermits();
            case "psem-set":
                psem.setPermits(Integer.parseInt(w[4]));
                return "ok " + System.nanoTime();
            case "psem-add":
                psem.addPermits(Integer.parseInt(w[4]));
                return "ok " + System.nanoTime();
            case "psem-contend": {
                long lease = Long.parseLong(w[6]);
                return Counter.contend(redisson, w[4], Long.parseLong(w[5]), () -> {
                    String id = psem.acquire(lease, TimeUnit.MILLISECONDS);
                    return () -> psem.release(id);
                });
            }
            default:
                return "err unknown command " + command;
        }
    }

    /** A deliberately non-atomic increment of {@code key}: only the semaphore keeps it right. */}
