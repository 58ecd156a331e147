package filter

import (
	"errors"
	"math/rand/v2"

	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/sharedstate"
)

// Concurrency limits ({"concurrency": N} in a local rule's limits): a request takes a permit of
// its key in OnHttpRequestHeaders and gives it back in OnHttpStreamDone, which Envoy calls once
// for every stream context it created, whatever ended the stream (a normal end, a reset by
// either side, a local reply by this or any filter, an upstream failure or timeout). A permit
// taken by a rule that was followed by a denial (a later rule, the shedder) is given back at
// once.
//
// The permits of a key are one owned record (sharedstate.OwnedEditor) in a sharedstate.Records set of
// max_keys slots; a key that finds no room shares the set's overflow record with the other
// keys without room (one pool of N permits for all of them). Every worker VM admits against
// the sum of the live entries, with compare-and-swap, so the total in flight never exceeds N
// however the workers interleave, and however many they are: a VM that finds no entry of its
// own in a record (it has sharedstate's 62 others) counts its permit in the record's shared entry
// (heldPermit.shared), never admitting uncounted, and keeps what it holds there per record
// (permits.shares, sharedstate.OwnedShare), so that a dead plugin's part expires. Each VM also counts, per key, the permits its own streams
// hold; its timer rewrites its entries with those counts every permitRenew, which renews
// their lease and repairs a release that could not be written (CAS contention). What a dead
// or replaced VM held is reclaimed the owned lease after its last renewal at most, and counted in
// meshlimit.rule.<rule>.permits_reclaimed.

// permitRenew is how often a plugin rewrites the entries of the owned records it holds
// (permits and shedding slots), renewing their lease (sharedstate's owned records: 10 s): four
// renewals fit in a lease, so a slow tick does not drop a live owner.
const permitRenew = int64(2e9)

// The owner id of an owned record is a random 32-bit VM instance id (drawn once per VM) and a
// 32-bit epoch (the number of plugin starts in that VM): a reconfigured plugin is a new owner,
// and the permits of the old one expire unless its streams end and release them.
//
// vmInstance is the random id of this VM, drawn at its first plugin start; pluginEpoch counts
// the plugin starts in the VM. Together they make the owner id of a plugin context.
var (
	vmInstance  uint32
	pluginEpoch uint32
)

// newOwner returns a fresh owner id for a starting plugin context.
func newOwner() uint64 {
	if vmInstance == 0 {
		vmInstance = rand.Uint32() | 1
	}
	pluginEpoch++
	return uint64(vmInstance)<<32 | uint64(pluginEpoch)
}

// heldPermit is a permit a stream holds.
type heldPermit struct {
	rule     int
	key      string
	overflow bool
	shared   bool // counted in the record's shared entry (sharedstate.SharedOwner), not this owner's
	fallback bool // a permit of a global rule's local fallback (ruleState.fbPermits)
}

// permitKey names the permits of one key of one rule in the plugin's own bookkeeping.
type permitKey = heldPermit

// permits is what a plugin keeps for its concurrency rules: the permits its streams hold, per key,
// which its timer renews.
type permits struct {
	*env
	owner     uint64
	rules     []ruleState
	held      map[permitKey]int64                  // the permits this plugin's streams hold, per key
	shares    map[permitKey]sharedstate.OwnedShare // per record (shareKey), what this plugin holds in its shared entry
	pools     map[permitKey]int64                  // renew's scratch: the permits held in each overflow pool, all keys together
	lastRenew int64
	ed        sharedstate.OwnedEditor
	key       []byte // a key being released or renewed (not the decision's: deny still reads that)
}

// any reports whether a rule of the plugin holds permits in this proxy's shared data (then the
// timer renews them).
func (c *permits) any() bool {
	for i := range c.rules {
		if c.rules[i].permits != nil || c.rules[i].fbPermits != nil {
			return true
		}
	}
	return false
}

// update applies e to key's owned record in rec, or to the overflow record when the key finds no
// room, there with the limit of overflow (the pool of the keys without room), and returns the limit
// that decided.
// The editor's Share is this plugin's share of the record's shared entry (sk's, then the
// overflow record's).
func (c *permits) update(rec *sharedstate.Records, key []byte, sk permitKey, e *sharedstate.OwnedEditor, spec, overflow *rules.LimitSpec) (sharedstate.Result, *rules.LimitSpec, error) {
	e.Share = c.share(sk, key)
	e.NewShare = e.Share
	res, err := c.records.Update(rec, key, e)
	if err == nil && res.Placement == sharedstate.NoRoom {
		if overflow != nil {
			spec, e.Limit = overflow, overflow.Concurrency
		}
		sk.overflow = true
		e.Share = c.share(sk, nil)
		e.NewShare = e.Share
		res, err = c.records.UpdateShared(rec.OverflowKey(), e)
	}
	return res, spec, err
}

// shareKey names the record of h in shares: its rule, its key (none in the overflow record, which
// counts every key without room) and its set.
func shareKey(h heldPermit) permitKey {
	if h.overflow {
		h.key = ""
	}
	h.shared = true
	return h
}

// share returns what this plugin holds in the shared entry of sk's record (of key, unless sk is the
// overflow record's). It looks up nothing (allocates nothing) while the plugin holds nothing in any
// shared entry, the rule with up to 62 workers.
func (c *permits) share(sk permitKey, key []byte) sharedstate.OwnedShare {
	if len(c.shares) == 0 {
		return sharedstate.OwnedShare{}
	}
	sk.shared = true
	if sk.overflow {
		return c.shares[sk]
	}
	sk.key = string(key)
	return c.shares[sk]
}

// keepShare records s, what this plugin now holds in the shared entry of h's record.
func (c *permits) keepShare(h heldPermit, s sharedstate.OwnedShare) {
	sk := shareKey(h)
	if s.Empty() {
		delete(c.shares, sk)
		return
	}
	if c.shares == nil {
		c.shares = map[permitKey]sharedstate.OwnedShare{}
	}
	c.shares[sk] = s
}

// acquire decides a request against the rule's concurrency limit and reports whether it is denied
// (enforced). An admitted request's permit is listed in the decision, for the stream.
func (c *permits) acquire(rs *ruleState, key []byte, now int64, enforced bool) bool {
	denied, h, held := c.acquireOwned(rs, rs.permits, rs.rule.Concurrency(), rs.rule.OverflowConcurrency(), key, now, enforced, false)
	if held {
		c.d.acquired = append(c.d.acquired, h)
	}
	return denied
}

// acquireFallback decides a global concurrency item by its rule's local fallback limit (the service
// could not decide) and reports whether the request is denied. The permit, when one is taken, is
// the stream's at once: this runs in the request path or in a callback of the paused request, and
// the stream's end gives it back whichever way the request goes.
func (c *permits) acquireFallback(h *httpContext, it *globalItem, now int64) bool {
	rs := it.rs
	fb := rs.rule.FallbackConcurrency()
	denied, held, ok := c.acquireOwned(rs, rs.fbPermits, fb, fb, []byte(it.key), now, !rs.rule.Shadow, true)
	if ok {
		h.permits = append(h.permits, held)
	}
	return denied
}

// acquireOwned decides a request against spec, a concurrency limit whose permits are in rec
// (fallback: a global rule's local fallback), or against overflow when its key finds no room, and
// reports whether it is denied (enforced) and the permit the request holds, if held.
func (c *permits) acquireOwned(rs *ruleState, rec *sharedstate.Records, spec, overflow *rules.LimitSpec, key []byte, now int64, enforced, fallback bool) (denied bool, h heldPermit, held bool) {
	d, r := &c.d, rs.rule
	e := &c.ed
	e.Op, e.Classes, e.Class, e.Owner, e.Now, e.Limit, e.Policy, e.Force = sharedstate.OwnedAcquire, 1, 0, c.owner, now, spec.Concurrency, nil, !enforced
	res, spec, err := c.update(rec, key, heldPermit{rule: r.Index, fallback: fallback}, e, spec, overflow)
	if err := c.updated(rs, res.Attempts, err); err != nil {
		return rs.failed(enforced), h, false
	}
	rs.countPlaced(res.Placement)
	if e.Reclaimed > 0 {
		rs.metrics.permitsReclaimed.inc(uint64(e.Reclaimed))
	}
	if e.Admitted {
		h = heldPermit{rule: r.Index, key: string(key), overflow: res.Placement == sharedstate.Overflow, shared: e.Shared, fallback: fallback}
		if c.held == nil {
			c.held = map[permitKey]int64{}
		}
		c.held[h]++
		if e.Shared {
			c.keepShare(h, e.NewShare)
		}
	}
	d.count(rs, e.Allowed, enforced)
	if enforced {
		d.outcome(spec, rules.ConcurrencyDecision(spec.Concurrency, e.Total, e.Allowed), c.cfg.Response.PartitionIn(r, key, res.Placement == sharedstate.Overflow), now)
	}
	return enforced && !e.Allowed, h, e.Admitted
}

// release gives back the permits in held (the stream's, or those taken by a request that was then
// denied) and empties it.
func (c *permits) release(held []heldPermit, now int64) []heldPermit {
	if c.held == nil {
		c.held = map[permitKey]int64{}
	}
	for _, h := range held {
		if n := c.held[h] - 1; n > 0 {
			c.held[h] = n
		} else {
			c.held[h] = 0 // renewed (with 0: removed) on the next renewal, then forgotten
		}
		c.write(h, sharedstate.OwnedRelease, 0, now)
	}
	return held[:0]
}

// releaseAcquired gives back the permits taken for the current request, which is denied after all
// (a later rule, the shedder).
func (c *permits) releaseAcquired(now int64) { c.d.acquired = c.release(c.d.acquired, now) }

// write writes one release or renewal of h's entry; a failure is repaired by the next renewal, or
// by the lease.
func (c *permits) write(h heldPermit, op sharedstate.OwnedOp, count int64, now int64) {
	rs := &c.rules[h.rule]
	rec := rs.permits
	if h.fallback {
		rec = rs.fbPermits
	}
	e := &c.ed
	e.Op, e.Classes, e.Class, e.Owner, e.Now, e.Counts[0], e.Shared = op, 1, 0, c.owner, now, count, h.shared
	if h.shared {
		e.Share = c.shares[shareKey(h)]
		if op == sharedstate.OwnedRenew { // what the streams hold: the truth, whatever a failed write left
			e.Share.Counts[0] = count
		}
		e.NewShare = e.Share
	}
	var err error
	if h.overflow {
		_, err = c.records.UpdateShared(rec.OverflowKey(), e)
	} else {
		c.key = append(c.key[:0], h.key...)
		_, err = c.records.Update(rec, c.key, e)
	}
	if h.shared {
		c.keepShare(h, sharedAfter(e, err))
	}
	if err != nil {
		if errors.Is(err, sharedstate.ErrContention) {
			rs.metrics.casExhausted.inc(1)
		}
		return
	}
	if e.Reclaimed > 0 {
		rs.metrics.permitsReclaimed.inc(uint64(e.Reclaimed))
	}
}

// sharedAfter is the share of e's owner after its release or renewal: the written one, or, when the
// write failed, the owner's own count (a release no longer held), which the next move repairs in
// the record (the generation left behind expires with what it still counts).
func sharedAfter(e *sharedstate.OwnedEditor, err error) sharedstate.OwnedShare {
	if err == nil {
		return e.NewShare
	}
	s := e.Share
	if e.Op == sharedstate.OwnedRelease {
		s.Counts[e.Class] = max(s.Counts[e.Class]-1, 0)
	}
	return s
}

// renew, on a tick, rewrites this plugin's entries with the counts its streams hold (renewing their
// lease) every permitRenew, and forgets the keys that hold nothing any more. The keys without room
// share the overflow record, where this plugin has one entry: it is rewritten once, with the
// permits of all those keys together.
func (c *permits) renew(now int64) {
	if now-c.lastRenew < permitRenew {
		return
	}
	c.lastRenew = now
	clear(c.pools)
	for h, n := range c.held {
		if h.overflow { // one entry of this owner counts every key's permits in the pool
			if c.pools == nil {
				c.pools = map[permitKey]int64{}
			}
			c.pools[heldPermit{rule: h.rule, overflow: true, shared: h.shared, fallback: h.fallback}] += n
		} else {
			c.write(h, sharedstate.OwnedRenew, n, now)
		}
		if n == 0 {
			delete(c.held, h)
		}
	}
	for h, n := range c.pools {
		c.write(h, sharedstate.OwnedRenew, n, now)
	}
}

// adopt moves the permits taken for the current request to the stream, which releases them when it
// ends. It runs deferred, so a panic after a permit was taken does not leak it.
func (c *permits) adopt(h *httpContext) {
	if d := &c.d; len(d.acquired) > 0 {
		h.permits = append(h.permits, d.acquired...)
		d.acquired = d.acquired[:0]
	}
}

// endStream gives back the permits the stream holds.
func (c *permits) endStream(h *httpContext) {
	if len(h.permits) > 0 {
		h.permits = c.release(h.permits, c.host.now())
	}
}
