package filter

import (
	"github.com/meshlimit/meshlimit/sharedstate"
)

// The key share of a shedder (key_share, share_key): no share_key value holds more than
// shed.Policy.KeySlots(capacity) of the shedder's slots at once, across the proxy's workers. The
// slots of each value are counted like concurrency permits: one owned record per value in a
// sharedstate.Records set (Shed.KeyShareSlots records), the values without room sharing the set's
// overflow record (one count for all of them, held to the same KeySlots), with owners, leases and
// renewals. A request takes its key's slot before the shedder's, and gives both back together.

// keySlot is one key share slot a stream holds.
type keySlot struct {
	key      string
	overflow bool // in the set's overflow record
	shared   bool // in the record's shared entry (sharedstate.SharedOwner)
}

// keyShare is what a plugin keeps for one shedder's key share.
type keyShare struct {
	recs  *sharedstate.Records
	held  map[keySlot]int64 // the slots this plugin's streams hold, per key
	pools map[keySlot]int64 // renew's scratch: the slots held in the overflow record, all keys together
	ed    sharedstate.OwnedEditor
	key   []byte
}

// acquire takes a slot of key at a limit of limit slots (counted even when over it with force),
// and reports whether the limit allowed it and the slot, when taken. It fails open (ok false) when
// the record could not be written.
func (k *keyShare) acquire(cur *sharedstate.Cursor, key []byte, owner uint64, now, limit int64, force bool) (ks keySlot, allowed, taken, ok bool) {
	e := &k.ed
	e.Op, e.Classes, e.Class, e.Owner, e.Now, e.Limit, e.Policy, e.Force = sharedstate.OwnedAcquire, 1, 0, owner, now, limit, nil, force
	res, err := cur.Update(k.recs, key, e)
	if err == nil && res.Placement == sharedstate.NoRoom {
		res, err = cur.UpdateShared(k.recs.OverflowKey(), e)
	}
	if err != nil {
		return ks, false, false, false
	}
	if e.Admitted {
		ks = keySlot{key: string(key), overflow: res.Placement == sharedstate.Overflow, shared: e.Shared}
		if k.held == nil {
			k.held = map[keySlot]int64{}
		}
		k.held[ks]++
	}
	return ks, e.Allowed, e.Admitted, true
}

// release gives back the slot ks.
func (k *keyShare) release(cur *sharedstate.Cursor, ks keySlot, owner uint64, now int64) {
	if n := k.held[ks] - 1; n > 0 {
		k.held[ks] = n
	} else if _, ok := k.held[ks]; ok {
		k.held[ks] = 0 // renewed (with 0: removed) on the next renewal, then forgotten
	}
	k.write(cur, ks, sharedstate.OwnedRelease, 0, owner, now)
}

// renew rewrites this plugin's entries with the slots its streams hold, the overflow record's
// once with the slots of every key in it, and forgets the keys that hold nothing.
func (k *keyShare) renew(cur *sharedstate.Cursor, owner uint64, now int64) {
	clear(k.pools)
	for ks, n := range k.held {
		if ks.overflow {
			if k.pools == nil {
				k.pools = map[keySlot]int64{}
			}
			k.pools[keySlot{overflow: true, shared: ks.shared}] += n
		} else {
			k.write(cur, ks, sharedstate.OwnedRenew, n, owner, now)
		}
		if n == 0 {
			delete(k.held, ks)
		}
	}
	for ks, n := range k.pools {
		k.write(cur, ks, sharedstate.OwnedRenew, n, owner, now)
	}
}

// write writes one release or renewal of ks's entry; a failure is repaired by the next renewal,
// or by the lease.
func (k *keyShare) write(cur *sharedstate.Cursor, ks keySlot, op sharedstate.OwnedOp, count int64, owner uint64, now int64) {
	e := &k.ed
	e.Op, e.Classes, e.Class, e.Owner, e.Now, e.Counts[0], e.Shared = op, 1, 0, owner, now, count, ks.shared
	if ks.overflow {
		_, _ = cur.UpdateShared(k.recs.OverflowKey(), e)
		return
	}
	k.key = append(k.key[:0], ks.key...)
	_, _ = cur.Update(k.recs, k.key, e)
}
