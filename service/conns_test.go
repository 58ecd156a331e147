package service

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// serveLimited serves h on a ConnLimiter of max connections on 127.0.0.1.
func serveLimited(t *testing.T, max int, h http.Handler) (*ConnLimiter, string) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ln := newConnLimiter(tcp, max)
	srv := &http.Server{Handler: h, ConnState: ln.ConnState, ReadHeaderTimeout: 2 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln, tcp.Addr().String()
}

// held counts the connections the limiter holds in state s: a test waits for the server to have
// seen a request (StateActive) or its end (StateIdle), which it learns after the client does.
func held(ln *ConnLimiter, s http.ConnState) int {
	ln.b.mu.Lock()
	defer ln.b.mu.Unlock()
	n := 0
	for c := range ln.b.conns {
		if c.state == s {
			n++
		}
	}
	return n
}

// count returns the number of connections ln holds.
func count(ln *ConnLimiter) int {
	ln.b.mu.Lock()
	defer ln.b.mu.Unlock()
	return len(ln.b.conns)
}

// get sends one GET on a new connection and returns the status, or 0 if the connection was
// closed first.
func get(addr, path string) int {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return 0
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: s\r\nConnection: close\r\n\r\n"); err != nil {
		return 0
	}
	b, _ := io.ReadAll(c)
	if !strings.HasPrefix(string(b), "HTTP/1.1 ") || len(b) < 12 {
		return 0
	}
	switch string(b[9:12]) {
	case "200":
		return 200
	}
	return -1
}

// When every held connection is busy with a request, a new one is closed at once rather than
// queued: the caller fails fast and applies its failure policy. When one is free again, new
// connections are served.
func TestANewConnectionIsClosedAtOnceWhenEveryHeldOneIsBusy(t *testing.T) {
	release := make(chan struct{})
	ln, addr := serveLimited(t, 2, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	}))
	done := make(chan int, 2)
	for range 2 {
		go func() { done <- get(addr, "/slow") }()
	}
	require.Eventually(t, func() bool { return held(ln, http.StateActive) == 2 }, time.Minute, time.Millisecond,
		"both are busy, not merely quiet")

	start := time.Now()
	assert.Equal(t, 0, get(addr, "/fast"), "closed, not served")
	t.Logf("a connection over the cap was closed after %v", time.Since(start).Round(time.Microsecond))
	assert.Equal(t, uint64(1), ln.refused.Load())

	close(release)
	assert.Equal(t, 200, <-done)
	assert.Equal(t, 200, <-done)
	require.Eventually(t, func() bool { return get(addr, "/fast") == 200 }, time.Minute, 10*time.Millisecond)
	assert.LessOrEqual(t, count(ln), 2)
}

// An idle keep-alive connection at the cap is closed for a new one.
func TestAnIdleConnectionMakesRoomForANewOne(t *testing.T) {
	ln, addr := serveLimited(t, 1, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	idle, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer idle.Close()
	_, err = io.WriteString(idle, "GET / HTTP/1.1\r\nHost: s\r\n\r\n")
	require.NoError(t, err)
	buf := make([]byte, 512)
	_, err = idle.Read(buf)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return held(ln, http.StateIdle) == 1 }, time.Minute, time.Millisecond,
		"the server has seen the response end")

	assert.Equal(t, 200, get(addr, "/"))
	assert.Equal(t, uint64(1), ln.reclaimed.Load())
	_ = idle.SetReadDeadline(time.Now().Add(time.Minute)) // a safety net: the close is asynchronous
	_, err = idle.Read(buf)
	assert.ErrorIs(t, err, io.EOF, "the idle connection was closed")
}

// Listeners of one budget share it: a connection on one that finds the budget spent closes the
// quietest connection of another, here a gRPC-style connection (LimitQuiet) that has sent
// nothing since it connected.
func TestAConnectionOnOneListenerMakesRoomByClosingAQuietOneOnAnother(t *testing.T) {
	budget := NewConnBudget(1)
	quietTCP, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	quietLn := budget.LimitQuiet(quietTCP)
	t.Cleanup(func() { quietLn.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := quietLn.Accept(); err == nil {
			accepted <- c
		}
	}()
	quiet, err := net.Dial("tcp", quietTCP.Addr().String())
	require.NoError(t, err)
	defer quiet.Close()
	held := <-accepted
	defer held.Close()

	httpTCP, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	httpLn := budget.Limit(httpTCP)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }),
		ConnState: httpLn.ConnState, ReadHeaderTimeout: 2 * time.Second}
	go func() { _ = srv.Serve(httpLn) }()
	t.Cleanup(func() { srv.Close() })
	time.Sleep(2 * minQuiet) // the quiet connection is past its quiet time

	assert.Equal(t, 200, get(httpTCP.Addr().String(), "/"), "the budget made room")
	assert.Equal(t, uint64(1), quietLn.reclaimed.Load())
	_ = quiet.SetReadDeadline(time.Now().Add(time.Minute))
	_, err = quiet.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "the quiet connection was closed")
}

// newConnLimiter is a listener that accepts from ln and holds at most max connections: a budget
// of its own.
func newConnLimiter(ln net.Listener, max int) *ConnLimiter {
	return NewConnBudget(max).Limit(ln)
}
