package service

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
)

// settleStores returns a MemoryStore and a RedisStore on a real redis-server.
func settleStores(t *testing.T) map[string]Store {
	rs := startRedis(t)
	m := NewMemoryStore(MemoryConfig{SweepInterval: -1})
	t.Cleanup(func() { m.Close() })
	return map[string]Store{"memory": m, "redis": newRedisStore(t, rs.Addr())}
}

// A reservation settled through /v1/check: the unused part is refunded, so the next request
// fits; an over-run is charged beyond the quota, so the key waits a capacity's refill and more.
func TestASettleRefundsAndChargesThroughTheCheckEndpoint(t *testing.T) {
	t.Parallel()
	for name, store := range settleStores(t) {
		t.Run(name, func(t *testing.T) {
			h := newTestHandler(t, Config{Store: store, Parse: ParseOptions{AllowClientTime: true}})
			const now = `"now_us":1800000000000000,`
			const limit = `"key":"tokens/alice","algorithm":"token_bucket","quota":10,"window_ms":10000`
			check := func(cost int) checkAnswer {
				t.Helper()
				code, body := serve(h, http.MethodPost, "/v1/check", `{`+now+`"descriptors":[{`+limit+`,"cost":`+strconv.Itoa(cost)+`}]}`)
				require.Equal(t, http.StatusOK, code, body)
				return decodeAnswer(t, body)
			}
			settle := func(delta int) {
				t.Helper()
				code, body := serve(h, http.MethodPost, "/v1/check", `{`+now+`"settle":[{`+limit+`,"delta":`+strconv.Itoa(delta)+`}]}`)
				require.Equal(t, http.StatusOK, code, body)
				assert.JSONEq(t, `{"allowed":true,"decisions":[],"settled":1}`, body)
			}
			require.True(t, check(8).Allowed, "the reservation")
			assert.False(t, check(8).Allowed, "a second reservation does not fit")
			settle(-6) // the first request used 2
			a := check(8)
			require.True(t, a.Allowed, "the refund made room")
			assert.Equal(t, int64(0), a.Decisions[0].Remaining)
			settle(15) // it used 23: capped at one capacity of debt
			a = check(1)
			require.False(t, a.Allowed)
			assert.Equal(t, int64(11000), a.Decisions[0].RetryAfterMs, "a full bucket of debt: 20 s to repay, then 1 s for the unit, less the 10 s of burst")
		})
	}
}

// A fixed window refunds only into the window that held the reservation: a refund whose
// reservation was decided before the window began would admit more than the quota.
func TestAFixedWindowRefundNeedsTheReservationsWindow(t *testing.T) {
	t.Parallel()
	for name, store := range settleStores(t) {
		t.Run(name, func(t *testing.T) {
			h := newTestHandler(t, Config{Store: store, Parse: ParseOptions{AllowClientTime: true}})
			const now = `"now_us":1800000000500000,` // 500 ms into a 1 s window
			const limit = `"key":"k","algorithm":"fixed_window","quota":10,"window_ms":1000`
			post := func(body string) string {
				t.Helper()
				code, out := serve(h, http.MethodPost, "/v1/check", `{`+now+body+`}`)
				require.Equal(t, http.StatusOK, code, out)
				return out
			}
			require.Contains(t, post(`"descriptors":[{`+limit+`,"cost":10}]`), `"allowed":true`)
			post(`"settle":[{` + limit + `,"delta":-10,"age_ms":600}]`)
			assert.Contains(t, post(`"descriptors":[{`+limit+`}]`), `"allowed":false`, "a reservation of the last window refunds nothing")
			post(`"settle":[{` + limit + `,"delta":-10,"age_ms":100}]`)
			assert.Contains(t, post(`"descriptors":[{`+limit+`}]`), `"allowed":true`, "one of this window does")
		})
	}
}

// Redis must not forget a key in debt: a settled over-run, and the denied decisions that follow
// it, keep the state until its TAT (a PEXPIRE of the bare τ would forgive the debt early).
func TestARedisKeyInDebtOutlivesTheDecisionTTL(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	s := newRedisStore(t, rs.Addr())
	ctx := context.Background()
	l := algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 10, Window: time.Second}
	req := Request{Key: "debtor", Limit: l, Cost: 10}
	pttl := func() int64 {
		t.Helper()
		ms, err := s.client.Do(ctx, s.client.B().Pttl().Key(s.Key(req)).Build()).AsInt64()
		require.NoError(t, err)
		return ms
	}
	d, err := s.Decide(ctx, req)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.LessOrEqual(t, pttl(), int64(1000), "a decision keeps the TTL of τ")
	require.NoError(t, s.Settle(ctx, SettleRequest{Key: "debtor", Limit: l, Delta: 10}))
	assert.Greater(t, pttl(), int64(1500), "the debt doubles the time to the TAT")
	d, err = s.Decide(ctx, Request{Key: "debtor", Limit: l, Cost: 1})
	require.NoError(t, err)
	require.False(t, d.Allowed)
	assert.Greater(t, pttl(), int64(1500), "a denied decision keeps the debt's expiry")
}

// The kinds that keep no exact state to refund into are refused by every store, before it is
// touched.
func TestSettlingASlidingLimitIsRefused(t *testing.T) {
	t.Parallel()
	for name, store := range settleStores(t) {
		for _, k := range []algorithms.Kind{algorithms.SlidingLog, algorithms.SlidingWindow} {
			err := store.(SettleStore).Settle(context.Background(), SettleRequest{Key: "k", Limit: algorithms.Limit{Kind: k, Quota: 10, Window: time.Second}, Delta: -1})
			assert.ErrorContains(t, err, "does not settle", "%s %v", name, k)
		}
	}
}

// BenchmarkRedisReserveThenSettle measures one reservation and its settle (a refund of part of
// it) on a loopback redis-server: two scripts.
func BenchmarkRedisReserveThenSettle(b *testing.B) {
	rs := startRedis(b)
	s := newRedisStore(b, rs.Addr())
	ctx := context.Background()
	l := algorithms.Limit{Kind: algorithms.TokenBucket, Quota: algorithms.MaxQuota, Window: time.Hour}
	b.ReportAllocs()
	for b.Loop() {
		if d, err := s.Decide(ctx, Request{Key: "bench", Limit: l, Cost: 500}); err != nil || !d.Allowed {
			b.Fatal(err, d)
		}
		if err := s.Settle(ctx, SettleRequest{Key: "bench", Limit: l, Delta: -380}); err != nil {
			b.Fatal(err)
		}
	}
}
