package sharedstate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/meshlimit/meshlimit/internal/fnv"
	"github.com/meshlimit/meshlimit/internal/siphash"
)

// recordVersion is the first byte of every record value. A change of layout changes it, and the key
// prefix carries it too, so two plugin versions sharing a vm_id never read each other's records.
const recordVersion = 2

// recordHeader is the size of a record's header: the version byte and the owner's fingerprint.
const recordHeader = 9

// MaxSlots bounds the size of a Records set: 2^20 slots of about 100 bytes each is far more than a
// proxy should hold for one rule.
const MaxSlots = 1 << 20

// Records is a fixed set of shared-data slots, each holding at most one key's record: the 64-bit
// fingerprint of the key that owns it and a payload that only that key's updates read or write. Memory
// stays bounded however many distinct keys arrive (Envoy's shared data can never delete a key, but a
// Records set never creates more than Slots keys, plus the shared records its users keep under
// OverflowKey), and one key's record is
// never read or written on behalf of another: this is the isolation rule every user of the package
// relies on (see Cursor.Update).
//
// Each key hashes to Candidates candidate slots. A key owns at most one of them at a time; when it owns
// none, it may claim one that is empty, unreadable, or whose owner's payload is vacant (its Editor
// says that forgetting it loses nothing: a bucket as full as a fresh one, an expired entry), the first
// such candidate first. When every candidate is owned by a key whose payload is not vacant, the key
// finds no room (Placement NoRoom) and its caller decides what that means: a limit Table decides it
// against its overflow state, the over-limit cache simply does not cache it.
//
// A key's fingerprint and candidates come from a keyed hash (SipHash-2-4) under a secret that only the
// proxy knows, so a client cannot pick a key value that shares another key's record or competes for
// its slots; two different keys share a record only by chance (~n²/2^65 for n keys).
type Records struct {
	prefix   string
	overflow string // the key of the overflow record
	slots    uint32
	seed     uint64
}

// NewRecords returns a set of slots slots stored under keys that start with prefix (which should name
// the plugin, the rule and a fingerprint of what gives the payloads a meaning).
func NewRecords(prefix string, slots int) (*Records, error) {
	if slots < 1 || slots > MaxSlots {
		return nil, fmt.Errorf("sharedstate: slots must be in [1, %d], got %d", MaxSlots, slots)
	}
	p := prefix + "/v" + strconv.Itoa(recordVersion) + "/"
	return &Records{prefix: p, overflow: p + "overflow", slots: uint32(slots), seed: fnv.String(p)}, nil
}

// SlotKey appends the shared-data key of slot i to dst.
func (r *Records) SlotKey(dst []byte, i int) []byte {
	dst = append(dst, r.prefix...)
	return appendBase36(dst, uint64(i))
}

// appendBase36 appends u in base 36 with lower-case digits, as strconv.AppendUint(dst, u, 36) does,
// in a few instructions: it runs on every decision.
func appendBase36(dst []byte, u uint64) []byte {
	const digits = "0123456789abcdefghijklmnopqrstuvwxyz"
	var b [13]byte // 36^13 > 2^64
	i := len(b)
	for u >= 36 {
		i--
		b[i] = digits[u%36]
		u /= 36
	}
	i--
	b[i] = digits[u]
	return append(dst, b[i:]...)
}

// OverflowKey is the shared-data key under which the set's users keep the one record that keys
// without room share (see Cursor.UpdateShared); it is outside the slots.
func (r *Records) OverflowKey() string { return r.overflow }

// Candidates is the number of slots a key may occupy (fewer in a set of fewer slots). A key that
// arrives while a fraction f of the slots is held by active keys finds no room with probability about
// f^Candidates: 6% at f = 1/2, 0.4% at f = 1/4.
const Candidates = 4

// candidates draws a key's distinct candidate slots, in the order they are tried, one at a time:
// most requests find their key's record in the first.
type candidates struct {
	fp, h uint64
	n     int // drawn so far
	max   int // min(Candidates, slots)
	slots uint32
	drawn [Candidates]uint32
}

// candidates returns the fingerprint of key under the proxy's secret (see Updater) and a generator of
// its candidate slots.
func (r *Records) candidates(u *Updater, key []byte) candidates {
	fp := siphash.SumBytes64(u.k0^r.seed, u.k1, key)
	return candidates{fp: fp, h: fp, max: min(Candidates, int(r.slots)), slots: r.slots}
}

// next returns the next candidate slot, or ok=false when all have been drawn.
func (c *candidates) next() (slot uint32, ok bool) {
	if c.n == c.max {
		return 0, false
	}
	for {
		c.h += 0x9e3779b97f4a7c15 // splitmix64: a fresh, well-mixed value per draw
		z := (c.h ^ c.h>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		z ^= z >> 31
		slot = uint32((z >> 32) * uint64(c.slots) >> 32) // z's high half scaled to [0, slots)
		if !contains(c.drawn[:c.n], slot) {
			c.drawn[c.n] = slot
			c.n++
			return slot, true
		}
	}
}

func contains(s []uint32, v uint32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Editor is what one update does to one key's record. Implementations are usually a pointer to a
// reused struct, so that an update allocates nothing.
type Editor interface {
	// Edit appends to dst the key's new payload, computed from cur, its current one (empty when the
	// key has no record yet: a fresh one). It returns write=false to leave the record as it is (nothing is
	// written, the update ends); an error ends the update too. Edit may run several times in one
	// update, once per CAS race lost, so it must not keep side effects of a round that did not win.
	Edit(dst, cur []byte) (next []byte, write bool, err error)
	// Vacant reports whether another key's record with this payload may be taken over: forgetting it
	// loses nothing, because the payload is equivalent to a fresh one (or expired).
	Vacant(payload []byte) bool
}

// Placement says where an update found or put the key's record.
type Placement uint8

// Placements.
const (
	// Owned: the key already owned one of its candidate slots.
	Owned Placement = iota
	// Claimed: the key took a slot that was empty or held an unreadable value.
	Claimed
	// Evicted: the key took a slot from another key whose payload was vacant.
	Evicted
	// NoRoom: every candidate is owned by another key whose payload is not vacant; nothing was
	// read or written on the key's behalf.
	NoRoom
	// Overflow: the update was applied to a shared record (Cursor.UpdateShared), such as a Table's
	// overflow state.
	Overflow
)

// Result reports what an update did.
type Result struct {
	Placement Placement
	// Attempts is the number of read-edit-write rounds taken (1 without contention).
	Attempts int
	// Written reports that the last round wrote (Edit returned write=true and the CAS succeeded).
	Written bool
}

// Cursor runs updates of Records for one goroutine (one VM) at a time: it reuses its buffers.
type Cursor struct {
	u     *Updater
	keys  [Candidates][]byte
	val   []byte
	memo  *[memoSize]memoEntry // allocated on the first update
	spare memoEntry            // a key too long to remember
}

// NewCursor returns a Cursor that reads and writes through u.
func NewCursor(u *Updater) *Cursor { return &Cursor{u: u} }

// Updater returns the Updater the Cursor writes through.
func (c *Cursor) Updater() *Updater { return c.u }

// Update applies e to key's record in r with compare-and-swap, at most u.MaxAttempts rounds (then
// ErrContention). It never reads another key's payload except to ask e whether it is vacant, and never
// writes a slot another key owns unless that payload is vacant: a key that owns its slot sees exactly
// the updates made for it, whatever other keys do. When the key has no record and no slot can be
// claimed, it returns Placement NoRoom without calling Edit.
func (c *Cursor) Update(r *Records, key []byte, e Editor) (Result, error) {
	return c.update(r, key, e, nil)
}

// update is Update, editing the key's own record where it lies through ip when ip is not nil and
// accepts the payload (see inPlaceEditor).
func (c *Cursor) update(r *Records, key []byte, e Editor, ip inPlaceEditor) (Result, error) {
	m := c.remember(r, key)
	cands, keys := &m.cands, &m.slotKeys
	fp := cands.fp
	res := Result{}
	for res.Attempts < c.u.maxAttempts {
		res.Attempts++
		res.Placement = NoRoom
		free, freeCas, place := -1, uint32(0), NoRoom
		for i := 0; ; i++ {
			if i == cands.n {
				slot, ok := cands.next()
				if !ok {
					break
				}
				keys[i] = r.SlotKey(keys[i][:0], int(slot))
			}
			v, cas, err := c.u.Read(bytesString(keys[i]))
			if err != nil {
				return res, err
			}
			owner, payload, ok := parseRecord(v)
			if ok && owner == fp {
				res.Placement, free = Owned, -1
				done, err := c.edit(&res, bytesString(keys[i]), cas, fp, v, payload, e, ip)
				if done || err != nil {
					return res, err
				}
				break // lost a race: read again
			}
			if free < 0 {
				if p := claimable(ok, payload, e); p != NoRoom {
					free, freeCas, place = i, cas, p
				}
			}
			if len(v) == 0 {
				// Never written, so the key never passed over it to claim a later candidate: none
				// of those can be its own.
				break
			}
		}
		if res.Placement == Owned {
			continue
		}
		res.Placement = place
		if free < 0 {
			return res, nil
		}
		if done, err := c.write(&res, bytesString(keys[free]), freeCas, fp, nil, e); done || err != nil {
			return res, err
		}
	}
	return res, ErrContention
}

// UpdateShared applies e to the record stored under key, which no fingerprint owns: every caller shares
// it. A Table keeps its overflow state this way (see Records.OverflowKey).
func (c *Cursor) UpdateShared(key string, e Editor) (Result, error) {
	return c.updateShared(key, e, nil)
}

// updateShared is UpdateShared, editing the record where it lies through ip when ip is not nil and
// accepts the payload (see inPlaceEditor).
func (c *Cursor) updateShared(key string, e Editor, ip inPlaceEditor) (Result, error) {
	res := Result{Placement: Overflow}
	for res.Attempts < c.u.maxAttempts {
		res.Attempts++
		v, cas, err := c.u.Read(key)
		if err != nil {
			return res, err
		}
		_, payload, ok := parseRecord(v)
		if !ok {
			v, payload = nil, nil // missing or unreadable: start fresh
		}
		if done, err := c.edit(&res, key, cas, 0, v, payload, e, ip); done || err != nil {
			return res, err
		}
	}
	return res, ErrContention
}

// Find returns key's payload in r, or ok=false when the key owns neither candidate. The payload views
// the bytes the store's Get returned (see Store) and is only valid until the next call on the Cursor.
func (c *Cursor) Find(r *Records, key []byte) (payload []byte, ok bool, err error) {
	cands := r.candidates(c.u, key)
	for slot, more := cands.next(); more; slot, more = cands.next() {
		c.keys[0] = r.SlotKey(c.keys[0][:0], int(slot))
		v, _, err := c.u.Read(bytesString(c.keys[0]))
		if err != nil || len(v) == 0 {
			return nil, false, err // a slot never written: no later candidate is the key's (see Update)
		}
		if owner, p, ok := parseRecord(v); ok && owner == cands.fp {
			return p, true, nil
		}
	}
	return nil, false, nil
}

// claimable says how a slot that the key does not own could be taken: Claimed when it is empty or
// unreadable, Evicted when its owner's payload is vacant, NoRoom otherwise.
func claimable(ok bool, payload []byte, e Editor) Placement {
	switch {
	case !ok:
		return Claimed
	case e.Vacant(payload):
		return Evicted
	}
	return NoRoom
}

// inPlaceEditor is an Editor that can also edit a payload where it lies, in the buffer the Store
// filled (the Store contract lets its caller modify it), when the payload has a shape it knows
// (a Table's record of fixed layout). EditInPlace reports ok=false, having changed nothing, for a
// payload it does not take, which then goes to Edit; with ok=true it has edited the payload
// (write=true: the record is to be written back as it now is) or decided to write nothing.
// Like Edit it may run once per CAS race lost, on a fresh read each time.
type inPlaceEditor interface {
	EditInPlace(payload []byte) (write, ok bool)
}

// edit runs one round of an update on rec, the record read with cas (nil when missing or
// unreadable), whose payload is cur: in place through ip when it takes the payload, so that the
// record goes back with the header it was read with, else by write. It reports done=false when
// the write lost a CAS race.
func (c *Cursor) edit(res *Result, key string, cas uint32, fp uint64, rec, cur []byte, e Editor, ip inPlaceEditor) (done bool, err error) {
	if ip != nil && rec != nil {
		if write, ok := ip.EditInPlace(cur); ok {
			res.Written = false
			if !write {
				return true, nil
			}
			err = c.u.Write(key, rec, cas)
			if err != nil && errors.Is(err, ErrCasMismatch) {
				return false, nil
			}
			res.Written = err == nil
			return true, err
		}
	}
	return c.write(res, key, cas, fp, cur, e)
}

// write runs e on cur and, when it asks to, writes the record (owner fp) to key with cas. It reports
// done=false when the write lost a CAS race.
func (c *Cursor) write(res *Result, key string, cas uint32, fp uint64, cur []byte, e Editor) (done bool, err error) {
	c.val = append(c.val[:0], recordVersion)
	c.val = binary.LittleEndian.AppendUint64(c.val, fp)
	next, write, err := e.Edit(c.val, cur)
	if err != nil || !write {
		res.Written = false
		return true, err
	}
	c.val = next
	err = c.u.Write(key, c.val, cas)
	if err != nil && errors.Is(err, ErrCasMismatch) {
		return false, nil
	}
	res.Written = err == nil
	return true, err
}

// parseRecord splits a record value into its owner's fingerprint and payload; ok is false for a
// missing or unreadable value (another version's, or garbage).
func parseRecord(v []byte) (owner uint64, payload []byte, ok bool) {
	if len(v) < recordHeader || v[0] != recordVersion {
		return 0, nil, false
	}
	return binary.LittleEndian.Uint64(v[1:recordHeader]), v[recordHeader:], true
}
