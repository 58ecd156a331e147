package filter

import (
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
// Each grant keeps its own expiry (sharedstate.LeaseEditor holds the record and its operations), so no
// unit is ever spendable later than ttl after the grant that brought it (some may expire early).
//
// The records live in a sharedstate.Records set of max_keys slots per rule, owner-checked: a key's
// lease is never read, spent or replaced by another key (a record is taken over only when it holds no
// live units and no lease is in flight). A key that finds no room leases nothing and is decided call by
// call.

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
	*e = sharedstate.LeaseEditor{Op: sharedstate.LeaseSpend, Now: now, Cost: it.cost, Batch: it.rs.rule.Lease().Batch}
	res, err := p.records.Update(it.rs.leases, []byte(it.key), e)
	if err != nil || res.Placement == sharedstate.NoRoom {
		return false // no room: the key is decided call by call, and cannot lease
	}
	p.countExpired(it, e)
	if e.Low {
		p.wantLease(it, now)
	}
	return e.Done && res.Written
}

// countExpired counts the units an operation found expired, when it wrote.
func (p *pluginContext) countExpired(it *globalItem, e *sharedstate.LeaseEditor) {
	if e.Dropped > 0 {
		it.rs.metrics.leaseExpired.Increment(uint64(e.Dropped))
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
	*e = sharedstate.LeaseEditor{Op: sharedstate.LeaseClaim, Now: now, Batch: it.rs.rule.Lease().Batch, Until: now + int64(p.global.cfg.Timeout)*2}
	res, err := p.records.Update(it.rs.leases, []byte(it.key), e)
	if err != nil || !res.Written {
		return false
	}
	p.countExpired(it, e)
	return e.Done
}

// endLease ends the lease in flight for the key, adding granted units (valid for the rule's ttl).
func (p *pluginContext) endLease(it *globalItem, granted, now int64) {
	e := &p.leaseEd
	*e = sharedstate.LeaseEditor{Op: sharedstate.LeaseEnd, Now: now, Cost: granted, Expiry: now + int64(it.rs.rule.Lease().TTL)}
	if _, err := p.records.Update(it.rs.leases, []byte(it.key), e); err == nil {
		p.countExpired(it, e)
	}
}
