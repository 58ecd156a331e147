package envoyhost_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

const cluster = "outbound|8081||rls.svc.cluster.local"

// upstream starts a 127.0.0.1 server for h and returns its address.
func upstream(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

func TestHTTPCallValidation(t *testing.T) {
	addr := upstream(t, func(w http.ResponseWriter, r *http.Request) {})
	p := newPlugin(t, "guest", envoyhost.Config{Clusters: map[string]string{cluster: addr}})
	tests := []struct {
		name string
		req  envoyhost.Headers
	}{
		{"an unknown cluster is BadArgument", op("httpcall", "x-cluster", "outbound|1||nope", "x-path", "/")},
		{"a missing :authority is BadArgument", op("httpcall", "x-cluster", cluster, "x-path", "/", "x-no-authority", "1")},
		{"a timeout above 2^31 ms is a negative i32 and BadArgument", op("httpcall", "x-cluster", cluster, "x-path", "/", "x-timeout", "4294967295")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := roundTrip(t, p.VM(0), tc.req)
			assert.Equal(t, "2", replyHeader(t, res, "x-status"))
		})
	}
}

func TestHTTPCallResponseReachesTheRootContext(t *testing.T) {
	type seen struct{ host, path, ua string }
	got := make(chan seen, 1)
	addr := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Host, r.URL.Path, r.Header.Get("User-Agent")}
		w.Header().Set("X-Upstream", "yes")
		w.WriteHeader(201)
		_, _ = w.Write([]byte("callout-body"))
	})
	p := newPlugin(t, "guest", envoyhost.Config{Workers: 1, Clusters: map[string]string{cluster: addr}})

	t.Run("a local reply sent from the callback", func(t *testing.T) {
		s := p.VM(1).NewStream(envoyhost.StreamInfo{})
		defer s.Close()
		act, err := s.SendRequestHeaders(op("httpcall", "x-cluster", cluster, "x-path", "/check"), true)
		require.NoError(t, err)
		assert.Equal(t, envoyhost.ActionPause, act)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		act, err = s.Wait(ctx)
		require.NoError(t, err)
		assert.Equal(t, envoyhost.ActionStop, act)

		assert.Equal(t, seen{"callout.test", "/check", ""}, <-got)
		r := s.LocalReply()
		require.NotNil(t, r)
		assert.Equal(t, "callout-body", string(r.Body))
		want := map[string]string{
			"x-root": "1", "x-callout-status": "201", "x-bs": "12", "x-nt": "0", "x-effective": "0",
			"x-get-status": "0",
		}
		for k, v := range want {
			got, _ := r.Headers.Get(k)
			assert.Equal(t, v, got, k)
		}
		nh, _ := r.Headers.Get("x-nh")
		assert.NotEqual(t, "0", nh)
	})
	t.Run("a resume from the callback forwards the modified request", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		res, err := p.VM(0).RoundTrip(ctx, &envoyhost.Request{
			Headers: op("httpcall", "x-cluster", cluster, "x-path", "/check", "x-mode", "resume"),
			Body:    []byte("held"),
		}, ok200)
		require.NoError(t, err)
		<-got
		require.Nil(t, res.LocalReply)
		status, _ := res.Upstream.Get("x-callout-status")
		assert.Equal(t, "201", status)
		root, _ := res.Upstream.Get("x-root")
		assert.Equal(t, "1", root)
		assert.Equal(t, int64(4), p.Process().Metrics()["body_bytes"].Value, "the held body was delivered after the resume")
	})
}

func TestHTTPCallUpstreamFailures(t *testing.T) {
	release := make(chan struct{})
	slow := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) })
	reset := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
		_ = buf.Flush()
		_ = conn.Close()
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refused := ln.Addr().String()
	require.NoError(t, ln.Close())

	p := newPlugin(t, "guest", envoyhost.Config{Clusters: map[string]string{
		"slow": slow, "reset": reset, "refused": refused,
	}})
	tests := []struct {
		name, cluster, timeout string
		want                   map[string]string
		wantBody               string
	}{
		{"a timeout is a 504 response", "slow", "50",
			map[string]string{"x-callout-status": "504", "x-get-status": "0"}, "upstream request timeout"},
		// A minute: a loaded machine never turns the refusal or the reset into a timeout.
		{"a refused connection is a 503 response", "refused", "60000",
			map[string]string{"x-callout-status": "503"}, "upstream connect error or disconnect/reset before headers. reset reason: connection failure"},
		{"a reset after the headers fails the call with no headers", "reset", "60000",
			map[string]string{"x-nh": "0", "x-bs": "0", "x-get-status": "11", "x-get-status-msg": "reset"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := roundTrip(t, p.VM(0), op("httpcall", "x-cluster", tc.cluster, "x-path", "/", "x-timeout", tc.timeout))
			for k, v := range tc.want {
				assert.Equal(t, v, replyHeader(t, res, k), k)
			}
			assert.Equal(t, tc.wantBody, string(res.LocalReply.Body))
		})
	}
}

func TestHTTPCallsFromManyVMsConcurrently(t *testing.T) {
	addr := upstream(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
	p := newPlugin(t, "guest", envoyhost.Config{Workers: 3, Clusters: map[string]string{cluster: addr}})
	done := make(chan envoyhost.Result)
	const perVM = 10
	for _, vm := range p.VMs() {
		go func() {
			for i := 0; i < perVM; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				res, err := vm.RoundTrip(ctx, &envoyhost.Request{Headers: op("httpcall", "x-cluster", cluster, "x-path", "/"+strconv.Itoa(i))}, ok200)
				cancel()
				assert.NoError(t, err)
				done <- res
			}
		}()
	}
	for i := 0; i < len(p.VMs())*perVM; i++ {
		res := <-done
		if assert.NotNil(t, res.LocalReply) {
			st, _ := res.LocalReply.Headers.Get("x-callout-status")
			assert.Equal(t, "200", st)
		}
	}
}

// now reads a stream's action without waiting: Pause while the filter still waits.
func now(t *testing.T, s *envoyhost.Stream) envoyhost.Action {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	act, _ := s.Wait(ctx)
	return act
}

func TestACalloutTimedOnTheClockTimesOutWhenTheClockPassesItsTimeoutAndNeverBefore(t *testing.T) {
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	held := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) })
	clock := envoyhost.NewClock(time.Unix(1_700_000_000, 0))
	p := newPlugin(t, "guest", envoyhost.Config{Clock: clock, CallTimeoutsOnClock: true, Clusters: map[string]string{"held": held}})
	s := p.VM(0).NewStream(envoyhost.StreamInfo{})
	defer s.Close()
	act, err := s.SendRequestHeaders(op("httpcall", "x-cluster", "held", "x-path", "/", "x-timeout", "50"), true)
	require.NoError(t, err)
	require.Equal(t, envoyhost.ActionPause, act)
	<-arrived
	assert.Equal(t, 1, p.CallsInFlight())

	clock.Advance(49 * time.Millisecond)
	assert.Equal(t, envoyhost.ActionPause, now(t, s), "49 ms of the clock: no timeout, however long the upstream has taken in real time")
	clock.Advance(time.Millisecond)
	assert.Equal(t, envoyhost.ActionStop, now(t, s), "the 504 was delivered at 50 ms, within Advance")
	assert.Equal(t, 0, p.CallsInFlight())
	r := s.LocalReply()
	require.NotNil(t, r)
	st, _ := r.Headers.Get("x-callout-status")
	assert.Equal(t, "504", st)
	assert.Equal(t, "upstream request timeout", string(r.Body))
}

func TestACalloutTimedOnTheClockIsAnsweredByItsUpstreamWhileTheClockStandsStill(t *testing.T) {
	release := make(chan struct{})
	slow := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		<-release // answers only when the test says, long after its 1 ms timeout in real time
		w.WriteHeader(201)
	})
	clock := envoyhost.NewClock(time.Unix(1_700_000_000, 0))
	p := newPlugin(t, "guest", envoyhost.Config{Clock: clock, CallTimeoutsOnClock: true, Clusters: map[string]string{"slow": slow}})
	s := p.VM(0).NewStream(envoyhost.StreamInfo{})
	defer s.Close()
	_, err := s.SendRequestHeaders(op("httpcall", "x-cluster", "slow", "x-path", "/", "x-timeout", "1"), true)
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond) // 20 times the timeout in real time: not a timeout on the clock
	close(release)
	act, err := s.Wait(context.Background())
	require.NoError(t, err)
	assert.Equal(t, envoyhost.ActionStop, act)
	st, _ := s.LocalReply().Headers.Get("x-callout-status")
	assert.Equal(t, "201", st)
	clock.Advance(time.Second)
	assert.Equal(t, "201", func() string { st, _ := s.LocalReply().Headers.Get("x-callout-status"); return st }(),
		"the answered call's timeout no longer fires")
}

func TestNoCallTimeoutsWinsOverCallTimeoutsOnClock(t *testing.T) {
	arrived := make(chan struct{}, 1)
	held := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done()
	})
	clock := envoyhost.NewClock(time.Unix(1_700_000_000, 0))
	p := newPlugin(t, "guest", envoyhost.Config{Clock: clock, CallTimeoutsOnClock: true, NoCallTimeouts: true,
		Clusters: map[string]string{"held": held}})
	s := p.VM(0).NewStream(envoyhost.StreamInfo{})
	defer s.Close()
	_, err := s.SendRequestHeaders(op("httpcall", "x-cluster", "held", "x-path", "/", "x-timeout", "50"), true)
	require.NoError(t, err)
	<-arrived
	clock.Advance(time.Minute)
	assert.Equal(t, envoyhost.ActionPause, now(t, s), "the call never times out")
	assert.Equal(t, 1, p.CallsInFlight())
}
