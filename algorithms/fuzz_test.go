package algorithms

import (
	"errors"
	"testing"
	"time"
)

// fuzzLimit maps fuzzer integers to a valid Limit (ok is false for the few that are not). A
// fixed window is a calendar window for most values of kind above 4.
func fuzzLimit(kind uint8, quota uint16, windowUs uint32, burst uint16) (Limit, bool) {
	l := Limit{
		Kind:   Kind(kind%5 + 1),
		Quota:  1 + int64(quota%1000),
		Window: MinWindow + time.Duration(windowUs%10_000_000)*time.Microsecond,
	}
	if l.Kind == SlidingLog {
		l.Quota = 1 + int64(quota%200)
	}
	if l.Kind.bucket() {
		l.Burst = int64(burst % 2000)
	}
	if u := CalendarUnit(kind / 5 % 5); l.Kind == FixedWindow && u != 0 {
		// A calendar window, at an offset from −18:00 to +18:00.
		l.Window = 0
		l.Calendar = Calendar{Unit: u, Offset: time.Duration(int64(windowUs)%(2*18*60+1)-18*60) * time.Minute}
	}
	return l, l.Validate() == nil
}

// fuzzTrace turns each 3 bytes of ops into a request: a time step (within the rate, zero, up to
// 16 windows idle, or back by up to a window) and a cost (mostly 1, sometimes above Capacity).
func fuzzTrace(l Limit, ops []byte) []req {
	w := span(l)
	unit := max(w/time.Duration(l.Quota), time.Microsecond)
	c := l.Capacity()
	var reqs []req
	for i := 0; i+3 <= len(ops) && len(reqs) < 300; i += 3 {
		var dt time.Duration
		switch b := time.Duration(ops[i+1]); ops[i] & 3 {
		case 0:
			dt = b * unit / 64
		case 1:
			dt = 0
		case 2:
			dt = b * w / 16
		case 3:
			dt = -b * w / 256
		}
		cost := int64(1)
		if b := int64(ops[i+2]); b >= 200 {
			cost = 1 + (b-200)*(c+5)/55
		}
		reqs = append(reqs, req{dt, cost})
	}
	return reqs
}

// FuzzDecide runs random request sequences through random limits and checks every decision's
// contract and the kind's bound on admissions (see checkTrace).
func FuzzDecide(f *testing.F) {
	burst := []byte{1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0}
	paced := []byte{0, 64, 0, 0, 64, 0, 0, 60, 0, 0, 70, 0, 0, 64, 210, 0, 64, 255}
	jitter := []byte{0, 200, 0, 3, 200, 0, 1, 0, 0, 3, 255, 230, 2, 17, 0, 0, 1, 1, 3, 1, 0}
	for k := range uint8(5) {
		f.Add(k, uint16(3), uint32(999_000), uint16(0), burst)
		f.Add(k, uint16(7), uint32(13), uint16(20), paced)
		f.Add(k, uint16(100), uint32(59_000), uint16(5), jitter)
	}
	for _, k := range []uint8{7, 12, 17, 22} { // fixed windows per day, week, month and year
		f.Add(k, uint16(3), uint32(330+1080), uint16(0), burst)
		f.Add(k, uint16(100), uint32(0), uint16(0), jitter)
	}
	f.Fuzz(func(t *testing.T, kind uint8, quota uint16, windowUs uint32, burst uint16, ops []byte) {
		l, ok := fuzzLimit(kind, quota, windowUs, burst)
		if !ok {
			t.Skip()
		}
		checkTrace(t, l, base, fuzzTrace(l, ops))
	})
}

// FuzzDecode feeds arbitrary bytes as state: Decide never panics, rejects what it cannot
// decode with ErrMalformedState, and otherwise writes a state it can read back. A kind above
// 127 that maps to the fixed window makes it a calendar month at +05:30.
func FuzzDecode(f *testing.F) {
	for _, k := range Kinds {
		l := Limit{Kind: k, Quota: 5, Window: time.Second}
		state, _, _ := l.Decide(nil, base, 2, nil)
		f.Add(uint8(k-1), state, base, int64(1))
		f.Add(uint8(k-1), state[:len(state)-1], base, int64(3))
		f.Add(uint8(k-1), []byte{header(k)}, int64(-1), int64(9))
	}
	f.Add(uint8(130), []byte{header(FixedWindow), 0, 0x0f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 3}, base, int64(1))
	f.Add(uint8(3), append([]byte{header(SlidingLog), 0, 0, 0, 0, 0, 0, 0, 9}, 0, 0, 0, 0, 0, 0, 0, 10), base, int64(1))
	f.Add(uint8(0), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, int64(1<<62), int64(2))
	f.Fuzz(func(t *testing.T, kind uint8, state []byte, now, cost int64) {
		k := Kind(kind%5 + 1)
		l := Limit{Kind: k, Quota: 5, Window: time.Second}
		if k.bucket() {
			l.Burst = 7
		}
		if k == FixedWindow && kind >= 128 {
			l.Window, l.Calendar = 0, Calendar{Unit: CalendarMonth, Offset: 5*time.Hour + 30*time.Minute}
		}
		cost = 1 + int64(uint64(cost)%10)
		_ = l.IdleAt(state, now)
		next, dec, err := l.Decide(state, now, cost, nil)
		if err != nil {
			if !errors.Is(err, ErrMalformedState) || next != nil {
				t.Fatalf("Decide(%x) = %x, %v; want nil and ErrMalformedState", state, next, err)
			}
			return
		}
		if dec.Remaining < 0 || dec.Remaining > l.Capacity() || len(next) > l.EncodedSize() {
			t.Fatalf("Decide(%x) = %x, %+v: out of range", state, next, dec)
		}
		if _, _, err := l.Decide(next, now, 1, nil); err != nil {
			t.Fatalf("Decide(%x) wrote %x, which it cannot read: %v", state, next, err)
		}
	})
}
