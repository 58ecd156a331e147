package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// gate is the demo's slow upstream: it holds every request for a path under /gpu/ or /work/ until
// the demo opens it, so a burst's requests stay in flight exactly as long as the demo needs to show
// what the filter did with the rest (a sleep would make the figures depend on the machine's load).
type gate struct {
	mu      sync.Mutex
	open    chan struct{}
	arrived int
}

func newGate() *gate { return &gate{open: make(chan struct{})} }

// hold holds a slow path's request until the gate opens (at most 3 s, or until the request is
// abandoned); it returns at once for any other path.
func (g *gate) hold(r *http.Request) {
	if !strings.HasPrefix(r.URL.Path, "/gpu/") && !strings.HasPrefix(r.URL.Path, "/work/") {
		return
	}
	g.mu.Lock()
	g.arrived++
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
	case <-r.Context().Done():
	case <-time.After(3 * time.Second):
	}
}

// held is the number of requests that reached the upstream since the gate last opened.
func (g *gate) held() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.arrived
}

// release lets every held request go and closes the gate again for the next burst.
func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.open)
	g.open, g.arrived = make(chan struct{}), 0
}

// answer is what a client of a burst saw.
type answer struct {
	status                   int
	policy, state, retryWait string
}

// burst sends n requests at once and returns, as soon as each of them is either answered by the
// filter or held at the upstream, the answers so far and a function that waits for the rest (after
// the gate opens).
func (g *gate) burst(ctx context.Context, client *http.Client, url string, n int, header ...string) (early []answer, rest func() []answer, err error) {
	base := g.held()
	answers := make(chan answer, n)
	for range n {
		go func() {
			a := answer{status: -1}
			defer func() { answers <- a }()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return
			}
			for i := 0; i+1 < len(header); i += 2 {
				req.Header.Set(header[i], header[i+1])
			}
			resp, err := client.Do(req)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			a = answer{resp.StatusCode, resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit"), resp.Header.Get("Retry-After")}
		}()
	}
	deadline := time.After(2 * time.Second)
	for len(early)+g.held()-base < n {
		select {
		case a := <-answers:
			early = append(early, a)
		case <-time.After(5 * time.Millisecond):
		case <-deadline:
			g.release()
			return nil, nil, errors.New("a burst's requests were neither answered nor held after 2s")
		}
	}
	return early, func() []answer {
		for len(early) < n {
			early = append(early, <-answers)
		}
		return early
	}, nil
}

// count returns how many answers have the status.
func count(as []answer, status int) int {
	n := 0
	for _, a := range as {
		if a.status == status {
			n++
		}
	}
	return n
}

// first returns the first answer with the status.
func first(as []answer, status int) answer {
	for _, a := range as {
		if a.status == status {
			return a
		}
	}
	return answer{}
}

// layers shows the defences behind the rate limits: a concurrency limit per key, then priority
// shedding, both against the slow upstream of g.
func layers(ctx context.Context, out io.Writer, client *http.Client, proxy string, g *gate, st *streams) error {
	if err := st.idle(); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nConcurrency limit gpu-per-tenant (3 in flight per x-tenant), 8 parallel requests from tenant acme,")
	fmt.Fprintln(out, "held by a slow upstream:")
	early, rest, err := g.burst(ctx, client, "http://"+proxy+"/gpu/generate", 8, "x-tenant", "acme")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  while they run: %d in flight at the upstream, %d answered 429 at once\n", g.held(), count(early, http.StatusTooManyRequests))
	if a := first(early, http.StatusTooManyRequests); a.status != 0 {
		wait := "no Retry-After: a slot frees when a request ends, not at a time"
		if a.retryWait != "" {
			wait = "Retry-After: " + a.retryWait
		}
		fmt.Fprintf(out, "  a 429: RateLimit-Policy: %s  RateLimit: %s  (%s)\n", a.policy, a.state, wait)
	}
	g.release()
	all := rest()
	fmt.Fprintf(out, "  in the end: %d answered 200, %d answered 429\n", count(all, http.StatusOK), count(all, http.StatusTooManyRequests))
	if err := st.idle(); err != nil { // the permits are back: the streams have ended
		return err
	}

	fmt.Fprintln(out, "\nPriority shedding (capacity 10 in flight: sheddable is shed from 7, critical keeps the last 10%),")
	fmt.Fprintln(out, "a burst of 10 sheddable requests to the slow upstream, then 3 critical ones while those run:")
	low, lowRest, err := g.burst(ctx, client, "http://"+proxy+"/work/report", 10, "x-priority", "sheddable")
	if err != nil {
		return err
	}
	shed := first(low, http.StatusServiceUnavailable)
	fmt.Fprintf(out, "  sheddable: %d admitted, %d shed with 503 (Retry-After: %s)\n", g.held(), count(low, http.StatusServiceUnavailable), shed.retryWait)
	before := g.held()
	high, highRest, err := g.burst(ctx, client, "http://"+proxy+"/work/report", 3, "x-priority", "critical")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  critical:  %d admitted, %d shed\n", g.held()-before, count(high, http.StatusServiceUnavailable))
	g.release()
	lowRest()
	highRest()
	return st.idle()
}

// streams wraps the proxy and counts its requests until their filter streams have ended (the
// proxy ends a stream after the client has its response): the demo waits for none to be left
// before a burst, so that the permits and shedding slots of the last one are back.
type streams struct {
	h http.Handler
	n atomic.Int64
}

func (s *streams) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.n.Add(1)
	defer s.n.Add(-1)
	s.h.ServeHTTP(w, r)
}

// idle waits until no stream is left, for at most 2 s.
func (s *streams) idle() error {
	for deadline := time.Now().Add(2 * time.Second); s.n.Load() > 0; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			return errors.New("the proxy's streams did not end within 2s")
		}
	}
	return nil
}
