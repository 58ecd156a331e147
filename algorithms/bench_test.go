package algorithms

import (
	"testing"
	"time"
)

// benchLimits are the limits the benchmarks use: 100 per second for every kind, and a calendar
// month of a million (a stream at twice its rate takes about two years of now for 10^8 requests).
func benchLimits() []Limit {
	var ls []Limit
	for _, k := range Kinds {
		ls = append(ls, Limit{Kind: k, Quota: 100, Window: time.Second})
	}
	return append(ls, Limit{Kind: FixedWindow, Quota: 1_000_000, Calendar: Calendar{Unit: CalendarMonth, Offset: -8 * time.Hour}})
}

func benchName(l Limit) string {
	if l.Calendar.Unit != 0 {
		return l.Kind.String() + "_calendar_" + l.Calendar.Unit.String()
	}
	return l.Kind.String()
}

// BenchmarkDecide measures one decide+encode, in place, on a steady stream at twice the rate
// (so about half the requests are denied); for the sliding log the state holds 100 entries.
func BenchmarkDecide(b *testing.B) {
	for _, l := range benchLimits() {
		b.Run(benchName(l), func(b *testing.B) {
			state := make([]byte, 0, l.EncodedSize())
			step := int64(span(l)) / l.Quota / 2
			now := base
			b.ReportAllocs()
			for b.Loop() {
				now += step
				state, _, _ = l.Decide(state, now, 1, state)
			}
			b.ReportMetric(float64(len(state)), "state-bytes")
		})
	}
}

func TestNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, l := range benchLimits() {
		t.Run(benchName(l), func(t *testing.T) {
			state := make([]byte, 0, l.EncodedSize())
			now := base
			allocs := testing.AllocsPerRun(1000, func() {
				now += int64(3 * time.Millisecond)
				state, _, _ = l.Decide(state, now, 1+now%3, state)
				_ = l.IdleAt(state, now)
			})
			if allocs != 0 {
				t.Errorf("Decide+IdleAt allocates %v times per run, want 0", allocs)
			}
		})
	}
}
