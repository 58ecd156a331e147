package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// -h used to log an ERROR line and exit 1: it prints the usage on stdout and exits 0.
func TestDashHPrintsUsageAndExitsZero(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := realMain(context.Background(), []string{"-h"}, func(string) string { return "" }, &stdout, &stderr)
	assert.Equal(t, 0, code)
	assert.Empty(t, stderr.String())
	for _, want := range []string{"Usage: meshlimit-service", "-redis", "-timeout", "-max-conns", "-idle-timeout", "MESHLIMIT_SECRET"} {
		assert.Contains(t, stdout.String(), want)
	}
	for _, typed := range []string{"  -allow-client-time\n", "  -grpc-reflection\n", "  -timeout duration\n", "  -max-conns int\n", "  -log-level level\n", `(default ":8081")`} {
		assert.Contains(t, stdout.String(), typed, "booleans take no value; the others say their type")
	}
}

// Every error of the binary is one line on stderr, naming what to fix.
func TestEveryErrorOfTheBinaryIsOneClearLine(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"an unknown flag", []string{"-listn", ":1"}, 2, "meshlimit-service: flag provided but not defined: -listn"},
		{"a bad duration", []string{"-timeout", "soon"}, 2, `meshlimit-service: -timeout: want a positive duration, got "soon"`},
		{"a bad log level", []string{"-log-level", "loud"}, 2, `meshlimit-service: -log-level: want debug, info, warn or error, got "loud"`},
		{"a bad connection cap", []string{"-max-conns", "0"}, 2, `meshlimit-service: -max-conns: want a positive integer, got "0"`},
		{"an address in use", []string{"-listen", taken.Addr().String(), "-log-level", "error"}, 1, "meshlimit-service: -listen " + taken.Addr().String() + ": listen tcp"},
		{"a Redis that does not answer", []string{"-redis", "127.0.0.1:1", "-log-level", "error"}, 1, "meshlimit-service: -redis 127.0.0.1:1: redisstore:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := realMain(context.Background(), tc.args, func(string) string { return "" }, &stdout, &stderr)
			assert.Equal(t, tc.code, code)
			assert.Empty(t, stdout.String())
			line := stderr.String()
			assert.True(t, strings.HasPrefix(line, tc.want), "%q should start with %q", line, tc.want)
			assert.Equal(t, 1, strings.Count(line, "\n"), "one line: %q", line)
		})
	}
}

// Attack22 finding 4: -store-timeout 9999999h (past Go's longest duration) was refused as "want
// a positive duration", and 1ns was accepted, after which every admitted call's answer was thrown
// away. The flag takes 1ms to 1m and says so.
func TestTheStoreTimeoutIsRefusedOutsideItsRangeNamingTheRange(t *testing.T) {
	for _, tc := range []struct {
		name, value string
	}{
		{"a duration past Go's longest", "9999999h"},
		{"a nanosecond, which no Redis call returns within", "1ns"},
		{"just under a millisecond", "999us"},
		{"just over a minute", "1m0.001s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := realMain(context.Background(), []string{"-store-timeout", tc.value}, func(string) string { return "" }, &stdout, &stderr)
			assert.Equal(t, 2, code)
			assert.Equal(t, `meshlimit-service: -store-timeout: want a duration between 1ms and 1m0s, got "`+tc.value+`"`+"\n", stderr.String())
		})
	}
}

// startService runs the binary's run on a free port with args and returns its base address.
func startService(t *testing.T, args ...string) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"-listen", addr, "-log-level", "error", "-shutdown-drain", "0"}, args...), func(string) string { return "" })
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Error("run did not return")
		}
	})
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 5*time.Second, 10*time.Millisecond)
	return addr
}

// dialFlood opens n connections to addr, closed when the test ends, and has each do first
// (write a request, a preface) before the next is opened.
func dialFlood(t *testing.T, addr string, n int, first func(c net.Conn)) []net.Conn {
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range n {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		conns = append(conns, c)
		first(c)
	}
	return conns
}

// openIdle opens n connections that each get /healthz once and then stay open, idle.
func openIdle(t *testing.T, addr string, n int) []net.Conn {
	return dialFlood(t, addr, n, func(c net.Conn) {
		_, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: s\r\n\r\n")
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil { // closed to make room for a later one: that is the point
			return
		}
		resp.Body.Close()
	})
}

// stillOpen counts the connections the server has not closed.
func stillOpen(conns []net.Conn) int {
	n := 0
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		var b [1]byte
		if _, err := c.Read(b[:]); errors.Is(err, os.ErrDeadlineExceeded) {
			n++
		}
	}
	return n
}

// Idle keep-alive connections to the unauthenticated /healthz used to be held for two
// minutes each, without bound, until the process ran out of descriptors and checks hung. The
// service now holds at most -max-conns: a flood of idle (or silent) connections costs it that
// many descriptors, and every check from a fresh connection is still answered.
func TestAnIdleConnectionFloodDoesNotStarveChecks(t *testing.T) {
	const maxConns, flood = 32, 300
	addr := startService(t, "-max-conns", "32")
	idle := openIdle(t, addr, flood)
	silent := make([]net.Conn, 0, 100)
	for range 100 { // connections that never send a request
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		silent = append(silent, c)
		defer c.Close()
	}
	// The service judges quiet from when it accepted a connection, which a loaded machine does
	// late: wait until it has accepted the whole flood (at most the budget still open: the kernel's
	// queue holds none), then past the quiet time a new connection is given.
	redistest.WaitFor(t, 2*time.Minute, "the service to accept the flood", func() bool {
		return stillOpen(idle)+stillOpen(silent) <= maxConns
	})
	time.Sleep(150 * time.Millisecond)

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	const checks = 20
	ok := 0
	for range checks {
		resp, err := client.Post("http://"+addr+"/v1/check", "application/json",
			strings.NewReader(`{"descriptors":[{"key":"k","algorithm":"token_bucket","quota":1000,"window_ms":1000}]}`))
		if err == nil {
			if resp.StatusCode == http.StatusOK {
				ok++
			}
			resp.Body.Close()
		}
	}
	held := stillOpen(idle) + stillOpen(silent)
	t.Logf("%d idle and %d silent connections: the service holds %d (cap %d); %d of %d checks from fresh connections answered 200",
		flood, len(silent), held, maxConns, ok, checks)
	assert.LessOrEqual(t, held, maxConns)
	assert.Equal(t, checks, ok)
}

// A connection cap above what the descriptor limit can hold is lowered: past the limit,
// accept fails and checks wait in the kernel's queue (measured with ulimit -n 256 and 400
// idle connections: 0 of 20 checks answered without the fit, 20 of 20 with it).
func TestTheConnectionCapFitsTheDescriptorLimit(t *testing.T) {
	var r syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r))
	if r.Cur > 1<<30 {
		assert.Equal(t, 1<<40, fitToDescriptors(1<<40), "no limit to fit")
		return
	}
	assert.Equal(t, int(r.Cur)-spareDescriptors, fitToDescriptors(int(r.Cur)+1))
	assert.Equal(t, 7, fitToDescriptors(7), "a cap that fits is kept")
}
