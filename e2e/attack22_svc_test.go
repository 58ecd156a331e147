package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/meshlimit/meshlimit/internal/redistest"
)

// The independent review of issue 22's service changes (docs/reviews/issue22-service-attack.md)
// drives the compiled service binary, never its source: these tests build cmd/meshlimit-service
// from this tree once (ATTACK22_SERVICE names another binary to drive instead, say a release's).

var a22svcBuilt struct {
	once sync.Once
	bin  string
	err  error
}

// a22svcBinary is the service binary under test: ATTACK22_SERVICE, else this tree's build.
func a22svcBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("ATTACK22_SERVICE"); bin != "" {
		return bin
	}
	a22svcBuilt.once.Do(func() {
		dir, err := os.MkdirTemp("", "meshlimit-service-")
		if err != nil {
			a22svcBuilt.err = err
			return
		}
		a22svcBuilt.bin = filepath.Join(dir, "meshlimit-service")
		out, err := exec.Command("go", "build", "-o", a22svcBuilt.bin, "../cmd/meshlimit-service").CombinedOutput()
		if err != nil {
			a22svcBuilt.err = fmt.Errorf("go build ../cmd/meshlimit-service: %v\n%s", err, out)
		}
	})
	require.NoError(t, a22svcBuilt.err)
	return a22svcBuilt.bin
}

// a22svcStart starts the service under test on a 127.0.0.1 port against redisAddr, with extra
// flags, and returns its base URL once /readyz answers 200. It is killed when the test ends.
func a22svcStart(t *testing.T, redisAddr string, flags ...string) string {
	t.Helper()
	bin := a22svcBinary(t)
	addr := a22svcFreeAddr(t)
	args := append([]string{"-listen", addr, "-redis", redisAddr, "-shutdown-drain", "0"}, flags...)
	cmd := exec.Command(bin, args...)
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("service log:\n%s", log.String())
		}
	})
	url := "http://" + addr
	redistest.WaitFor(t, 10*time.Second, "the service answers /readyz", func() bool {
		r, err := http.Get(url + "/readyz")
		if err != nil {
			return false
		}
		_ = r.Body.Close()
		return r.StatusCode == http.StatusOK
	})
	return url
}

// a22svcCheck posts body to /v1/check and returns the answer, failing the test on any status but 200.
func a22svcCheck(t *testing.T, url, body string) map[string]any {
	t.Helper()
	r, err := http.Post(url+"/v1/check", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, r.StatusCode, "%s -> %s", body, b)
	var a map[string]any
	require.NoError(t, json.Unmarshal(b, &a))
	return a
}

// a22svcMetric reads one sample of the service's /metrics, by its full name with labels.
func a22svcMetric(t *testing.T, url, name string) float64 {
	t.Helper()
	r, err := http.Get(url + "/metrics")
	require.NoError(t, err)
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			require.NoError(t, err)
			return f
		}
	}
	require.Failf(t, "no such metric", "%s", name)
	return 0
}

// a22svcCommandCalls reads Redis's INFO commandstats: the calls of each command, by lower-case name.
func a22svcCommandCalls(t *testing.T, r *redistest.Server) map[string]int {
	t.Helper()
	s, err := r.Do("INFO", "commandstats")
	require.NoError(t, err)
	calls := map[string]int{}
	for _, line := range strings.Split(s, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, fields, _ := strings.Cut(rest, ":")
		for _, f := range strings.Split(fields, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				calls[name], _ = strconv.Atoi(v)
			}
		}
	}
	return calls
}

// Finding 1 of the review: a sliding log whose ring is full (quota runs of one unit each, so it
// cannot double) and whose middle run an undo emptied is rewritten whole (a SET of the ring) by
// the next decision, and by every decision after each such undo: O(quota) per decision, which
// service/API.md ("Redis work per check") excludes outside a doubling and a conversion. Measured on
// quota 10^4: 5.7–15 ms of Redis per decision against 0.07 ms, and one check of 64 undos and 64
// decisions on 64 such logs held Redis 0.77–1.1 s in one script.
func TestADecisionAfterAnUndoInTheMiddleOfAFullSlidingLogDoesNotRewriteTheRing(t *testing.T) {
	r := redistest.Start(t)
	url := a22svcStart(t, r.Addr(), "-allow-client-time", "-timeout", "5s", "-store-timeout", "5s")
	const quota = 2000
	desc := fmt.Sprintf(`"key":"a22-ring","algorithm":"sliding_log","quota":%d,"window_ms":3600000`, quota)
	t0 := int64(1_800_000_000_000_000)
	now := t0
	for range quota {
		a := a22svcCheck(t, url, fmt.Sprintf(`{"now_us":%d,"descriptors":[{%s}]}`, now, desc))
		require.Equal(t, true, a["allowed"])
		now += 1000
	}
	for round := range 3 {
		middle := t0 + int64(quota/2+round)*1000
		a22svcCheck(t, url, fmt.Sprintf(`{"now_us":%d,"settle":[{%s,"undo":true,"delta":-1,"at_us":%d}]}`, now, desc, middle))
		now += 1000
		before := a22svcCommandCalls(t, r)
		a := a22svcCheck(t, url, fmt.Sprintf(`{"now_us":%d,"descriptors":[{%s}]}`, now, desc))
		after := a22svcCommandCalls(t, r)
		now += 1000
		require.Equal(t, true, a["allowed"], "the undo freed one unit")
		onLog := 0
		for _, c := range []string{"get", "set", "getrange", "setrange", "strlen"} {
			onLog += after[c] - before[c]
		}
		t.Logf("round %d: %d commands on the log besides PEXPIRE, %d SET", round, onLog, after["set"]-before["set"])
		assert.Zero(t, after["set"]-before["set"], "round %d: the decision rewrote the whole ring with SET", round)
		assert.LessOrEqual(t, onLog, 8, "round %d: commands on the log besides PEXPIRE (API.md: at most 8)", round)
	}
}

// Finding 2 of the review: meshlimit_settled_units_total{kind="refunded"} counts the units a
// settle asked to refund, not those the store gave back: a refund of 7 into a token bucket that
// had 2 units used counts 7 (the bucket holds at most its capacity), a refund into a fresh bucket
// or an empty fixed window counts everything, and one entry of delta -10^12 adds 10^12.
// given_back (the undo's units) counts what the store gave back; refunded should too.
func TestTheRefundedCounterCountsOnlyTheUnitsASettleGaveBack(t *testing.T) {
	r := redistest.Start(t)
	url := a22svcStart(t, r.Addr())
	refunded := func() float64 { return a22svcMetric(t, url, `meshlimit_settled_units_total{kind="refunded"}`) }
	bucket := `"key":"a22-refund","algorithm":"token_bucket","quota":10,"window_ms":600000`
	cases := []struct {
		name   string
		before string // a check run first, or ""
		settle string
		want   float64
	}{
		{"a refund into a fresh bucket gives nothing back", "",
			`{` + bucket + `,"delta":-7}`, 0},
		{"a refund of 7 into a bucket with 2 units used gives back 2",
			`{"descriptors":[{` + bucket + `,"cost":2}]}`, `{` + bucket + `,"delta":-7}`, 2},
		{"a refund into an empty fixed window gives nothing back", "",
			`{"key":"a22-refund-fw","algorithm":"fixed_window","quota":10,"window_ms":600000,"delta":-9}`, 0},
		{"a refund of 10^12 into a fresh leaky bucket gives nothing back", "",
			`{"key":"a22-refund-lb","algorithm":"leaky_bucket","quota":10,"window_ms":600000,"delta":-1000000000000}`, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.before != "" {
				a22svcCheck(t, url, c.before)
			}
			was := refunded()
			a22svcCheck(t, url, `{"settle":[`+c.settle+`]}`)
			assert.Equal(t, c.want, refunded()-was)
		})
	}
}

// a22rawCodec sends and receives a gRPC message's bytes as they are, so that a test can send what
// no generated client would.
type a22rawCodec struct{}

func (a22rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (a22rawCodec) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), b...)
	return nil
}
func (a22rawCodec) Name() string { return "proto" }

// a22svcFreeAddr is a 127.0.0.1 address free a moment before (redistest.FreePort's port).
func a22svcFreeAddr(t *testing.T) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t, false))
}

// Finding 3 of the review: a request past the front's bounds (more than 64 descriptors, or more than
// 64 entries in one) is refused only after it was decoded whole, and decoding allocates about 47
// times the message (gRPC) or 51 times the body (/json): 12.2 MB for a 256 KiB message of 131,038
// empty descriptors (16.6 MB before svccpu22), 13.3 MB for a /json body of 87,000. One gRPC
// connection with its 128 streams of such messages grew the replica from 44 MB to 1.2 GB resident
// (heap in use 1.28 GB) in 4 s; the API's "no client can grow a replica past its memory" bounds the
// messages in flight (128 × 256 KiB = 32 MiB a connection), not what decoding them costs.
func TestARequestPastTheDescriptorBoundsIsRefusedWithoutAllocatingManyTimesItsSize(t *testing.T) {
	url, grpcAddr := bounds22Start(t)
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(a22rawCodec{}), grpc.MaxCallSendMsgSize(1<<20)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	const size = 256*1024 - 64
	grpcMessage := bounds22EmptyDescriptors(size)
	wideMessage := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "d")
	wideMessage = protowire.AppendTag(wideMessage, 2, protowire.BytesType)
	wideMessage = protowire.AppendVarint(wideMessage, uint64(size-len(wideMessage)-3)/2*2)
	for len(wideMessage)+2 <= size {
		wideMessage = append(wideMessage, 0x0a, 0x00) // field 1 (entries), an empty message
	}
	// An unknown field first: the message is not the hand decoder's, proto.Unmarshal's.
	unknownFirst := append(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1), grpcMessage[:size-9]...)
	// A truncated field last: the message is malformed, known only at its end.
	truncatedLast := append(grpcMessage[:size-9:size-9], 0x12, 0x05)
	jsonBody := `{"domain":"d","descriptors":[{}` + strings.Repeat(`,{}`, (size-40)/3) + `]}`
	jsonWide := `{"domain":"d","descriptors":[{"entries":[{}` + strings.Repeat(`,{}`, (size-60)/3) + `]}]}`
	invoke := func(msg []byte) func(t *testing.T) {
		return func(t *testing.T) {
			in, out := msg, []byte(nil)
			err := conn.Invoke(t.Context(), "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", &in, &out)
			require.Equal(t, codes.InvalidArgument, grpcstatus.Code(err), "%v", err)
		}
	}
	post := func(body string) func(t *testing.T) {
		return func(t *testing.T) {
			resp, err := http.Post(url+"/json", "application/json", strings.NewReader(body))
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			require.Equal(t, http.StatusBadRequest, resp.StatusCode)
		}
	}
	cases := []struct {
		name string
		size int
		send func(t *testing.T)
	}{
		{"a ShouldRateLimit message of 131,038 empty descriptors", len(grpcMessage), invoke(grpcMessage)},
		{"a ShouldRateLimit message of one descriptor of 131,036 empty entries", len(wideMessage), invoke(wideMessage)},
		{"a ShouldRateLimit message of an unknown field and 131,034 empty descriptors", len(unknownFirst), invoke(unknownFirst)},
		{"a ShouldRateLimit message of 131,034 empty descriptors and a truncated one", len(truncatedLast), invoke(truncatedLast)},
		{"a /json body of 87,000 empty descriptors", len(jsonBody), post(jsonBody)},
		{"a /json body of one descriptor of 87,000 empty entries", len(jsonWide), post(jsonWide)},
	}
	const calls = 10
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := a22svcMetric(t, url, "go_memstats_alloc_bytes_total")
			for range calls {
				c.send(t)
			}
			perCall := (a22svcMetric(t, url, "go_memstats_alloc_bytes_total") - before) / calls
			t.Logf("%.0f bytes allocated per refused request of %d bytes (%.2f times)", perCall, c.size, perCall/float64(c.size))
			assert.LessOrEqual(t, perCall, float64(8*c.size), "bytes allocated per refused request of %d bytes", c.size)
		})
	}
}
