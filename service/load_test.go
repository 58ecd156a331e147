package service

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
)

// TestLoadFigures measures, side by side on this machine and against one redis-server, the
// service's checks per second and latency at 64 connections (Redis store and memory store),
// the HTTP floor (a Go handler that reads the body and answers a constant), and
// redis-benchmark running the token-bucket script with EVALSHA. Loopback only, bounded in
// time. It runs when MESHLIMIT_BENCH=1 (MESHLIMIT_BENCH_SECONDS per phase, default 5):
//
//	MESHLIMIT_BENCH=1 go test -run TestLoadFigures -v ./service/
func TestLoadFigures(t *testing.T) {
	if os.Getenv("MESHLIMIT_BENCH") != "1" {
		t.Skip("set MESHLIMIT_BENCH=1 to measure")
	}
	d := time.Duration(envInt("MESHLIMIT_BENCH_SECONDS", 5)) * time.Second
	const conns = 64
	rs := startRedis(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	floor := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"allowed":true}` + "\n"))
	})
	redisStore, err := NewRedisStore(RedisConfig{Addrs: []string{rs.Addr()}, FlushDelay: time.Duration(envInt("MESHLIMIT_BENCH_FLUSH_US", 0)) * time.Microsecond})
	require.NoError(t, err)
	t.Cleanup(func() { redisStore.Close() })
	memStore := NewMemoryStore(MemoryConfig{})
	t.Cleanup(func() { memStore.Close() })
	withRedis, err := NewHandler(Config{Store: redisStore, Logger: quiet, Timeout: time.Second})
	require.NoError(t, err)
	withMemory, err := NewHandler(Config{Store: memStore, Logger: quiet, Timeout: time.Second})
	require.NoError(t, err)

	results := map[string]loadResult{}
	for _, p := range []struct {
		name string
		h    http.Handler
	}{{"floor", floor}, {"service+redis", withRedis}, {"service+memory", withMemory}} {
		res := runLoad(t, p.h, conns, d)
		results[p.name] = res
		t.Logf("%-15s %9.0f req/s  p50 %6.3f ms  p99 %6.3f ms  errors %d  (%d requests)",
			p.name, res.rps, ms(res.p50), ms(res.p99), res.errors, res.n)
	}
	for _, name := range []string{"service+redis", "service+memory"} {
		t.Logf("%s / floor = %.2f", name, results[name].rps/results["floor"].rps)
	}

	src, err := Script(algorithms.TokenBucket)
	require.NoError(t, err)
	sha, err := rs.Do("SCRIPT", "LOAD", src)
	require.NoError(t, err)
	// The service's exact call: 10,000 keys, quota 10^9 per second, cost 1, Redis TIME.
	args := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(rs.Port()), "-c", strconv.Itoa(conns),
		"-n", strconv.Itoa(int(max(results["service+redis"].rps, 20000)) * int(d/time.Second)), "-r", "10000", "-q",
		"evalsha", sha, "1", "ml:{bench:__rand_int__}:token_bucket", "1000000000", "1000000", "0", "1", "1000"}
	ctx, cancel := context.WithTimeout(context.Background(), 4*d)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-benchmark", args...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Logf("redis-benchmark %v\n%s", args, bytes.TrimSpace(lastLine(out)))
}

type loadResult struct {
	n, errors int
	rps       float64
	p50, p99  time.Duration
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func lastLine(b []byte) []byte {
	b = bytes.TrimRight(b, "\r\n ")
	if i := bytes.LastIndexAny(b, "\r\n"); i >= 0 {
		return b[i+1:]
	}
	return b
}

// runLoad serves h on a loopback port and drives it from conns goroutines, one keep-alive
// connection each, for d; each request checks one of 10,000 keys under a token bucket that
// always admits.
func runLoad(t *testing.T, h http.Handler, conns int, d time.Duration) loadResult {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/v1/check"

	var wg sync.WaitGroup
	lat := make([][]time.Duration, conns)
	errs := make([]int, conns)
	deadline := time.Now().Add(d)
	for c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
			for i := 0; time.Now().Before(deadline); i++ {
				body := fmt.Appendf(nil, `{"descriptors":[{"key":"user-%d","algorithm":"token_bucket","quota":1000000000,"window_ms":1000}]}`, (c*7919+i)%10000)
				start := time.Now()
				resp, err := client.Post(url, "application/json", bytes.NewReader(body))
				if err != nil {
					errs[c]++
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					errs[c]++
					continue
				}
				lat[c] = append(lat[c], time.Since(start))
			}
		}()
	}
	wg.Wait()
	all := slices.Concat(lat...)
	slices.Sort(all)
	res := loadResult{n: len(all), rps: float64(len(all)) / d.Seconds()}
	for _, e := range errs {
		res.errors += e
	}
	if len(all) > 0 {
		res.p50, res.p99 = all[len(all)/2], all[len(all)*99/100]
	}
	return res
}
