/* Preloaded into a redis-server (LD_PRELOAD) by lock_tests::topology::clock_skew: shifts the
   process's wall clock (CLOCK_REALTIME, gettimeofday, time) by SKEW_US microseconds, negative
   for behind; monotonic clocks are left alone. Debian's libfaketime cannot start Debian's
   redis-server (linked with jemalloc, whose start-up calls clock_gettime before libfaketime
   has resolved its symbols: "Unexpected recursive calls to clock_gettime()", libfaketime
   issues 130 and 327); this shim makes raw system calls and resolves nothing, so it loads
   before jemalloc starts. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long skew_us(void) {
  static long long skew = 0;
  static int read = 0;
  if (!read) {
    const char *s = getenv("SKEW_US");
    skew = s ? atoll(s) : 0;
    read = 1;
  }
  return skew;
}

static void shift(struct timespec *ts) {
  long long ns = (long long)ts->tv_nsec + (skew_us() % 1000000) * 1000;
  ts->tv_sec += skew_us() / 1000000;
  while (ns < 0) { ns += 1000000000; ts->tv_sec -= 1; }
  while (ns >= 1000000000) { ns -= 1000000000; ts->tv_sec += 1; }
  ts->tv_nsec = ns;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
  int r = (int)syscall(SYS_clock_gettime, id, ts);
  if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) shift(ts);
  return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
  struct timespec ts;
  int r = clock_gettime(CLOCK_REALTIME, &ts);
  if (r == 0 && tv) { tv->tv_sec = ts.tv_sec; tv->tv_usec = ts.tv_nsec / 1000; }
  (void)tz;
  return r;
}

time_t time(time_t *t) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (t) *t = ts.tv_sec;
  return ts.tv_sec;
}
