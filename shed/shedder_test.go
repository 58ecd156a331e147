package shed

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	critical  = 0
	normal    = 1 // the "default" class of DefaultPolicy
	sheddable = 2
)

// op is one step of a shedder timeline: admit (or, with release, end) a request of class at
// capacity, and whether it must be admitted.
type op struct {
	class        int
	capacity     int64
	release      bool
	wantAdmitted bool
}

// runOps feeds ops to p in order and reports every mismatch; it returns the final state.
func runOps(t *testing.T, p Policy, s State, ops []op) State {
	t.Helper()
	for i, o := range ops {
		if o.release {
			s = p.Release(s, o.class)
			continue
		}
		var d Decision
		s, d = p.Admit(s, o.capacity, o.class)
		if d.Admitted != o.wantAdmitted {
			t.Errorf("step %d: Admit(class %d, capacity %d) at %d in flight = %v (threshold %d), want %v",
				i, o.class, o.capacity, d.InFlight, d.Admitted, d.Threshold, o.wantAdmitted)
		}
	}
	return s
}

// filled returns a state with n requests in flight in class.
func filled(class int, n uint32) State {
	var s State
	s.InFlight[class] = n
	return s
}

func TestAdmit(t *testing.T) {
	p := DefaultPolicy()
	tests := []struct {
		name  string
		start State
		ops   []op
		want  State
	}{
		{"an empty shedder admits every class", State{}, []op{
			{sheddable, 10, false, true}, {normal, 10, false, true}, {critical, 10, false, true},
		}, State{InFlight: [MaxClasses]uint32{1, 1, 1}}},
		{"sheddable is shed from 70% occupancy while default and critical still pass", filled(sheddable, 7), []op{
			{sheddable, 10, false, false}, {normal, 10, false, true}, {critical, 10, false, true},
		}, State{InFlight: [MaxClasses]uint32{1, 1, 7}}},
		{"default is shed from 90% occupancy while critical still passes", filled(normal, 9), []op{
			{normal, 10, false, false}, {sheddable, 10, false, false}, {critical, 10, false, true},
		}, State{InFlight: [MaxClasses]uint32{1, 9, 0}}},
		{"critical is shed only at capacity", filled(critical, 9), []op{
			{critical, 10, false, true}, {critical, 10, false, false},
		}, filled(critical, 10)},
		{"a release makes room for exactly one more", filled(sheddable, 7), []op{
			{sheddable, 10, true, false}, {sheddable, 10, false, true}, {sheddable, 10, false, false},
		}, filled(sheddable, 7)},
		{"a release without an acquire changes nothing", State{}, []op{
			{sheddable, 10, true, false}, {critical, 10, true, false},
		}, State{}},
		{"a drop in capacity revokes nothing and admits no lower class above the new threshold", filled(normal, 9), []op{
			{normal, 5, false, false}, {sheddable, 5, false, false}, {normal, 5, true, false}, {normal, 5, false, false}, {normal, 20, false, true},
		}, State{InFlight: [MaxClasses]uint32{0, 9, 0}}},
		{"after a drop in capacity critical still has its reserve above what the lower classes hold", filled(normal, 9), []op{
			{critical, 5, false, true}, {critical, 5, false, false}, {critical, 20, false, true},
		}, State{InFlight: [MaxClasses]uint32{2, 9, 0}}},
		{"a class out of range is decided and released as the lowest class", filled(sheddable, 6), []op{
			{7, 10, false, true}, {-1, 10, false, false}, {99, 10, true, false},
		}, filled(sheddable, 6)},
		{"requests of a class the policy no longer has still count", State{InFlight: [MaxClasses]uint32{5: 9}}, []op{
			{normal, 10, false, false}, {critical, 10, false, true}, {critical, 10, false, false},
		}, State{InFlight: [MaxClasses]uint32{0: 1, 5: 9}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want.InFlight, runOps(t, p, tt.start, tt.ops).InFlight)
		})
	}
}

func TestAFloodOfSheddableTrafficLeavesCriticalItsReserveAndDefaultItsShare(t *testing.T) {
	p := DefaultPolicy()
	var s State
	var d Decision
	for range 1000 {
		s, _ = p.Admit(s, 100, sheddable)
	}
	assert.Equal(t, uint32(70), s.InFlight[sheddable])
	for range 1000 {
		s, _ = p.Admit(s, 100, normal)
	}
	assert.Equal(t, uint32(20), s.InFlight[normal])
	for range 1000 {
		s, d = p.Admit(s, 100, critical)
	}
	assert.Equal(t, uint32(10), s.InFlight[critical])
	assert.Equal(t, int64(100), s.Total())
	assert.False(t, d.Admitted)
	assert.Equal(t, int64(100), d.Threshold)
}

func TestAdmitReportsTheDecisionItMade(t *testing.T) {
	p := DefaultPolicy()
	_, d := p.Admit(filled(critical, 3), 10, sheddable)
	assert.Equal(t, Decision{Admitted: true, Class: sheddable, InFlight: 3, Threshold: 7}, d)
	_, d = p.Admit(filled(critical, 3), 10, 42)
	assert.Equal(t, Decision{Admitted: true, Class: sheddable, InFlight: 3, Threshold: 7}, d)
}

func TestThePeakIsTheMostInFlightSinceTheIntervalBegan(t *testing.T) {
	p := DefaultPolicy()
	var s State
	for range 5 {
		s, _ = p.Admit(s, 10, normal)
	}
	for range 3 {
		s = p.Release(s, normal)
	}
	s, _ = p.Admit(s, 10, sheddable)
	assert.Equal(t, int64(3), s.Total())
	assert.Equal(t, uint32(5), s.Peak)
	s, _ = p.Admit(s, 1, normal) // shed: over capacity
	assert.Equal(t, uint32(5), s.Peak, "a shed request does not count")

	next, peak := s.EndInterval()
	assert.Equal(t, int64(5), peak)
	assert.Equal(t, uint32(3), next.Peak, "the next interval starts at the current total")
	assert.Equal(t, s.InFlight, next.InFlight)
	_, peak = (State{InFlight: [MaxClasses]uint32{4}}).EndInterval()
	assert.Equal(t, int64(4), peak, "a peak below the total (a state from before a release was undone) is the total")
}

func TestASaturatedCountIsShedNeverWrapped(t *testing.T) {
	p, err := NewPolicy([]Class{{"only", 0}}, "only")
	require.NoError(t, err)
	s := filled(0, 1<<32-1)
	next, d := p.Admit(s, MaxCapacity, 0)
	assert.False(t, d.Admitted)
	assert.Equal(t, s, next)
}

func TestStateEncodingRoundTrips(t *testing.T) {
	s := State{InFlight: [MaxClasses]uint32{1, 2, 3, 0, 0, 0, 1 << 31, 1<<32 - 1}, Peak: 77}
	b := s.AppendBinary(nil)
	require.Len(t, b, StateSize)
	assert.Equal(t, byte(0x11), b[0])
	assert.Equal(t, []byte{2, 0, 0, 0}, b[5:9], "little-endian")
	assert.Equal(t, []byte{77, 0, 0, 0}, b[33:37], "the peak last")
	got, err := DecodeState(b)
	require.NoError(t, err)
	assert.Equal(t, s, got)

	empty, err := DecodeState(nil)
	require.NoError(t, err)
	assert.Equal(t, State{}, empty)
}

func TestDecodeStateRejectsWhatItCannotTrust(t *testing.T) {
	good := (&State{}).AppendBinary(nil)
	tests := []struct {
		name    string
		b       []byte
		wantErr string
	}{
		{"a short record", good[:StateSize-1], "shedder state of 36 bytes, want 37"},
		{"a long record", append(good[:StateSize:StateSize], 0), "shedder state of 38 bytes, want 37"},
		{"another version", append([]byte{0x21}, good[1:]...), "version 2, want 1"},
		{"a controller record", append([]byte{0x12}, good[1:]...), "kind 2, want 1 (shedder)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeState(tt.b)
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrMalformed))
			assert.Equal(t, "shed: malformed state: "+tt.wantErr, err.Error())
		})
	}
}

func TestAKeyThatHoldsItsShareIsShedWhateverItsClass(t *testing.T) {
	p, err := DefaultPolicy().WithKeyShare(100)
	require.NoError(t, err)
	s := filled(normal, 5)
	for _, class := range []int{critical, normal, sheddable} {
		next, d := p.AdmitKey(s, 100, class, 10)
		assert.True(t, d.KeyLimited)
		assert.False(t, d.Admitted)
		assert.Equal(t, s, next, "a shed request holds nothing")
		next, d = p.AdmitKey(s, 100, class, 9)
		assert.True(t, d.Admitted, "one slot short of its share")
		assert.False(t, d.KeyLimited)
		assert.Equal(t, int64(6), next.Total())
	}
	_, d := p.AdmitKey(filled(normal, 90), 100, normal, 0)
	assert.False(t, d.Admitted || d.KeyLimited, "under its share, a key still meets the class thresholds")
}

// Four request bodies that send a byte and then nothing hold four default slots for ever, and
// the capacity has dropped to 3 (a probe): critical still gets its reserve at that capacity.
func TestCriticalKeepsItsReserveWhateverTheLowerClassesHold(t *testing.T) {
	p := DefaultPolicy()
	tests := []struct {
		name     string
		start    State
		capacity int64
		want     int64 // critical requests admitted
	}{
		{"four stuck default streams at a capacity of 3", filled(normal, 4), 3, 1},
		{"ninety default streams after a drop from 100 to 10", filled(normal, 90), 10, 1},
		{"ninety default streams after a drop from 100 to 50", filled(normal, 90), 50, 5},
		{"the lower classes within their thresholds: the capacity itself", filled(sheddable, 70), 100, 30},
		{"a capacity of zero keeps nothing", filled(normal, 4), 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.start
			admitted := int64(0)
			for range 200 {
				var d Decision
				if s, d = p.Admit(s, tt.capacity, critical); d.Admitted {
					admitted++
				}
				_, dl := p.Admit(s, tt.capacity, normal)
				assert.False(t, tt.capacity < 100 && dl.Admitted, "the lower classes get nothing back")
			}
			assert.Equal(t, tt.want, admitted)
			assert.Equal(t, max(tt.capacity, tt.start.Total()+(tt.capacity+9)/10), p.Reserved(tt.start, tt.capacity))
		})
	}
	one, err := NewPolicy([]Class{{"only", 0}}, "only")
	require.NoError(t, err)
	assert.Equal(t, int64(3), one.Reserved(filled(0, 4), 3), "one class has no reserve: the capacity")
}
