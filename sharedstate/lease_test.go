package sharedstate

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// edit runs one lease operation on a record (nil: none yet) and returns the new record.
func edit(t *testing.T, cur []byte, e LeaseEditor) ([]byte, LeaseEditor, bool) {
	t.Helper()
	next, write, err := e.Edit(nil, cur)
	require.NoError(t, err)
	if !write {
		return cur, e, false
	}
	return next, e, true
}

func TestANewGrantNeverExtendsTheExpiryOfOlderUnits(t *testing.T) {
	sec := int64(time.Second)
	var rec []byte
	rec, _, _ = edit(t, rec, LeaseEditor{Op: LeaseEnd, Now: 0, Cost: 10, Expiry: sec})               // 10 units until 1 s
	rec, _, _ = edit(t, rec, LeaseEditor{Op: LeaseSpend, Now: sec / 2, Cost: 5, Batch: 10})          // 5 left of the first grant
	rec, _, _ = edit(t, rec, LeaseEditor{Op: LeaseEnd, Now: sec / 2, Cost: 10, Expiry: sec * 3 / 2}) // 10 more until 1.5 s
	spent, dropped := 0, int64(0)
	for {
		var e LeaseEditor
		rec, e, _ = edit(t, rec, LeaseEditor{Op: LeaseSpend, Now: sec, Cost: 1, Batch: 10}) // after the first ttl
		dropped += e.Dropped
		if !e.Done {
			break
		}
		spent++
	}
	assert.Equal(t, int64(5), dropped, "the first grant's 5 units expired at 1 s")
	assert.Equal(t, 10, spent, "only the second grant's units are spendable after the first grant's ttl")
}

func TestWithTwoGrantsLiveAThirdMergesTheOlderUnderTheEarlierExpiry(t *testing.T) {
	var r leaseRecord
	r.grant(3, 100)
	r.grant(4, 200)
	r.grant(5, 300)
	assert.Equal(t, leaseRecord{units: [2]int64{7, 5}, expiry: [2]int64{100, 300}}, r)
	assert.Equal(t, int64(7), r.expire(100), "the merged units expire with the older grant")
	assert.Equal(t, leaseRecord{units: [2]int64{5, 0}, expiry: [2]int64{300, 0}}, r)
}

func TestALeaseIsClaimedOnlyBelowABatchAndWithNoneInFlight(t *testing.T) {
	tests := []struct {
		name  string
		setup []LeaseEditor
		want  bool
	}{
		{"no units and nothing in flight", nil, true},
		{"a lease already in flight", []LeaseEditor{{Op: LeaseClaim, Now: 0, Batch: 10, Until: 1000}}, false},
		{"a whole batch still held", []LeaseEditor{{Op: LeaseEnd, Now: 0, Cost: 10, Expiry: 5000}}, false},
		{"less than a batch held", []LeaseEditor{{Op: LeaseEnd, Now: 0, Cost: 10, Expiry: 5000}, {Op: LeaseSpend, Now: 1, Cost: 1, Batch: 10}}, true},
		{"a batch held but expired", []LeaseEditor{{Op: LeaseEnd, Now: 0, Cost: 10, Expiry: 5}}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var rec []byte
			for _, op := range tc.setup {
				rec, _, _ = edit(t, rec, op)
			}
			_, e, _ := edit(t, rec, LeaseEditor{Op: LeaseClaim, Now: 10, Batch: 10, Until: 500})
			assert.Equal(t, tc.want, e.Done)
		})
	}
}

func TestALeaseRecordIsVacantOnlyWithNoLiveUnitsAndNothingInFlight(t *testing.T) {
	granted, _, _ := edit(t, nil, LeaseEditor{Op: LeaseEnd, Now: 0, Cost: 5, Expiry: 100})
	inflight, _, _ := edit(t, nil, LeaseEditor{Op: LeaseClaim, Now: 0, Batch: 5, Until: 100})
	assert.False(t, (&LeaseEditor{Now: 50}).Vacant(granted))
	assert.True(t, (&LeaseEditor{Now: 100}).Vacant(granted), "its units expired")
	assert.False(t, (&LeaseEditor{Now: 50}).Vacant(inflight), "its lease may still land")
	assert.True(t, (&LeaseEditor{Now: 100}).Vacant(inflight))
}
