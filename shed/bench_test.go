package shed

import (
	"testing"
	"time"
)

// BenchmarkAdmitRelease measures one admission decision and its release, with the state
// decoded from and encoded to its shared-data bytes, as the filter will do on each request.
func BenchmarkAdmitRelease(b *testing.B) {
	p := DefaultPolicy()
	buf := make([]byte, 0, StateSize)
	var s State
	for range 60 {
		s, _ = p.Admit(s, 100, sheddable)
	}
	buf = s.AppendBinary(buf[:0])
	class := 0
	b.ReportAllocs()
	for b.Loop() {
		s, _ := DecodeState(buf)
		s, d := p.Admit(s, 100, class)
		if d.Admitted {
			s = p.Release(s, class)
		}
		buf = s.AppendBinary(buf[:0])
		class = (class + 1) % 3
	}
}

// BenchmarkRecord measures recording one answer's latency in a worker's histogram.
func BenchmarkRecord(b *testing.B) {
	var h Histogram
	var sp Sampler
	d := int64(20 * time.Millisecond)
	b.ReportAllocs()
	for b.Loop() {
		sp.Record(&h, base, base+d, Served)
		d += int64(37 * time.Microsecond)
	}
}

// BenchmarkTick measures one tick: merging a worker's histogram into the shared one (both
// decoded and encoded), summarizing it and updating the controller.
func BenchmarkTick(b *testing.B) {
	g := DefaultGradient()
	var local, shared Histogram
	for i := range 1000 {
		local.Record(time.Duration(15+i%10) * time.Millisecond)
	}
	hbuf := make([]byte, 0, HistogramSize)
	cbuf := make([]byte, 0, GradientStateSize)
	hbuf = shared.AppendBinary(hbuf)
	var c GradientState
	cbuf = c.AppendBinary(cbuf)
	now := base
	b.ReportAllocs()
	for b.Loop() {
		now += int64(100 * time.Millisecond)
		h, _ := DecodeHistogram(hbuf)
		h.Merge(&local)
		c, _ := DecodeGradientState(cbuf)
		c, _ = g.Update(c, now, g.Summarize(&h, 50))
		cbuf = c.AppendBinary(cbuf[:0])
		hbuf = (&Histogram{}).AppendBinary(hbuf[:0])
	}
}

func TestNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	p := DefaultPolicy()
	g := DefaultGradient()
	sbuf := make([]byte, 0, StateSize)
	hbuf := make([]byte, 0, HistogramSize)
	cbuf := make([]byte, 0, GradientStateSize)
	var s State
	var h Histogram
	var c GradientState
	now := base
	names := []string{"critical", "default", "sheddable", "unknown", ""}
	i := 0
	tests := []struct {
		name string
		f    func()
	}{
		{"the request path: class lookup, decode, admit, encode, release", func() {
			i++
			class := p.Class(names[i%len(names)])
			s, _ = DecodeState(sbuf)
			var d Decision
			s, d = p.AdmitKey(s, int64(10+i%50), class, int64(i%7))
			sbuf = s.AppendBinary(sbuf[:0])
			if d.Admitted && i%3 == 0 {
				s = p.Release(s, class)
			}
		}},
		{"the response path: recording a latency", func() {
			i++
			g.Sampler(&c).Record(&h, now-int64(i)*1000, now, Answer(i%3))
		}},
		{"the tick: merge, end the interval, summarize, update, encode", func() {
			now += int64(100 * time.Millisecond)
			shared, _ := DecodeHistogram(hbuf)
			shared.Merge(&h)
			hbuf = shared.AppendBinary(hbuf[:0])
			var peak int64
			s, peak = s.EndInterval()
			c, _ = DecodeGradientState(cbuf)
			c, _ = g.Update(c, now, g.Summarize(&shared, peak))
			cbuf = c.AppendBinary(cbuf[:0])
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if allocs := testing.AllocsPerRun(1000, tt.f); allocs != 0 {
				t.Errorf("%s allocates %v times per run, want 0", tt.name, allocs)
			}
		})
	}
}
