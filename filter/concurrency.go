package filter

import (
	"errors"
	"math/rand/v2"

	"github.com/meshlimit/meshlimit/abi"

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
// however the workers interleave. Each VM also counts, per key, the permits its own streams
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

// heldPermit is a permit (or a shedding slot, rule -1) a stream holds.
type heldPermit struct {
	rule     int
	key      string
	overflow bool
	fallback bool // a permit of a global rule's local fallback (ruleState.fbPermits)
}

// permitKey names the permits of one key of one rule in the plugin's own bookkeeping.
type permitKey = heldPermit

// concurrencyState is what a plugin keeps for its concurrency rules.
type concurrencyState struct {
	owner     uint64
	held      map[permitKey]int64 // the permits this plugin's streams hold, per key
	lastRenew int64
	ed        sharedstate.OwnedEditor
	key       []byte // a key being released or renewed (not the scratch's: deny still reads that)
}

// newPermits creates the permit records of a rule with a local concurrency limit.
func (rs *ruleState) newPermits(base, fp string) (err error) {
	if rs.rule.Scope == rules.ScopeGlobal {
		return nil
	}
	rs.permits, err = sharedstate.NewRecords(base+"permits/"+fp, rs.rule.MaxKeys)
	return err
}

// updateOwned applies e to key's owned record in rec, or to the overflow record when the key
// finds no room.
func (p *pluginContext) updateOwned(rec *sharedstate.Records, key []byte, e *sharedstate.OwnedEditor) (sharedstate.Result, error) {
	res, err := p.records.Update(rec, key, e)
	if err == nil && res.Placement == sharedstate.NoRoom {
		res, err = p.records.UpdateShared(rec.OverflowKey(), e)
	}
	return res, err
}

// acquirePermit decides a request against the rule's concurrency limit and reports whether it
// is denied (enforced). An admitted request's permit is listed in the scratch for the stream.
func (p *pluginContext) acquirePermit(rs *ruleState, key []byte, now int64, enforced bool) bool {
	denied, h, held := p.acquireOwned(rs, rs.permits, rs.rule.Concurrency(), key, now, enforced, false)
	if held {
		p.scratch.acquired = append(p.scratch.acquired, h)
	}
	return denied
}

// acquireOwned decides a request against spec, a concurrency limit whose permits are in rec
// (fallback: a global rule's local fallback), and reports whether it is denied (enforced) and
// the permit the request holds, if held.
func (p *pluginContext) acquireOwned(rs *ruleState, rec *sharedstate.Records, spec *rules.LimitSpec, key []byte, now int64, enforced, fallback bool) (denied bool, h heldPermit, held bool) {
	s, r, c := &p.scratch, rs.rule, &p.conc
	e := &c.ed
	e.Op, e.Classes, e.Class, e.Owner, e.Now, e.Limit, e.Policy, e.Force = sharedstate.OwnedAcquire, 1, 0, c.owner, now, spec.Concurrency, nil, !enforced
	res, err := p.updateOwned(rec, key, e)
	if err := p.updated(rs, res.Attempts, err); err != nil {
		return p.failed(rs, enforced), h, false
	}
	p.countPlaced(rs, res.Placement)
	if e.Reclaimed > 0 {
		rs.metrics.permitsReclaimed.Increment(uint64(e.Reclaimed))
	}
	if e.Admitted {
		h = heldPermit{rule: r.Index, key: string(key), overflow: res.Placement == sharedstate.Overflow, fallback: fallback}
		if c.held == nil {
			c.held = map[permitKey]int64{}
		}
		c.held[h]++
	}
	p.count(rs, e.Allowed, enforced)
	if enforced {
		d := rules.ConcurrencyDecision(spec.Concurrency, e.Total, e.Allowed)
		s.outcomes = append(s.outcomes, rules.Outcome{Limit: spec, Decision: d, Partition: p.cfg.Response.Partition(r, key)})
	}
	return enforced && !e.Allowed, h, e.Admitted
}

// countPlaced counts overflow and evictions of an owned update.
func (p *pluginContext) countPlaced(rs *ruleState, pl sharedstate.Placement) {
	switch pl {
	case sharedstate.Overflow:
		rs.metrics.overflow.Increment(1)
	case sharedstate.Evicted:
		rs.metrics.evictions.Increment(1)
	}
}

// releasePermits gives back the permits in held (the stream's, or those taken by a request that
// was then denied) and empties it.
func (p *pluginContext) releasePermits(held []heldPermit, now int64) []heldPermit {
	c := &p.conc
	if c.held == nil {
		c.held = map[permitKey]int64{}
	}
	for _, h := range held {
		if n := c.held[h] - 1; n > 0 {
			c.held[h] = n
		} else {
			c.held[h] = 0 // renewed (with 0: removed) on the next renewal, then forgotten
		}
		p.writeOwned(h, sharedstate.OwnedRelease, 0, now)
	}
	return held[:0]
}

// writeOwned writes one release or renewal of h's entry; a failure is repaired by the next
// renewal, or by the lease.
func (p *pluginContext) writeOwned(h heldPermit, op sharedstate.OwnedOp, count int64, now int64) {
	c := &p.conc
	rs := &p.rules[h.rule]
	rec := rs.permits
	if h.fallback {
		rec = rs.fbPermits
	}
	e := &c.ed
	e.Op, e.Classes, e.Class, e.Owner, e.Now, e.Counts[0] = op, 1, 0, c.owner, now, count
	var err error
	if h.overflow {
		_, err = p.records.UpdateShared(rec.OverflowKey(), e)
	} else {
		c.key = append(c.key[:0], h.key...)
		_, err = p.records.Update(rec, c.key, e)
	}
	if err != nil {
		if errors.Is(err, sharedstate.ErrContention) {
			rs.metrics.casExhausted.Increment(1)
		}
		return
	}
	if e.Reclaimed > 0 {
		rs.metrics.permitsReclaimed.Increment(uint64(e.Reclaimed))
	}
}

// renewPermits, on a tick, rewrites this plugin's entries with the counts its streams hold
// (renewing their lease) every permitRenew, and forgets the keys that hold nothing any more.
func (p *pluginContext) renewPermits(now int64) {
	c := &p.conc
	if now-c.lastRenew < permitRenew {
		return
	}
	c.lastRenew = now
	for h, n := range c.held {
		p.writeOwned(h, sharedstate.OwnedRenew, n, now)
		if n == 0 {
			delete(c.held, h)
		}
	}
	for i := range p.sheds {
		p.renewShed(&p.sheds[i], now)
	}
}

// adoptPermits moves the permits taken for the current request to the stream, which releases
// them when it ends. It runs deferred, so a panic after a permit was taken does not leak it.
func (h *httpContext) adoptPermits() {
	s := &h.plugin.scratch
	if len(s.acquired) > 0 {
		h.permits = append(h.permits, s.acquired...)
		s.acquired = s.acquired[:0]
	}
}

// admitShed runs the first shedder that matches the current request, if any, and reports
// whether the request was shed (the response is then sent, and the rules' permits given back).
func (h *httpContext) admitShed(now int64) bool {
	p := h.plugin
	idx := -1
	for i := range p.sheds {
		if p.sheds[i].cfg.Matches(&p.scratch.req) {
			idx = i
			break
		}
	}
	if idx < 0 {
		return false
	}
	st := &p.sheds[idx]
	class, shedIt := p.admitShed(st, now)
	if class >= 0 {
		h.shedClass, h.shedIdx, h.shedHeld, h.admitted = class, idx, true, now
	}
	if !shedIt {
		return false
	}
	p.scratch.acquired = p.releasePermits(p.scratch.acquired, now)
	p.sendShed(st)
	return true
}

// endStream gives back what the stream holds: its permits and its shedding slot (with the
// upstream latency when a response came).
func (h *httpContext) endStream() {
	if len(h.permits) == 0 && !h.shedHeld {
		return
	}
	p := h.plugin
	now := abi.UnixNano()
	h.permits = p.releasePermits(h.permits, now)
	if h.shedHeld {
		h.shedHeld = false
		latency := int64(-1)
		if h.responded > 0 {
			latency = h.responded - h.admitted
		}
		p.releaseShed(&p.sheds[h.shedIdx], h.shedClass, latency, now)
	}
}

// permitTickMillis is the timer period the permits and the shedders need: the shortest adaptive
// controller's interval, else a second (renewals run every permitRenew); 0 without either. A
// controller with a longer interval updates on the first tick past it (Gradient.Update).
func (p *pluginContext) permitTickMillis() uint32 {
	tick := int64(0)
	for i := range p.sheds {
		ms := int64(1000)
		if g := p.sheds[i].cfg.Adaptive; g != nil {
			ms = max(g.Interval.Milliseconds(), 1)
		}
		if tick == 0 || ms < tick {
			tick = ms
		}
	}
	if tick > 0 {
		return uint32(tick)
	}
	for i := range p.rules {
		if p.rules[i].permits != nil || p.rules[i].fbPermits != nil {
			return 1000
		}
	}
	return 0
}

// tickOwned renews the permits and shedding slots, and runs the adaptive controller.
func (p *pluginContext) tickOwned(now int64) {
	p.renewPermits(now)
	for i := range p.sheds {
		p.tickShed(&p.sheds[i], now)
	}
}
