package rls

import (
	"bufio"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/meshlimit/meshlimit/service/rlsconfig"
)

// rssBytes is the process's resident set size, from /proc/self/status.
func rssBytes(t *testing.T) int64 {
	f, err := os.Open("/proc/self/status")
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Skip("no VmRSS in /proc/self/status")
	return 0
}

// headerBomb opens one HTTP/2 connection to addr and sends n ShouldRateLimit streams of
// HEADERS only, each header block referring refs times (one byte each, HPACK-indexed) to one
// header of size bytes. It returns how many streams the server ended (RST_STREAM, or a
// response that ends the stream) before the connection went quiet for a few seconds.
func headerBomb(t *testing.T, addr string, n, refs, size int) int {
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	_, err = c.Write([]byte(http2.ClientPreface))
	require.NoError(t, err)
	require.NoError(t, fr.WriteSettings())
	var block strings.Builder
	enc := hpack.NewEncoder(&block)
	bomb := hpack.HeaderField{Name: "x-bomb", Value: strings.Repeat("b", size)}
	writeErr := make(chan error, 1)
	go func() {
		for i := range n {
			block.Reset()
			for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "rls"},
				{":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
				_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
			}
			for range refs {
				_ = enc.WriteField(bomb)
			}
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: []byte(block.String()), EndHeaders: true}); err != nil {
				writeErr <- err
				return
			}
		}
		writeErr <- nil
	}()
	ended := map[uint32]bool{}
	for len(ended) < n {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		f, err := fr.ReadFrame()
		if err != nil {
			break
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			ended[f.StreamID] = true
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				ended[f.StreamID] = true
			}
		case *http2.GoAwayFrame:
			t.Logf("GOAWAY %v after %d streams ended", f.ErrCode, len(ended))
		}
	}
	require.NoError(t, <-writeErr, "the server read every stream")
	return len(ended)
}

// The attack: 500 streams of HEADERS only, each referring 4,000 times by HPACK index to
// one 4,000-byte header (2 MiB sent, 16 MB of headers each once decoded), raised a replica's RSS
// from 21 to 300+ MiB and held it: grpc-go's default header list bound is 16 MiB, and a stream
// waiting for its message is held. The header list is now bounded (DefaultMaxHeaderListSize):
// every such stream is reset as its block is decoded, none reaches a handler, and RSS rises by
// less than 64 MiB (memory, not time: the bound does not depend on the machine's speed).
func TestHeaderBombStreamsAreResetAndDoNotGrowMemory(t *testing.T) {
	store := &countingStore{Store: memoryStore(t)}
	f := newFixture(t, store, HeadersOff)
	before := rssBytes(t)
	ended := headerBomb(t, f.conn.Target(), 500, 4000, 4000)
	grown := rssBytes(t) - before
	t.Logf("500 header-bomb streams: %d ended by the server; RSS +%.1f MiB", ended, float64(grown)/(1<<20))
	assert.Equal(t, 500, ended, "every stream is ended by the server")
	assert.Less(t, grown, int64(64<<20), "RSS growth")
	assert.Zero(t, store.calls.Load(), "store calls")
	f.call(req("edge_proxy_per_ip", desc("remote_address", "1.1.1.1"))) // still serving
}

// 20,000 plain streams on one connection, each waiting for its message, held 20,072
// goroutines and 142 MiB. A connection now holds at most DefaultMaxStreams: every stream past
// them is refused at once.
func TestStreamsPastTheConcurrencyBoundAreRefused(t *testing.T) {
	addr := serveGRPCWith(t, GRPCOptions{StreamTimeout: time.Hour}) // the held streams stay held
	const n = 1000
	ended := headerBomb(t, addr, n, 0, 0)
	assert.Equal(t, n-DefaultMaxStreams, ended, "streams refused")
}

// A stream that sends its headers and never its message was held until its connection closed
// (30 minutes): a slot of the connection's streams and a goroutine each. It is now ended at its
// StreamTimeout.
func TestAStreamThatNeverSendsItsMessageIsEndedAtItsDeadline(t *testing.T) {
	addr := serveGRPCWith(t, GRPCOptions{StreamTimeout: 200 * time.Millisecond})
	assert.Equal(t, 3, headerBomb(t, addr, 3, 0, 0), "streams ended by the server")
}

// serveGRPCWith serves a Server of the good rules on 127.0.0.1 with the options o, and returns
// its address.
func serveGRPCWith(t *testing.T, o GRPCOptions) string {
	srv, err := NewServer(Config{Store: memoryStore(t), Rules: func() *rlsconfig.Config { return goodRules(t) }})
	require.NoError(t, err)
	g := NewGRPCServer(srv, o)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	return ln.Addr().String()
}
