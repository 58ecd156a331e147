package shed

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBucketsTileTheRangeWithoutGapsAndNoWiderThanAnEighth(t *testing.T) {
	prevHi := uint64(0)
	for i := range histBuckets {
		lo, hi := bucketBounds(i)
		require.Equal(t, prevHi, lo, "bucket %d starts where %d ends", i, i-1)
		if lo >= histSub {
			assert.LessOrEqual(t, (hi-lo)*8, lo, "bucket %d [%d, %d) is at most an eighth of its lower bound wide", i, lo, hi)
		}
		assert.Equal(t, i, bucketOf(lo))
		assert.Equal(t, i, bucketOf(hi-1))
		prevHi = hi
	}
	assert.Equal(t, uint64(histTopUs), prevHi)
	assert.Equal(t, histBuckets-1, bucketOf(1<<40), "beyond the top, the last bucket")
}

func TestQuantilesAreWithinAnEighthOfTheExactValue(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, spread := range []float64{0.01, 0.1, 1, 5} {
		var h Histogram
		var exact []time.Duration
		for range 5000 {
			d := time.Duration(float64(20*time.Millisecond) * (1 + spread*r.ExpFloat64()))
			h.Record(d)
			exact = append(exact, d.Truncate(time.Microsecond))
		}
		slices.Sort(exact)
		for _, pm := range []int{1, 100, 500, 900, 990, 1000} {
			want := exact[max((len(exact)*pm+999)/1000, 1)-1]
			assert.InDelta(t, float64(want), float64(h.Quantile(pm)), float64(want)/8, "spread %v, p%v", spread, float64(pm)/10)
			want = exactWeighted(exact, pm)
			assert.InDelta(t, float64(want), float64(h.WeightedQuantile(pm)), float64(want)/8, "spread %v, weighted p%v", spread, float64(pm)/10)
		}
	}
}

func TestQuantilesOfFewSamples(t *testing.T) {
	tests := []struct {
		name     string
		samples  []time.Duration
		pm       int
		want     time.Duration
		weighted time.Duration
	}{
		{"an empty histogram has no quantile", nil, 500, 0, 0},
		{"one sample is every quantile", []time.Duration{20 * time.Millisecond}, 1, 20 * time.Millisecond, 20 * time.Millisecond},
		{"one sample is every quantile, the maximum too", []time.Duration{20 * time.Millisecond}, 1000, 20 * time.Millisecond, 20 * time.Millisecond},
		{"latencies below 8 µs are exact", []time.Duration{3 * time.Microsecond, 5 * time.Microsecond, 7 * time.Microsecond}, 500, 5 * time.Microsecond, 5 * time.Microsecond},
		{"the maximum is exact", []time.Duration{time.Millisecond, 3 * time.Second}, 1000, 3 * time.Second, 3 * time.Second},
		{"the minimum is exact", []time.Duration{1234 * time.Microsecond, 3 * time.Second}, 0, 1234 * time.Microsecond, 1234 * time.Microsecond},
		{"a negative latency counts as zero", []time.Duration{-time.Second}, 500, 0, 0},
		{"a latency above the top bucket keeps its maximum", []time.Duration{10 * time.Minute}, 500, 10 * time.Minute, 10 * time.Minute},
		{"by weight, a slow sample outweighs many fast ones", []time.Duration{time.Millisecond, time.Millisecond, time.Millisecond, 100 * time.Millisecond}, 500, time.Millisecond, 100 * time.Millisecond},
		{"zero latencies weigh a microsecond each", []time.Duration{0, 0, 0, 0, 0, 0, 0}, 500, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Histogram
			for _, d := range tt.samples {
				h.Record(d)
			}
			assert.Equal(t, tt.want, h.Quantile(tt.pm))
			assert.Equal(t, tt.weighted, h.WeightedQuantile(tt.pm), "weighted")
		})
	}
}

func TestMergingHistogramsEqualsRecordingEverySampleInOne(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var workers [4]Histogram
	var all, merged Histogram
	for range 10_000 {
		d := time.Duration(r.Int64N(int64(2 * time.Second)))
		workers[r.IntN(4)].Record(d)
		all.Record(d)
	}
	for i := range workers {
		merged.Merge(&workers[i])
	}
	merged.Merge(&Histogram{}) // an empty one changes nothing
	assert.Equal(t, all, merged)
	assert.Equal(t, int64(10_000), merged.Count())
}

func TestCountsSaturateInsteadOfWrapping(t *testing.T) {
	h := Histogram{n: maxCount - 1, min: 10, max: 10}
	h.counts[bucketOf(10)] = maxCount - 1
	h.Record(10 * time.Microsecond)
	h.Record(10 * time.Microsecond)
	assert.Equal(t, int64(maxCount), h.Count())
	h.Merge(&h)
	assert.Equal(t, int64(maxCount), h.Count())
	assert.Equal(t, uint32(maxCount), h.counts[bucketOf(10)])
}

func TestHistogramEncodingRoundTrips(t *testing.T) {
	var h Histogram
	for _, d := range []time.Duration{0, time.Microsecond, 20 * time.Millisecond, time.Hour} {
		h.Record(d)
	}
	b := h.AppendBinary(nil)
	require.Len(t, b, HistogramSize)
	assert.Equal(t, byte(0x13), b[0])
	assert.Equal(t, []byte{4, 0, 0, 0}, b[1:5], "little-endian count")
	got, err := DecodeHistogram(b)
	require.NoError(t, err)
	assert.Equal(t, h, got)
	assert.Equal(t, time.Hour, got.Max())
	assert.Equal(t, time.Duration(0), got.Min())
}

func TestDecodeHistogramRejectsWhatItCannotTrust(t *testing.T) {
	var h Histogram
	h.Record(5 * time.Millisecond)
	good := h.AppendBinary(nil)
	with := func(off int, v ...byte) []byte {
		b := slices.Clone(good)
		copy(b[off:], v)
		return b
	}
	emptyWith := func(off int, v ...byte) []byte {
		b := (&Histogram{}).AppendBinary(nil)
		copy(b[off:], v)
		return b
	}
	tests := []struct {
		name    string
		b       []byte
		wantErr string
	}{
		{"a short record", good[:HistogramSize-4], "histogram state of 809 bytes, want 813"},
		{"a shedder record", with(0, 0x11), "kind 1, want 3 (histogram)"},
		{"a count that is not the sum of the buckets", with(1, 2), "histogram count 2, buckets add up to 1"},
		{"a minimum above the maximum", with(5, 0xff, 0xff), "histogram min 65535 µs above max 5000 µs"},
		{"a maximum in an empty bucket", with(9, 0, 0, 1), "histogram min 5000 µs or max 65536 µs in an empty bucket"},
		{"a count of zero over a filled bucket", with(1, 0, 0, 0, 0), "histogram count 0, buckets add up to 1"},
		{"an empty histogram with a minimum", emptyWith(5, 7, 0, 0, 0, 7), "empty histogram with min 7 µs, max 7 µs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeHistogram(tt.b)
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrMalformed))
			assert.Equal(t, "shed: malformed state: "+tt.wantErr, err.Error())
		})
	}
}

// exactWeighted returns the weighted quantile of sorted samples by the definition: the first
// sample at which the running sum of latencies reaches permille thousandths of their total.
func exactWeighted(sorted []time.Duration, permille int) time.Duration {
	total := time.Duration(0)
	for _, d := range sorted {
		total += max(d, time.Microsecond)
	}
	want, run := total/1000*time.Duration(permille), time.Duration(0)
	for _, d := range sorted {
		if run += max(d, time.Microsecond); run >= want {
			return d
		}
	}
	return sorted[len(sorted)-1]
}

// A caller who answers many requests at once, or very few very slowly, weighs only the time its
// requests held: with a share a of that time, the median stays between the others' quantiles
// (0.5 − a)/(1 − a) and 0.5/(1 − a), and a flood of instant answers moves it by nothing.
func TestTheWeightedMedianMovesOnlyAsFarAsTheShareOfTimeItIsGiven(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	var honest Histogram
	var sorted []time.Duration
	for range 2000 {
		d := time.Duration(float64(20*time.Millisecond) * (0.5 + r.Float64())) // 10 to 30 ms
		honest.Record(d)
		sorted = append(sorted, d.Truncate(time.Microsecond))
	}
	slices.Sort(sorted)
	honestTime := time.Duration(0)
	for _, d := range sorted {
		honestTime += d
	}
	tests := []struct {
		name    string
		latency time.Duration
		n       int64
	}{
		{"a million answers of 1 µs", time.Microsecond, 1_000_000},
		{"twenty thousand answers of 1 ms (a third of the time)", time.Millisecond, int64(honestTime / time.Millisecond / 2)},
		{"two answers of 10 s (a third of the time)", 10 * time.Second, int64(honestTime / (10 * time.Second) / 2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := honest
			h.recordN(tt.latency, tt.n)
			a := float64(tt.latency) * float64(tt.n) / (float64(tt.latency)*float64(tt.n) + float64(honestTime))
			lo := exactWeighted(sorted, int(1000*max(0.5-a, 0)/(1-a)))
			hi := exactWeighted(sorted, int(1000*min(0.5/(1-a), 1)))
			got := h.WeightedQuantile(500)
			assert.GreaterOrEqual(t, float64(got), float64(lo)*7/8, "share %.3f: not below the others' p%.0f", a, 100*(0.5-a)/(1-a))
			assert.LessOrEqual(t, float64(got), float64(hi)*9/8, "share %.3f: not above the others' p%.0f", a, 100*0.5/(1-a))
		})
	}
	flooded := honest
	flooded.recordN(time.Microsecond, 1_000_000)
	assert.InDelta(t, float64(honest.WeightedQuantile(500)), float64(flooded.WeightedQuantile(500)), float64(time.Millisecond),
		"a million instant answers hold 1 s of the 40 s: the median barely moves")
	assert.Equal(t, time.Microsecond, flooded.Quantile(500), "where the median by count is theirs")
}

func TestACappedQuantileCountsASlowSampleAsTheCeiling(t *testing.T) {
	var h Histogram
	for range 50 {
		h.Record(20 * time.Millisecond)
	}
	h.Record(time.Second)
	h.Record(time.Second)
	assert.Greater(t, h.WeightedQuantile(500), 500*time.Millisecond, "two slow samples hold most of the weight")
	assert.InDelta(t, float64(20*time.Millisecond), float64(h.CappedQuantile(500, 44*time.Millisecond)), float64(3*time.Millisecond),
		"at a ceiling of 44 ms they hold 8% of it")
	assert.Equal(t, h.WeightedQuantile(900), h.CappedQuantile(900, time.Hour), "below the ceiling it is WeightedQuantile")
	assert.Zero(t, (&Histogram{}).CappedQuantile(500, time.Second))
}
