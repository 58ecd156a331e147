package filter

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"

	"github.com/meshlimit/meshlimit/abi"
	"github.com/meshlimit/meshlimit/sharedstate"
)

// Quota leasing (rules[].lease): instead of one call to the decision service per request, a proxy
// leases Batch units of a key's quota at a time (a /v1/check with cost Batch per limit) into a record in
// its shared data, which every worker thread spends locally. When a key's units run low, the next tick
// of the worker that noticed leases more, ahead of need, so at steady load requests never wait for a
// call. A request that finds no leased units is decided by an ordinary call, and asks for a lease.
//
// Leased units are charged in the service when they are leased, so the proxies together never admit
// more than the service granted. What leasing changes is when: units granted at t may be spent until
// t + ttl, so in any window the admissions can exceed the limit by at most the units outstanding in
// the proxies. A worker claims a lease only while the key holds less than one batch and no lease is in
// flight, both checked in the same compare-and-swap that marks the lease in flight; so a proxy holds
// fewer than 2 × Batch units of a key, and the excess is below P × 2 × Batch for P proxies. Units not
// spent within ttl are dropped (admitting less, never more; counted in lease_expired).
//
// Each grant keeps its own expiry: a record holds the two most recent grants, spent oldest first. When
// a third grant lands while both are live, the older two are merged under the earlier expiry, so no
// unit is ever spendable later than ttl after the grant that brought it (some may expire early).
//
// The records live in a sharedstate.Records set of max_keys slots per rule, owner-checked: a key's
// lease is never read, spent or replaced by another key (a record is taken over only when it holds no
// live units and no lease is in flight). A key that finds no room leases nothing and is decided call by
// call.

// leasePayloadSize is the size of a lease record's payload: two grants (units, expiry) and the time
// until which a lease is in flight, all 8-byte little-endian.
const leasePayloadSize = 40

// leaseRecord is a decoded lease payload.
type leaseRecord struct {
	units, expiry [2]int64 // [0] the older grant, [1] the newer
	inflight      int64
}

func decodeLease(p []byte) (r leaseRecord) {
	if len(p) != leasePayloadSize {
		return r // none (or unreadable): nothing leased
	}
	for i := range 2 {
		r.units[i] = int64(binary.LittleEndian.Uint64(p[16*i:]))
		r.expiry[i] = int64(binary.LittleEndian.Uint64(p[16*i+8:]))
	}
	r.inflight = int64(binary.LittleEndian.Uint64(p[32:]))
	return r
}

func (r *leaseRecord) append(dst []byte) []byte {
	for i := range 2 {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(r.units[i]))
		dst = binary.LittleEndian.AppendUint64(dst, uint64(r.expiry[i]))
	}
	return binary.LittleEndian.AppendUint64(dst, uint64(r.inflight))
}

// expire drops the units of grants that expired at now and returns how many, then moves the newer
// grant into the older's place when the older is empty.
func (r *leaseRecord) expire(now int64) (dropped int64) {
	for i := range 2 {
		if r.units[i] > 0 && r.expiry[i] <= now {
			dropped += r.units[i]
			r.units[i] = 0
		}
	}
	if r.units[0] == 0 {
		r.units[0], r.expiry[0], r.units[1], r.expiry[1] = r.units[1], r.expiry[1], 0, 0
	}
	return dropped
}

func (r *leaseRecord) live() int64 { return r.units[0] + r.units[1] }

// spend takes cost units, oldest grant first; the caller checked that live() >= cost.
func (r *leaseRecord) spend(cost int64) {
	from0 := min(cost, r.units[0])
	r.units[0] -= from0
	r.units[1] -= cost - from0
	r.expire(0) // shift only: expiry times are positive
}

// grant adds units that expire at expiry. With two live grants already, the older two merge under
// the earlier expiry (the older grant's).
func (r *leaseRecord) grant(units, expiry int64) {
	switch {
	case r.units[0] == 0:
		r.units[0], r.expiry[0] = units, expiry
	case r.units[1] == 0:
		r.units[1], r.expiry[1] = units, expiry
	default:
		r.units[0] += r.units[1]
		r.expiry[0] = min(r.expiry[0], r.expiry[1])
		r.units[1], r.expiry[1] = units, expiry
	}
}

// Lease operations, the modes of leaseEditor.
const (
	leaseSpend = iota // take cost units if there are enough
	leaseClaim        // mark a lease in flight if fewer than batch units are live and none is in flight
	leaseEnd          // end the lease in flight, adding granted units
)

// leaseEditor is the sharedstate.Editor of one lease operation. Its outputs describe the round that
// was written (Edit recomputes them on every CAS round).
type leaseEditor struct {
	op                              int
	now, cost, batch, until, expiry int64 // inputs: until = in flight until (claim), expiry of the grant (end)
	done, low                       bool  // outputs: spent or claimed; the key runs low
	dropped                         int64 // output: units that expired unspent
}

// Vacant implements sharedstate.Editor: a record with no live units and no lease in flight holds nothing.
func (e *leaseEditor) Vacant(p []byte) bool {
	r := decodeLease(p)
	r.expire(e.now)
	return r.live() == 0 && r.inflight <= e.now
}

// Edit implements sharedstate.Editor.
func (e *leaseEditor) Edit(dst, cur []byte) ([]byte, bool, error) {
	r := decodeLease(cur)
	e.done, e.low = false, false
	e.dropped = r.expire(e.now)
	switch e.op {
	case leaseSpend:
		e.low = r.live()-e.cost < e.batch && r.inflight <= e.now
		if r.live() < e.cost {
			return dst, e.dropped > 0, nil // write only to drop what expired (then a fresh record is vacant)
		}
		r.spend(e.cost)
	case leaseClaim:
		if r.inflight > e.now || r.live() >= e.batch {
			return dst, false, nil
		}
		r.inflight = e.until
	case leaseEnd:
		r.inflight = 0
		if e.cost > 0 {
			r.grant(e.cost, e.expiry)
		}
	}
	e.done = true
	return r.append(dst), true, nil
}

// leaseState is the lease bookkeeping of one plugin (one worker thread).
type leaseState struct {
	want    map[leaseKey]globalItem // keys whose buckets run low, to lease for on the next tick
	backoff map[leaseKey]int64      // keys the service refused a batch for, until when
}

type leaseKey struct {
	rule int
	key  string
}

// maxLeaseWants bounds the keys a worker remembers to lease for between two ticks.
const maxLeaseWants = 1024

// spendLease takes the request's cost from the key's leased units. It reports whether the request
// was admitted that way, and asks for a lease when less than a batch is left, so that a batch that
// covers one tick's consumption keeps the units from running out.
func (p *pluginContext) spendLease(it *globalItem, now int64) bool {
	e := &p.leaseEd
	*e = leaseEditor{op: leaseSpend, now: now, cost: it.cost, batch: it.rs.rule.Lease().Batch}
	res, err := p.records.Update(it.rs.leases, []byte(it.key), e)
	if err != nil || res.Placement == sharedstate.NoRoom {
		return false // no room: the key is decided call by call, and cannot lease
	}
	p.countExpired(it, e)
	if e.low {
		p.wantLease(it, now)
	}
	return e.done && res.Written
}

// countExpired counts the units an operation found expired, when it wrote.
func (p *pluginContext) countExpired(it *globalItem, e *leaseEditor) {
	if e.dropped > 0 {
		it.rs.metrics.leaseExpired.Increment(uint64(e.dropped))
	}
}

func (p *pluginContext) wantLease(it *globalItem, now int64) {
	k := leaseKey{rule: it.rs.rule.Index, key: it.key}
	if until, ok := p.leases.backoff[k]; ok {
		if now < until {
			return
		}
		delete(p.leases.backoff, k)
	}
	if p.leases.want == nil {
		p.leases.want = map[leaseKey]globalItem{}
	}
	if len(p.leases.want) < maxLeaseWants {
		p.leases.want[k] = *it
	}
}

// refillLeases, on a tick, leases a batch for every key that ran low, one call per key, unless another
// worker of this proxy already has a lease in flight for it or the key no longer runs low.
func (p *pluginContext) refillLeases(now int64) {
	if len(p.leases.want) == 0 || p.global == nil || !p.global.breaker.allow(now) {
		return
	}
	g := p.global
	for k, it := range p.leases.want {
		delete(p.leases.want, k)
		if !p.claimLease(&it, now) {
			continue
		}
		batch := it
		batch.cost = it.rs.rule.Lease().Batch
		g.body = appendCheckBody(g.body[:0], p.name, []globalItem{batch})
		_, err := proxywasm.DispatchHttpCall(g.cfg.Cluster, g.headers, g.body, nil, g.timeout, func(numHeaders, bodySize, _ int) {
			p.onLeaseResponse(&batch, numHeaders, bodySize)
		})
		if err != nil {
			g.metrics.failures.Increment(1)
			p.endLease(&batch, 0, now)
			continue
		}
		g.metrics.leaseCalls.Increment(1)
	}
}

// onLeaseResponse adds a granted batch to the key's bucket; a refused batch makes this worker stop
// leasing for the key until the service's Retry-After (requests are then decided one by one).
func (p *pluginContext) onLeaseResponse(it *globalItem, numHeaders, bodySize int) {
	defer p.recoverPanic("a lease answer")
	g := p.global
	now := abi.UnixNano()
	decisions, err := readCheckResponse(numHeaders, bodySize, len(it.spec))
	if err != nil {
		var se *statusError
		if errors.As(err, &se) && se.rejected() {
			g.metrics.rejected.Increment(1) // refused, not an outage: no breaker (see globalFailed)
		} else {
			g.metrics.failures.Increment(1)
			if g.breaker.failure(now) {
				g.metrics.breakerOpened.Increment(1)
			}
		}
		p.endLease(it, 0, now)
		return
	}
	g.breaker.success()
	var wait int64
	for _, d := range decisions {
		switch {
		case d.Allowed:
		case d.RetryAfterMs < 0: // a batch larger than the bucket can never be granted
			wait = max(wait, int64(time.Second))
		default:
			wait = max(wait, d.RetryAfterMs*int64(time.Millisecond), int64(time.Millisecond))
		}
	}
	if wait > 0 {
		if p.leases.backoff == nil {
			p.leases.backoff = map[leaseKey]int64{}
		}
		if len(p.leases.backoff) < maxLeaseWants {
			p.leases.backoff[leaseKey{rule: it.rs.rule.Index, key: it.key}] = now + wait
		}
		p.endLease(it, 0, now)
		return
	}
	it.rs.metrics.leased.Increment(uint64(it.cost))
	p.endLease(it, it.cost, now)
}

// claimLease marks a lease in flight for the key if it still holds less than a batch and no other
// worker has one in flight: the check and the mark are one compare-and-swap.
func (p *pluginContext) claimLease(it *globalItem, now int64) bool {
	e := &p.leaseEd
	*e = leaseEditor{op: leaseClaim, now: now, batch: it.rs.rule.Lease().Batch, until: now + int64(p.global.cfg.Timeout)*2}
	res, err := p.records.Update(it.rs.leases, []byte(it.key), e)
	if err != nil || !res.Written {
		return false
	}
	p.countExpired(it, e)
	return e.done
}

// endLease ends the lease in flight for the key, adding granted units (valid for the rule's ttl).
func (p *pluginContext) endLease(it *globalItem, granted, now int64) {
	e := &p.leaseEd
	*e = leaseEditor{op: leaseEnd, now: now, cost: granted, expiry: now + int64(it.rs.rule.Lease().TTL)}
	if _, err := p.records.Update(it.rs.leases, []byte(it.key), e); err == nil {
		p.countExpired(it, e)
	}
}
