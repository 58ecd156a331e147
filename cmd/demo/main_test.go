package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTheDemoRunsAndReports keeps `make demo` true: it runs the demo on the built module and checks the
// report says what the README promises.
func TestTheDemoRunsAndReports(t *testing.T) {
	// The demo itself takes seconds; under the race detector on a loaded machine, compiling the
	// module for each VM alone can take a minute.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out, "../../build/meshlimit.wasm", "", 2), "run `make wasm` first if the module is missing")
	report := out.String()
	assert.Contains(t, report, "GET /api/orders (203.0.113.7)      allowed  8  limited  4")
	assert.Contains(t, report, "GET /search?q=wasm (alice)         allowed  4  limited  2")
	assert.Contains(t, report, "POST /login (198.51.100.23)        allowed  4  limited  0")
	assert.Contains(t, report, "POST /signin (198.51.100.50)       allowed  3  limited  1", "three failed sign-ins, then the penalty box")
	assert.Contains(t, report, "POST /signin (198.51.100.51)       allowed  1  limited  0", "another client signs in")
	assert.Contains(t, report, "429  x-meshlimit-rule: signin  Retry-After: 600")
	assert.Contains(t, report, `"shadow":"login"`, "the shadow rule tags the upstream request")
	assert.Contains(t, report, "HTTP/1.1 429 Too Many Requests")
	assert.Contains(t, report, `Ratelimit-Policy: "search";q=4;w=60;qu="requests"`)
	assert.Contains(t, report, `meshlimit_decisions_total{algorithm="token_bucket",result="denied"} 1`)
}
