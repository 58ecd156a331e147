package rls

import (
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
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/redisstore"
	"github.com/meshlimit/meshlimit/service/rlsconfig"
	"github.com/meshlimit/meshlimit/wire"
)

// floorServer answers every ShouldRateLimit with a constant OK: the gRPC floor.
type floorServer struct {
	pb.UnimplementedRateLimitServiceServer
}

var floorAnswer = &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK,
	Statuses: []*pb.RateLimitResponse_DescriptorStatus{{Code: pb.RateLimitResponse_OK}}}

func (floorServer) ShouldRateLimit(context.Context, *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	return floorAnswer, nil
}

func benchEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestGRPCLoadFigures measures ShouldRateLimit's requests per second and latency against a
// no-op gRPC server (the floor), both served by the same grpc.Server settings, with the same
// load: MESHLIMIT_BENCH_CONNS (64) requests in flight over MESHLIMIT_BENCH_GRPC_CONNS (8)
// HTTP/2 connections, one descriptor per request over 10,000 client addresses; and the same
// requests on POST /json against a no-op HTTP handler, over 64 keep-alive connections (with
// net/http's client: compare /json with its floor, not with the gRPC phases); and
// grpc-rls+script and json-rls+script, the fronts with their counters kept by the
// fixed-window Lua script, as before they were INCRBY + PEXPIRE NX. The phases
// alternate for MESHLIMIT_BENCH_ROUNDS (3) rounds of MESHLIMIT_BENCH_SECONDS (3) after a
// warm-up; the figures are the medians. MESHLIMIT_BENCH_ONLY (e.g. grpc-rls+redis) keeps some
// phases only, MESHLIMIT_BENCH_NO_REDIS_BENCHMARK=1 skips redis-benchmark (for a profile).
// MESHLIMIT_BENCH_PEER (host:port of envoyproxy/ratelimit's gRPC, run with the same rule on a
// Redis of its own) adds grpc-peer and grpc-peer16, the same loads against it, and
// MESHLIMIT_BENCH_PEER_PID its process, whose CPU then counts in those phases' CPU per request.
// MESHLIMIT_BENCH_TIMEOUT_MS sets the servers' store deadline (default the production 10 ms; the
// peer has none): on a machine too busy for it, a longer one ranks throughputs without timeouts.
// Loopback only, bounded, opt-in:
//
//	MESHLIMIT_BENCH=1 go test -run TestGRPCLoadFigures -v ./service/rls/
func TestGRPCLoadFigures(t *testing.T) {
	if os.Getenv("MESHLIMIT_BENCH") != "1" {
		t.Skip("set MESHLIMIT_BENCH=1 to measure")
	}
	d := time.Duration(benchEnv("MESHLIMIT_BENCH_SECONDS", 3)) * time.Second
	rounds, inflight, nconns := benchEnv("MESHLIMIT_BENCH_ROUNDS", 3), benchEnv("MESHLIMIT_BENCH_CONNS", 64), benchEnv("MESHLIMIT_BENCH_GRPC_CONNS", 8)
	timeout := time.Duration(benchEnv("MESHLIMIT_BENCH_TIMEOUT_MS", 0)) * time.Millisecond // 0: the production default
	rs := redistest.Start(t)
	store, err := redisstore.New(redisstore.Config{Addrs: []string{rs.Addr()}, FlushDelay: redisstore.DefaultFlushDelay})
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	rules, err := rlsconfig.Load([]rlsconfig.File{{Name: "bench.yaml", Data: []byte(
		"domain: bench\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n")}})
	require.NoError(t, err)
	srv, err := NewServer(Config{Store: store, Rules: func() *rlsconfig.Config { return rules },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Timeout: timeout})
	require.NoError(t, err)
	// The same server on the same Redis with the counters kept by the fixed-window script
	// (Decide), as before the INCRBY counter.
	scripted, err := NewServer(Config{Store: scriptedCounter{store}, Rules: func() *rlsconfig.Config { return rules },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Timeout: timeout})
	require.NoError(t, err)

	// The same server with 16 descriptors per request, its counts in one batch (one round
	// trip), and with the store's batch hidden: a goroutine and a round trip per counter, as
	// before the batch.
	unbatched, err := NewServer(Config{Store: struct{ service.Store }{store}, Rules: func() *rlsconfig.Config { return rules },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Timeout: timeout})
	require.NoError(t, err)

	// The same server behind a Gate of MESHLIMIT_BENCH_GATE (16) descriptors in flight.
	gated, err := NewServer(Config{Store: service.NewGate(store, service.GateConfig{MinWork: benchEnv("MESHLIMIT_BENCH_GATE", 16), MaxWork: 16 * benchEnv("MESHLIMIT_BENCH_GATE", 16)}), Rules: func() *rlsconfig.Config { return rules },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Timeout: timeout})
	require.NoError(t, err)

	reqs, reqs16 := benchRequests(1), benchRequests(16)
	bodies := make([][]byte, len(reqs))
	for i, r := range reqs {
		bodies[i], err = protojson.Marshal(r)
		require.NoError(t, err)
	}
	jsonMux := http.NewServeMux()
	jsonMux.Handle("POST /json", srv.JSONHandler())
	scriptedJSON := http.NewServeMux()
	scriptedJSON.Handle("POST /json", scripted.JSONHandler())
	floorHTTP := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"overallCode":"OK","statuses":[{"code":"OK"}]}`))
	})
	type phase struct {
		name string
		addr string
		http bool
		many bool // 16 descriptors per request
	}
	phases := []phase{
		{name: "grpc-floor", addr: serveGRPC(t, floorServer{})}, {name: "grpc-rls+redis", addr: serveGRPC(t, srv)},
		{name: "grpc-rls+script", addr: serveGRPC(t, scripted)},
		{name: "grpc-rls+gate", addr: serveGRPC(t, gated)},
		{name: "grpc-rls16+redis", addr: serveGRPC(t, srv), many: true}, {name: "grpc-rls16+gate", addr: serveGRPC(t, gated), many: true}, {name: "grpc-rls16+goroutines", addr: serveGRPC(t, unbatched), many: true},
		{name: "http-floor", addr: serveHTTP(t, floorHTTP), http: true}, {name: "json-rls+redis", addr: serveHTTP(t, jsonMux), http: true},
		{name: "json-rls+script", addr: serveHTTP(t, scriptedJSON), http: true},
	}
	if peer := os.Getenv("MESHLIMIT_BENCH_PEER"); peer != "" { // envoyproxy/ratelimit, on a Redis of its own
		phases = append(phases, phase{name: "grpc-peer", addr: peer}, phase{name: "grpc-peer16", addr: peer, many: true})
	}
	peerPID := benchEnv("MESHLIMIT_BENCH_PEER_PID", 0)         // its CPU counts in its phases' CPU per request
	if only := os.Getenv("MESHLIMIT_BENCH_ONLY"); only != "" { // e.g. "grpc-rls+redis" for a profile
		phases = slices.DeleteFunc(phases, func(p phase) bool {
			return !slices.Contains(strings.Split(only, ","), p.name)
		})
	}
	load := func(i int, d time.Duration) (grpcResult, error) {
		if phases[i].http {
			return jsonLoad(phases[i].addr, inflight, d, bodies)
		}
		if phases[i].many {
			return grpcLoad(phases[i].addr, nconns, inflight, d, reqs16)
		}
		return grpcLoad(phases[i].addr, nconns, inflight, d, reqs)
	}
	t.Logf("GOMAXPROCS %d, %s, %d in flight over %d connections, %d rounds of %v", runtime.GOMAXPROCS(0), runtime.Version(), inflight, nconns, rounds, d)
	for i, p := range phases {
		_, err := load(i, time.Second)
		require.NoError(t, err, p.name)
	}
	results := map[string][]grpcResult{}
	for r := range rounds {
		for i := range phases {
			j := (i + r) % len(phases)
			p := phases[j]
			self0, redis0, wait0, peer0 := selfCPU(), redisCPU(rs), redisWait(rs), procCPU(peerPID)
			res, err := load(j, d)
			require.NoError(t, err, p.name)
			self, redis, wait := selfCPU()-self0, redisCPU(rs)-redis0, redisWait(rs)-wait0
			if strings.HasPrefix(p.name, "grpc-peer") {
				redis = procCPU(peerPID) - peer0 // the peer's process (not its Redis) in place of ours
			}
			res.cpuUs = float64((self+redis)/time.Microsecond) / float64(res.n+res.errors)
			results[p.name] = append(results[p.name], res)
			t.Logf("round %d %-15s %9.0f req/s  p50 %6.3f ms  p99 %6.3f ms  (%d requests, %d errors = %.2f%%; CPU: this process %.2f, redis-server %.2f, %.1f µs/request; redis-server waited for a CPU %.0f ms/s)",
				r+1, p.name, res.rps, msOf(res.p50), msOf(res.p99), res.n, res.errors, 100*float64(res.errors)/float64(res.n+res.errors),
				self.Seconds()/d.Seconds(), redis.Seconds()/d.Seconds(), res.cpuUs, float64(wait/time.Millisecond)/d.Seconds())
		}
	}
	for _, p := range phases {
		m := medianGRPC(results[p.name])
		t.Logf("median %-15s %9.0f req/s  p50 %6.3f ms  p99 %6.3f ms", p.name, m.rps, msOf(m.p50), msOf(m.p99))
	}
	for _, pair := range [][2]string{{"grpc-rls+redis", "grpc-floor"}, {"grpc-rls+script", "grpc-floor"}, {"json-rls+redis", "http-floor"}, {"json-rls+script", "http-floor"},
		{"grpc-rls+gate", "grpc-floor"}, {"grpc-rls16+redis", "grpc-rls+redis"}, {"grpc-rls16+goroutines", "grpc-rls+redis"},
		{"grpc-rls16+gate", "grpc-rls+gate"}, {"grpc-peer", "grpc-floor"}, {"grpc-rls+redis", "grpc-peer"}, {"grpc-rls+gate", "grpc-peer"},
		{"grpc-peer16", "grpc-peer"}, {"grpc-rls16+redis", "grpc-peer16"}} {
		logPair(t, results, pair[0], pair[1])
	}
	if os.Getenv("MESHLIMIT_BENCH_NO_REDIS_BENCHMARK") != "1" {
		redisBenchmark(t, rs, inflight, d)
	}
}

// procCPU is the user and system CPU of process pid so far (/proc/PID/stat, in clock ticks of
// 10 ms), 0 for pid 0 or an unreadable file.
func procCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// logPair logs phase a against phase b, round by round (the rounds ran the two phases seconds
// apart, so each ratio saw about the same machine): the median ratio of throughputs, of p99s, of
// CPU per request (b's ÷ a's: what the throughput ratio would be if both were CPU-bound on a
// machine of their own), and a's errors with their kinds. It logs nothing unless both ran.
func logPair(t *testing.T, results map[string][]grpcResult, a, b string) {
	t.Helper()
	rounds := min(len(results[a]), len(results[b]))
	if rounds == 0 {
		return
	}
	var ratios, p99s, cpus []float64
	errs, n := 0, 0
	kinds := map[string]int{}
	for r := range rounds {
		x, y := results[a][r], results[b][r]
		ratios, p99s = append(ratios, x.rps/y.rps), append(p99s, float64(x.p99)/float64(y.p99))
		cpus = append(cpus, y.cpuUs/x.cpuUs)
		errs, n = errs+x.errors, n+x.n+x.errors
		for k, c := range x.kinds {
			kinds[k] += c
		}
	}
	slices.Sort(ratios)
	slices.Sort(p99s)
	slices.Sort(cpus)
	t.Logf("%s / %s: throughput median %.2f (rounds %.2f), p99 median %.2f (rounds %.2f), CPU per request: %s's / %s's median %.2f (rounds %.2f), errors %d of %d (%.3f%%) %v",
		a, b, ratios[len(ratios)/2], ratios, p99s[len(p99s)/2], p99s, b, a, cpus[len(cpus)/2], cpus, errs, n, 100*float64(errs)/float64(n), kinds)
}

// benchRequests returns 10,000 requests of n descriptors each, every descriptor its own
// client address (so its own counter).
func benchRequests(n int) []*pb.RateLimitRequest {
	reqs := make([]*pb.RateLimitRequest, 10000)
	for i := range reqs {
		ds := make([]*rlext.RateLimitDescriptor, n)
		for j := range ds {
			a := i*n + j
			ds[j] = &rlext.RateLimitDescriptor{Entries: []*rlext.RateLimitDescriptor_Entry{{Key: "remote_address", Value: fmt.Sprintf("10.%d.%d.%d", a>>16, a>>8&255, a&255)}}}
		}
		reqs[i] = &pb.RateLimitRequest{Domain: "bench", Descriptors: ds}
	}
	return reqs
}

// scriptedCounter is a Store whose window counters are kept by the fixed-window script: a
// Decide of service.CountRequest.Limit, as the memory store counts (which also reads a count
// without charging it; the load needs no such read).
type scriptedCounter struct{ service.Store }

func (s scriptedCounter) CountWindow(ctx context.Context, r service.CountRequest) (int64, time.Duration, error) {
	if r.Hits == 0 {
		return 0, 0, errors.New("the scripted counter is not read without a charge")
	}
	d, err := s.Decide(ctx, service.Request{Key: r.Key, Limit: r.Limit(), Cost: min(r.Hits, algorithms.MaxQuota), Now: r.Now})
	if err != nil {
		return 0, 0, err
	}
	return algorithms.MaxQuota - d.Remaining, d.Reset, nil
}

// redisBenchmark runs redis-benchmark on the fixed-window script as a counter (quota 10^12, a
// one-second window, cost 1, Redis TIME; the RLS front's store call before its counter became
// INCRBY + PEXPIRE NX, and still /v1/check's fixed window) and on INCRBY, over 10,000 keys.
func redisBenchmark(t *testing.T, rs *redistest.Server, conns int, d time.Duration) {
	// The script redisstore composes for a fixed window: lib.lua, then fixed_window.lua.
	var src string
	for _, f := range []string{"lib.lua", "fixed_window.lua"} {
		b, err := os.ReadFile("../redisstore/lua/" + f)
		require.NoError(t, err)
		src += string(b)
	}
	sha, err := rs.Do("SCRIPT", "LOAD", src)
	require.NoError(t, err)
	args := []string{"-h", "127.0.0.1", "-p", strings.TrimPrefix(rs.Addr(), "127.0.0.1:"), "-c", strconv.Itoa(conns),
		"-n", strconv.Itoa(30000 * int(d/time.Second)), "-r", "10000", "-q",
		"evalsha", sha, "1", "ml:{rls:bench|remote_address=__rand_int__@second}:fixed_window", "1000000000000", "1000000", "0", "1", "1000"}
	ctx, cancel := context.WithTimeout(context.Background(), 4*d)
	defer cancel()
	incr := append(slices.Clone(args[:11]), "incrby", "ml:{rls:bench|remote_address=__rand_int__@second}:count", "1")
	for _, args := range [][]string{args, incr} {
		out, err := exec.CommandContext(ctx, "redis-benchmark", args...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		lines := strings.FieldsFunc(string(out), func(r rune) bool { return r == '\r' || r == '\n' })
		t.Logf("redis-benchmark %v\n%s", args, strings.TrimSpace(lines[len(lines)-1]))
	}
}

func serveGRPC(t *testing.T, s pb.RateLimitServiceServer) string {
	t.Helper()
	g := grpc.NewServer(serverOptions(GRPCOptions{})...) // the floor and the service alike
	pb.RegisterRateLimitServiceServer(g, s)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	return ln.Addr().String()
}

type grpcResult struct {
	rps      float64
	p50, p99 time.Duration
	n        int
	errors   int
	cpuUs    float64        // CPU µs (this process and redis-server) per request, answered or not
	kinds    map[string]int // the failed calls by kind: gRPC code, HTTP status, client error
}

// selfCPU returns the CPU time (user and system) this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisWait returns how long redis-server's threads have waited, runnable, for a CPU.
func redisWait(rs *redistest.Server) time.Duration { return pidWait(redisProcessID(rs)) }

// redisProcessID returns redis-server's process id (INFO server), 0 if it does not say.
func redisProcessID(rs *redistest.Server) int {
	out, err := rs.Do("INFO", "server")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, _ := strconv.Atoi(v)
			return pid
		}
	}
	return 0
}

// pidWait returns how long process pid's threads have waited, runnable, for a CPU (the second
// field of /proc/PID/task/*/schedstat; 0 where Linux does not say).
func pidWait(pid int) time.Duration {
	files, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/schedstat")
	var total int64
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil {
			if fields := strings.Fields(string(b)); len(fields) >= 2 {
				n, _ := strconv.ParseInt(fields[1], 10, 64)
				total += n
			}
		}
	}
	return time.Duration(total)
}

// redisCPU returns the CPU time redis-server has used (INFO cpu).
func redisCPU(rs *redistest.Server) time.Duration {
	out, err := rs.Do("INFO", "cpu")
	if err != nil {
		return 0
	}
	var total float64
	for _, line := range strings.Split(out, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func medianGRPC(rs []grpcResult) grpcResult {
	by := func(f func(grpcResult) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return grpcResult{
		rps: by(func(r grpcResult) float64 { return r.rps }),
		p50: time.Duration(by(func(r grpcResult) float64 { return float64(r.p50) })),
		p99: time.Duration(by(func(r grpcResult) float64 { return float64(r.p99) })),
	}
}

func serveHTTP(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// jsonLoad keeps inflight POST /json requests going over as many keep-alive connections for
// d; a request counts when it answers 200.
func jsonLoad(addr string, inflight int, d time.Duration, bodies [][]byte) (grpcResult, error) {
	return postLoad("http://"+addr+"/json", inflight, d, bodies)
}

// postLoad keeps inflight POSTs of bodies to url going over as many keep-alive connections
// (net/http's client) for d; a request counts when it answers 200 within 5 s, a failure by its
// status ("HTTP 503") or the client's error.
func postLoad(url string, inflight int, d time.Duration, bodies [][]byte) (grpcResult, error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: inflight, MaxConnsPerHost: inflight}}
	defer c.CloseIdleConnections()
	return drive(inflight, d, func(i int) string {
		resp, err := c.Post(url, "application/json", bytes.NewReader(bodies[i%len(bodies)]))
		if err != nil {
			return "client: " + errorKind(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return "HTTP " + strconv.Itoa(resp.StatusCode)
		}
		return ""
	})
}

// errorKind names a client error's kind: a timeout, a refused or reset connection, or else its
// text without the addresses that make every instance differ.
func errorKind(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded) || os.IsTimeout(err):
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "connection reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed"
	}
	return err.Error()
}

// grpcLoad keeps inflight calls going over nconns connections for d; a call counts when it
// answers OK within 5 s, a failure by its gRPC code or by the overall code it answered.
func grpcLoad(addr string, nconns, inflight int, d time.Duration, reqs []*pb.RateLimitRequest) (grpcResult, error) {
	clients := make([]pb.RateLimitServiceClient, nconns)
	for i := range clients {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return grpcResult{}, err
		}
		defer c.Close()
		clients[i] = pb.NewRateLimitServiceClient(c)
	}
	return drive(inflight, d, func(i int) string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := clients[i%nconns].ShouldRateLimit(ctx, reqs[i%len(reqs)])
		if err != nil {
			return "gRPC " + status.Code(err).String()
		}
		if code := resp.GetOverallCode(); code != pb.RateLimitResponse_OK {
			return "answered " + code.String()
		}
		return ""
	})
}

// drive runs call from inflight goroutines for d (goroutine g calls with g, g+inflight, ...)
// and measures the successful calls, those for which call returns ""; the others count by the
// kind it returns. It never fails: a phase whose every call failed measures 0 req/s.
func drive(inflight int, d time.Duration, call func(i int) string) (grpcResult, error) {
	var wg sync.WaitGroup
	lat := make([][]time.Duration, inflight)
	errs := make([]map[string]int, inflight)
	end := time.Now().Add(d)
	for g := range inflight {
		wg.Add(1)
		errs[g] = map[string]int{}
		go func() {
			defer wg.Done()
			for i := g; time.Now().Before(end); i += inflight {
				start := time.Now()
				if kind := call(i); kind != "" {
					errs[g][kind]++
					continue
				}
				lat[g] = append(lat[g], time.Since(start))
			}
		}()
	}
	wg.Wait()
	var all []time.Duration
	res := grpcResult{kinds: map[string]int{}}
	for g := range lat {
		all = append(all, lat[g]...)
		for k, n := range errs[g] {
			res.errors += n
			res.kinds[k] += n
		}
	}
	slices.Sort(all)
	res.n = len(all)
	res.rps = float64(len(all)) / d.Seconds()
	if len(all) > 0 { // else every call failed: a figure too (0 req/s)
		res.p50, res.p99 = all[len(all)/2], all[len(all)*99/100]
	}
	return res, nil
}

// benchRule is the rule of every load figure, in the YAML of envoyproxy/ratelimit that both it
// and meshlimit's -ratelimit-config read: every client address its own counter, 10^9 a second.
const benchRule = "domain: bench\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n"

// server is a process TestServiceBinariesLoadFigures loads: its gRPC and HTTP addresses and the
// processes whose CPU is its CPU (its own and its Redis's).
type server struct {
	name       string
	grpc, http string
	pids       []int
}

// TestServiceBinariesLoadFigures measures built services side by side, each a process of its
// own on a redis-server of its own: the meshlimit-service binaries of MESHLIMIT_BENCH_BINARIES
// (name=path,..., e.g. before=/tmp/a,after=/tmp/b), envoyproxy/ratelimit's binary of
// MESHLIMIT_BENCH_PEER_BIN (its settings' defaults but the addresses, TCP Redis and no statsd),
// both with benchRule, and the no-op floors in a child process of this test binary
// (TestServeFloors). Only the load generators run in this process, so a phase's CPU per request
// is its server's process and its Redis's (/proc/PID/stat), not the generator's.
//
// The phases of a server s: grpc-s and grpc16-s (ShouldRateLimit of 1 and 16 descriptors, 64 in
// flight over 8 connections as TestGRPCLoadFigures), json-s (POST /json of 1 descriptor), and,
// meshlimit's only, check-s and check16-s (POST /v1/check of 1 and 16 token-bucket descriptors);
// the floors' are grpc-floor, json-floor and check-floor. The HTTP phases use net/http's client
// at 64 keep-alive connections. The phases alternate, in an order rotated each round, for
// MESHLIMIT_BENCH_ROUNDS (3) rounds of MESHLIMIT_BENCH_SECONDS (3), after a warm-up of a second
// each; every round logs the load average before and after it. A failed call counts by its
// kind, and each meshlimit service's own error counters are logged at the end.
// MESHLIMIT_BENCH_TIMEOUT_MS is the binaries' -timeout (default theirs, the production 10 ms),
// MESHLIMIT_BENCH_ONLY keeps the phases it names. MESHLIMIT_BENCH_CALLGRIND=DIR runs every server
// (not Redis) under valgrind's callgrind, its counts in DIR, zeroed before each phase and dumped
// after it: the instructions per request, a figure the machine's load does not change (give
// such a run a MESHLIMIT_BENCH_TIMEOUT_MS of seconds and a few connections); the servers then
// run with GODEBUG=asyncpreemptoff=1, as valgrind needs.
// Loopback only, bounded, opt-in:
//
//	MESHLIMIT_BENCH_BINARIES=before=/tmp/bin/a,after=/tmp/bin/b MESHLIMIT_BENCH_PEER_BIN=/tmp/bin/ratelimit \
//	  go test -run TestServiceBinariesLoadFigures -v -timeout 30m ./service/rls/
func TestServiceBinariesLoadFigures(t *testing.T) {
	binaries, peerBin := os.Getenv("MESHLIMIT_BENCH_BINARIES"), os.Getenv("MESHLIMIT_BENCH_PEER_BIN")
	if binaries == "" && peerBin == "" {
		t.Skip("set MESHLIMIT_BENCH_BINARIES and/or MESHLIMIT_BENCH_PEER_BIN to measure")
	}
	d := time.Duration(benchEnv("MESHLIMIT_BENCH_SECONDS", 3)) * time.Second
	rounds, inflight, nconns := benchEnv("MESHLIMIT_BENCH_ROUNDS", 3), benchEnv("MESHLIMIT_BENCH_CONNS", 64), benchEnv("MESHLIMIT_BENCH_GRPC_CONNS", 8)

	servers := []server{startFloors(t)}
	var names []string // the meshlimit binaries', in the order given
	for _, nb := range strings.Split(binaries, ",") {
		if nb == "" {
			continue
		}
		name, bin, ok := strings.Cut(nb, "=")
		require.True(t, ok, "MESHLIMIT_BENCH_BINARIES: %q is not name=path", nb)
		servers = append(servers, startMeshlimit(t, name, bin))
		names = append(names, name)
	}
	if peerBin != "" {
		servers = append(servers, startPeer(t, peerBin))
	}

	reqs, reqs16 := benchRequests(1), benchRequests(16)
	bodies := make([][]byte, len(reqs))
	for i, r := range reqs {
		var err error
		bodies[i], err = protojson.Marshal(r)
		require.NoError(t, err)
	}
	checks, checks16 := checkBodies(1), checkBodies(16)
	type phase struct {
		name string
		srv  server
		load func(time.Duration) (grpcResult, error)
	}
	var phases []phase
	for _, s := range servers {
		suffix := "-" + s.name
		phases = append(phases,
			phase{"grpc" + suffix, s, func(d time.Duration) (grpcResult, error) { return grpcLoad(s.grpc, nconns, inflight, d, reqs) }},
			phase{"json" + suffix, s, func(d time.Duration) (grpcResult, error) { return jsonLoad(s.http, inflight, d, bodies) }})
		if s.name != "floor" {
			phases = append(phases, phase{"grpc16" + suffix, s, func(d time.Duration) (grpcResult, error) { return grpcLoad(s.grpc, nconns, inflight, d, reqs16) }})
		}
		if s.name != "peer" {
			phases = append(phases, phase{"check" + suffix, s, func(d time.Duration) (grpcResult, error) {
				return postLoad("http://"+s.http+"/v1/check", inflight, d, checks)
			}})
		}
		if s.name != "peer" && s.name != "floor" {
			phases = append(phases, phase{"check16" + suffix, s, func(d time.Duration) (grpcResult, error) {
				return postLoad("http://"+s.http+"/v1/check", inflight, d, checks16)
			}})
		}
	}
	if only := os.Getenv("MESHLIMIT_BENCH_ONLY"); only != "" {
		phases = slices.DeleteFunc(phases, func(p phase) bool { return !slices.Contains(strings.Split(only, ","), p.name) })
	}

	for _, s := range servers {
		t.Logf("%s: gRPC %s, HTTP %s, processes %v (the server's, its Redis's)", s.name, s.grpc, s.http, s.pids)
	}
	t.Logf("%s, %d in flight (gRPC over %d connections), %d rounds of %v, %d phases", runtime.Version(), inflight, nconns, rounds, d, len(phases))
	for _, p := range phases {
		_, err := p.load(time.Second)
		require.NoError(t, err, p.name)
	}
	results := map[string][]grpcResult{}
	for r := range rounds {
		load0 := loadAverage()
		for i := range phases {
			p := phases[(i+r)%len(phases)]
			callgrind(t, "-z", p.srv.pids[0])
			cpu0, own0, wait0, self0 := pidsCPU(p.srv.pids), procCPU(p.srv.pids[0]), pidWait(p.srv.pids[0]), selfCPU()
			res, err := p.load(d)
			require.NoError(t, err, p.name)
			if ir := callgrind(t, "-d", p.srv.pids[0]); ir > 0 {
				t.Logf("round %d %-16s %.0f instructions per request of the server (callgrind, %d requests)", r+1, p.name, float64(ir)/float64(res.n+res.errors), res.n+res.errors)
			}
			cpu, own, wait, self := pidsCPU(p.srv.pids)-cpu0, procCPU(p.srv.pids[0])-own0, pidWait(p.srv.pids[0])-wait0, selfCPU()-self0
			res.cpuUs = float64(cpu/time.Microsecond) / float64(res.n+res.errors)
			results[p.name] = append(results[p.name], res)
			t.Logf("round %d %-16s %9.0f req/s  p50 %6.3f ms  p99 %6.3f ms  (%d answered, %d errors %v; CPU: server and its Redis %.2f, %.1f µs/request, %.1f µs/answer (the server's own %.1f), the server waited for a CPU %.0f ms/s; load generator %.2f)",
				r+1, p.name, res.rps, msOf(res.p50), msOf(res.p99), res.n, res.errors, res.kinds,
				cpu.Seconds()/d.Seconds(), res.cpuUs, float64(cpu/time.Microsecond)/float64(res.n), float64(own/time.Microsecond)/float64(res.n),
				float64(wait/time.Millisecond)/d.Seconds(), self.Seconds()/d.Seconds())
		}
		t.Logf("round %d: load average %s → %s", r+1, load0, loadAverage())
	}
	for _, p := range phases {
		m := medianGRPC(results[p.name])
		cpus := make([]float64, 0, len(results[p.name]))
		for _, r := range results[p.name] {
			cpus = append(cpus, r.cpuUs)
		}
		slices.Sort(cpus)
		t.Logf("median %-16s %9.0f req/s  p50 %6.3f ms  p99 %6.3f ms  %.1f CPU µs/request", p.name, m.rps, msOf(m.p50), msOf(m.p99), cpus[len(cpus)/2])
	}
	for _, s := range append(slices.Clone(names), "peer") {
		for _, pair := range [][2]string{{"grpc-", "grpc-floor"}, {"json-", "json-floor"}, {"check-", "check-floor"},
			{"grpc16-", "grpc-"}, {"check16-", "check-"}, {"grpc-", "grpc-peer"}, {"grpc16-", "grpc16-peer"}, {"json-", "json-peer"}} {
			b := pair[1]
			if strings.HasSuffix(b, "-") {
				b += s
			}
			if b != pair[0]+s {
				logPair(t, results, pair[0]+s, b)
			}
		}
	}
	for i, a := range names { // every later binary against every earlier one
		for _, b := range names[i+1:] {
			for _, front := range []string{"grpc-", "grpc16-", "json-", "check-", "check16-"} {
				logPair(t, results, front+b, front+a)
			}
		}
	}
	for _, s := range servers[1:] {
		if s.name != "peer" {
			t.Logf("%s's own counters: %v", s.name, errorCounters(t, s.http))
		}
	}
}

// checkBodies returns 10,000 /v1/check bodies of n token-bucket descriptors each that always
// admit (quota 10^9 a second, cost 1), every descriptor its own key, as the filter encodes them
// (package wire).
func checkBodies(n int) [][]byte {
	bodies := make([][]byte, 10000)
	limit := algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 1_000_000_000, Window: time.Second}
	for i := range bodies {
		b := wire.AppendRequestStart(nil)
		for j := range n {
			b = wire.AppendDescriptor(b, j, wire.Key{Plugin: "bench", Rule: "user", Value: "user-" + strconv.Itoa(i*n+j)}, limit, 1)
		}
		bodies[i] = wire.AppendRequestEnd(b)
	}
	return bodies
}

// startFloors starts this test binary's TestServeFloors in a child process and returns its
// addresses; the child ends when the test does (its stdin closes).
func startFloors(t *testing.T) server {
	cmd := benchCommand(os.Args[0], "-test.run", "^TestServeFloors$", "-test.timeout", "0")
	cmd.Env = append(append(os.Environ(), "MESHLIMIT_BENCH_FLOOR_CHILD=1"), underValgrind()...)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	var grpcAddr, httpAddr string
	_, err = fmt.Fscanf(stdout, "floors %s %s\n", &grpcAddr, &httpAddr)
	require.NoError(t, err, "the floors' child did not say its addresses")
	return server{name: "floor", grpc: grpcAddr, http: httpAddr, pids: []int{cmd.Process.Pid}}
}

// TestServeFloors is not a test but the floors' process of TestServiceBinariesLoadFigures (it
// skips without MESHLIMIT_BENCH_FLOOR_CHILD=1): it serves the no-op gRPC RateLimitService
// (floorServer) with the service's grpc.Server settings, and on HTTP a constant OK for
// POST /json and {"allowed":true} for POST /v1/check with cmd/meshlimit-service's timeouts,
// writes "floors GRPC_ADDR HTTP_ADDR" to its stdout, and serves until its stdin closes.
func TestServeFloors(t *testing.T) {
	if os.Getenv("MESHLIMIT_BENCH_FLOOR_CHILD") != "1" {
		t.Skip("the floors' process of TestServiceBinariesLoadFigures")
	}
	floor := func(answer string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(answer))
		}
	}
	mux := http.NewServeMux()
	mux.Handle("POST /json", floor(`{"overallCode":"OK","statuses":[{"code":"OK"}]}`))
	mux.Handle("POST /v1/check", floor(`{"allowed":true}`+"\n"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, IdleTimeout: 30 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	fmt.Printf("floors %s %s\n", serveGRPC(t, floorServer{}), ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// startMeshlimit runs the meshlimit-service binary bin on a redis-server of its own with
// benchRule, its gRPC and HTTP fronts on free loopback ports, until the test ends.
func startMeshlimit(t *testing.T, name, bin string) server {
	rs := redistest.Start(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bench.yaml"), []byte(benchRule), 0o600))
	s := server{name: name, grpc: fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t, false)), http: fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t, false))}
	args := []string{"-listen", s.http, "-grpc-listen", s.grpc, "-redis", rs.Addr(), "-ratelimit-config", dir, "-log-level", "warn"}
	if ms := benchEnv("MESHLIMIT_BENCH_TIMEOUT_MS", 0); ms > 0 {
		args = append(args, "-timeout", strconv.Itoa(ms)+"ms")
	}
	cmd := benchCommand(bin, args...)
	cmd.Env = append(os.Environ(), underValgrind()...)
	pid := startProcess(t, name, cmd, "http://"+s.http+"/readyz")
	s.pids = []int{pid, redisProcessID(rs)}
	require.NotZero(t, s.pids[1], "redis-server's pid")
	return s
}

// startPeer runs envoyproxy/ratelimit's binary bin on a redis-server of its own with benchRule
// (RUNTIME_ROOT a temporary directory), every port on loopback, until the test ends.
func startPeer(t *testing.T, bin string) server {
	rs := redistest.Start(t)
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "ratelimit", "config"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(root, "ratelimit", "config", "bench.yaml"), []byte(benchRule), 0o600))
	grpcPort, httpPort, debugPort := redistest.FreePort(t, false), redistest.FreePort(t, false), redistest.FreePort(t, false)
	cmd := benchCommand(bin)
	cmd.Env = append(underValgrind(), "USE_STATSD=false", "LOG_LEVEL=warn", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+rs.Addr(),
		"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(httpPort), "GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(grpcPort),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(debugPort))
	s := server{name: "peer", grpc: fmt.Sprintf("127.0.0.1:%d", grpcPort), http: fmt.Sprintf("127.0.0.1:%d", httpPort)}
	pid := startProcess(t, "peer", cmd, "http://"+s.http+"/healthcheck")
	s.pids = []int{pid, redisProcessID(rs)}
	require.NotZero(t, s.pids[1], "redis-server's pid")
	return s
}

// startProcess starts cmd, its output to a file of the test's temporary directory, waits until
// ready answers 200 (at most 2 minutes: valgrind is slow to start) and returns its pid; the process is killed when the test ends.
func startProcess(t *testing.T, name string, cmd *exec.Cmd, ready string) int {
	out, err := os.Create(filepath.Join(t.TempDir(), name+".log"))
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start(), name)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		out.Close()
	})
	redistest.WaitFor(t, 2*time.Minute, name+" ready", func() bool {
		resp, err := http.Get(ready)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return cmd.Process.Pid
}

// pidsCPU is the CPU the processes pids have used so far (procCPU's sum).
func pidsCPU(pids []int) time.Duration {
	var total time.Duration
	for _, pid := range pids {
		total += procCPU(pid)
	}
	return total
}

// loadAverage is the machine's load averages over 1, 5 and 15 minutes (/proc/loadavg).
func loadAverage() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// errorCounters returns the non-zero meshlimit_errors_total and meshlimit_store_* counters of the
// service whose HTTP address is addr (its /metrics).
func errorCounters(t *testing.T, addr string) []string {
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "meshlimit_errors_total") && !strings.HasPrefix(line, "meshlimit_store_overloaded") && !strings.HasPrefix(line, "meshlimit_store_late") {
			continue
		}
		if f := strings.Fields(line); len(f) == 2 && f[1] != "0" {
			out = append(out, line)
		}
	}
	return out
}

// benchCommand is the command of program and args, under callgrind when MESHLIMIT_BENCH_CALLGRIND
// names a directory for its counts.
func benchCommand(program string, args ...string) *exec.Cmd {
	if dir := os.Getenv("MESHLIMIT_BENCH_CALLGRIND"); dir != "" {
		return exec.Command("valgrind", append([]string{"--tool=callgrind", "--callgrind-out-file=" + filepath.Join(dir, "callgrind.out.%p"), program}, args...)...)
	}
	return exec.Command(program, args...)
}

// underValgrind is the environment the servers add under callgrind: Go's preemption signals off.
func underValgrind() []string {
	if os.Getenv("MESHLIMIT_BENCH_CALLGRIND") == "" {
		return nil
	}
	return []string{"GODEBUG=asyncpreemptoff=1"}
}

// callgrind sends callgrind_control's command (-z zero, -d dump) to the server pid when the
// servers run under callgrind (MESHLIMIT_BENCH_CALLGRIND), and after a dump returns the
// instructions it counted since the last zero (the "totals:" of its newest dump); else 0.
func callgrind(t *testing.T, command string, pid int) int64 {
	dir := os.Getenv("MESHLIMIT_BENCH_CALLGRIND")
	if dir == "" {
		return 0
	}
	pattern := filepath.Join(dir, fmt.Sprintf("callgrind.out.%d.*", pid))
	before, _ := filepath.Glob(pattern)
	out, err := exec.Command("callgrind_control", command, strconv.Itoa(pid)).CombinedOutput()
	require.NoError(t, err, "%s", out)
	if command != "-d" {
		return 0
	}
	var dumps []string // the dump is written when the process next runs: wait for it
	redistest.WaitFor(t, time.Minute, fmt.Sprintf("callgrind's dump of %d", pid), func() bool {
		dumps, _ = filepath.Glob(pattern)
		return len(dumps) > len(before)
	})
	n := func(f string) int { i, _ := strconv.Atoi(f[strings.LastIndexByte(f, '.')+1:]); return i }
	newest := slices.MaxFunc(dumps, func(a, b string) int { return n(a) - n(b) })
	b, err := os.ReadFile(newest)
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "totals: "); ok {
			ir, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			require.NoError(t, err)
			return ir
		}
	}
	t.Fatalf("%s has no totals", newest)
	return 0
}
