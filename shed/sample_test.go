package shed

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTheSamplerKeepsOnlyAnswersThatDidWork(t *testing.T) {
	g := testGradient()
	steady := probed(t, g) // ideal 10 ms: the target is 11 ms
	fresh, _ := g.Update(GradientState{}, base, Summary{})
	at := base + int64(time.Second)
	tests := []struct {
		name    string
		state   GradientState
		admit   int64 // ns before at
		answer  Answer
		want    bool
		comment string
	}{
		{"an upstream answer that did work is a sample", steady, int64(5 * ms), Served, true, ""},
		{"a fast upstream error is none", steady, int64(5 * ms), Refused, false, "a 404 costs the upstream nothing"},
		{"an upstream error at the target is none", steady, int64(11 * ms), Refused, false, ""},
		{"an upstream error slower than the target is a sample", steady, int64(12 * ms), Refused, true, "it waited in the queue like the others"},
		{"a local reply is none", steady, int64(50 * ms), Local, false, ""},
		{"an unknown answer is none", steady, int64(50 * ms), Answer(9), false, ""},
		{"before any ideal latency, an error is none", GradientState{limit: 10 * milli, capacity: 10}, int64(50 * ms), Refused, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Histogram
			assert.Equal(t, tt.want, g.Sampler(&tt.state).Record(&h, at-tt.admit, at, tt.answer), tt.comment)
			assert.Equal(t, map[bool]int64{true: 1, false: 0}[tt.want], h.Count())
			if tt.want {
				assert.Equal(t, time.Duration(tt.admit), h.Max(), "the latency is from admission to the response headers")
			}
		})
	}
	t.Run("during a probe, only requests admitted an interval after it began", func(t *testing.T) {
		sp := g.Sampler(&fresh) // the probe began at base
		var h Histogram
		assert.False(t, sp.Record(&h, base+int64(99*ms), at, Served), "admitted before every worker saw the probe")
		assert.True(t, sp.Record(&h, base+int64(100*ms), at, Served))
		assert.False(t, sp.Record(&h, base+int64(500*ms), base+int64(700*ms), Refused), "a probe never counts errors, even slow ones")
		assert.Equal(t, int64(1), h.Count())
	})
	t.Run("a latency below zero counts as zero", func(t *testing.T) {
		var h Histogram
		require.True(t, Sampler{}.Record(&h, at, at-int64(time.Second), Served))
		assert.Equal(t, time.Duration(0), h.Max())
	})
}

func TestAnswerNames(t *testing.T) {
	assert.Equal(t, "served refused local answer(7)", Served.String()+" "+Refused.String()+" "+Local.String()+" "+Answer(7).String())
}
