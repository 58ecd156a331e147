package filter

import (
	"encoding/binary"
	"errors"
	"github.com/meshlimit/meshlimit/abi"
	"github.com/meshlimit/meshlimit/internal/fnv"
	"strconv"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"

	"github.com/meshlimit/meshlimit/sharedstate"
)

// Quota leasing (rules[].lease): instead of one call to the decision service per request, a proxy
// leases Batch units of a key's quota at a time (a /v1/check with cost Batch per limit) into a bucket in
// its shared data, which every worker thread spends locally. When a bucket runs low, the next tick of
// the worker that noticed leases more, ahead of need, so at steady load requests never wait for a call.
// A request that finds no leased units is decided by an ordinary call, and asks for a lease.
//
// Leased units are charged in the service when they are leased, so the proxies together never admit
// more than the service granted. What leasing changes is when: units leased at t may be spent until
// t + ttl, so in any window the admissions can exceed the limit by at most the units outstanding in
// the proxies: a proxy leases only while it holds less than one batch, with one lease in flight per key
// (guarded in shared data), so it holds fewer than 2 × Batch units and the excess is below P × 2 × Batch
// for P proxies,
// and units not spent within ttl are dropped (admitting less, never more).

// leaseEntrySize is the size of a lease slot: key fingerprint, units left, expiry, lease in flight
// until (all 8-byte little-endian).
const leaseEntrySize = 32

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

type leaseSlot struct {
	fp, units, expiry, inflight int64
}

func (p *pluginContext) leaseSlotKey(it *globalItem) (string, uint64) {
	fp := fnv.String(it.key) ^ it.rs.rule.Fingerprint()
	return it.rs.leasePrefix + strconv.FormatUint(fp%uint64(it.rs.rule.MaxKeys), 36), fp
}

func readLeaseSlot(v []byte, fp uint64) leaseSlot {
	if len(v) != leaseEntrySize || binary.LittleEndian.Uint64(v) != fp {
		return leaseSlot{fp: int64(fp)} // empty, or another key's: this key has nothing leased
	}
	return leaseSlot{
		fp:       int64(fp),
		units:    int64(binary.LittleEndian.Uint64(v[8:])),
		expiry:   int64(binary.LittleEndian.Uint64(v[16:])),
		inflight: int64(binary.LittleEndian.Uint64(v[24:])),
	}
}

func (s leaseSlot) encode(b *[leaseEntrySize]byte) []byte {
	binary.LittleEndian.PutUint64(b[0:], uint64(s.fp))
	binary.LittleEndian.PutUint64(b[8:], uint64(s.units))
	binary.LittleEndian.PutUint64(b[16:], uint64(s.expiry))
	binary.LittleEndian.PutUint64(b[24:], uint64(s.inflight))
	return b[:]
}

// updateLease applies f to the key's lease slot with compare-and-swap. f returns false to leave the
// slot as it is.
func (p *pluginContext) updateLease(it *globalItem, f func(*leaseSlot) bool) error {
	key, fp := p.leaseSlotKey(it)
	u := p.limiter.Updater()
	var buf [leaseEntrySize]byte
	for range u.MaxAttempts() {
		v, cas, err := u.Read(key)
		if err != nil {
			return err
		}
		s := readLeaseSlot(v, fp)
		if !f(&s) {
			return nil
		}
		err = u.Write(key, s.encode(&buf), cas)
		if !errors.Is(err, sharedstate.ErrCasMismatch) {
			return err
		}
	}
	return sharedstate.ErrContention
}

// spendLease takes the request's cost from the key's leased units. It reports whether the request
// was admitted that way, and asks for a lease when less than a batch is left, so that a batch that
// covers one tick's consumption keeps the bucket from running dry.
func (p *pluginContext) spendLease(it *globalItem, now int64) bool {
	l := it.rs.rule.Lease()
	spent, low := false, false
	err := p.updateLease(it, func(s *leaseSlot) bool {
		if s.expiry <= now {
			s.units = 0
		}
		low = s.units-it.cost < l.Batch && s.inflight <= now
		if s.units < it.cost {
			return false
		}
		s.units -= it.cost
		spent = true
		return true
	})
	if err != nil {
		return false
	}
	if low {
		p.wantLease(it, now)
	}
	return spent
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
// worker of this proxy already has a lease in flight for it.
func (p *pluginContext) refillLeases(now int64) {
	if len(p.leases.want) == 0 || p.global == nil || !p.global.breaker.allow(now) {
		return
	}
	g := p.global
	for k, it := range p.leases.want {
		delete(p.leases.want, k)
		claimed := false
		_ = p.updateLease(&it, func(s *leaseSlot) bool {
			if s.inflight > now {
				return false
			}
			s.inflight = now + int64(g.cfg.Timeout)*2
			claimed = true
			return true
		})
		if !claimed {
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
	g := p.global
	now := abi.UnixNano()
	decisions, err := readCheckResponse(numHeaders, bodySize, len(it.spec))
	if err != nil {
		g.metrics.failures.Increment(1)
		if g.breaker.failure(now) {
			g.metrics.breakerOpened.Increment(1)
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

// endLease ends the lease in flight for the key, adding granted units (valid for the rule's ttl).
func (p *pluginContext) endLease(it *globalItem, granted, now int64) {
	ttl := int64(it.rs.rule.Lease().TTL)
	_ = p.updateLease(it, func(s *leaseSlot) bool {
		s.inflight = 0
		if granted > 0 {
			if s.expiry <= now {
				s.units = 0
			}
			s.units += granted
			s.expiry = now + ttl
		}
		return true
	})
}
