package sharedstate

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAnOverLimitEntryOnlyEverBlocksLonger(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cur       []byte
		until     int64
		wantWrite bool
		wantUntil int64
	}{
		{"a key blocked for the first time is written", nil, 100, true, 100},
		{"a later time replaces an earlier one", (&BlockEditor{Until: 50, Limit: 1}).entry(t), 100, true, 100},
		{"an earlier time leaves the later one", (&BlockEditor{Until: 200, Limit: 1}).entry(t), 100, false, 200},
		{"the same time writes nothing", (&BlockEditor{Until: 100, Limit: 1}).entry(t), 100, false, 100},
		{"an unreadable entry is replaced", []byte{1, 2, 3}, 100, true, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &BlockEditor{Now: 10, Until: tc.until, Limit: 2}
			next, write, err := e.Edit(nil, tc.cur)
			require.NoError(t, err)
			assert.Equal(t, tc.wantWrite, write)
			if !write {
				next = tc.cur
			}
			until, _, ok := ParseBlock(next)
			require.True(t, ok)
			assert.Equal(t, tc.wantUntil, until)
		})
	}
}

func TestAnOverLimitEntryNamesTheLimitThatDeniedAndIsVacantOnceExpired(t *testing.T) {
	p := (&BlockEditor{Until: 100, Limit: 3}).entry(t)
	until, limit, ok := ParseBlock(p)
	require.True(t, ok)
	assert.Equal(t, int64(100), until)
	assert.Equal(t, 3, limit)
	assert.False(t, (&BlockEditor{Now: 99}).Vacant(p), "still blocking")
	assert.True(t, (&BlockEditor{Now: 100}).Vacant(p), "expired")
	assert.True(t, (&BlockEditor{Now: 0}).Vacant([]byte("not an entry")), "unreadable: blocks nothing")
	_, _, ok = ParseBlock(p[:8])
	assert.False(t, ok, "a truncated entry is none")
}

// entry returns the payload e writes on an empty record.
func (e *BlockEditor) entry(t *testing.T) []byte {
	t.Helper()
	p, write, err := e.Edit(nil, nil)
	require.NoError(t, err)
	require.True(t, write)
	return p
}
