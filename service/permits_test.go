package service_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/wire"
)

// Two service replicas on one Redis hold one bound: 40 concurrent acquires of a limit of 7,
// half through each replica, admit exactly 7.
func TestTwoReplicasShareOneBound(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	replicas := []*service.Handler{
		newTestHandler(t, service.Config{Store: newRedisStore(t, rs.Addr()), Timeout: time.Second}),
		newTestHandler(t, service.Config{Store: newRedisStore(t, rs.Addr()), Timeout: time.Second}),
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := `{"descriptors":[{"key":"gpu","algorithm":"concurrency","quota":7,"permit":"p` + fmt.Sprint(i) + `","lease_ms":60000}]}`
			code, resp := serve(replicas[i%2], "POST", "/v1/check", body)
			if code == http.StatusOK && strings.HasPrefix(resp, `{"allowed":true`) {
				admitted.Add(1)
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(7), admitted.Load())
}

// A check that a later descriptor denies gives back the permit it acquired: a denied request
// holds nothing. The answer to a renew and release list counts what was held.
func TestADeniedCheckHoldsNoPermit(t *testing.T) {
	t.Parallel()
	h := newTestHandler(t, service.Config{})
	permit := func(id string) string {
		return `{"key":"gpu","algorithm":"concurrency","quota":1,"permit":"` + id + `","lease_ms":60000}`
	}
	rate := `{"key":"r","algorithm":"fixed_window","quota":1,"window_ms":60000}`
	check := func(body string) wire.Answer {
		t.Helper()
		code, resp := serve(h, "POST", "/v1/check", body)
		require.Equal(t, http.StatusOK, code, resp)
		a, err := wire.DecodeFullAnswer([]byte(resp), strings.Count(body, `"key"`), nil)
		require.NoError(t, err, resp)
		return a
	}
	assert.True(t, check(`{"descriptors":[`+rate+`]}`).Allowed, "the rate's one unit is used")
	a := check(`{"descriptors":[` + permit("a") + `,` + rate + `]}`)
	require.False(t, a.Allowed)
	assert.True(t, a.Decisions[0].Allowed, "the permit was acquired")
	assert.False(t, a.Decisions[1].Allowed, "the rate denied")
	b := check(`{"descriptors":[` + permit("b") + `]}`)
	assert.True(t, b.Allowed, "a's permit was given back when the rate denied")
	c := check(`{"descriptors":[` + permit("c") + `]}`)
	assert.False(t, c.Allowed)
	assert.Equal(t, wire.Decision{Limit: 1, RetryAfterMs: -1}, c.Decisions[0], "a permit denial promises no retry time")

	code, resp := serve(h, "POST", "/v1/check", `{"renew":[{"key":"gpu","permit":"b","lease_ms":1000},{"key":"gpu","permit":"a","lease_ms":1000}],"release":[{"key":"gpu","permit":"b"}]}`)
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, `{"allowed":true,"decisions":[],"renewed":0,"released":1,"lost":[0,1]}`+"\n", resp, "b is released before the renewals: none is held")
	_, m := serve(h, "GET", "/metrics", "")
	assert.Contains(t, m, `meshlimit_permits_total{result="lost"} 2`)
	assert.Contains(t, m, `meshlimit_decisions_total{algorithm="concurrency",result="denied"} 1`)
}

// A Redis restart loses the permits, as it loses the counters (the shipped Redis keeps no
// persistence): while it is down every permit operation fails (the filter applies its
// fallback), and afterwards a renewal finds its permit gone (counted lost) and new acquires
// start from none held.
func TestARedisRestartLosesThePermits(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	h := newTestHandler(t, service.Config{Store: newRedisStore(t, rs.Addr()), Timeout: 10 * time.Second}) // a stopped Redis fails at once; a slow one never reaches it
	acquire := func(id string) (int, string) {
		return serve(h, "POST", "/v1/check", `{"descriptors":[{"key":"gpu","algorithm":"concurrency","quota":1,"permit":"`+id+`","lease_ms":60000}]}`)
	}
	code, resp := acquire("a")
	require.Equal(t, http.StatusOK, code)
	require.True(t, strings.HasPrefix(resp, `{"allowed":true`), resp)
	rs.Stop()
	code, resp = acquire("b")
	assert.Equal(t, http.StatusServiceUnavailable, code, resp)
	code, _ = serve(h, "POST", "/v1/check", `{"release":[{"key":"gpu","permit":"a"}]}`)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	rs.Start()
	redistest.WaitFor(t, 5*time.Second, "a permit is admitted after the restart", func() bool {
		code, resp := acquire("b")
		return code == http.StatusOK && strings.HasPrefix(resp, `{"allowed":true`)
	})
	redistest.WaitFor(t, 5*time.Second, "a renewal is answered after the restart", func() bool {
		code, resp = serve(h, "POST", "/v1/check", `{"renew":[{"key":"gpu","permit":"a","lease_ms":1000}]}`)
		return code == http.StatusOK
	})
	assert.Contains(t, resp, `"renewed":0`, "a's permit went with the restart")
}
