package sharedstate

import "encoding/binary"

// ResetPosition is a proxy's place in the decision service's reset log (the filter's
// global.reset_poll), kept in one shared-data record that every worker of the proxy reads: the
// position applied (the last entry's sequence number) and when the last poll was claimed.
type ResetPosition struct {
	Seq      uint64
	PolledAt int64 // unix ns; 0: the next poll is due at once
}

// The record is a version byte, then Seq and PolledAt, 8 bytes little-endian each.
const (
	resetPositionSize    = 17
	resetPositionVersion = 1
)

// ParseResetPosition reads a position record; a record that is missing or unreadable is no
// position (the zero value, ok false): the poll is due.
func ParseResetPosition(v []byte) (p ResetPosition, ok bool) {
	if len(v) != resetPositionSize || v[0] != resetPositionVersion {
		return ResetPosition{}, false
	}
	return ResetPosition{Seq: binary.LittleEndian.Uint64(v[1:]), PolledAt: int64(binary.LittleEndian.Uint64(v[9:]))}, true
}

// AppendBinary appends the record of p to b.
func (p ResetPosition) AppendBinary(b []byte) []byte {
	b = append(b, resetPositionVersion)
	b = binary.LittleEndian.AppendUint64(b, p.Seq)
	return binary.LittleEndian.AppendUint64(b, uint64(p.PolledAt))
}
