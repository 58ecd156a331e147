package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/memstore"
)

// Attack 22's harness: the module under attack (ATTACK_WASM, default build/meshlimit.wasm) and a
// real decision service on the in-memory store and the virtual clock, which records every call's
// body so that a test can read what the filter asked for.

func attackModule(t *testing.T) []byte {
	t.Helper()
	if p := os.Getenv("ATTACK_WASM"); p != "" {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		return b
	}
	return module(t, "meshlimit")
}

type spyService struct {
	srv    *httptest.Server
	mu     sync.Mutex
	bodies []string
	fail   func(body string) bool // answer 503 without deciding
}

func startSpy(t *testing.T, clock *envoyhost.Clock) *spyService {
	t.Helper()
	store := memstore.New(memstore.Config{SweepInterval: -1, Clock: clock.Now})
	t.Cleanup(func() { _ = store.Close() })
	h, err := service.NewHandler(service.Config{Store: store, Timeout: time.Second})
	require.NoError(t, err)
	s := &spyService{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		s.mu.Lock()
		if r.URL.Path == "/v1/check" {
			s.bodies = append(s.bodies, string(body))
		}
		fail := s.fail
		s.mu.Unlock()
		if fail != nil && fail(string(body)) {
			w.Header().Set("content-type", "application/json")
			w.WriteHeader(503)
			_, _ = w.Write([]byte(`{"error":"store unavailable"}`))
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *spyService) withIt(clock *envoyhost.Clock) func(*envoyhost.Config) {
	return func(c *envoyhost.Config) {
		c.Clusters = map[string]string{"outbound|8081||meshlimit.meshlimit.svc.cluster.local": strings.TrimPrefix(s.srv.URL, "http://")}
		c.Clock = clock
		c.Process = envoyhost.NewProcess()
	}
}

func (s *spyService) calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.bodies...)
}

// undos returns the calls that carried an undo entry.
func (s *spyService) undos() (n int, bodies []string) {
	for _, b := range s.calls() {
		if strings.Contains(b, `"undo":true`) {
			n++
			bodies = append(bodies, b)
		}
	}
	return n, bodies
}

// attempt sends a request to path from ip with extra headers through vm, answers it with status if
// it reached the upstream, and reports whether it did.
func attempt(t *testing.T, p *envoyhost.Plugin, vm int, path, ip string, respStatus string, extra ...[2]string) bool {
	t.Helper()
	s := p.VM(vm).NewStream(envoyhost.StreamInfo{SourceAddress: ip + ":4000"})
	_, err := s.SendRequestHeaders(get("app.example", path, ip, extra...).Headers, true)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	act, err := s.Wait(ctx)
	cancel()
	require.NoError(t, err)
	if act != envoyhost.ActionContinue || s.LocalReply() != nil {
		_ = s.Close()
		settle(t, p)
		return false
	}
	_, err = s.SendResponseHeaders(envoyhost.Headers{{":status", respStatus}}, true)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	settle(t, p)
	return true
}
