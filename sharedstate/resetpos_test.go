package sharedstate

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestAResetPositionReadsBackAsWritten(t *testing.T) {
	p := ResetPosition{Seq: 1<<64 - 1, PolledAt: 1_700_000_000_000_000_000}
	got, ok := ParseResetPosition(p.AppendBinary(nil))
	assert.True(t, ok)
	assert.Equal(t, p, got)
}

func TestAMissingOrUnreadableResetPositionIsNoPosition(t *testing.T) {
	valid := ResetPosition{Seq: 7, PolledAt: 9}.AppendBinary(nil)
	for _, tc := range []struct {
		name string
		v    []byte
	}{
		{"a missing record", nil},
		{"a truncated record", valid[:16]},
		{"a record of another version", append([]byte{2}, valid[1:]...)},
		{"a record with trailing bytes", append(append([]byte(nil), valid...), 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParseResetPosition(tc.v)
			assert.False(t, ok)
			assert.Zero(t, got, "no position: the poll is due")
		})
	}
}
