package service_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/memstore"
	"github.com/meshlimit/meshlimit/service/redisstore"
)

// TestLoadFigures measures, side by side on this machine and against one redis-server, the
// service's checks per second and latency at 64 keep-alive connections (Redis store and memory
// store), the HTTP floor (a no-op Go handler that reads the body and answers a constant),
// checks of 16 descriptors on the Redis store in one script (service16+redis) and one script per
// descriptor (service16+each, the store's batch hidden), and redis-benchmark running the token-bucket script with EVALSHA. See BENCHMARKS.md.
//
// Every phase is driven by the same lean load generator (raw HTTP/1.1 over net.Conn with
// preformatted requests, one goroutine per connection) and served by the same http.Server
// settings as cmd/meshlimit-service. The phases alternate (floor, redis, memory, floor, ...)
// for MESHLIMIT_BENCH_ROUNDS rounds (default 5) of MESHLIMIT_BENCH_SECONDS each (default 3),
// after a warm-up, so that a noisy neighbour hits every phase alike; the figures are the
// medians over rounds. MESHLIMIT_BENCH_TIMEOUT_MS sets the Redis handlers' deadline (default the
// production one, 10 ms): on a machine too busy for it, a longer one ranks throughputs without
// the timeouts. Loopback only, bounded in time, and opt-in:
//
//	MESHLIMIT_BENCH=1 go test -run TestLoadFigures -v ./service/
func TestLoadFigures(t *testing.T) {
	if os.Getenv("MESHLIMIT_BENCH") != "1" {
		t.Skip("set MESHLIMIT_BENCH=1 to measure")
	}
	d := time.Duration(envInt("MESHLIMIT_BENCH_SECONDS", 3)) * time.Second
	rounds := int(envInt("MESHLIMIT_BENCH_ROUNDS", 5))
	conns := int(envInt("MESHLIMIT_BENCH_CONNS", 64))
	rs := redistest.Start(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	floor := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"allowed":true}` + "\n"))
	})
	redisStore, err := redisstore.New(redisstore.Config{Addrs: []string{rs.Addr()}, FlushDelay: time.Duration(envInt("MESHLIMIT_BENCH_FLUSH_US", int64(redisstore.DefaultFlushDelay/time.Microsecond))) * time.Microsecond})
	require.NoError(t, err)
	t.Cleanup(func() { redisStore.Close() })
	memStore := memstore.New(memstore.Config{})
	t.Cleanup(func() { memStore.Close() })
	redisMetrics, memoryMetrics := service.NewMetrics(), service.NewMetrics()
	timeout := time.Duration(envInt("MESHLIMIT_BENCH_TIMEOUT_MS", 0)) * time.Millisecond // 0: the production default
	withRedis, err := service.NewHandler(service.Config{Store: redisStore, Logger: quiet, Metrics: redisMetrics, Timeout: timeout})
	require.NoError(t, err)
	withMemory, err := service.NewHandler(service.Config{Store: memStore, Logger: quiet, Metrics: memoryMetrics})
	require.NoError(t, err)
	// The Redis store with its batch hidden: a check's descriptors one script (one round trip)
	// each, as before service.BatchDecider; for the 16-descriptor phases.
	eachRedis, err := service.NewHandler(service.Config{Store: struct{ service.Store }{redisStore}, Logger: quiet, Timeout: timeout})
	require.NoError(t, err)
	reqs, reqs16 := checkRequests(10000, 1), checkRequests(10000, 16)

	type phase struct {
		name string
		h    http.Handler
		addr string
		reqs [][]byte
	}
	phases := []phase{{name: "floor", h: floor, reqs: reqs}, {name: "service+redis", h: withRedis, reqs: reqs},
		{name: "service+memory", h: withMemory, reqs: reqs},
		{name: "service16+redis", h: withRedis, reqs: reqs16}, {name: "service16+each", h: eachRedis, reqs: reqs16}}
	if only := os.Getenv("MESHLIMIT_BENCH_ONLY"); only != "" { // e.g. "service+redis" for a profile
		phases = slices.DeleteFunc(phases, func(p phase) bool {
			return !slices.Contains(strings.Split(only, ","), p.name)
		})
	}
	for i := range phases {
		phases[i].addr = serveLoopback(t, phases[i].h)
	}

	t.Logf("GOMAXPROCS %d, NumCPU %d, %s, %d connections, %d rounds of %v per phase",
		runtime.GOMAXPROCS(0), runtime.NumCPU(), runtime.Version(), conns, rounds, d)
	for _, p := range phases { // warm-up: connections, pools, Redis keys, scripts loaded
		_, err := leanLoad(p.addr, conns, time.Second, p.reqs)
		require.NoError(t, err, p.name)
	}
	results := map[string][]loadResult{}
	for r := range rounds {
		for i := range phases {
			p := phases[(i+r)%len(phases)] // rotate the order too: no phase always follows another
			self0, rt0 := selfCPU(), readRuntimeStats()
			redis0, cmds0, reads0, pid := redisStats(rs)
			wait0, redisWait0 := runQueueWait(os.Getpid()), runQueueWait(pid)
			res, err := leanLoad(p.addr, conns, d, p.reqs)
			require.NoError(t, err, p.name)
			rt := readRuntimeStats().since(rt0)
			rt += fmt.Sprintf("; waited for a CPU: this process %.0f ms/s, redis-server %.0f ms/s",
				ms(runQueueWait(os.Getpid())-wait0)/d.Seconds(), ms(runQueueWait(pid)-redisWait0)/d.Seconds())
			redis1, cmds1, reads1, _ := redisStats(rs)
			self, redis := (selfCPU()-self0).Seconds()/d.Seconds(), (redis1-redis0).Seconds()/d.Seconds()
			res.cpuUs = (self + redis) * 1e6 / res.rps
			batch := ""
			if cmds1 > cmds0 {
				batch = fmt.Sprintf(", %.1f scripts per Redis read", (cmds1-cmds0)/(reads1-reads0))
			}
			results[p.name] = append(results[p.name], res)
			t.Logf("round %d %-15s %9.0f req/s  p50 %6.3f ms  p99 %6.3f ms  (%d requests, %d not 200 allowed; CPU: this process %.2f, redis-server %.2f, %.1f µs/request%s; %s)",
				r+1, p.name, res.rps, ms(res.p50), ms(res.p99), res.n, res.errors, self, redis, res.cpuUs, batch, rt)
		}
	}
	med := map[string]loadResult{}
	for _, p := range phases {
		med[p.name] = medianResult(results[p.name])
		m := med[p.name]
		t.Logf("median %-15s %9.0f req/s  p50 %6.3f ms  p99 %6.3f ms  %.1f CPU µs/request", p.name, m.rps, ms(m.p50), ms(m.p99), m.cpuUs)
	}
	if f, ok := med["floor"]; ok {
		for _, name := range []string{"service+redis", "service+memory"} {
			if m, ok := med[name]; ok {
				ratios := roundRatios(results[name], results["floor"])
				errs, n := 0, 0
				for _, r := range results[name] {
					errs, n = errs+r.errors, n+r.n+r.errors
				}
				t.Logf("%s / floor = %.2f (ratio of medians; median of the rounds' ratios %.2f, rounds %s), p99 %.3f vs %.3f ms, CPU per request floor / service %.2f, errors %d of %d (%.3f%%)",
					name, m.rps/f.rps, medianOf(ratios), fmtRatios(ratios), ms(m.p99), ms(f.p99), f.cpuUs/m.cpuUs, errs, n, 100*float64(errs)/float64(n))
			}
		}
	}
	for store, m := range map[string]*service.Metrics{"redis": redisMetrics, "memory": memoryMetrics} {
		families, err := m.Registry().Gather()
		require.NoError(t, err)
		var kinds []string
		for _, f := range families {
			if f.GetName() != "meshlimit_errors_total" {
				continue
			}
			for _, c := range f.GetMetric() {
				if v := c.GetCounter().GetValue(); v > 0 {
					kinds = append(kinds, fmt.Sprintf("%s %.0f", c.GetLabel()[0].GetValue(), v))
				}
			}
		}
		t.Logf("errors by kind, %s store (warm-up included): %v", store, kinds)
	}
	if _, ok := med["service+redis"]; !ok || os.Getenv("MESHLIMIT_BENCH_NO_REDIS_BENCHMARK") == "1" {
		return
	}

	src, err := luaScript("local LEAKY = false\n", "lib.lua", "gcra_state.lua", "gcra.lua")
	require.NoError(t, err)
	sha, err := rs.Do("SCRIPT", "LOAD", src)
	require.NoError(t, err)
	// The service's exact call: 10,000 keys, quota 10^9 per second, cost 1, Redis TIME.
	args := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(rs.Port()), "-c", strconv.Itoa(conns),
		"-n", strconv.Itoa(int(max(med["service+redis"].rps, 20000)) * int(d/time.Second)), "-r", "10000", "-q",
		"evalsha", sha, "1", "ml:{bench:__rand_int__}:token_bucket", "1000000000", "1000000", "0", "1", "1000"}
	ctx, cancel := context.WithTimeout(context.Background(), 4*d)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-benchmark", args...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Logf("redis-benchmark %v\n%s", args, bytes.TrimSpace(lastLine(out)))
}

// envInt returns the integer in the environment variable name, or def.
func envInt(name string, def int64) int64 {
	if v, err := strconv.ParseInt(os.Getenv(name), 10, 64); err == nil {
		return v
	}
	return def
}

// luaScript returns the Lua source package redisstore composes from prefix and the files of
// its lua/ directory (redisstore's script), for redis-benchmark to run.
func luaScript(prefix string, files ...string) (string, error) {
	src := prefix
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join("redisstore", "lua", f))
		if err != nil {
			return "", err
		}
		src += string(b)
	}
	return src, nil
}

// selfCPU returns the CPU time (user and system) this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisStats returns the CPU time the redis-server process has used, the commands it has
// processed and the socket reads it took to get them (INFO).
func redisStats(rs *redistest.Server) (cpu time.Duration, cmds, reads float64, pid int) {
	out, err := rs.Do("INFO", "all")
	if err != nil {
		return 0, 0, 0, 0
	}
	var total float64
	for _, line := range strings.Split(out, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		f, _ := strconv.ParseFloat(v, 64)
		switch k {
		case "process_id":
			pid = int(f)
		case "used_cpu_sys", "used_cpu_user":
			total += f
		case "total_reads_processed":
			reads = f
		case "cmdstat_evalsha":
			calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
			cmds, _ = strconv.ParseFloat(calls, 64)
		}
	}
	return time.Duration(total * float64(time.Second)), cmds, reads, pid
}

// runQueueWait returns how long the threads of process pid have waited, runnable, for a CPU
// (the second field of /proc/PID/task/*/schedstat; 0 where Linux does not report it).
func runQueueWait(pid int) time.Duration {
	files, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/schedstat")
	var total int64
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if fields := strings.Fields(string(b)); len(fields) >= 2 {
			n, _ := strconv.ParseInt(fields[1], 10, 64)
			total += n
		}
	}
	return time.Duration(total)
}

type loadResult struct {
	n, errors int
	rps       float64
	p50, p99  time.Duration
	cpuUs     float64 // CPU µs (this process and redis-server) per request
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func lastLine(b []byte) []byte {
	b = bytes.TrimRight(b, "\r\n ")
	if i := bytes.LastIndexAny(b, "\r\n"); i >= 0 {
		return b[i+1:]
	}
	return b
}

// medianResult returns the median of each figure over rs (taken separately).
func medianResult(rs []loadResult) loadResult {
	median := func(f func(loadResult) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		return medianOf(v)
	}
	return loadResult{
		rps:   median(func(r loadResult) float64 { return r.rps }),
		p50:   time.Duration(median(func(r loadResult) float64 { return float64(r.p50) })),
		p99:   time.Duration(median(func(r loadResult) float64 { return float64(r.p99) })),
		cpuUs: median(func(r loadResult) float64 { return r.cpuUs }),
	}
}

// roundRatios returns a[i].rps / b[i].rps for each round i: the phases of one round ran
// seconds apart, so each ratio saw about the same machine.
func roundRatios(a, b []loadResult) []float64 {
	var r []float64
	for i := range min(len(a), len(b)) {
		r = append(r, a[i].rps/b[i].rps)
	}
	return r
}

func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Sorted(slices.Values(v))
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func fmtRatios(v []float64) string {
	s := make([]string, len(v))
	for i, r := range v {
		s[i] = fmt.Sprintf("%.2f", r)
	}
	return strings.Join(s, " ")
}

// serveLoopback serves h on a free loopback port, with the http.Server settings of
// cmd/meshlimit-service, until the test ends.
func serveLoopback(t *testing.T, h http.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// checkRequests returns n preformatted HTTP/1.1 check requests, each for one key of n under a
// token bucket that always admits.
func checkRequests(n, descriptors int) [][]byte {
	reqs := make([][]byte, n)
	for i := range reqs {
		var b strings.Builder
		for j := range descriptors {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"key":"user-%d","algorithm":"token_bucket","quota":1000000000,"window_ms":1000}`, i*descriptors+j)
		}
		body := `{"descriptors":[` + b.String() + `]}`
		reqs[i] = fmt.Appendf(nil, "POST /v1/check HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
	return reqs
}

// leanLoad drives addr from conns goroutines, one keep-alive connection each, for d: each
// writes a preformatted request, reads the whole answer and writes the next. An answer counts
// only if it is 200 with a body starting {"allowed":true. The generator is deliberately lean
// (no net/http client) so that it takes as little of the machine as it can from the server.
func leanLoad(addr string, conns int, d time.Duration, reqs [][]byte) (loadResult, error) {
	var wg sync.WaitGroup
	lat := make([][]time.Duration, conns)
	errs := make([]int, conns)
	fatal := make([]error, conns)
	ready := make(chan struct{})
	var deadline time.Time
	for c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				fatal[c] = err
				<-ready
				return
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(d + 30*time.Second))
			br := bufio.NewReaderSize(conn, 4096)
			lat[c] = make([]time.Duration, 0, 1<<14)
			<-ready
			for i := c * 7919; time.Now().Before(deadline); i++ {
				start := time.Now()
				if _, err := conn.Write(reqs[i%len(reqs)]); err != nil {
					fatal[c] = err
					return
				}
				ok, err := readAnswer(br)
				if err != nil {
					fatal[c] = err
					return
				}
				if !ok {
					errs[c]++
					continue
				}
				lat[c] = append(lat[c], time.Since(start))
			}
		}()
	}
	start := time.Now()
	deadline = start.Add(d)
	close(ready)
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(fatal...); err != nil {
		return loadResult{}, err
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	res := loadResult{n: len(all), rps: float64(len(all)) / elapsed.Seconds()}
	for _, e := range errs {
		res.errors += e
	}
	if len(all) > 0 {
		res.p50, res.p99 = all[len(all)/2], all[len(all)*99/100]
	}
	return res, nil
}

// readAnswer reads one HTTP/1.1 response with a Content-Length from br and reports whether it
// was a 200 whose body starts {"allowed":true.
func readAnswer(br *bufio.Reader) (bool, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return false, err
	}
	status := len(line) >= 12 && string(line[9:12]) == "200"
	n := -1
	for {
		line, err = br.ReadSlice('\n')
		if err != nil {
			return false, err
		}
		if len(line) <= 2 {
			break
		}
		const cl = "content-length:"
		if len(line) > len(cl) && strings.EqualFold(string(line[:len(cl)]), cl) {
			if n, err = strconv.Atoi(string(bytes.TrimSpace(line[len(cl):]))); err != nil {
				return false, err
			}
		}
	}
	if n < 0 {
		return false, errors.New("answer without Content-Length")
	}
	const want = `{"allowed":true`
	body, err := br.Peek(min(n, len(want)))
	if err != nil {
		return false, err
	}
	ok := status && string(body) == want
	_, err = br.Discard(n)
	return ok, err
}

// runtimeStats is a snapshot of the Go runtime's scheduling figures (runtime/metrics).
type runtimeStats struct {
	sched, gcPause *metrics.Float64Histogram // time runnable before running; GC stop-the-world pauses
	gcCycles       uint64
}

func readRuntimeStats() runtimeStats {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}, {Name: "/sched/pauses/total/gc:seconds"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return runtimeStats{sched: s[0].Value.Float64Histogram(), gcPause: s[1].Value.Float64Histogram(), gcCycles: s[2].Value.Uint64()}
}

// since describes what happened between a and b: GC cycles, the longest GC pause and the
// 99th and 99.9th percentiles of the time goroutines waited to run (bucket upper bounds).
func (b runtimeStats) since(a runtimeStats) string {
	q := func(h0, h1 *metrics.Float64Histogram, f float64) float64 {
		var n uint64
		for i := range h1.Counts {
			n += h1.Counts[i] - h0.Counts[i]
		}
		var seen uint64
		for i := range h1.Counts {
			if seen += h1.Counts[i] - h0.Counts[i]; n > 0 && float64(seen) >= f*float64(n) {
				return h1.Buckets[i+1] * 1e3
			}
		}
		return 0
	}
	return fmt.Sprintf("GC %d cycles, max pause %.2f ms; goroutines wait to run p99 %.2f ms, p99.9 %.2f ms",
		b.gcCycles-a.gcCycles, q(a.gcPause, b.gcPause, 1), q(a.sched, b.sched, 0.99), q(a.sched, b.sched, 0.999))
}
