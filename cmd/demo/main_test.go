package main

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// demoRun is one run of the demo, shared by the tests that read its output.
var demoRun struct {
	once sync.Once
	out  string
	err  error
}

// demoOutput runs the demo on the built module once per test binary and returns what it printed.
func demoOutput(t *testing.T) string {
	demoRun.once.Do(func() {
		// The demo itself takes seconds; under the race detector on a machine busy with other work
		// it took over 4 minutes. No deadline here: go test's -timeout bounds a hang.
		var out bytes.Buffer
		demoRun.err = run(context.Background(), &out, "../../build/meshlimit.wasm", "", 2)
		demoRun.out = out.String()
	})
	require.NoError(t, demoRun.err, "run `make wasm` first if the module is missing")
	return demoRun.out
}

// TestTheDemoRunsAndReports keeps `make demo` true: it runs the demo on the built module and checks the
// report says what the README promises.
func TestTheDemoRunsAndReports(t *testing.T) {
	report := demoOutput(t)
	assert.Contains(t, report, "GET /api/orders (203.0.113.7)      allowed  8  limited  4")
	assert.Contains(t, report, "GET /search?q=wasm (alice)         allowed  4  limited  2")
	assert.Contains(t, report, "POST /login (198.51.100.23)        allowed  4  limited  0")
	assert.Contains(t, report, "POST /signin (198.51.100.50)       allowed  3  limited  1", "three failed sign-ins, then the penalty box")
	assert.Contains(t, report, "POST /signin (198.51.100.51)       allowed  1  limited  0", "another client signs in")
	assert.Contains(t, report, "429  x-meshlimit-rule: signin  Retry-After: 600")
	assert.Contains(t, report, "POST /signin (198.51.100.50, reset) 200", "an admin reset frees the penalty box through the reset log")
	assert.Contains(t, report, `"shadow":"login"`, "the shadow rule tags the upstream request")
	assert.Contains(t, report, "HTTP/1.1 429 Too Many Requests")
	assert.Contains(t, report, `Ratelimit-Policy: "search";q=4;w=60;qu="requests"`)
	assert.Contains(t, report, `meshlimit_decisions_total{algorithm="token_bucket",result="denied"} 1`)

	assert.Contains(t, report, "while they run: 3 in flight at the upstream, 5 answered 429 at once", "a concurrency limit of 3")
	assert.Contains(t, report, `a 429: RateLimit-Policy: "gpu-slots";q=3;qu="concurrent-requests"  RateLimit: "gpu-slots";r=0  (no Retry-After`)
	assert.Contains(t, report, "in the end: 3 answered 200, 5 answered 429")
	assert.Contains(t, report, "sheddable: 7 admitted, 3 shed with 503 (Retry-After: ", "sheddable is shed from 70% of 10")
	assert.Contains(t, report, "critical:  3 admitted, 0 shed", "critical passes while sheddable is shed")
	assert.Contains(t, report, "meshlimit.shed.sheddable.shed                  3")

	assert.Contains(t, report, `max_tokens 400   200  used 120: 280 refunded        RateLimit at admission: "tokens";r=600;`, "the unused reservation comes back")
	assert.Contains(t, report, `max_tokens 800   200  used 800: as reserved         RateLimit at admission: "tokens";r=80;`, "880 were left after the refund")
	assert.Contains(t, report, "max_tokens 200   429  the reservation does not fit what is left")
	assert.Contains(t, report, "max_tokens 50    200  used  75: 25 over-run charged", "an over-run is charged")
	assert.Contains(t, report, "gRPC stream (ann), the client writing every 20 ms when not held: 25 messages reached the server", "5 burst + 5/s × 4 s")
	assert.Contains(t, report, "WebSocket echo (bob): 25 messages reached the server, 24 echoes reached the client", "the last echo is still held")
	assert.Contains(t, report, "on_limit end, 6 messages at once (cat): the client gets [[:status 200] [content-type application/grpc] [grpc-status 8]")
	assert.Contains(t, report, "settled 3 completions: 280 tokens refunded, 25 charged beyond their reservations")
}
