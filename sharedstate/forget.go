package sharedstate

import "errors"

// tombstone is the value a forgotten record's slot holds: the record version byte alone. It is not
// a readable record (shorter than a header), so every user reads it as free (Placement Claimed) and
// no key owns it; and it is not empty, so a scan of a key's candidates does not stop at it the way
// it stops at a slot never written (see Cursor.Update): a key that owns a later candidate still
// finds it. (Envoy's shared data can never delete a key; an empty value would be read as never
// written and would break that rule.)
var tombstone = []byte{recordVersion}

// Forget vacates key's record in r, so that the key's next update starts from a fresh payload (as
// if it had never been seen) and its slot may be claimed by any key. It reports whether a record was
// vacated; forgetting a key that owns no record is a no-op (false, nil), so Forget is idempotent.
//
// Forget is owner-checked like every other access: it writes only a slot whose record carries key's
// fingerprint, and with compare-and-swap on the version it read, so a record that another key took
// meanwhile, or that an update of the same key rewrote, is read again rather than overwritten. It
// vacates every candidate the key owns (a race between two workers' claims can, rarely, leave a key
// owning two). It takes at most u.MaxAttempts rounds per slot, then reports ErrContention.
//
// Forget reaches only the records a key owns: the shared state of a Table's overflow (keys that
// found no room) cannot be forgotten for one key, since every key without room shares it.
func (c *Cursor) Forget(r *Records, key []byte) (forgotten bool, err error) {
	cands := r.candidates(c.u, key)
	for slot, more := cands.next(); more; slot, more = cands.next() {
		c.keys[0] = r.SlotKey(c.keys[0][:0], int(slot))
		done, err := c.vacate(bytesString(c.keys[0]), cands.fp)
		if err != nil {
			return forgotten, err
		}
		forgotten = forgotten || done
	}
	return forgotten, nil
}

// vacate writes the tombstone to slot key while the record there is owned by fp, retrying lost CAS
// races; it reports whether it wrote.
func (c *Cursor) vacate(key string, fp uint64) (bool, error) {
	for range c.u.maxAttempts {
		v, cas, err := c.u.Read(key)
		if err != nil {
			return false, err
		}
		if owner, _, ok := parseRecord(v); !ok || owner != fp {
			return false, nil // empty, already forgotten, or another key's: not ours to touch
		}
		err = c.u.Write(key, tombstone, cas)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, ErrCasMismatch) {
			return false, err
		}
	}
	return false, ErrContention
}

// Forget vacates key's record in t (see Cursor.Forget): its next request is decided against fresh
// states of every limit. A key whose requests were decided in the overflow state has no record of
// its own there and is not affected (false, nil): the overflow state is shared by every key without
// room and is never forgotten for one of them.
func (l *Limiter) Forget(t *Table, key []byte) (bool, error) {
	return l.c.Forget(t.records, key)
}
