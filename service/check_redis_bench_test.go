package service_test

import (
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/service"
)

// BenchmarkACheckOnRedis measures one /v1/check through the handler on a real redis-server,
// without the network, one at a time, with 1 and 16 token-bucket descriptors over 1,024 bodies
// (distinct keys) that always pass. ns/op is latency on a shared machine; the load-independent
// figure is the instruction count per check (BENCHMARKS.md, callgrind over two -benchtime
// counts).
func BenchmarkACheckOnRedis(b *testing.B) {
	store := newRedisStore(b, benchRedisAddr(b))
	h := newTestHandler(b, service.Config{Store: store, Timeout: time.Minute}) // valgrind is slow
	for _, n := range []int{1, 16} {
		bodies := checkBodies(1024, n)
		b.Run(fmt.Sprintf("descriptors=%d", n), func(b *testing.B) {
			r := httptest.NewRequest("POST", "/v1/check", nil)
			body := strings.NewReader("")
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				s := bodies[i%len(bodies)]
				body.Reset(s)
				r.Body, r.ContentLength = noClose{body}, int64(len(s))
				w.Body.Reset()
				h.ServeHTTP(w, r)
				if w.Code != 200 || !strings.HasPrefix(w.Body.String(), `{"allowed":true`) {
					b.Fatal(w.Code, w.Body.String())
				}
			}
		})
	}
}

// benchRedisAddr is the redis-server of a benchmark: MESHLIMIT_BENCH_REDIS (host:port, flushed
// first) when set, so that the benchmark runs under valgrind (whose callgrind does not survive the
// signals of a child process), else one of its own.
func benchRedisAddr(b *testing.B) string {
	addr := os.Getenv("MESHLIMIT_BENCH_REDIS")
	if addr == "" {
		return redistest.Start(b).Addr()
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("FLUSHALL\r\n")); err != nil {
		b.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 16)); err != nil {
		b.Fatal(err)
	}
	return addr
}

// checkBodies are count /v1/check bodies of n token-bucket descriptors each, every key distinct.
func checkBodies(count, n int) []string {
	bodies := make([]string, count)
	for i := range bodies {
		var sb strings.Builder
		sb.WriteString(`{"descriptors":[`)
		for j := range n {
			if j > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `{"key":"bench/ip/%d","algorithm":"token_bucket","quota":1000000000,"window_ms":1000}`, i*n+j)
		}
		sb.WriteString(`]}`)
		bodies[i] = sb.String()
	}
	return bodies
}
