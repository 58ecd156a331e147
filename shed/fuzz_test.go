package shed

import (
	"errors"
	"math"
	"testing"
	"time"
)

// fuzzPolicy maps fuzzer bytes to a valid Policy of 1 to 8 classes.
func fuzzPolicy(n uint8, reserves []byte) Policy {
	classes := make([]Class, 1+int(n)%MaxClasses)
	budget := 999
	for i := range classes {
		classes[i].Name = string(rune('a' + i))
		if i < len(classes)-1 && i < len(reserves) {
			classes[i].Reserve = min(int(reserves[i])*4, budget)
			budget -= classes[i].Reserve
		}
	}
	p, err := NewPolicy(classes, "a")
	if err != nil {
		panic(err) // fuzzPolicy only builds valid policies
	}
	return p
}

// checkGuarantees checks the documented guarantees of one Admit at capacity c from s.
func checkGuarantees(t *testing.T, p *Policy, s State, c int64, class int, next State, d Decision) {
	t.Helper()
	cc := min(max(c, 0), MaxCapacity)
	if d.Admitted != (s.Total() < d.Threshold) {
		t.Fatalf("class %d at %d in flight, threshold %d: admitted %v", d.Class, s.Total(), d.Threshold, d.Admitted)
	}
	if d.Class > 0 && d.Threshold != p.Threshold(c, d.Class) {
		t.Fatalf("class %d held to %d, not its threshold %d", d.Class, d.Threshold, p.Threshold(c, d.Class))
	}
	if d.Admitted && d.Class > 0 && next.Total() > cc {
		t.Fatalf("admitted class %d to %d in flight over capacity %d", class, next.Total(), cc)
	}
	if p.Classes() > 1 {
		lower := s.Total() - int64(s.InFlight[0])
		reserve := cc - p.Threshold(c, 1)
		if d.Admitted && d.Class == 0 && next.Total() > max(cc, lower+reserve) {
			t.Fatalf("admitted the highest class to %d in flight, over capacity %d and over its reserve %d above the %d below it", next.Total(), cc, reserve, lower)
		}
		if d.Class == 0 && int64(s.InFlight[0]) < reserve && !d.Admitted {
			t.Fatalf("the highest class shed holding %d of its reserve %d (%v, capacity %d)", s.InFlight[0], reserve, s.InFlight, c)
		}
	}
	for higher := range d.Class {
		if _, dh := p.Admit(s, c, higher); d.Admitted && !dh.Admitted {
			t.Fatalf("class %d shed while lower class %d is admitted at %d in flight, capacity %d", higher, d.Class, s.Total(), c)
		}
	}
}

// checkReserves checks that the classes below each class hold no more than its successor's
// threshold, so that each class keeps its reserve, when the capacity never changed.
func checkReserves(t *testing.T, p *Policy, s State, c int64) {
	t.Helper()
	for i := 0; i+1 < p.Classes(); i++ {
		below := int64(0)
		for j := i + 1; j < MaxClasses; j++ {
			below += int64(s.InFlight[j])
		}
		if limit := p.Threshold(c, i+1); below > limit {
			t.Fatalf("classes below %d hold %d, more than threshold %d: %v", i, below, limit, s.InFlight)
		}
		held := int64(0)
		for j := 0; j <= i; j++ {
			held += int64(s.InFlight[j])
		}
		if held < p.Threshold(c, i)-p.Threshold(c, i+1) {
			if _, d := p.Admit(s, c, i); !d.Admitted {
				t.Fatalf("class %d shed with its reserve unused: classes up to it hold %d of %d", i, held, p.Threshold(c, i)-p.Threshold(c, i+1))
			}
		}
	}
}

// FuzzAdmit drives a shedder with admissions and releases of random classes from four keys
// held to a random share. With a fixed capacity, the total never exceeds it and each class
// keeps its reserve; with a changing capacity, every decision still respects the capacity and
// the class order of its moment, and the highest class keeps its reserve whatever the lower
// classes hold; no key ever holds more than KeySlots of the capacity it was admitted at.
func FuzzAdmit(f *testing.F) {
	f.Add(uint8(2), []byte{25, 50}, uint16(10), false, uint16(1000), []byte{2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 0, 0, 0, 0})
	f.Add(uint8(7), []byte{1, 2, 3, 4, 5, 6, 7}, uint16(100), true, uint16(300), []byte{7, 6, 5, 4, 3, 2, 1, 0, 0x87, 0x80, 3})
	f.Add(uint8(0), []byte{}, uint16(1), false, uint16(1), []byte{0, 0, 0x80, 0})
	f.Add(uint8(3), []byte{200, 49, 1}, uint16(3), true, uint16(100), []byte{0x23, 0x43, 0x63, 0x83, 1, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, n uint8, reserves []byte, capacity uint16, vary bool, share uint16, ops []byte) {
		p, err := fuzzPolicy(n, reserves).WithKeyShare(1 + int(share%1000))
		if err != nil {
			t.Fatal(err)
		}
		c := int64(capacity % 2000)
		var s State
		var keys [4][MaxClasses + 1]int64 // slots held per key and class
		for i, o := range ops {
			if i >= 2000 {
				break
			}
			class := int(o&0x1f) % (p.Classes() + 1) // one past the last: out of range
			key := int(o>>5) & 3
			if vary && i%7 == 6 {
				c = int64(o) % 300
			}
			if o&0x80 != 0 {
				s = p.Release(s, class)
				keys[key][class] = max(keys[key][class]-1, 0)
				continue
			}
			held := int64(0)
			for _, k := range keys[key] {
				held += k
			}
			next, d := p.AdmitKey(s, c, class, held)
			if d.KeyLimited != (held >= p.KeySlots(c)) || d.KeyLimited && (d.Admitted || next != s) {
				t.Fatalf("key holding %d of %d slots: %+v", held, p.KeySlots(c), d)
			}
			if !d.KeyLimited {
				checkGuarantees(t, &p, s, c, class, next, d)
			}
			if d.Admitted {
				keys[key][class]++
			}
			s = next
			if s.Total() > int64(s.Peak) {
				t.Fatalf("peak %d below the %d in flight", s.Peak, s.Total())
			}
			if !vary {
				checkReserves(t, &p, s, c)
			}
		}
	})
}

// FuzzDecode feeds arbitrary bytes to every decoder: none panics, each either rejects them
// with ErrMalformed or accepts a value whose encoding decodes to the same value.
func FuzzDecode(f *testing.F) {
	var h Histogram
	h.Record(20 * time.Millisecond)
	g := DefaultGradient()
	cs, _ := g.Update(GradientState{}, base, Summary{})
	f.Add((&State{InFlight: [MaxClasses]uint32{1, 2, 3}}).AppendBinary(nil))
	f.Add(h.AppendBinary(nil))
	f.Add(cs.AppendBinary(nil))
	f.Add([]byte{0x12, 1, 5, 0})
	f.Add(append([]byte{0x12, 1, 2, 0}, make([]byte, 64)...)) // version 1
	f.Add(cs.AppendBinary(nil)[:68])
	f.Fuzz(func(t *testing.T, b []byte) {
		if s, err := DecodeState(b); err == nil {
			if again, err := DecodeState(s.AppendBinary(nil)); err != nil || again != s {
				t.Fatalf("state %x decodes to %v, which does not round-trip: %v", b, s, err)
			}
		} else if !errors.Is(err, ErrMalformed) {
			t.Fatal(err)
		}
		if h, err := DecodeHistogram(b); err == nil {
			if again, err := DecodeHistogram(h.AppendBinary(nil)); err != nil || again != h {
				t.Fatalf("histogram %x does not round-trip: %v", b, err)
			}
			pm := int(h.n % 1001)
			if q, w := h.Quantile(pm), h.WeightedQuantile(pm); q < h.Min() || q > h.Max() || w < h.Min() || w > h.Max() {
				t.Fatalf("histogram %x: p%d %v or weighted %v outside [%v, %v]", b, pm, q, w, h.Min(), h.Max())
			}
			ceiling := time.Duration(h.n%200_000) * time.Microsecond
			if c := h.CappedQuantile(pm, ceiling); c < h.Min() || c > h.Max() {
				t.Fatalf("histogram %x: p%d capped at %v is %v, outside [%v, %v]", b, pm, ceiling, c, h.Min(), h.Max())
			}
		} else if !errors.Is(err, ErrMalformed) {
			t.Fatal(err)
		}
		if s, err := DecodeGradientState(b); err == nil {
			if again, err := DecodeGradientState(s.AppendBinary(nil)); err != nil || again != s {
				t.Fatalf("controller %x does not round-trip: %v", b, err)
			}
			next, st := g.Update(s, base, Summary{Count: 1, Latency: ms, InFlight: 1})
			if st.Limit < g.MinLimit || st.Limit > g.MaxLimit {
				t.Fatalf("controller %x: limit %d out of [%d, %d]", b, st.Limit, g.MinLimit, g.MaxLimit)
			}
			if _, err := DecodeGradientState(next.AppendBinary(nil)); err != nil {
				t.Fatalf("controller %x: Update wrote a state it cannot read: %v", b, err)
			}
		} else if !errors.Is(err, ErrMalformed) {
			t.Fatal(err)
		}
	})
}

// FuzzUpdate runs the controller on random intervals, with and without their histograms: the
// limit stays within its bounds (the probe limit while probing), the state round-trips, every
// step is an action it documents, and no probe outlives its timeout by more than an interval.
func FuzzUpdate(f *testing.F) {
	f.Add(uint16(3), uint16(500), uint16(100), uint16(200), []byte{10, 20, 30, 200, 255, 0, 1, 2, 3})
	f.Add(uint16(1), uint16(1), uint16(0), uint16(1000), []byte{255, 255, 255, 0, 0, 0})
	f.Add(uint16(50), uint16(60), uint16(1000), uint16(1), []byte{1, 1, 1, 1, 1, 1, 1, 1, 9, 9, 9, 9})
	f.Add(uint16(2), uint16(9), uint16(7), uint16(3), []byte{10, 0, 4, 10, 0, 4, 10, 0, 4, 10, 0, 4, 10, 0, 4, 10, 1, 4})
	f.Fuzz(func(t *testing.T, minLimit, maxLimit, buffer, smoothing uint16, ops []byte) {
		g := DefaultGradient()
		g.MinLimit = 1 + int64(minLimit%100)
		g.MaxLimit = g.MinLimit + int64(maxLimit%2000)
		g.InitialLimit, g.ProbeLimit = g.MinLimit, g.MinLimit
		g.Buffer, g.Smoothing = int(buffer%1001), 1+int(smoothing%1000)
		g.Objective, g.ProbeInterval, g.ProbeSamples = 80*ms, time.Second, 5
		g.ProbeTimeout, g.ProbeMinSamples = time.Duration(100+int(buffer%900))*ms, 1+int64(smoothing%7)
		var s GradientState
		var h Histogram
		now := base
		for i := 0; i+2 < len(ops) && i < 900; i += 3 {
			now += int64(ops[i]) * int64(10*ms)
			if ops[i]&3 == 3 {
				now -= int64(ops[i+1]) * int64(ms) // the clock steps back
			}
			h.Reset()
			for j := range int(ops[i+1] % 8) {
				h.Record(time.Duration(ops[i+2]) * ms * time.Duration(j+1) / 4)
			}
			sum := g.Summarize(&h, int64(ops[i+1])%40)
			if ops[i+1]&8 != 0 {
				sum = Summary{Count: int64(ops[i+1]), Latency: time.Duration(ops[i+2]) * ms, InFlight: int64(ops[i+1]) % 40}
			}
			if ops[i+2] == 255 { // absurd inputs: no overflow, no limit out of bounds
				sum = Summary{Count: math.MaxInt64, Latency: math.MaxInt64, InFlight: math.MaxInt64 - int64(ops[i])}
			}
			prev := s.last
			var st Step
			s, st = g.Update(s, now, sum)
			if st.Limit < min(g.MinLimit, g.ProbeLimit) || st.Limit > g.MaxLimit || st.Action > Expired {
				t.Fatalf("step %d: %+v out of bounds [%d, %d]", i/3, st, g.MinLimit, g.MaxLimit)
			}
			if st.Updated && st.Action == Probe && prev > s.probeStart && s.last >= s.probeStart+g.ProbeTimeout.Microseconds() {
				t.Fatalf("step %d: the probe that began at %d µs still runs at %d µs, past its timeout", i/3, s.probeStart, s.last)
			}
			if again, err := DecodeGradientState(s.AppendBinary(nil)); err != nil || again != s {
				t.Fatalf("step %d: state does not round-trip: %v", i/3, err)
			}
		}
	})
}

// FuzzRecord feeds random answers to the Sampler of random controller states: an answer is a
// sample only as documented, and a sample is the time from admission to the response headers.
func FuzzRecord(f *testing.F) {
	f.Add(true, int64(10_000), int64(0), int64(50), uint8(0))
	f.Add(false, int64(10_000), int64(5), int64(20), uint8(1))
	f.Add(false, int64(0), int64(-9), int64(-3), uint8(2))
	f.Fuzz(func(t *testing.T, probing bool, ideal, admitted, answered int64, answer uint8) {
		g := testGradient()
		s := GradientState{probing: probing, ideal: min(max(ideal, 0), maxUs32), probeStart: base / 1000, limit: 10 * milli}
		sp := g.Sampler(&s)
		adm, ans := base+admitted%10_000_000*int64(ms), base+answered%10_000_000*int64(ms) // ±2.7 hours

		var h Histogram
		got := sp.Record(&h, adm, ans, Answer(answer%4))
		lat := time.Duration(max(ans-adm, 0))
		kept := min(lat.Truncate(time.Microsecond), maxUs32*time.Microsecond)
		want := false
		switch a := Answer(answer % 4); {
		case a == Served && probing:
			want = adm >= base+int64(g.Interval)
		case a == Served:
			want = true
		case a == Refused && !probing && s.ideal > 0:
			want = lat.Microseconds() > g.target(s.ideal)
		}
		if got != want || h.Count() != map[bool]int64{true: 1}[got] || got && h.Max() != kept {
			t.Fatalf("probing %v, ideal %d µs, %v after admission, answer %d: recorded %v (%d samples, max %v), want %v",
				probing, s.ideal, lat, answer%4, got, h.Count(), h.Max(), want)
		}
	})
}
