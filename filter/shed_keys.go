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
	key      string // the held entry's own copy (keyEntry.name)
	overflow bool   // in the set's overflow record
	shared   bool   // in the record's shared entry (sharedstate.SharedOwner)
}

// keyEntry is what this plugin's streams hold of one key: counts by place (keySlot.place).
type keyEntry struct {
	name  string
	n     [4]int64
	share sharedstate.OwnedShare // what n[1] counts, in the key record's shared entry
}

func (ks keySlot) place() int {
	p := 0
	if ks.overflow {
		p |= 2
	}
	if ks.shared {
		p |= 1
	}
	return p
}

// keyShare is what a plugin keeps for one shedder's key share.
type keyShare struct {
	recs  *sharedstate.Records
	held  map[string]*keyEntry   // the slots this plugin's streams hold, per key
	pools [2]int64               // renew's scratch: the slots held in the overflow record (own entry, shared entry)
	pool  sharedstate.OwnedShare // the slots held in the overflow record's shared entry
	ed    sharedstate.OwnedEditor
	key   []byte
}

// acquire takes a slot of key at a limit of limit slots (counted even when over it with force),
// and reports whether the limit allowed it and the slot, when taken. It fails open (ok false) when
// the record could not be written. A key this plugin already holds allocates nothing.
func (k *keyShare) acquire(cur *sharedstate.Cursor, key []byte, owner uint64, now, limit int64, force bool) (ks keySlot, allowed, taken, ok bool) {
	e := &k.ed
	e.Op, e.Classes, e.Class, e.Owner, e.Now, e.Limit, e.Policy, e.Force = sharedstate.OwnedAcquire, 1, 0, owner, now, limit, nil, force
	ent := k.held[string(key)]
	e.Share = sharedstate.OwnedShare{}
	if ent != nil {
		e.Share = ent.share
	}
	e.NewShare = e.Share
	res, err := cur.Update(k.recs, key, e)
	if err == nil && res.Placement == sharedstate.NoRoom {
		e.Share, e.NewShare = k.pool, k.pool
		res, err = cur.UpdateShared(k.recs.OverflowKey(), e)
	}
	if err != nil {
		return ks, false, false, false
	}
	if e.Admitted {
		if ent == nil {
			if k.held == nil {
				k.held = map[string]*keyEntry{}
			}
			ent = &keyEntry{name: string(key)}
			k.held[ent.name] = ent
		}
		ks = keySlot{key: ent.name, overflow: res.Placement == sharedstate.Overflow, shared: e.Shared}
		ent.n[ks.place()]++
		if sh := k.share(ks); sh != nil && ks.shared {
			*sh = e.NewShare
		}
	}
	return ks, e.Allowed, e.Admitted, true
}

// release gives back the slot ks.
func (k *keyShare) release(cur *sharedstate.Cursor, ks keySlot, owner uint64, now int64) {
	if ent := k.held[ks.key]; ent != nil {
		ent.n[ks.place()] = max(ent.n[ks.place()]-1, 0) // at 0: renewed (removed) on the next renewal, then forgotten
	}
	k.write(cur, ks, sharedstate.OwnedRelease, 0, owner, now)
}

// renew rewrites this plugin's entries with the slots its streams hold, the overflow record's
// once with the slots of every key in it, and forgets the keys that hold nothing.
func (k *keyShare) renew(cur *sharedstate.Cursor, owner uint64, now int64) {
	k.pools = [2]int64{}
	for name, ent := range k.held {
		for place, n := range ent.n {
			ks := keySlot{key: name, overflow: place&2 != 0, shared: place&1 != 0}
			if ks.overflow {
				k.pools[place&1] += n
			} else if n > 0 || place == 0 {
				k.write(cur, ks, sharedstate.OwnedRenew, n, owner, now)
			}
		}
		if ent.n == [4]int64{} {
			delete(k.held, name)
		}
	}
	k.write(cur, keySlot{overflow: true}, sharedstate.OwnedRenew, k.pools[0], owner, now)
	if k.pools[1] > 0 {
		k.write(cur, keySlot{overflow: true, shared: true}, sharedstate.OwnedRenew, k.pools[1], owner, now)
	}
}

// write writes one release or renewal of ks's entry; a failure is repaired by the next renewal,
// or by the lease.
func (k *keyShare) write(cur *sharedstate.Cursor, ks keySlot, op sharedstate.OwnedOp, count int64, owner uint64, now int64) {
	e := &k.ed
	e.Op, e.Classes, e.Class, e.Owner, e.Now, e.Counts[0], e.Shared = op, 1, 0, owner, now, count, ks.shared
	sh := k.share(ks)
	e.Share = sharedstate.OwnedShare{} // a key no longer held: nothing of this plugin's to release
	if ks.shared && sh != nil {
		e.Share = *sh
		if op == sharedstate.OwnedRenew { // what the streams hold: the truth, whatever a failed write left
			e.Share.Counts[0] = count
		}
	}
	e.NewShare = e.Share
	var err error
	if ks.overflow {
		_, err = cur.UpdateShared(k.recs.OverflowKey(), e)
	} else {
		k.key = append(k.key[:0], ks.key...)
		_, err = cur.Update(k.recs, k.key, e)
	}
	if ks.shared && sh != nil {
		*sh = sharedAfter(e, err)
	}
}

// share returns what this plugin holds in the shared entry of ks's record (nil for a key it no
// longer holds).
func (k *keyShare) share(ks keySlot) *sharedstate.OwnedShare {
	if ks.overflow {
		return &k.pool
	}
	if ent := k.held[ks.key]; ent != nil {
		return &ent.share
	}
	return nil
}
