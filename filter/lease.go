package filter

import (
	"errors"
	"time"

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

// leaser is the lease bookkeeping of one plugin (one worker thread).
type leaser struct {
	*env
	g       *globalClient
	ed      sharedstate.LeaseEditor // reused
	wants   map[leaseKey]globalItem // keys whose buckets run low, to lease for on the next tick
	backoff map[leaseKey]int64      // keys the service refused a batch for, until when
}

type leaseKey struct {
	rule int
	key  string
}

// maxLeaseWants bounds the keys a worker remembers to lease for between two ticks.
const maxLeaseWants = 1024

// spend takes the request's cost from the key's leased units. It reports whether the request was
// admitted that way, and asks for a lease when less than a batch is left, so that a batch that
// covers one tick's consumption keeps the units from running out.
func (l *leaser) spend(it *globalItem, now int64) bool {
	e := &l.ed
	*e = sharedstate.LeaseEditor{Op: sharedstate.LeaseSpend, Now: now, Cost: it.cost, Batch: it.rs.rule.Lease().Batch}
	res, err := l.records.Update(it.rs.leases, []byte(it.key), e)
	if err != nil || res.Placement == sharedstate.NoRoom {
		return false // no room: the key is decided call by call, and cannot lease
	}
	countExpired(it, e)
	if e.Low {
		l.want(it, now)
	}
	return e.Done && res.Written
}

// countExpired counts the units an operation found expired, when it wrote.
func countExpired(it *globalItem, e *sharedstate.LeaseEditor) {
	if e.Dropped > 0 {
		it.rs.metrics.leaseExpired.inc(uint64(e.Dropped))
	}
}

// want remembers to lease for the key on the next tick, unless the service refused it a batch
// until later.
func (l *leaser) want(it *globalItem, now int64) {
	k := leaseKey{rule: it.rs.rule.Index, key: it.key}
	if until, ok := l.backoff[k]; ok {
		if now < until {
			return
		}
		delete(l.backoff, k)
	}
	if l.wants == nil {
		l.wants = map[leaseKey]globalItem{}
	}
	if len(l.wants) < maxLeaseWants {
		l.wants[k] = *it
	}
}

// refill, on a tick, leases a batch for every key that ran low, one call per key, unless another
// worker of this proxy already has a lease in flight for it or the key no longer runs low.
func (l *leaser) refill(now int64) {
	g := l.g
	if len(l.wants) == 0 || g == nil || !g.breaker.allow(now) {
		return
	}
	for k, it := range l.wants {
		delete(l.wants, k)
		if !l.claim(&it, now) {
			continue
		}
		batch := it
		batch.cost = it.rs.rule.Lease().Batch
		g.body = appendCheckBody(g.body[:0], l.name, []globalItem{batch})
		err := l.host.dispatch(g.cfg.Cluster, g.headers, g.body, g.timeout, func(numHeaders, bodySize, _ int) {
			l.onAnswer(&batch, numHeaders, bodySize)
		})
		if err != nil {
			g.metrics.failures.inc(1)
			l.end(&batch, 0, now)
			continue
		}
		g.metrics.leaseCalls.inc(1)
	}
}

// onAnswer adds a granted batch to the key's bucket; a refused batch makes this worker stop leasing
// for the key until the service's Retry-After (requests are then decided one by one).
func (l *leaser) onAnswer(it *globalItem, numHeaders, bodySize int) {
	defer l.panics.recoverPanic("a lease answer")
	g := l.g
	now := l.host.now()
	decisions, err := g.readCheck(numHeaders, bodySize, len(it.spec))
	if err != nil {
		var se *statusError
		if errors.As(err, &se) && se.rejected() {
			g.metrics.rejected.inc(1) // refused, not an outage: no breaker (see globalClient.failed)
		} else {
			g.failure(now)
		}
		l.end(it, 0, now)
		return
	}
	g.breaker.success()
	boundDecisions(it.spec, decisions, it.rs.rule.Settle() != nil, now)
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
		if l.backoff == nil {
			l.backoff = map[leaseKey]int64{}
		}
		if len(l.backoff) < maxLeaseWants {
			l.backoff[leaseKey{rule: it.rs.rule.Index, key: it.key}] = now + wait
		}
		l.end(it, 0, now)
		return
	}
	it.rs.metrics.leased.inc(uint64(it.cost))
	l.end(it, it.cost, now)
}

// claim marks a lease in flight for the key if it still holds less than a batch and no other
// worker has one in flight: the check and the mark are one compare-and-swap.
func (l *leaser) claim(it *globalItem, now int64) bool {
	e := &l.ed
	*e = sharedstate.LeaseEditor{Op: sharedstate.LeaseClaim, Now: now, Batch: it.rs.rule.Lease().Batch, Until: now + int64(l.g.cfg.Timeout)*2}
	res, err := l.records.Update(it.rs.leases, []byte(it.key), e)
	if err != nil || !res.Written {
		return false
	}
	countExpired(it, e)
	return e.Done
}

// end ends the lease in flight for the key, adding granted units (valid for the rule's ttl).
func (l *leaser) end(it *globalItem, granted, now int64) {
	e := &l.ed
	*e = sharedstate.LeaseEditor{Op: sharedstate.LeaseEnd, Now: now, Cost: granted, Expiry: now + int64(it.rs.rule.Lease().TTL)}
	if _, err := l.records.Update(it.rs.leases, []byte(it.key), e); err == nil {
		countExpired(it, e)
	}
}
