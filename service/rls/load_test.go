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
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/redisstore"
	"github.com/meshlimit/meshlimit/service/rlsconfig"
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
		if len(results[pair[0]]) == 0 || len(results[pair[1]]) == 0 {
			continue
		}
		var ratios, p99s, cpus []float64
		errs, n := 0, 0
		for r := range rounds {
			a, b := results[pair[0]][r], results[pair[1]][r]
			ratios, p99s = append(ratios, a.rps/b.rps), append(p99s, float64(a.p99)/float64(b.p99))
			cpus = append(cpus, b.cpuUs/a.cpuUs)
			errs, n = errs+a.errors, n+a.n+a.errors
		}
		slices.Sort(ratios)
		slices.Sort(p99s)
		slices.Sort(cpus)
		t.Logf("%s / %s: throughput median %.2f (rounds %.2f), p99 median %.2f, CPU per request: floor / service median %.2f (rounds %.2f), errors %d of %d (%.3f%%)",
			pair[0], pair[1], ratios[len(ratios)/2], ratios, p99s[len(p99s)/2], cpus[len(cpus)/2], cpus, errs, n, 100*float64(errs)/float64(n))
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
	cpuUs    float64 // CPU µs (this process and redis-server) per request, answered or not
}

// selfCPU returns the CPU time (user and system) this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisWait returns how long redis-server's threads have waited, runnable, for a CPU (the
// second field of /proc/PID/task/*/schedstat, PID from INFO server; 0 where Linux does not say).
func redisWait(rs *redistest.Server) time.Duration {
	out, err := rs.Do("INFO", "server")
	if err != nil {
		return 0
	}
	pid := ""
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid = v
		}
	}
	files, _ := filepath.Glob("/proc/" + pid + "/task/*/schedstat")
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
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: inflight, MaxConnsPerHost: inflight}}
	defer c.CloseIdleConnections()
	url := "http://" + addr + "/json"
	return drive(inflight, d, func(i int) bool {
		resp, err := c.Post(url, "application/json", bytes.NewReader(bodies[i%len(bodies)]))
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// grpcLoad keeps inflight calls going over nconns connections for d; a call counts when it
// answers OK.
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
	return drive(inflight, d, func(i int) bool {
		resp, err := clients[i%nconns].ShouldRateLimit(context.Background(), reqs[i%len(reqs)])
		return err == nil && resp.GetOverallCode() == pb.RateLimitResponse_OK
	})
}

// drive runs call from inflight goroutines for d (goroutine g calls with g, g+inflight, ...)
// and measures the successful calls.
func drive(inflight int, d time.Duration, call func(i int) bool) (grpcResult, error) {
	var wg sync.WaitGroup
	lat := make([][]time.Duration, inflight)
	errs := make([]int, inflight)
	end := time.Now().Add(d)
	for g := range inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; time.Now().Before(end); i += inflight {
				start := time.Now()
				if !call(i) {
					errs[g]++
					continue
				}
				lat[g] = append(lat[g], time.Since(start))
			}
		}()
	}
	wg.Wait()
	var all []time.Duration
	res := grpcResult{}
	for g := range lat {
		all = append(all, lat[g]...)
		res.errors += errs[g]
	}
	if len(all) == 0 {
		return res, fmt.Errorf("no successful call")
	}
	slices.Sort(all)
	res.n = len(all)
	res.rps = float64(len(all)) / d.Seconds()
	res.p50, res.p99 = all[len(all)/2], all[len(all)*99/100]
	return res, nil
}
