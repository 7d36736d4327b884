// Command peer-redsync drives go-redsync/redsync v4's Mutex (one Redis pool: go-redis v9)
// through lock-bench's scenarios, in the protocol lock-bench reads from its out-of-process
// peers (the same as interop/redisson's Bench class):
//
//	peer-redsync URL uncontended WORKERS RUN_MS  prints "start" after a 1 s warm-up, then
//	                                             "result PAIRS ELAPSED_NS P50_NS P99_NS"
//	peer-redsync URL hot TASKS FIRST             prints "ready" after a warm-up, reads
//	                                             "go BEGIN_NS UNTIL_NS" on stdin, then prints one
//	                                             line "AT_NS WORKER WAIT_NS" per acquisition and
//	                                             "failed N" at the end
//	peer-redsync URL wake CYCLES                 one line "WAKE_NS" per cycle
//	peer-redsync version                         "redsync vX, go-redis vY, goZ"
//
// Leases are 10 s, as for every lock in the benchmark. The retries are redsync's defaults: 32
// tries per Lock(), a random 50 to 250 ms apart. A Lock() that gives up (ErrFailed after its
// 32 tries) is called again at once, as a user's retry loop would, and counted in "failed N";
// the wait reported is from the first call. Times are CLOCK_MONOTONIC in nanoseconds, the clock
// the Rust processes use, so acquisitions of several processes can be put in one order.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"
)

// lease is every benchmarked lock's lease.
const lease = 10 * time.Second

func main() {
	if len(os.Args) == 2 && os.Args[1] == "version" {
		fmt.Println(version())
		return
	}
	if len(os.Args) < 4 {
		fail("usage: peer-redsync URL uncontended WORKERS RUN_MS | hot TASKS FIRST | wake CYCLES | version")
	}
	opts, err := goredislib.ParseURL(os.Args[1])
	if err != nil {
		fail("bad URL: %v", err)
	}
	// As many pooled connections as the Redisson peer has (128), so 64 workers never queue
	// for one.
	opts.PoolSize = 128
	opts.MinIdleConns = 8
	client := goredislib.NewClient(opts)
	defer client.Close()
	rs := redsync.New(goredis.NewPool(client))

	out := bufio.NewWriterSize(os.Stdout, 1<<16)
	defer out.Flush()
	switch os.Args[2] {
	case "uncontended":
		uncontended(rs, out, number(os.Args[3]), time.Duration(number(arg(4)))*time.Millisecond)
	case "hot":
		hot(rs, out, number(os.Args[3]), number(arg(4)))
	case "wake":
		wake(rs, out, number(os.Args[3]))
	default:
		fail("unknown scenario %q", os.Args[2])
	}
}

// version names the redsync, go-redis and Go versions this binary was built with.
func version() string {
	modules := map[string]string{}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			modules[dep.Path] = dep.Version
		}
	}
	return fmt.Sprintf("redsync %s, go-redis %s, %s",
		modules["github.com/go-redsync/redsync/v4"],
		modules["github.com/redis/go-redis/v9"],
		runtime.Version())
}

func arg(i int) string {
	if i >= len(os.Args) {
		fail("missing argument %d", i)
	}
	return os.Args[i]
}

func number(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		fail("not a number: %q", s)
	}
	return n
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "peer-redsync: "+format+"\n", args...)
	os.Exit(2)
}

// monoNs is CLOCK_MONOTONIC in nanoseconds (Go's own monotonic clock has another origin).
func monoNs() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		fail("clock_gettime: %v", err)
	}
	return ts.Nano()
}

func newMutex(rs *redsync.Redsync, name string) *redsync.Mutex {
	return rs.NewMutex(name, redsync.WithExpiry(lease))
}

// lock takes m, calling Lock() again each time it gives up after its tries; returns how many
// times it gave up.
func lock(m *redsync.Mutex) int {
	failed := 0
	for {
		err := m.Lock()
		if err == nil {
			return failed
		}
		var taken *redsync.ErrTaken
		if !errors.Is(err, redsync.ErrFailed) && !errors.As(err, &taken) {
			fail("lock %s: %v", m.Name(), err)
		}
		failed++
	}
}

func unlock(m *redsync.Mutex) {
	if ok, err := m.Unlock(); !ok || err != nil {
		fail("unlock %s: %v %v", m.Name(), ok, err)
	}
}

// pairs runs `workers` goroutines, each locking and unlocking its own key for `run`; the pair
// durations (ns) of all of them.
func pairs(rs *redsync.Redsync, workers int, run time.Duration) []int64 {
	end := monoNs() + run.Nanoseconds()
	perWorker := make([][]int64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := newMutex(rs, "u:redsync:"+strconv.Itoa(w))
			var local []int64
			for monoNs() < end {
				t0 := monoNs()
				lock(m)
				unlock(m)
				local = append(local, monoNs()-t0)
			}
			perWorker[w] = local
		}()
	}
	wg.Wait()
	return slices.Concat(perWorker...)
}

func uncontended(rs *redsync.Redsync, out *bufio.Writer, workers int, run time.Duration) {
	// Warm the connection pool up before the measured run, as the other peers do.
	pairs(rs, workers, time.Second)
	fmt.Fprintln(out, "start")
	out.Flush()
	t0 := monoNs()
	samples := pairs(rs, workers, run)
	elapsed := monoNs() - t0
	slices.Sort(samples)
	fmt.Fprintf(out, "result %d %d %d %d\n", len(samples), elapsed, quantile(samples, 0.5), quantile(samples, 0.99))
}

func quantile(sorted []int64, q float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted)-1) + 0.5)
	return sorted[min(i, len(sorted)-1)]
}

func hot(rs *redsync.Redsync, out *bufio.Writer, tasks, first int) {
	warm := newMutex(rs, "hot-warm:redsync:"+strconv.Itoa(first))
	for range 200 {
		lock(warm)
		unlock(warm)
	}
	// Every process starts at the same instant, once all of them are up.
	fmt.Fprintln(out, "ready")
	out.Flush()
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil {
		fail("no go line: %v", err)
	}
	var begin, until int64
	if _, err := fmt.Sscanf(strings.TrimSpace(line), "go %d %d", &begin, &until); err != nil {
		fail("bad go line %q: %v", line, err)
	}
	time.Sleep(time.Duration(begin - monoNs()))
	lines := make([]strings.Builder, tasks)
	failed := make([]int, tasks)
	var wg sync.WaitGroup
	for w := range tasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := newMutex(rs, "hot:redsync")
			for monoNs() < until {
				t0 := monoNs()
				failed[w] += lock(m)
				at := monoNs()
				if at < until {
					fmt.Fprintf(&lines[w], "%d %d %d\n", at, first+w, at-t0)
				}
				unlock(m)
			}
		}()
	}
	wg.Wait()
	total := 0
	for w := range tasks {
		out.WriteString(lines[w].String())
		total += failed[w]
	}
	fmt.Fprintf(out, "failed %d\n", total)
}

func wake(rs *redsync.Redsync, out *bufio.Writer, cycles int) {
	holder := newMutex(rs, "wake:redsync")
	// A few unmeasured cycles first, as the other peers have (no JIT to warm here, only the
	// connections).
	for c := -3; c < cycles; c++ {
		lock(holder)
		got := make(chan int64, 1)
		go func() {
			m := newMutex(rs, "wake:redsync")
			lock(m)
			at := monoNs()
			unlock(m)
			got <- at
		}()
		time.Sleep(50 * time.Millisecond)
		unlock(holder)
		released := monoNs()
		at := <-got
		if c >= 0 {
			fmt.Fprintln(out, max(0, at-released))
		}
	}
}
