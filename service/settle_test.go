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
