package algorithms

import (
	"testing"
	"time"
)

// benchLimit returns the limit the benchmarks use for k: 100 per second.
func benchLimit(k Kind) Limit {
	return Limit{Kind: k, Quota: 100, Window: time.Second}
}

// BenchmarkDecide measures one decide+encode, in place, on a steady stream at twice the rate
// (so about half the requests are denied); for the sliding log the state holds 100 entries.
func BenchmarkDecide(b *testing.B) {
	for _, k := range Kinds {
		b.Run(k.String(), func(b *testing.B) {
			l := benchLimit(k)
			state := make([]byte, 0, l.EncodedSize())
			step := int64(l.Window) / l.Quota / 2
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
	for _, k := range Kinds {
		t.Run(k.String(), func(t *testing.T) {
			l := benchLimit(k)
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
