package sharedstate

import "encoding/binary"

// An over-limit entry says that a key is blocked until a time, by one of its rule's limits: the
// filter's over-limit cache (a key the decision service denied, until its Retry-After) and
// penalty box (a key a counted response exhausted). Its payload is the time (unix ns, 8 bytes
// little-endian) and the index of the limit.

const blockPayloadSize = 9

// ParseBlock reads an over-limit entry's payload: until when the key is blocked and by which
// limit; ok is false for a payload that is not one (then nothing is blocked).
func ParseBlock(p []byte) (until int64, limit int, ok bool) {
	if len(p) != blockPayloadSize {
		return 0, 0, false
	}
	return int64(binary.LittleEndian.Uint64(p)), int(p[8]), true
}

// BlockEditor is the Editor of an over-limit entry: it blocks the key until Until by limit
// Limit, or until the later time the entry already says.
type BlockEditor struct {
	Now, Until int64
	Limit      byte
}

// Vacant implements Editor: an entry that has expired (or cannot be read) blocks nothing.
func (e *BlockEditor) Vacant(p []byte) bool {
	until, _, ok := ParseBlock(p)
	return !ok || until <= e.Now
}

// Edit implements Editor: the entry blocks until the later of its current and new times.
func (e *BlockEditor) Edit(dst, cur []byte) ([]byte, bool, error) {
	if until, _, ok := ParseBlock(cur); ok && until >= e.Until {
		return dst, false, nil // already blocked for at least as long
	}
	dst = binary.LittleEndian.AppendUint64(dst, uint64(e.Until))
	return append(dst, e.Limit), true, nil
}
