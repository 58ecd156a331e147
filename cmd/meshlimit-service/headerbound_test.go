package main

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/service"
)

// Review r21 F6: the docs bound a request's headers at 16 KiB, but a 17,000-byte header
// reached the handler (net/http reads 4 KiB past MaxHeaderBytes). Now a request whose headers
// pass 16 KiB gets 431, and one well within it is served.
func TestRequestHeadersPastSixteenKiBAreRefused(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ln := service.NewConnBudget(8).Limit(tcp)
	srv := newServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }), ln, 0,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	status := func(header int) int {
		c, err := net.Dial("tcp", tcp.Addr().String())
		require.NoError(t, err)
		defer c.Close()
		_, err = fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: s\r\nX-Big: %s\r\nConnection: close\r\n\r\n", strings.Repeat("a", header))
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusOK, status(12_000), "12,000 bytes of headers")
	assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, status(17_000), "17,000 bytes of headers")
}
