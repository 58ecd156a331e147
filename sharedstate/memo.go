package sharedstate

import "bytes"

// The memo is what an update computes from a key alone, kept per Cursor (one VM) for the keys it
// updated last: the key's fingerprint (one SipHash pass, from which its candidate slots are
// drawn too) and the shared-data keys of the candidates drawn so far. A key that comes back is
// not hashed again and its slot keys are not rebuilt. It is a cache of a function of the proxy's
// secret, the Records and the key, all three fixed for its life (an entry names its Records and
// holds the key's bytes), so it cannot be stale: the walk over the candidates is the same with or
// without it.
//
// It is deliberately not a hint of which candidate the key owns, read first in place of the
// candidates before it. Every record is exact under contention by its own CAS, but a key's
// exactness also needs every VM to decide it on the same record, and what makes them agree is the
// walk's order: the key's record is the first candidate it owns. Two VMs can claim two candidates
// for one key at once (the first reads candidate 0 owned by an active key and claims the empty
// candidate 1; meanwhile candidate 0's owner goes idle and the second, which read candidate 1
// still empty, evicts it and claims candidate 0), and the CAS of neither claim can see the other.
// The walk then sends every VM to candidate 0 and the second record is forgotten (one request's
// charge, once); a VM that read its hinted candidate 1 first would keep deciding the key there,
// while the others decide it on candidate 0, each record admitting the key's whole quota for as
// long as the hint lived. The fingerprint check cannot tell: both records are the key's.
type memoEntry struct {
	recs     *Records
	key      []byte
	cands    candidates
	slotKeys [Candidates][]byte
}

// memoSize is the number of keys a Cursor remembers (a power of two); memoMaxKey bounds the size
// of a key it remembers, and so its memory.
const (
	memoSize   = 16
	memoMaxKey = 128
)

// remember returns the memo entry of key in r: the one it had, or one filled anew (replacing the
// key that shared its place, or the spare entry for a key too long to keep).
func (c *Cursor) remember(r *Records, key []byte) *memoEntry {
	if c.memo == nil {
		c.memo = new([memoSize]memoEntry)
	}
	m := &c.spare
	if len(key) <= memoMaxKey {
		m = &c.memo[memoIndex(key)]
		if m.recs == r && bytes.Equal(m.key, key) {
			return m
		}
		m.recs, m.key = r, append(m.key[:0], key...)
	}
	m.cands = r.candidates(c.u, key)
	return m
}

// memoIndex places a key in the memo by its length and its last bytes, where keys such as client
// addresses and identifiers differ; keys that share a place only replace each other.
func memoIndex(key []byte) int {
	h := uint(len(key)) * 0x9e3779b1
	if n := len(key); n > 0 {
		h ^= uint(key[n-1]) | uint(key[max(n-2, 0)])<<8
	}
	return int(h^h>>7) & (memoSize - 1)
}
