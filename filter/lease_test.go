package filter

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// edit runs one lease operation on a record (nil: none yet) and returns the new record.
func edit(t *testing.T, cur []byte, e leaseEditor) ([]byte, leaseEditor, bool) {
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
	rec, _, _ = edit(t, rec, leaseEditor{op: leaseEnd, now: 0, cost: 10, expiry: sec})               // 10 units until 1 s
	rec, _, _ = edit(t, rec, leaseEditor{op: leaseSpend, now: sec / 2, cost: 5, batch: 10})          // 5 left of the first grant
	rec, _, _ = edit(t, rec, leaseEditor{op: leaseEnd, now: sec / 2, cost: 10, expiry: sec * 3 / 2}) // 10 more until 1.5 s
	spent, dropped := 0, int64(0)
	for {
		var e leaseEditor
		rec, e, _ = edit(t, rec, leaseEditor{op: leaseSpend, now: sec, cost: 1, batch: 10}) // after the first ttl
		dropped += e.dropped
		if !e.done {
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
		setup []leaseEditor
		want  bool
	}{
		{"no units and nothing in flight", nil, true},
		{"a lease already in flight", []leaseEditor{{op: leaseClaim, now: 0, batch: 10, until: 1000}}, false},
		{"a whole batch still held", []leaseEditor{{op: leaseEnd, now: 0, cost: 10, expiry: 5000}}, false},
		{"less than a batch held", []leaseEditor{{op: leaseEnd, now: 0, cost: 10, expiry: 5000}, {op: leaseSpend, now: 1, cost: 1, batch: 10}}, true},
		{"a batch held but expired", []leaseEditor{{op: leaseEnd, now: 0, cost: 10, expiry: 5}}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var rec []byte
			for _, op := range tc.setup {
				rec, _, _ = edit(t, rec, op)
			}
			_, e, _ := edit(t, rec, leaseEditor{op: leaseClaim, now: 10, batch: 10, until: 500})
			assert.Equal(t, tc.want, e.done)
		})
	}
}

func TestALeaseRecordIsVacantOnlyWithNoLiveUnitsAndNothingInFlight(t *testing.T) {
	granted, _, _ := edit(t, nil, leaseEditor{op: leaseEnd, now: 0, cost: 5, expiry: 100})
	inflight, _, _ := edit(t, nil, leaseEditor{op: leaseClaim, now: 0, batch: 5, until: 100})
	assert.False(t, (&leaseEditor{now: 50}).Vacant(granted))
	assert.True(t, (&leaseEditor{now: 100}).Vacant(granted), "its units expired")
	assert.False(t, (&leaseEditor{now: 50}).Vacant(inflight), "its lease may still land")
	assert.True(t, (&leaseEditor{now: 100}).Vacant(inflight))
}
