package algorithms

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// conformanceLimits covers every kind with round and awkward parameters: windows that Quota
// does not divide (fractional emission intervals), bursts above and below Quota.
var conformanceLimits = []Limit{
	{Kind: TokenBucket, Quota: 3, Window: time.Second},
	{Kind: TokenBucket, Quota: 7, Window: 1013 * time.Microsecond, Burst: 20},
	{Kind: TokenBucket, Quota: 1000, Window: time.Minute, Burst: 10},
	{Kind: LeakyBucket, Quota: 3, Window: time.Second},
	{Kind: LeakyBucket, Quota: 7, Window: 1013 * time.Microsecond, Burst: 2},
	{Kind: FixedWindow, Quota: 3, Window: time.Second},
	{Kind: FixedWindow, Quota: 100, Window: 1013 * time.Microsecond},
	{Kind: SlidingLog, Quota: 3, Window: time.Second},
	{Kind: SlidingLog, Quota: 50, Window: 1013 * time.Microsecond},
	{Kind: SlidingWindow, Quota: 3, Window: time.Second},
	{Kind: SlidingWindow, Quota: 100, Window: 1013 * time.Microsecond},
	{Kind: FixedWindow, Quota: 3, Calendar: Calendar{Unit: CalendarDay}},
	{Kind: FixedWindow, Quota: 40, Calendar: Calendar{Unit: CalendarDay, Offset: 5*time.Hour + 30*time.Minute}},
	{Kind: FixedWindow, Quota: 25, Calendar: Calendar{Unit: CalendarWeek, Offset: -8 * time.Hour}},
	{Kind: FixedWindow, Quota: 100, Calendar: Calendar{Unit: CalendarMonth}},
	{Kind: FixedWindow, Quota: 7, Calendar: Calendar{Unit: CalendarMonth, Offset: -MaxCalendarOffset}},
	{Kind: FixedWindow, Quota: 1000, Calendar: Calendar{Unit: CalendarYear, Offset: 14 * time.Hour}},
}

// span returns the length a test trace is scaled to: l's Window, or for a calendar window the
// unit's shortest period.
func span(l Limit) time.Duration {
	switch l.Calendar.Unit {
	case 0:
		return l.Window
	case CalendarMonth:
		return 28 * 24 * time.Hour
	case CalendarYear:
		return 365 * 24 * time.Hour
	}
	return l.Calendar.Unit.MaxLength()
}

// traceLength returns how many requests of genTrace keep a trace of l within about 60 years
// after base (at most 3000): a tenth of its steps idle for one to three spans.
func traceLength(l Limit) int {
	const years60 = 60 * 365 * 24 * time.Hour
	return int(min(3000, years60/(span(l)/4)))
}

func limitName(l Limit) string {
	switch {
	case l.Kind.bucket():
		return fmt.Sprintf("%v %d per %v burst %d", l.Kind, l.Quota, l.Window, l.Burst)
	case l.Calendar.Unit != 0:
		return fmt.Sprintf("%v %d per %v", l.Kind, l.Quota, l.Calendar)
	}
	return fmt.Sprintf("%v %d per %v", l.Kind, l.Quota, l.Window)
}

// req is one request of a trace; dt is added to the previous now and may be negative (the
// clock steps back).
type req struct {
	dt   time.Duration
	cost int64
}

// admission is an admitted request at its effective time: the latest now seen so far, in µs.
// Decisions at an earlier now are at least as strict and change the state as a decision at the
// effective time would, so the documented bounds must hold at effective times.
type admission struct{ at, cost int64 }

// genTrace returns n requests around l's rate, with bursts, idle gaps, clock steps back and
// costs above capacity.
func genTrace(r *rand.Rand, l Limit, n int) []req {
	w := span(l)
	unit := max(w/time.Duration(l.Quota), time.Microsecond)
	c := l.Capacity()
	reqs := make([]req, n)
	for i := range reqs {
		var dt time.Duration
		switch p := r.IntN(100); {
		case p < 40:
			dt = time.Duration(r.Int64N(int64(2 * unit)))
		case p < 60:
			dt = 0
		case p < 80:
			dt = time.Duration(r.Int64N(int64(unit/4) + 1))
		case p < 90:
			dt = w + time.Duration(r.Int64N(int64(2*w)))
		default:
			dt = -time.Duration(r.Int64N(int64(w)))
		}
		cost := int64(1)
		switch p := r.IntN(100); {
		case p < 15:
			cost = 1 + r.Int64N(c)
		case p < 18:
			cost = c + 1 + r.Int64N(c)
		}
		reqs[i] = req{dt, cost}
	}
	return reqs
}

// checkTrace runs reqs through l, starting fresh at start (unix ns), checks the contract of
// every decision, then the kind's bound on what it admitted. It returns the admissions.
func checkTrace(t testing.TB, l Limit, start int64, reqs []req) []admission {
	t.Helper()
	c, ttl := l.Capacity(), l.TTL()
	var state []byte
	var adm []admission
	now, latest := start, int64(0) // latest: the latest now seen
	for i, rq := range reqs {
		now = max(now+int64(rq.dt), 0)
		latest = max(latest, now)
		next, dec, err := l.Decide(state, now, rq.cost, nil)
		require.NoError(t, err, "step %d", i)
		fail := func(format string, args ...any) {
			t.Fatalf("step %d: Decide(now %d, cost %d) = %+v: %s", i, now, rq.cost, dec, fmt.Sprintf(format, args...))
		}
		switch {
		case dec.Limit != l.Quota:
			fail("Limit != Quota %d", l.Quota)
		case dec.Remaining < 0 || dec.Remaining > c:
			fail("Remaining out of [0, %d]", c)
		case (dec.Reset == 0) != (dec.Remaining == c):
			fail("Reset is 0 but Remaining is not Capacity, or the reverse")
		case dec.Reset < 0 || dec.Reset > ttl+time.Duration(latest-now)+us: // now and latest are truncated to µs
			fail("Reset out of [0, TTL %v + clock step back]", ttl)
		case dec.Allowed && dec.RetryAfter != 0:
			fail("allowed with a RetryAfter")
		case !dec.Allowed && dec.RetryAfter <= 0:
			fail("denied without a RetryAfter")
		case !dec.Allowed && (rq.cost > c) != (dec.RetryAfter == RetryNever):
			fail("RetryNever must mean exactly cost > Capacity %d", c)
		case dec.Delay < 0 || dec.Delay > 0 && !(dec.Allowed && l.Kind == LeakyBucket):
			fail("a Delay outside an allowed leaky bucket request")
		case dec.Delay > ttl:
			fail("Delay above TTL %v", ttl)
		case !l.IdleAt(next, now+int64(dec.Reset)):
			fail("not idle after Reset")
		case !l.IdleAt(next, latest+int64(ttl)):
			fail("not idle after TTL")
		}
		if err := effectiveWindowError(l, next, now, dec); err != nil {
			fail("%v", err)
		}
		if !dec.Allowed {
			// Logically unchanged: the old and the new state decide a probe alike.
			_, p1, err1 := l.Decide(state, now, 1, nil)
			_, p2, err2 := l.Decide(next, now, 1, nil)
			require.NoError(t, err1)
			require.NoError(t, err2)
			if p1 != p2 {
				fail("denial changed the state: probe %+v before, %+v after", p1, p2)
			}
		}
		if !dec.Allowed && dec.RetryAfter != RetryNever {
			// RetryAfter is exact: the same request then succeeds, and not a microsecond earlier.
			if _, r, _ := l.Decide(next, now+int64(dec.RetryAfter), rq.cost, nil); !r.Allowed {
				fail("denied again after RetryAfter: %+v", r)
			}
			if dec.RetryAfter > us {
				if _, r, _ := l.Decide(next, now+int64(dec.RetryAfter-us), rq.cost, nil); r.Allowed {
					fail("allowed 1µs before RetryAfter")
				}
			}
		}
		if dec.Allowed {
			adm = append(adm, admission{latest / 1000, rq.cost})
		}
		state = next
	}
	if err := checkBound(l, adm); err != nil {
		t.Fatal(err)
	}
	return adm
}

// checkBound reports the first span in which adm (ordered by time) exceeds what l documents:
// Capacity + span×Quota/Window for the buckets (over any closed span), Quota in any (t−W, t]
// for the sliding log, Quota per aligned window (so 2×Quota in any span of length W) for the
// fixed and sliding windows (per calendar period for a calendar window).
func checkBound(l Limit, adm []admission) error {
	q := l.Quota
	if l.Calendar.Unit != 0 {
		perPeriod := map[int64]int64{}
		for _, a := range adm {
			start, _ := oraclePeriod(l.Calendar, min(a.at, maxTimeUs)) // Decide clamps now
			perPeriod[start] += a.cost
		}
		for start, sum := range perPeriod {
			if sum > q {
				return fmt.Errorf("%d admitted in the %v from %d µs, bound %d", sum, l.Calendar, start, q)
			}
		}
		return nil
	}
	w := l.windowUs()
	switch l.Kind {
	case TokenBucket, LeakyBucket:
		for i := range adm {
			sum := int64(0)
			for j := i; j < len(adm); j++ {
				sum += adm[j].cost
				if span := adm[j].at - adm[i].at; sum > l.Capacity()+span*q/w {
					return fmt.Errorf("%d admitted in [%d, %d] µs, bound %d", sum, adm[i].at, adm[j].at, l.Capacity()+span*q/w)
				}
			}
		}
	case SlidingLog:
		for i, sum, j := 0, int64(0), 0; j < len(adm); j++ {
			sum += adm[j].cost
			for adm[i].at <= adm[j].at-w {
				sum -= adm[i].cost
				i++
			}
			if sum > q {
				return fmt.Errorf("%d admitted in (%d, %d] µs, bound %d", sum, adm[j].at-w, adm[j].at, q)
			}
		}
	default:
		perWindow := map[int64]int64{}
		for _, a := range adm {
			perWindow[a.at/w] += a.cost
		}
		for win, sum := range perWindow {
			if sum > q {
				return fmt.Errorf("%d admitted in window %d, bound %d", sum, win, q)
			}
		}
	}
	return nil
}

// drain spends l's capacity at now with requests of cost 1 and returns the state.
func drain(t *testing.T, l Limit, now int64) []byte {
	t.Helper()
	var state []byte
	for range l.Capacity() + 1 {
		next, dec, err := l.Decide(state, now, 1, nil)
		require.NoError(t, err)
		state = next
		if !dec.Allowed {
			return state
		}
	}
	t.Fatalf("%v admitted more than Capacity %d at one instant", l.Kind, l.Capacity())
	return nil
}

func TestConformance(t *testing.T) {
	for _, l := range conformanceLimits {
		require.NoError(t, l.Validate(), limitName(l))
		c, w := l.Capacity(), int64(span(l))
		t.Run(limitName(l), func(t *testing.T) {
			t.Run("allows the first request", func(t *testing.T) {
				_, dec, err := l.Decide(nil, base, 1, nil)
				require.NoError(t, err)
				assert.True(t, dec.Allowed)
				assert.Equal(t, c-1, dec.Remaining)
				_, dec, err = l.Decide(nil, base, c, nil)
				require.NoError(t, err)
				assert.True(t, dec.Allowed, "a first request of cost Capacity")
			})
			t.Run("keeps its contract and its bound over a random trace", func(t *testing.T) {
				r := rand.New(rand.NewPCG(1, uint64(l.Kind)))
				n := traceLength(l)
				adm := checkTrace(t, l, base+w/3, genTrace(r, l, n))
				assert.Greater(t, len(adm), n/10, "the trace should admit plenty")
			})
			t.Run("recovers its full capacity after TTL", func(t *testing.T) {
				now := base + w/2
				state := drain(t, l, now)
				later := now + int64(l.TTL())
				assert.True(t, l.IdleAt(state, later))
				_, dec, err := l.Decide(state, later, c, nil)
				require.NoError(t, err)
				assert.True(t, dec.Allowed)
				assert.Equal(t, int64(0), dec.Remaining)
			})
			t.Run("admits nothing extra when the clock steps back", func(t *testing.T) {
				now := base + w/2
				state := drain(t, l, now)
				for _, back := range []int64{1000, w / 3, w / 2, w, 5 * w} {
					next, dec, err := l.Decide(state, now-back, 1, nil)
					require.NoError(t, err)
					assert.False(t, dec.Allowed, "%v back", time.Duration(back))
					state = next
				}
			})
			t.Run("denies a cost above capacity for good", func(t *testing.T) {
				state, dec, err := l.Decide(nil, base, c+1, nil)
				require.NoError(t, err)
				assert.False(t, dec.Allowed)
				assert.Equal(t, RetryNever, dec.RetryAfter)
				assert.Equal(t, c, dec.Remaining)
				_, dec, err = l.Decide(state, base, c, nil)
				require.NoError(t, err)
				assert.True(t, dec.Allowed, "the denial must not have spent anything")
			})
			t.Run("decides in place when dst is the state", func(t *testing.T) {
				r := rand.New(rand.NewPCG(2, uint64(l.Kind)))
				inPlace := make([]byte, 0, l.EncodedSize())
				var fresh []byte
				now := base
				for i, rq := range genTrace(r, l, 500) {
					now += int64(rq.dt)
					var d1, d2 Decision
					var err error
					fresh, d1, err = l.Decide(fresh, now, rq.cost, nil)
					require.NoError(t, err)
					inPlace, d2, err = l.Decide(inPlace, now, rq.cost, inPlace)
					require.NoError(t, err)
					require.Equal(t, d1, d2, "step %d", i)
					require.Equal(t, fresh, inPlace, "step %d", i)
				}
			})
			t.Run("rejects malformed state", func(t *testing.T) {
				good, _, err := l.Decide(nil, base, 1, nil)
				require.NoError(t, err)
				otherKind := append([]byte{header(l.Kind%5 + 1)}, good[1:]...)
				otherVersion := append([]byte{2<<4 | byte(l.Kind)}, good[1:]...)
				for name, bad := range map[string][]byte{
					"truncated":     good[:len(good)-1],
					"one byte":      good[:1],
					"another kind":  otherKind,
					"version 2":     otherVersion,
					"all ones":      bytes.Repeat([]byte{0xff}, len(good)),
					"time too late": append(append([]byte{good[0]}, bytes.Repeat([]byte{0x7f}, 8)...), good[9:]...),
				} {
					next, dec, err := l.Decide(bad, base, 1, nil)
					assert.True(t, errors.Is(err, ErrMalformedState), "%s: err = %v", name, err)
					assert.Nil(t, next, name)
					assert.Zero(t, dec, name)
					assert.True(t, l.IdleAt(bad, base), "%s: a malformed state is idle", name)
				}
			})
		})
	}
}

// TestSlidingLogMatchesBruteForce checks the sliding log against the obvious implementation: a
// list of every admitted unit's time, counted afresh for each request.
func TestSlidingLogMatchesBruteForce(t *testing.T) {
	for _, l := range []Limit{
		{Kind: SlidingLog, Quota: 5, Window: time.Second},
		{Kind: SlidingLog, Quota: 30, Window: 1013 * time.Microsecond},
	} {
		t.Run(limitName(l), func(t *testing.T) {
			r := rand.New(rand.NewPCG(3, uint64(l.Quota)))
			w := l.windowUs()
			var state []byte
			var times []int64 // every admitted unit, in µs
			now, latest := base, int64(0)
			for i, rq := range genTrace(r, l, 5000) {
				now += int64(rq.dt)
				latest = max(latest, now/1000)
				inView := int64(0)
				for _, at := range times {
					if at > latest-w {
						inView++
					}
				}
				want := rq.cost <= l.Quota-inView
				next, dec, err := l.Decide(state, now, rq.cost, nil)
				require.NoError(t, err)
				require.Equal(t, want, dec.Allowed, "step %d: %d in view, cost %d", i, inView, rq.cost)
				if want {
					for range rq.cost {
						times = append(times, latest)
					}
					inView += rq.cost
				}
				require.Equal(t, max(l.Quota-inView, 0), dec.Remaining, "step %d", i)
				state = next
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		limit   Limit
		wantErr string
	}{
		{"accepts a token bucket of 100 per second", Limit{Kind: TokenBucket, Quota: 100, Window: time.Second}, ""},
		{"accepts a yearly fixed window of a trillion", Limit{Kind: FixedWindow, Quota: MaxQuota, Window: 366 * 24 * time.Hour}, ""},
		{"accepts a burst far above the quota", Limit{Kind: TokenBucket, Quota: 1, Window: time.Second, Burst: 1_000_000}, ""},
		{"rejects the zero kind", Limit{Quota: 1, Window: time.Second}, "algorithms: unknown kind 0"},
		{"rejects a zero quota", Limit{Kind: FixedWindow, Window: time.Second}, "algorithms: quota must be > 0, got 0"},
		{"rejects a quota above MaxQuota", Limit{Kind: FixedWindow, Quota: MaxQuota + 1, Window: time.Second},
			"algorithms: quota must be <= 1000000000000, got 1000000000001"},
		{"rejects a sliding log too large to keep", Limit{Kind: SlidingLog, Quota: 10_001, Window: time.Second},
			"algorithms: sliding_log quota must be <= 10000 (its state keeps one 8-byte time per unit), got 10001"},
		{"rejects a window under a millisecond", Limit{Kind: FixedWindow, Quota: 1, Window: 999 * time.Microsecond},
			"algorithms: window must be between 1ms and 9600h0m0s, got 999µs"},
		{"rejects a window over 400 days", Limit{Kind: FixedWindow, Quota: 1, Window: MaxWindow + time.Microsecond},
			"algorithms: window must be between 1ms and 9600h0m0s, got 9600h0m0.000001s"},
		{"rejects a window with nanoseconds", Limit{Kind: FixedWindow, Quota: 1, Window: time.Second + 1},
			"algorithms: window must be a whole number of microseconds, got 1.000000001s"},
		{"rejects a burst on a window algorithm", Limit{Kind: SlidingWindow, Quota: 1, Window: time.Second, Burst: 2},
			"algorithms: burst must be 0 for sliding_window, got 2"},
		{"rejects a negative burst", Limit{Kind: LeakyBucket, Quota: 1, Window: time.Second, Burst: -1},
			"algorithms: burst must be between 0 and 1000000000000, got -1"},
		{"accepts a monthly calendar window at +05:30", Limit{Kind: FixedWindow, Quota: 10_000,
			Calendar: Calendar{Unit: CalendarMonth, Offset: 5*time.Hour + 30*time.Minute}}, ""},
		{"accepts a yearly calendar window at -18:00", Limit{Kind: FixedWindow, Quota: MaxQuota,
			Calendar: Calendar{Unit: CalendarYear, Offset: -MaxCalendarOffset}}, ""},
		{"rejects a calendar on a token bucket", Limit{Kind: TokenBucket, Quota: 10, Calendar: Calendar{Unit: CalendarMonth}},
			"algorithms: a calendar window needs the fixed_window kind, got token_bucket (a bucket refills continuously: there is no period to align)"},
		{"rejects a calendar on a sliding window counter", Limit{Kind: SlidingWindow, Quota: 10, Calendar: Calendar{Unit: CalendarDay}},
			"algorithms: a calendar window needs the fixed_window kind, got sliding_window (a sliding window looks back over a span that moves with the clock: there is no period to align)"},
		{"rejects a window next to a calendar unit", Limit{Kind: FixedWindow, Quota: 10, Window: time.Hour, Calendar: Calendar{Unit: CalendarWeek}},
			"algorithms: window must be 0 with a calendar unit (the week is the window), got 1h0m0s"},
		{"rejects a calendar offset beyond 18 hours", Limit{Kind: FixedWindow, Quota: 10, Calendar: Calendar{Unit: CalendarDay, Offset: 18*time.Hour + time.Minute}},
			"algorithms: calendar offset must be between -18:00 and +18:00, got 18h1m0s"},
		{"rejects a calendar offset with seconds", Limit{Kind: FixedWindow, Quota: 10, Calendar: Calendar{Unit: CalendarDay, Offset: time.Hour + time.Second}},
			"algorithms: calendar offset must be a whole number of minutes, got 1h0m1s"},
		{"rejects a calendar offset without a unit", Limit{Kind: FixedWindow, Quota: 10, Window: time.Hour, Calendar: Calendar{Offset: time.Hour}},
			"algorithms: calendar offset +01:00 without a calendar unit"},
		{"rejects an unknown calendar unit", Limit{Kind: FixedWindow, Quota: 10, Calendar: Calendar{Unit: 5}},
			"algorithms: unknown calendar unit 5"},
		{"rejects a fixed window with neither a window nor a calendar", Limit{Kind: FixedWindow, Quota: 10},
			"algorithms: window must be between 1ms and 9600h0m0s, got 0s"},
		{"rejects a bucket that takes over 400 days to refill", Limit{Kind: TokenBucket, Quota: 1, Window: time.Hour, Burst: 9601},
			"algorithms: capacity × window / quota (the time to refill an empty bucket) must be <= 9600h0m0s, got 9601 × 1h0m0s / 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.limit.Validate()
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tc.wantErr)
			_, _, err = tc.limit.Decide(nil, base, 1, nil)
			require.EqualError(t, err, tc.wantErr, "Decide validates too")
		})
	}
}

func TestDecideRejectsACostBelowOne(t *testing.T) {
	l := Limit{Kind: TokenBucket, Quota: 1, Window: time.Second}
	for _, cost := range []int64{0, -1} {
		next, _, err := l.Decide(nil, base, cost, nil)
		require.EqualError(t, err, fmt.Sprintf("algorithms: cost must be >= 1, got %d", cost))
		require.Nil(t, next)
	}
}

func TestParseKindRoundTrips(t *testing.T) {
	for _, k := range Kinds {
		got, err := ParseKind(k.String())
		require.NoError(t, err)
		require.Equal(t, k, got)
	}
	_, err := ParseKind("gcra")
	require.EqualError(t, err, `algorithms: unknown kind "gcra" (want token_bucket, leaky_bucket, fixed_window, sliding_log or sliding_window)`)
	require.Equal(t, "kind(9)", Kind(9).String())
}

// TestStateSizes pins the documented encoding sizes.
func TestStateSizes(t *testing.T) {
	for _, tc := range []struct {
		limit Limit
		want  int
	}{
		{Limit{Kind: TokenBucket, Quota: 10, Window: time.Second}, 17},
		{Limit{Kind: LeakyBucket, Quota: 10, Window: time.Second}, 17},
		{Limit{Kind: FixedWindow, Quota: 10, Window: time.Second}, 17},
		{Limit{Kind: SlidingWindow, Quota: 10, Window: time.Second}, 25},
		{Limit{Kind: SlidingLog, Quota: 10, Window: time.Second}, 9 + 8*10},
		{Limit{Kind: FixedWindow, Quota: 10, Calendar: Calendar{Unit: CalendarMonth}}, 17},
	} {
		t.Run(limitName(tc.limit), func(t *testing.T) {
			require.Equal(t, tc.want, tc.limit.EncodedSize())
			next, _, err := tc.limit.Decide(nil, base, tc.limit.Quota, nil)
			require.NoError(t, err)
			require.Len(t, next, tc.want, "a state at capacity")
		})
	}
}

func TestNowOutOfRangeIsClamped(t *testing.T) {
	for _, l := range conformanceLimits {
		t.Run(limitName(l), func(t *testing.T) {
			for _, now := range []int64{math.MinInt64, -1, 0, math.MaxInt64} {
				state, dec, err := l.Decide(nil, now, 1, nil)
				require.NoError(t, err, "now %d", now)
				require.True(t, dec.Allowed, "now %d", now)
				_, dec, err = l.Decide(state, now, l.Capacity(), nil)
				require.NoError(t, err, "now %d", now)
				require.False(t, dec.Allowed, "now %d", now)
				require.LessOrEqual(t, dec.Reset, l.TTL()+us, "now %d", now)
			}
		})
	}
}
