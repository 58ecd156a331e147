package algorithms

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPeekReportsWhatAnAdmittedRequestLeftAndOneUnitMoreThanACostOneRequestWouldLeave checks Peek
// against Decide on random traces of every conformance limit: after an admitted request, Peek of the
// new state at the same now reports the decision's Remaining and Reset; before any request, a cost-1
// request that is admitted leaves exactly one unit less than Peek reports, and a denied one means
// Peek reports nothing left; Peek never changes what a later decision sees.
func TestPeekReportsWhatAnAdmittedRequestLeftAndOneUnitMoreThanACostOneRequestWouldLeave(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for _, l := range conformanceLimits {
		t.Run(limitName(l), func(t *testing.T) {
			var state []byte
			now := int64(1_700_000_000_000_000_000)
			for i, rq := range genTrace(r, l, 400) {
				now = max(now+int64(rq.dt), 0)
				peek, err := l.Peek(state, now)
				require.NoError(t, err)
				assert.True(t, peek.Allowed)
				assert.Equal(t, peek.Reset == 0, peek.Remaining == l.Capacity(), "step %d: Reset is 0 exactly when the quota is full", i)
				_, one, err := l.Decide(state, now, 1, nil)
				require.NoError(t, err)
				if one.Allowed {
					assert.Equal(t, one.Remaining+1, peek.Remaining, "step %d", i)
				} else {
					assert.Zero(t, peek.Remaining, "step %d", i)
				}
				next, d, err := l.Decide(state, now, rq.cost, nil)
				require.NoError(t, err)
				if d.Allowed {
					after, err := l.Peek(next, now)
					require.NoError(t, err)
					assert.Equal(t, d.Remaining, after.Remaining, "step %d", i)
					assert.Equal(t, d.Reset, after.Reset, "step %d", i)
				}
				state = next
			}
		})
	}
}

func TestPeekAllocatesNothingAndRefusesMalformedState(t *testing.T) {
	for _, l := range conformanceLimits {
		state, _, err := l.Decide(nil, 1_000_000_000, 1, nil)
		require.NoError(t, err)
		assert.Zero(t, testing.AllocsPerRun(100, func() { _, _ = l.Peek(state, 1_000_000_000) }), limitName(l))
		_, err = l.Peek([]byte{0xff, 1, 2}, 1_000_000_000)
		assert.ErrorIs(t, err, ErrMalformedState, limitName(l))
	}
	_, err := Limit{}.Peek(nil, 0)
	assert.Error(t, err, "an invalid limit")
}
