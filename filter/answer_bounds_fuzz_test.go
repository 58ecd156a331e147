package filter

import (
	"testing"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/wire"
)

// FuzzABoundedAnswerNeverWaitsPastWhatTheLimitCanNeed: whatever times an answer claims, the
// decision the filter renders waits no longer than the limit's longest wait (rounded up to a
// millisecond), never negatively, and a calendar one has an effective window.
func FuzzABoundedAnswerNeverWaitsPastWhatTheLimitCanNeed(f *testing.F) {
	specs := []rules.LimitSpec{
		{Limit: algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 10, Calendar: algorithms.Calendar{Unit: algorithms.CalendarMonth, Offset: 2 * time.Hour}}},
		{Limit: algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 10, Window: time.Minute}},
		{Limit: algorithms.Limit{Kind: algorithms.SlidingWindow, Quota: 10, Window: time.Hour}},
	}
	f.Add(uint8(0), false, false, int64(0), int64(0), int64(0), int64(0), int64(1769903940000000000))
	f.Add(uint8(1), true, false, int64(34560000000), int64(-1), int64(9223372036854775807), int64(4611686018427387904), int64(0))
	f.Add(uint8(2), false, true, int64(-5), int64(9223372036854775807), int64(-9223372036854775808), int64(1), int64(1<<62))
	f.Fuzz(func(t *testing.T, which uint8, allowed, settles bool, reset, retry, delay, eff, now int64) {
		spec := &specs[int(which)%len(specs)]
		d := wire.Decision{Allowed: allowed, Limit: 10, ResetMs: reset, RetryAfterMs: retry, DelayMs: delay, EffectiveMs: eff}
		boundDecision(spec, &d, settles, now)
		w := spec.LongestWait(now, settles)
		most := w + time.Millisecond
		out := d.Algorithms()
		if out.Reset > most || out.Delay > most || out.EffectiveWindow > most || out.EffectiveWindow < 0 || out.Delay < 0 {
			t.Fatalf("%+v (bound %v) renders %+v", d, w, out)
		}
		if out.RetryAfter != algorithms.RetryNever && (out.RetryAfter > most || out.RetryAfter < 0) {
			t.Fatalf("%+v (bound %v) waits %v", d, w, out.RetryAfter)
		}
		if spec.Limit.Calendar.Unit != 0 && spec.Limit.EffectiveWindowOf(out) <= 0 {
			t.Fatalf("a calendar decision %+v without an effective window", d)
		}
	})
}
