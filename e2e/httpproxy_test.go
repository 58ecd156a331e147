package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

func TestRealHTTPThroughTheFilterGets200sThen429s(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("x-upstream-saw-shadow", r.Header.Get("x-meshlimit-shadow"))
		_, _ = io.WriteString(w, "hello from "+r.URL.Path)
	}))
	defer upstream.Close()
	p := load(t, module(t, "meshlimit"), `{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"3/m"}]}]}`, 2)
	proxy := &envoyhost.HTTPProxy{Plugin: p, Upstream: upstream.URL}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrc := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- proxy.ListenAndServe(ctx, "127.0.0.1:0", func(a net.Addr) { addrc <- a }) }()
	base := "http://" + (<-addrc).String()

	client := &http.Client{Timeout: patience}
	var codes []int
	var last *http.Response
	for range 5 {
		resp, err := client.Get(base + "/items")
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		if resp.StatusCode == 200 {
			assert.Equal(t, "hello from /items", string(body))
			assert.NotEmpty(t, resp.Header.Get("RateLimit"), "the quota fields reach a real client")
		}
		last = resp
	}
	assert.Equal(t, []int{200, 200, 200, 429, 429}, codes, "one client, spread over two workers, one shared bucket")
	assert.Equal(t, "20", last.Header.Get("Retry-After"))
	assert.Equal(t, `"per-ip";q=3;w=60;qu="requests"`, last.Header.Get("RateLimit-Policy"))

	cancel()
	require.NoError(t, <-done)
}

func TestTheHTTPProxyRefusesToListenBeyondLoopback(t *testing.T) {
	proxy := &envoyhost.HTTPProxy{}
	err := proxy.ListenAndServe(context.Background(), "0.0.0.0:0", nil)
	assert.ErrorContains(t, err, "loopback only")
}
