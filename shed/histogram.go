package shed

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"time"
)

// Histogram buckets: latencies in whole microseconds, exact below 8 µs, then eight buckets per
// power of two (each at most an eighth of its lower bound wide) up to 2^27 µs (134 s); longer
// latencies fall in the last bucket (Max still records them, up to 2^32−1 µs).
const (
	histSub     = 8                    // buckets per power of two
	subShift    = 3                    // log2(histSub)
	histBuckets = histSub + 24*histSub // 200: 0..7 µs exact, then 24 powers of two, 2^3 .. 2^27
	histTopUs   = 1 << 27              // the upper bound of the last bucket
	maxUs32     = 1<<32 - 1            // the largest latency kept, in µs (71 minutes)
	maxCount    = 1<<32 - 1            // counts saturate here
	histHeader  = 1 + 4 + 4 + 4        // header byte, count, min, max
)

// HistogramSize is the length of an encoded Histogram.
const HistogramSize = histHeader + 4*histBuckets

// Histogram is a fixed-size summary of latency samples: counts in logarithmic buckets, the
// sample count, the minimum and the maximum. Histograms of different workers merge exactly
// (Merge), so each worker can record its own samples and one tick can combine them. The zero
// Histogram is empty. A Histogram is 812 bytes and holds no pointers.
type Histogram struct {
	counts   [histBuckets]uint32
	n        uint32
	min, max uint32 // µs; meaningful when n > 0
}

// bucketOf returns the bucket of a latency of us microseconds.
func bucketOf(us uint64) int {
	if us < histSub {
		return int(us)
	}
	if us >= histTopUs {
		return histBuckets - 1
	}
	e := bits.Len64(us) - 1 // subShift <= e <= 26
	sub := int(us>>(e-subShift)) & (histSub - 1)
	return histSub + (e-subShift)*histSub + sub
}

// bucketBounds returns the range [lo, hi) of bucket i in µs.
func bucketBounds(i int) (lo, hi uint64) {
	if i < histSub {
		return uint64(i), uint64(i) + 1
	}
	e := (i-histSub)/histSub + subShift
	sub := uint64((i - histSub) % histSub)
	w := uint64(1) << (e - subShift)
	lo = (histSub + sub) * w
	return lo, lo + w
}

func toUs(d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	return min(uint64(d/time.Microsecond), maxUs32)
}

// Record adds one latency sample (negative durations count as 0; durations are truncated to
// microseconds). Counts saturate at 2^32−1. It does not allocate.
func (h *Histogram) Record(d time.Duration) {
	us := toUs(d)
	if h.n == maxCount {
		return
	}
	if h.n == 0 || uint32(us) < h.min {
		h.min = uint32(us)
	}
	if h.n == 0 || uint32(us) > h.max {
		h.max = uint32(us)
	}
	h.n++
	h.counts[bucketOf(us)]++
}

// Merge adds the samples of o to h, as if each had been recorded in h (saturating).
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if h.n == 0 || o.max > h.max {
		h.max = o.max
	}
	h.n = satAdd(h.n, o.n)
	for i, c := range o.counts {
		h.counts[i] = satAdd(h.counts[i], c)
	}
}

func satAdd(a, b uint32) uint32 {
	if s := uint64(a) + uint64(b); s < maxCount {
		return uint32(s)
	}
	return maxCount
}

// Reset empties h.
func (h *Histogram) Reset() { *h = Histogram{} }

// Count returns the number of samples.
func (h *Histogram) Count() int64 { return int64(h.n) }

// Min returns the smallest sample, or 0 if there is none.
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) * time.Microsecond }

// Max returns the largest sample, or 0 if there is none.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) * time.Microsecond }

// Quantile returns the latency below which permille thousandths of the samples fall (500 is
// the median, 900 the p90; clamped to [0, 1000]). The sample of rank r = ceil(n × permille/1000)
// (at least 1) is placed by linear interpolation in its bucket, as if the bucket's k samples
// were spread evenly (the j-th at lo + (hi−lo)(2j−1)/2k), and the result is clamped to
// [Min, Max]. It is exact below 8 µs and errs by less than an eighth of the true value above.
// It returns 0 for an empty h.
func (h *Histogram) Quantile(permille int) time.Duration {
	if h.n == 0 {
		return 0
	}
	pm := uint64(min(max(permille, 0), 1000))
	rank := max((uint64(h.n)*pm+999)/1000, 1)
	below := uint64(0)
	i := 0
	for ; i < histBuckets-1; i++ {
		if below+uint64(h.counts[i]) >= rank {
			break
		}
		below += uint64(h.counts[i])
	}
	return h.place(i, rank-below)
}

// WeightedQuantile is Quantile with every sample weighted by its own latency: it returns the
// latency below which permille thousandths of the samples' total time falls. Where requests hold
// a slot while they wait, that is the share of slot-time: a caller that holds a share a of the
// slots over the histogram's span moves the result at most to the quantiles (permille/1000 − a)/
// (1 − a) and (permille/1000)/(1 − a) of the others, however many (fast) or few (slow) samples
// it adds. Weights are the bucket's midpoint (exact below 8 µs, 1 µs for 0), so it errs, like
// Quantile, by less than an eighth. It returns 0 for an empty h.
func (h *Histogram) WeightedQuantile(permille int) time.Duration {
	return h.CappedQuantile(permille, 1<<62)
}

// CappedQuantile is WeightedQuantile with no sample weighing more than ceiling (at least 1 µs):
// a sample slower than the ceiling counts as if it took the ceiling. So a set of samples that are
// a share f of the count, however slow, holds at most a share a = f·C/(f·C + (1−f)·w) of the
// weight, with C the ceiling and w the others' mean weight, and moves the result at most to the
// others' quantile (permille/1000)/(1 − a). Below the ceiling it is WeightedQuantile.
func (h *Histogram) CappedQuantile(permille int, ceiling time.Duration) time.Duration {
	if h.n == 0 {
		return 0
	}
	c := uint64(max(toUsInt(ceiling), 1))
	weight := func(i int) uint64 { return min(bucketWeight[i], c) }
	total := uint64(0)
	for i, n := range h.counts {
		total = satAdd64(total, uint64(n)*weight(i))
	}
	pm := uint64(min(max(permille, 0), 1000))
	want := max(total/1000*pm+(total%1000*pm+999)/1000, 1)
	below := uint64(0)
	i := 0
	for ; i < histBuckets-1; i++ {
		w := uint64(h.counts[i]) * weight(i)
		if below+w >= want {
			break
		}
		below += w
	}
	return h.place(i, (want-below+weight(i)-1)/weight(i))
}

// bucketWeight is the latency, in µs and at least 1, that stands for each sample of a bucket
// in WeightedQuantile: its midpoint (its value below 8 µs).
var bucketWeight = func() (w [histBuckets]uint64) {
	for i := range w {
		lo, hi := bucketBounds(i)
		w[i] = max((lo+hi-1)/2, 1)
	}
	return w
}()

func satAdd64(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return 1<<64 - 1
}

// place returns the j-th (from 1) of the k samples of bucket i spread evenly over the bucket,
// clamped to [Min, Max].
func (h *Histogram) place(i int, j uint64) time.Duration {
	lo, hi := bucketBounds(i)
	k := max(uint64(h.counts[i]), 1)
	j = min(max(j, 1), k)
	v := lo + (hi-lo)*(2*j-1)/(2*k)
	v = min(max(v, uint64(h.min)), uint64(h.max))
	return time.Duration(v) * time.Microsecond
}

// recordN adds n samples of latency d (saturating), as n calls of Record would.
func (h *Histogram) recordN(d time.Duration, n int64) {
	if n <= 0 {
		return
	}
	us := toUs(d)
	var o Histogram
	o.n, o.min, o.max = uint32(min(n, maxCount)), uint32(us), uint32(us)
	o.counts[bucketOf(us)] = o.n
	h.Merge(&o)
}

// AppendBinary appends the HistogramSize-byte encoding of h to dst and returns it; it does not
// allocate when dst has room.
func (h *Histogram) AppendBinary(dst []byte) []byte {
	dst = append(dst, version<<4|kindHistogram)
	dst = binary.LittleEndian.AppendUint32(dst, h.n)
	dst = binary.LittleEndian.AppendUint32(dst, h.min)
	dst = binary.LittleEndian.AppendUint32(dst, h.max)
	for _, c := range h.counts {
		dst = binary.LittleEndian.AppendUint32(dst, c)
	}
	return dst
}

// DecodeHistogram decodes an encoded Histogram. An empty b is the empty Histogram. It rejects,
// wrapping ErrMalformed, a count that is not the sum of the buckets (or, saturated, below it),
// and a minimum or maximum outside the buckets that hold samples.
func DecodeHistogram(b []byte) (Histogram, error) {
	var h Histogram
	if len(b) == 0 {
		return h, nil
	}
	if err := checkHeader(b, kindHistogram, HistogramSize); err != nil {
		return Histogram{}, err
	}
	h.n = binary.LittleEndian.Uint32(b[1:])
	h.min = binary.LittleEndian.Uint32(b[5:])
	h.max = binary.LittleEndian.Uint32(b[9:])
	sum := uint64(0)
	for i := range h.counts {
		h.counts[i] = binary.LittleEndian.Uint32(b[histHeader+4*i:])
		sum += uint64(h.counts[i])
	}
	if err := h.check(sum); err != nil {
		return Histogram{}, err
	}
	return h, nil
}

func (h *Histogram) check(sum uint64) error {
	switch {
	case uint64(h.n) != sum && !(h.n == maxCount && sum >= maxCount):
		return fmt.Errorf("%w: histogram count %d, buckets add up to %d", ErrMalformed, h.n, sum)
	case h.n == 0 && (h.min != 0 || h.max != 0):
		return fmt.Errorf("%w: empty histogram with min %d µs, max %d µs", ErrMalformed, h.min, h.max)
	case h.n == 0:
		return nil
	case h.min > h.max:
		return fmt.Errorf("%w: histogram min %d µs above max %d µs", ErrMalformed, h.min, h.max)
	case h.counts[bucketOf(uint64(h.min))] == 0 || h.counts[bucketOf(uint64(h.max))] == 0:
		return fmt.Errorf("%w: histogram min %d µs or max %d µs in an empty bucket", ErrMalformed, h.min, h.max)
	}
	return nil
}
