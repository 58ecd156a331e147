package main

import (
	"context"
	"log/slog"
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
	assert.Equal(t, "a:1,b:2", o.redis.addrs)
	assert.Equal(t, "s", o.secret)
	assert.Equal(t, ":8081", o.listen, "the port of every deploy file")
	assert.Equal(t, 100*time.Microsecond, o.redis.flushDelay)
	assert.Equal(t, slog.LevelInfo, o.logLevel)

	for _, args := range [][]string{{"-timeout", "0"}, {"-max-keys", "x"}, {"-allow-client-time", "maybe"}, {"-redis-flush-delay", "-1ms"}, {"extra"}} {
		_, err := parseOptions(args, func(string) string { return "" })
		assert.Error(t, err, "%q", args)
	}
}

func TestAStoreMinInflightAboveTheMaxIsRefusedNamingBothFlags(t *testing.T) {
	o, err := parseOptions(nil, func(string) string { return "" })
	require.NoError(t, err)
	assert.Equal(t, 128, o.storeMinInflight)
	assert.Equal(t, 16*128, o.storeMaxInflight, "the bound may grow 16 times by default")
	_, err = parseOptions([]string{"-store-min-inflight", "65", "-store-max-inflight", "64"}, func(string) string { return "" })
	assert.EqualError(t, err, "-store-min-inflight 65: more than -store-max-inflight 64")
}

// A flag's environment variable is typed like the flag, and a bad value is named by the
// variable it came from.
func TestAnEnvironmentValueIsParsedAsItsFlag(t *testing.T) {
	env := map[string]string{"MESHLIMIT_ALLOW_CLIENT_TIME": "true", "MESHLIMIT_SHUTDOWN_GRACE": "1.5s", "MESHLIMIT_MAX_CONNS": "7", "MESHLIMIT_LOG_LEVEL": "warn"}
	o, err := parseOptions(nil, func(k string) string { return env[k] })
	require.NoError(t, err)
	assert.True(t, o.allowClientTime)
	assert.Equal(t, 1500*time.Millisecond, o.grace)
	assert.Equal(t, 7, o.maxConns)
	assert.Equal(t, slog.LevelWarn, o.logLevel)
	for name, want := range map[string]string{
		"MESHLIMIT_ALLOW_CLIENT_TIME": `MESHLIMIT_ALLOW_CLIENT_TIME: want true or false, got "maybe"`,
		"MESHLIMIT_TIMEOUT":           `MESHLIMIT_TIMEOUT: want a positive duration, got "maybe"`,
		"MESHLIMIT_MAX_KEYS":          `MESHLIMIT_MAX_KEYS: want a positive integer, got "maybe"`,
	} {
		_, err := parseOptions(nil, func(k string) string { return map[string]string{name: "maybe"}[k] })
		assert.EqualError(t, err, want)
	}
	_, err = parseOptions([]string{"-timeout", "5ms"}, func(k string) string { return map[string]string{"MESHLIMIT_TIMEOUT": "maybe"}[k] })
	assert.NoError(t, err, "the flag wins: its variable is not read")
}

// Durations are logged as text, not as slog's JSON nanoseconds.
func TestDurationsAreLoggedAsText(t *testing.T) {
	var b strings.Builder
	slog.New(slog.NewJSONHandler(&b, &slog.HandlerOptions{ReplaceAttr: durationsAsText})).Info("listening", "timeout", 1500*time.Millisecond, "flush_delay", 100*time.Microsecond)
	assert.Contains(t, b.String(), `"timeout":"1.5s","flush_delay":"100µs"`)
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
		done <- run(ctx, []string{"-listen", addr, "-log-level", "error", "-shutdown-drain", "0"}, func(string) string { return "" })
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
