package service_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/wire"
)

// A reservation settled through /v1/check: the unused part is refunded, so the next request
// fits; an over-run is charged beyond the quota, so the key waits a capacity's refill and more.
func TestASettleRefundsAndChargesThroughTheCheckEndpoint(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store service.Store) {
		h := newTestHandler(t, service.Config{Store: store, Parse: wire.DecodeOptions{AllowClientTime: true}})
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
		settle(15) // it used 23: the whole over-run is owed (algorithms.MaxDebt capacities at most)
		a = check(1)
		require.False(t, a.Allowed)
		assert.Equal(t, int64(16000), a.Decisions[0].RetryAfterMs, "a debt of 15: 25 s to repay, then 1 s for the unit, less the 10 s of burst")
	})
}

// A fixed window refunds only into the window that held the reservation: a refund whose
// reservation was decided before the window began would admit more than the quota.
func TestAFixedWindowRefundNeedsTheReservationsWindow(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store service.Store) {
		h := newTestHandler(t, service.Config{Store: store, Parse: wire.DecodeOptions{AllowClientTime: true}})
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

// meshlimit_settled_units_total{kind="given_back"} counts the units the store gave back, not the
// ones an undo asked for: an undo of an admission that has expired from its sliding log gives
// nothing back and counts 0; an undo of a live one counts its units, and its repetition (the run
// already given back) counts nothing more.
func TestAnUndoOfAnExpiredAdmissionCountsNoUnitsGivenBack(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store service.Store) {
		h := newTestHandler(t, service.Config{Store: store, Parse: wire.DecodeOptions{AllowClientTime: true}})
		const limit = `"key":"log/alice","algorithm":"sliding_log","quota":5,"window_ms":3600000` // an hour: Redis's TTL (real time) never ends the log
		const t0, hour = int64(1_800_000_000_000_000), int64(3_600_000_000)
		post := func(nowUs int64, body string) string {
			t.Helper()
			code, out := serve(h, http.MethodPost, "/v1/check", `{"now_us":`+strconv.FormatInt(nowUs, 10)+`,`+body+`}`)
			require.Equal(t, http.StatusOK, code, out)
			return out
		}
		givenBack := func() string {
			t.Helper()
			_, m := serve(h, "GET", "/metrics", "")
			for _, line := range strings.Split(m, "\n") {
				if strings.HasPrefix(line, `meshlimit_settled_units_total{kind="given_back"} `) {
					return strings.TrimPrefix(line, `meshlimit_settled_units_total{kind="given_back"} `)
				}
			}
			return "absent"
		}
		undo := func(nowUs, atUs int64) {
			t.Helper()
			post(nowUs, `"settle":[{`+limit+`,"delta":-3,"undo":true,"at_us":`+strconv.FormatInt(atUs, 10)+`}]`)
		}
		require.True(t, decodeAnswer(t, post(t0, `"descriptors":[{`+limit+`,"cost":3}]`)).Allowed)
		undo(t0+2*hour, t0) // two windows later: the admission's entries have expired
		assert.Equal(t, "0", givenBack(), "an expired admission gives nothing back")
		require.True(t, decodeAnswer(t, post(t0+3*hour, `"descriptors":[{`+limit+`,"cost":3}]`)).Allowed)
		undo(t0+3*hour+100, t0+3*hour)
		assert.Equal(t, "3", givenBack(), "a live admission gives its units back")
		undo(t0+3*hour+200, t0+3*hour)
		assert.Equal(t, "3", givenBack(), "a repeated undo gives nothing more")
	})
}

// meshlimit_settled_units_total{kind="refunded"} counts the units a refund gave back, not the
// ones it asked for (attack22 finding 2): a bucket takes back only what it lacked of full, rounded
// up as its remaining rounds down; a fixed window only what its count holds of the reservation's
// window. {kind="overrun"} counts what an over-run charged, up to the debt's ceiling. Memory and
// Redis agree.
func TestTheRefundedCounterCountsTheUnitsEachRefundGaveBack(t *testing.T) {
	t.Parallel()
	const t0 = int64(1_800_000_000_000_000) // a fixed window of 10 s begins here
	const bucket = `"algorithm":"token_bucket","quota":10,"window_ms":10000`
	const window = `"algorithm":"fixed_window","quota":10,"window_ms":10000`
	cases := []struct {
		name   string
		key    string
		limit  string
		cost   int64 // a decision of this cost at t0 first, or 0
		atUs   int64 // the refund's time
		delta  int64
		want   string
		remain int64 // a cost-1 decision's remaining at atUs after the refund
	}{
		{"a refund into a fresh bucket gives nothing back", "b0", bucket, 0, t0, -7, "0", 9},
		{"a refund of 7 into a bucket with 2 units used gives back 2", "b1", bucket, 2, t0, -7, "2", 9},
		{"a refund of 1 into a bucket with 2 units used gives back 1", "b2", bucket, 2, t0, -1, "1", 8},
		{"a refund into a bucket that has refilled half a unit of its 2 gives back 2", "b3", bucket, 2, t0 + 500_000, -7, "2", 9},
		{"a refund into a bucket that has refilled its 2 gives nothing back", "b4", bucket, 2, t0 + 2_000_000, -7, "0", 9},
		{"a refund of 10^12 into a fresh leaky bucket gives nothing back", "b5", `"algorithm":"leaky_bucket","quota":10,"window_ms":10000`, 0, t0, -1_000_000_000_000, "0", 9},
		{"a refund of 10^12 into a full bucket of 10 used gives back 10", "b6", bucket, 10, t0, -1_000_000_000_000, "10", 9},
		{"a refund into an empty fixed window gives nothing back", "w0", window, 0, t0, -9, "0", 9},
		{"a refund of 9 into a fixed window that counts 3 gives back 3", "w1", window, 3, t0 + 1000, -9, "3", 9},
		{"a refund into the window after the reservation's gives nothing back", "w2", window, 3, t0 + 10_000_000, -9, "0", 9},
	}
	overruns := []struct {
		name  string
		key   string
		limit string
		delta int64
		want  string
	}{
		{"an over-run of 5 counts 5", "o0", bucket, 5, "5"},
		{"an over-run of 10^12 into a bucket counts the 65 capacities its debt stops at", "o1", bucket, 1_000_000_000_000, "650"},
		{"an over-run of 10^12 into a fixed window counts the 65 quotas its debt stops at", "o2", window, 1_000_000_000_000, "650"},
	}
	for _, c := range overruns {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			eachStore(t, func(t *testing.T, store service.Store) {
				h := newTestHandler(t, service.Config{Store: store, Parse: wire.DecodeOptions{AllowClientTime: true}})
				code, out := serve(h, http.MethodPost, "/v1/check", `{"now_us":`+strconv.FormatInt(t0, 10)+`,"settle":[{"key":"`+c.key+`",`+c.limit+`,"delta":`+strconv.FormatInt(c.delta, 10)+`}]}`)
				require.Equal(t, http.StatusOK, code, out)
				assert.Equal(t, c.want, metricLine(t, h, `meshlimit_settled_units_total{kind="overrun"}`))
			})
		})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			eachStore(t, func(t *testing.T, store service.Store) {
				h := newTestHandler(t, service.Config{Store: store, Parse: wire.DecodeOptions{AllowClientTime: true}})
				limit := `"key":"` + c.key + `",` + c.limit
				post := func(nowUs int64, body string) string {
					t.Helper()
					code, out := serve(h, http.MethodPost, "/v1/check", `{"now_us":`+strconv.FormatInt(nowUs, 10)+`,`+body+`}`)
					require.Equal(t, http.StatusOK, code, out)
					return out
				}
				if c.cost > 0 {
					require.True(t, decodeAnswer(t, post(t0, `"descriptors":[{`+limit+`,"cost":`+strconv.FormatInt(c.cost, 10)+`}]`)).Allowed)
				}
				post(c.atUs, `"settle":[{`+limit+`,"delta":`+strconv.FormatInt(c.delta, 10)+`,"at_us":`+strconv.FormatInt(t0, 10)+`}]`)
				assert.Equal(t, c.want, metricLine(t, h, `meshlimit_settled_units_total{kind="refunded"}`))
				a := decodeAnswer(t, post(c.atUs, `"descriptors":[{`+limit+`}]`))
				require.True(t, a.Allowed)
				assert.Equal(t, c.remain, a.Decisions[0].Remaining, "what the refund gave back is what the next decision finds")
			})
		})
	}
}

// metricLine returns the value of the metric line named name in h's /metrics, or "absent".
func metricLine(t *testing.T, h http.Handler, name string) string {
	t.Helper()
	_, m := serve(h, http.MethodGet, "/metrics", "")
	for _, line := range strings.Split(m, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return "absent"
}
