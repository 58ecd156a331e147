package rules

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
)

// quotaAnswer is what a client reads of one policy: r, t and, on a denial, Retry-After ("" when
// there is none).
type quotaAnswer struct {
	r, t  int64
	retry string
}

// answer renders the outcome of one limit as the filter does: the quota fields of an allowed
// request, or the local response of a denied one.
func answer(t *testing.T, r *Response, o Outcome, random uint64) quotaAnswer {
	t.Helper()
	var fields []Field
	retry := ""
	if o.Decision.Allowed {
		fields, _ = r.AppendAllowed(nil, nil, []Outcome{o}, random)
	} else {
		var lr LocalResponse
		r.Deny(&lr, nil, []Outcome{o}, false, random)
		fields = lr.Headers
		retry, _ = header(t, fields, HeaderRetryAfter)
	}
	rl, ok := header(t, fields, HeaderRateLimit)
	require.True(t, ok)
	p := parsePolicies(t, rl)[0].params
	return quotaAnswer{p["r"], p["t"], retry}
}

// TestRAndTAndRetryAfterOfEveryAlgorithmFollowDraft11 renders real decisions at chosen instants
// (seconds after 1.8e9 s, a multiple of a minute and an hour): r is the available quota, t the
// effective window, "the number of seconds within which the client can use no more than the
// available quota" (draft-ietf-httpapi-ratelimit-headers-11, §4.1.2), and Retry-After, the wait of
// the request denied, never ends before it (§6).
func TestRAndTAndRetryAfterOfEveryAlgorithmFollowDraft11(t *testing.T) {
	r := responseOf(t, `{}`)
	per := func(k algorithms.Kind, q int64, w time.Duration) algorithms.Limit {
		return algorithms.Limit{Kind: k, Quota: q, Window: w}
	}
	const s = int64(time.Second)
	for _, tc := range []struct {
		name  string
		limit algorithms.Limit
		steps [][2]int64 // at (ns after the start), cost; the last one is rendered
		want  quotaAnswer
	}{
		{"a token bucket of 100/h two units down gets its next unit in 36 s, not when it is full in 72 s",
			per(algorithms.TokenBucket, 100, time.Hour), [][2]int64{{0, 1}, {0, 1}}, quotaAnswer{98, 36, ""}},
		{"a token bucket that took 42 units 10 s ago gets the first back 26 s from now",
			per(algorithms.TokenBucket, 100, time.Hour), [][2]int64{{0, 42}, {10 * s, 1}}, quotaAnswer{57, 26, ""}},
		{"a token bucket of 2/min spent 10 s ago denies for the 20 s until its next unit",
			per(algorithms.TokenBucket, 2, time.Minute), [][2]int64{{0, 2}, {10 * s, 1}}, quotaAnswer{0, 20, "20"}},
		{"a token bucket that denies a cost of 3 with one unit left says t=15, a second unit, and Retry-After 30, three",
			per(algorithms.TokenBucket, 4, time.Minute), [][2]int64{{0, 3}, {0, 3}}, quotaAnswer{1, 15, "30"}},
		{"a leaky bucket of 10/s one unit down drains it in 100 ms, rounded up to 1",
			per(algorithms.LeakyBucket, 10, time.Second), [][2]int64{{0, 1}}, quotaAnswer{9, 1, ""}},
		{"a fixed window of 10/min with 3 used 20 s in ends in 40 s",
			per(algorithms.FixedWindow, 10, time.Minute), [][2]int64{{20 * s, 3}}, quotaAnswer{7, 40, ""}},
		{"a spent fixed window denies until its end",
			per(algorithms.FixedWindow, 10, time.Minute), [][2]int64{{20 * s, 10}, {30 * s, 1}}, quotaAnswer{0, 30, "30"}},
		{"a sliding log with 3 used at 0 s and 2 at 25 s can use more when the first 3 expire: 35 s, not 60 s",
			per(algorithms.SlidingLog, 10, time.Minute), [][2]int64{{0, 3}, {25 * s, 2}}, quotaAnswer{5, 35, ""}},
		{"a spent sliding log denies until its oldest entry expires",
			per(algorithms.SlidingLog, 10, time.Minute), [][2]int64{{0, 3}, {25 * s, 7}, {40 * s, 1}}, quotaAnswer{0, 20, "20"}},
		{"a sliding log that denies a cost of 6 with 2 left says t=20, when the oldest expire, and Retry-After 45, when 6 fit",
			per(algorithms.SlidingLog, 10, time.Minute), [][2]int64{{0, 3}, {25 * s, 5}, {40 * s, 6}}, quotaAnswer{2, 20, "45"}},
		{"a sliding window counter with 5 of 10 used 25 s in frees a unit 6 s into the next window: 41 s, not 95 s",
			per(algorithms.SlidingWindow, 10, time.Minute), [][2]int64{{0, 3}, {25 * s, 2}}, quotaAnswer{5, 41, ""}},
		{"a spent sliding window counter denies until the weight of its window has decayed by one unit",
			per(algorithms.SlidingWindow, 10, time.Minute), [][2]int64{{0, 10}, {30 * s, 1}}, quotaAnswer{0, 36, "36"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds, _, _ := decisions(t, tc.limit, tc.steps...)
			got := answer(t, r, Outcome{Limit: &LimitSpec{Name: "p", Limit: tc.limit}, Decision: ds[len(ds)-1]}, 0)
			assert.Equal(t, tc.want, got)
			if got.retry != "" {
				retry, err := strconv.ParseInt(got.retry, 10, 64)
				require.NoError(t, err)
				assert.GreaterOrEqual(t, retry, got.t, "Retry-After is never earlier than the end of the effective window")
			}
		})
	}
}

// TestEffectiveWindowJitterLengthensEveryTAndRetryAfterNeverEndsBeforeIt: with
// effective_window_jitter, t grows by the same 0 to 5 s on every member, picked by the caller's
// random value (the same value, the same answer), and a denial's Retry-After stays at or after every
// denying policy's t. Without it the random value changes nothing.
func TestEffectiveWindowJitterLengthensEveryTAndRetryAfterNeverEndsBeforeIt(t *testing.T) {
	hourly := algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 100, Window: time.Hour}
	burst := algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 2, Window: time.Minute}
	hd, _, _ := decisions(t, hourly, [2]int64{0, 1}, [2]int64{0, 1})
	bd, _, _ := decisions(t, burst, [2]int64{0, 2}, [2]int64{int64(10 * time.Second), 1})
	outcomes := func() []Outcome {
		return []Outcome{
			{Limit: &LimitSpec{Name: "hourly", Limit: hourly}, Decision: hd[1]}, // t=36
			{Limit: &LimitSpec{Name: "burst", Limit: burst}, Decision: bd[1]},   // denied: t=20, Retry-After 20
		}
	}
	jittered := responseOf(t, `{"effective_window_jitter": "5s"}`)
	plain := responseOf(t, `{}`)
	seen := map[int64]bool{}
	for random := range uint64(64) {
		random *= 0x9e3779b97f4a7c15
		var lr LocalResponse
		jittered.Deny(&lr, nil, outcomes(), false, random)
		rl, _ := header(t, lr.Headers, HeaderRateLimit)
		ps := parsePolicies(t, rl)
		require.Equal(t, "burst", ps[0].name)
		j := ps[0].params["t"] - 20
		require.True(t, j >= 0 && j <= 5, "jitter %d", j)
		assert.Equal(t, 36+j, ps[1].params["t"], "one jitter for every member")
		retry, _ := header(t, lr.Headers, HeaderRetryAfter)
		assert.Equal(t, strconv.FormatInt(20+j, 10), retry, "Retry-After is not earlier than the jittered t")
		seen[j] = true

		again := answer(t, jittered, Outcome{Limit: &LimitSpec{Name: "hourly", Limit: hourly}, Decision: hd[1]}, random)
		assert.Equal(t, 36+j, again.t, "the same random value, the same jitter, on an allowed answer too")
		assert.Equal(t, int64(36), answer(t, plain, Outcome{Limit: &LimitSpec{Name: "hourly", Limit: hourly}, Decision: hd[1]}, random).t)
	}
	assert.Len(t, seen, 6, "every jitter from 0 to 5 s is drawn")
}

// TestRetryAfterJitterAndEffectiveWindowJitterAreDrawnApart: with both jitters, Retry-After is
// lengthened by its own and never ends before the jittered t.
func TestRetryAfterJitterAndEffectiveWindowJitterAreDrawnApart(t *testing.T) {
	burst := algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 2, Window: time.Minute}
	bd, _, _ := decisions(t, burst, [2]int64{0, 2}, [2]int64{int64(10 * time.Second), 1})
	r := responseOf(t, `{"effective_window_jitter": "10s", "retry_after_jitter": "10s"}`)
	pairs := map[[2]int64]bool{}
	for random := range uint64(200) {
		random *= 0x9e3779b97f4a7c15
		a := answer(t, r, Outcome{Limit: &LimitSpec{Name: "burst", Limit: burst}, Decision: bd[1]}, random)
		retry, err := strconv.ParseInt(a.retry, 10, 64)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, retry, a.t)
		assert.LessOrEqual(t, retry, int64(30))
		pairs[[2]int64{a.t, retry}] = true
	}
	assert.Greater(t, len(pairs), 11, "the two jitters are not one")
}

func TestEffectiveWindowJitterIsCheckedLikeRetryAfterJitter(t *testing.T) {
	for _, tc := range []struct{ value, want string }{
		{`"2h"`, "response.effective_window_jitter: 2h is above the maximum of 1h"},
		{`"soon"`, "response.effective_window_jitter"},
	} {
		_, err := ParseConfig([]byte(`{"response": {"effective_window_jitter": ` + tc.value + `}, "rules": [{"name": "r", "limits": [{"rate": "1/s"}]}]}`))
		require.Error(t, err, tc.value)
		assert.Contains(t, err.Error(), tc.want)
	}
	assert.Equal(t, 1500*time.Millisecond, responseOf(t, `{"effective_window_jitter": "1500ms"}`).WindowJitter)
}

func TestAnAllowedResponseDrawsARandomNumberOnlyForAConfiguredJitter(t *testing.T) {
	assert.False(t, responseOf(t, `{}`).AllowedUsesRandom())
	assert.False(t, responseOf(t, `{"retry_after_jitter": "5s"}`).AllowedUsesRandom(), "Retry-After is not on an allowed response")
	assert.True(t, responseOf(t, `{"effective_window_jitter": "5s"}`).AllowedUsesRandom())
}
