package filter

import (
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/wire"
)

// Global concurrency limits: a rule with scope "global" whose limit is {"concurrency": N} holds
// its permits in the decision service (service/API.md, "Concurrency permits"). The request's
// /v1/check carries the permit with the rule's other global descriptors, under an id unique to
// the request (this plugin context's owner id, the stream id and a random number). An admitted
// stream's permits are kept per stream in the worker's globalPermits; every globalPermitRenew
// the tick renews them all (batched, up to wire.MaxDescriptors per call), and the stream's end
// (OnHttpStreamDone) releases them with a call whose answer is not awaited. A permit whose
// release is lost (a call that fails, a VM that dies, a proxy that goes away) ends with its
// lease, globalPermitLease after its last renewal, in the service.
//
// A call that fails or passes its deadline, or whose stream ends before its answer, may have
// acquired permits (or may still acquire them: a script Redis runs after the service gave up):
// they are released too, two call timeouts later, by the tick, so that the release rarely
// overtakes the acquire (one that does leaves the permit to its lease). A request the service
// denies holds nothing (the service gives back what the check acquired); so does one admitted
// while a rule in shadow was denied (the service's answer is a denial): it goes on without a
// permit. Failures follow the rate path: the breaker, then the rule's fallback or failure_mode.
// A concurrency rule's fallback is one local concurrency limit: while the service cannot decide
// (a failed call, a passed deadline, the breaker open), the request takes a permit of that limit
// in this proxy's shared data instead (concurrency.go's owned records, leases and renewals), held
// by the stream and given back when it ends. Scope "both" adds the local permits of
// concurrency.go to every request, and takes no fallback.
// While the breaker is open, no renewal or release is sent: the leases cover them.

const (
	// globalPermitLease is the lease of a global permit: how long a permit whose release was
	// lost stays held at most after its last renewal.
	globalPermitLease = 5 * time.Second
	// globalPermitRenew is how often the tick renews the permits of live streams: a permit
	// survives four lost renewals in a row.
	globalPermitRenew = time.Second
)

// globalPermit is a permit the decision service holds for a stream of this worker.
type globalPermit struct {
	stream uint32
	rule   string
	fp     uint64 // the concurrency limit's fingerprint (wire.Key)
	key    string
	permit string
}

// globalPermits are the permits this worker's streams hold in the service.
type globalPermits struct {
	g         *globalClient
	owner     uint64                    // the plugin's owner id, which starts every permit id
	held      map[uint32][]globalPermit // by stream id
	nextRenew int64
	body      []byte
	refs      []globalPermit    // the scratch list of one renewal or release
	deferred  []deferredRelease // permits an unanswered or failed call may hold, to release when due
}

// deferredRelease is a permit to release at due (unix ns).
type deferredRelease struct {
	due int64
	gp  globalPermit
}

// assign gives each global concurrency item of a request a permit id.
func (gp *globalPermits) assign(items []globalItem, stream uint32) {
	for i := range items {
		if it := &items[i]; isConcurrency(it.spec) {
			b := strconv.AppendUint(make([]byte, 0, 48), gp.owner, 36)
			b = append(b, '/')
			b = strconv.AppendUint(b, uint64(stream), 36)
			b = append(b, '/')
			it.permit = string(strconv.AppendUint(b, rand.Uint64(), 36))
		}
	}
}

// isConcurrency reports whether a rule's limits are one concurrency limit.
func isConcurrency(spec []rules.LimitSpec) bool { return len(spec) == 1 && spec[0].Concurrency > 0 }

// hold keeps, for the stream, the permits of an answer that admitted every descriptor (an answer
// with any denial was released by the service).
func (gp *globalPermits) hold(stream uint32, items []globalItem, decisions []wire.Decision) {
	for _, d := range decisions {
		if !d.Allowed || d.Skipped {
			return
		}
	}
	for i := range items {
		if it := &items[i]; it.permit != "" {
			if gp.held == nil {
				gp.held = map[uint32][]globalPermit{}
			}
			gp.held[stream] = append(gp.held[stream],
				globalPermit{stream: stream, rule: it.rs.rule.Name, fp: it.spec[0].Fingerprint, key: it.key, permit: it.permit})
		}
	}
}

// endStream, at the end of a stream, releases the permits it holds in the service, and those a call
// still unanswered may have acquired.
func (gp *globalPermits) endStream(h *httpContext) {
	if h.call.deadline != 0 {
		gp.releaseItems(h.call.items, gp.g.host.now())
	}
	if held, ok := gp.held[h.id]; ok {
		delete(gp.held, h.id)
		gp.release(held)
	}
}

// releaseItems releases, when two call timeouts have passed, the permits of items, sent in a call
// that failed, was given up or lost its stream.
func (gp *globalPermits) releaseItems(items []globalItem, now int64) {
	due := now + 2*int64(gp.g.cfg.Timeout)
	for i := range items {
		if it := &items[i]; it.permit != "" {
			p := globalPermit{rule: it.rs.rule.Name, fp: it.spec[0].Fingerprint, key: it.key, permit: it.permit}
			gp.deferred = append(gp.deferred, deferredRelease{due: due, gp: p})
		}
	}
}

// releaseDeferred, on a tick, releases the deferred permits that are due.
func (gp *globalPermits) releaseDeferred(now int64) {
	d := gp.deferred
	if len(d) == 0 || d[0].due > now { // appended in due order
		return
	}
	refs, n := gp.refs[:0], 0
	for n < len(d) && d[n].due <= now {
		refs = append(refs, d[n].gp)
		n++
	}
	gp.refs = refs
	gp.deferred = append(d[:0], d[n:]...)
	for len(refs) > 0 {
		k := min(len(refs), wire.MaxDescriptors)
		gp.call(wire.Release, refs[:k])
		refs = refs[k:]
	}
}

// release sends one call that releases permits (at most wire.MaxDescriptors of them; a stream holds
// one per global concurrency rule), not awaiting its answer beyond counting a failure.
func (gp *globalPermits) release(permits []globalPermit) {
	gp.call(wire.Release, permits[:min(len(permits), wire.MaxDescriptors)])
}

// renew, on a tick, renews the permits of every live stream every globalPermitRenew.
func (gp *globalPermits) renew(now int64) {
	if len(gp.held) == 0 || now < gp.nextRenew {
		return
	}
	gp.nextRenew = now + int64(globalPermitRenew)
	refs := gp.refs[:0]
	for _, held := range gp.held {
		refs = append(refs, held...)
	}
	gp.refs = refs
	for len(refs) > 0 {
		n := min(len(refs), wire.MaxDescriptors)
		gp.call(wire.Renew, refs[:n])
		refs = refs[n:]
	}
}

// call sends a renew or release call for permits, unless the breaker is open (the leases then
// cover them). Its answer counts renewals that found their permit gone.
func (gp *globalPermits) call(list wire.PermitList, permits []globalPermit) {
	g := gp.g
	if g.breaker.open() {
		return
	}
	lease := time.Duration(0)
	if list == wire.Renew {
		lease = globalPermitLease
	}
	b := wire.AppendPermitListStart(gp.body[:0], list, false)
	for i, p := range permits {
		b = wire.AppendPermitRef(b, i, wire.Key{Plugin: g.name, Rule: p.rule, Fingerprint: p.fp, Value: p.key}, p.permit, lease)
	}
	gp.body = wire.AppendRequestEnd(b)
	var batch []globalPermit // a renewal's answer names the entries it did not renew
	if list == wire.Renew {
		batch = append(batch, permits...)
	}
	err := g.host.dispatch(g.cfg.Cluster, g.headers, gp.body, g.timeout, func(numHeaders, bodySize, _ int) {
		gp.onAnswer(batch, numHeaders, bodySize)
	})
	g.metrics.permitCalls.inc(1)
	if err != nil {
		g.metrics.permitFailures.inc(1)
	}
}

// onAnswer reads the answer to a renew (batch: its entries) or release call. A permit the service
// did not renew is gone (its lease ended, or Redis restarted): it is counted once and no longer
// renewed; its stream goes on without it.
func (gp *globalPermits) onAnswer(batch []globalPermit, numHeaders, bodySize int) {
	g := gp.g
	a, err := g.readPermitAnswer(numHeaders, bodySize)
	if err != nil {
		g.metrics.permitFailures.inc(1)
		return
	}
	for i := range batch {
		if a.Lost&(1<<i) != 0 {
			g.metrics.permitsLost.inc(1)
			gp.forget(&batch[i])
		}
	}
}

// forget drops a permit from its stream's list.
func (gp *globalPermits) forget(p *globalPermit) {
	held := gp.held[p.stream]
	for i := range held {
		if held[i].permit == p.permit {
			held = append(held[:i], held[i+1:]...)
			break
		}
	}
	if len(held) == 0 {
		delete(gp.held, p.stream)
	} else {
		gp.held[p.stream] = held
	}
}
