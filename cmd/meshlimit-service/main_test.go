package main

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseOptions(t *testing.T) {
	env := map[string]string{"MESHLIMIT_TIMEOUT": "20ms", "MESHLIMIT_REDIS": "a:1,b:2", "MESHLIMIT_SECRET": "s"}
	o, err := parseOptions([]string{"-timeout", "30ms"}, func(k string) string { return env[k] })
	require.NoError(t, err)
	assert.Equal(t, 30*time.Millisecond, o.timeout, "the flag wins over the environment")
	assert.Equal(t, "a:1,b:2", o.redis)
	assert.Equal(t, "s", o.secret)
	assert.Equal(t, ":8080", o.listen)
	assert.Equal(t, 100*time.Microsecond, o.flushDelay)

	for _, args := range [][]string{{"-timeout", "0"}, {"-max-keys", "x"}, {"-allow-client-time", "maybe"}, {"-redis-flush-delay", "-1ms"}, {"extra"}} {
		_, err := parseOptions(args, func(string) string { return "" })
		assert.Error(t, err, "%q", args)
	}
}

// The binary's wiring serves the API on the in-memory store and shuts down gracefully when
// its context ends.
func TestRunServesAndShutsDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	l.Close()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-listen", addr, "-log-level", "error"}, func(string) string { return "" })
	}()

	base := "http://" + addr
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 5*time.Second, 10*time.Millisecond)
	resp, err := http.Post(base+"/v1/check", "application/json",
		strings.NewReader(`{"descriptors":[{"key":"k","algorithm":"fixed_window","quota":1,"window_ms":1000}]}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
}
