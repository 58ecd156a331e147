package filter

import (
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"

	"github.com/meshlimit/meshlimit/abi"
	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/wire"
)

// Global concurrency limits: a rule with scope "global" whose limit is {"concurrency": N} holds
// its permits in the decision service (service/API.md, "Concurrency permits"). The request's
// /v1/check carries the permit with the rule's other global descriptors, under an id unique to
// the request (this plugin context's owner id, the stream id and a random number). An admitted
// stream's permits are kept per stream in the worker's globalClient; every globalPermitRenew
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

// assignPermits gives each global concurrency item of a request a permit id.
func (p *pluginContext) assignPermits(items []globalItem, stream uint32) {
	for i := range items {
		if it := &items[i]; isConcurrency(it.spec) {
			b := strconv.AppendUint(make([]byte, 0, 48), p.conc.owner, 36)
			b = append(b, '/')
			b = strconv.AppendUint(b, uint64(stream), 36)
			b = append(b, '/')
			it.permit = string(strconv.AppendUint(b, rand.Uint64(), 36))
		}
	}
}

// isConcurrency reports whether a rule's limits are one concurrency limit.
func isConcurrency(spec []rules.LimitSpec) bool { return len(spec) == 1 && spec[0].Concurrency > 0 }

// holdPermits keeps, for the stream, the permits of an answer that admitted every descriptor
// (an answer with any denial was released by the service).
func (g *globalClient) holdPermits(stream uint32, items []globalItem, decisions []wire.Decision) {
	for _, d := range decisions {
		if !d.Allowed || d.Skipped {
			return
		}
	}
	for i := range items {
		if it := &items[i]; it.permit != "" {
			if g.permits.held == nil {
				g.permits.held = map[uint32][]globalPermit{}
			}
			g.permits.held[stream] = append(g.permits.held[stream],
				globalPermit{stream: stream, rule: it.rs.rule.Name, fp: it.spec[0].Fingerprint, key: it.key, permit: it.permit})
		}
	}
}

// endGlobalPermits, at the end of a stream, releases the permits it holds in the service, and
// those a call still unanswered may have acquired.
func (h *httpContext) endGlobalPermits() {
	g := h.plugin.global
	if g == nil {
		return
	}
	if h.deadline != 0 {
		g.releaseItems(h.globals, abi.UnixNano())
	}
	if held, ok := g.permits.held[h.id]; ok {
		delete(g.permits.held, h.id)
		g.release(h.plugin.name, held)
	}
}

// releaseItems releases, when two call timeouts have passed, the permits of items, sent in a
// call that failed, was given up or lost its stream.
func (g *globalClient) releaseItems(items []globalItem, now int64) {
	due := now + 2*int64(g.cfg.Timeout)
	for i := range items {
		if it := &items[i]; it.permit != "" {
			gp := globalPermit{rule: it.rs.rule.Name, fp: it.spec[0].Fingerprint, key: it.key, permit: it.permit}
			g.permits.deferred = append(g.permits.deferred, deferredRelease{due: due, gp: gp})
		}
	}
}

// releaseDeferred, on a tick, releases the deferred permits that are due.
func (g *globalClient) releaseDeferred(plugin string, now int64) {
	d := g.permits.deferred
	if len(d) == 0 || d[0].due > now { // appended in due order
		return
	}
	refs, n := g.permits.refs[:0], 0
	for n < len(d) && d[n].due <= now {
		refs = append(refs, d[n].gp)
		n++
	}
	g.permits.refs = refs
	g.permits.deferred = append(d[:0], d[n:]...)
	for len(refs) > 0 {
		k := min(len(refs), wire.MaxDescriptors)
		g.permitCall(plugin, wire.Release, refs[:k])
		refs = refs[k:]
	}
}

// release sends one call that releases permits (at most wire.MaxDescriptors of them; a stream
// holds one per global concurrency rule), not awaiting its answer beyond counting a failure.
func (g *globalClient) release(plugin string, permits []globalPermit) {
	g.permitCall(plugin, wire.Release, permits[:min(len(permits), wire.MaxDescriptors)])
}

// renewPermits, on a tick, renews the permits of every live stream every globalPermitRenew.
func (g *globalClient) renewPermits(plugin string, now int64) {
	if len(g.permits.held) == 0 || now < g.permits.nextRenew {
		return
	}
	g.permits.nextRenew = now + int64(globalPermitRenew)
	refs := g.permits.refs[:0]
	for _, held := range g.permits.held {
		refs = append(refs, held...)
	}
	g.permits.refs = refs
	for len(refs) > 0 {
		n := min(len(refs), wire.MaxDescriptors)
		g.permitCall(plugin, wire.Renew, refs[:n])
		refs = refs[n:]
	}
}

// permitCall sends a renew or release call for permits, unless the breaker is open (the
// leases then cover them). Its answer counts renewals that found their permit gone.
func (g *globalClient) permitCall(plugin string, list wire.PermitList, permits []globalPermit) {
	if g.breaker.failures >= g.breaker.threshold {
		return
	}
	lease := time.Duration(0)
	if list == wire.Renew {
		lease = globalPermitLease
	}
	b := wire.AppendPermitListStart(g.permits.body[:0], list, false)
	for i, gp := range permits {
		b = wire.AppendPermitRef(b, i, wire.Key{Plugin: plugin, Rule: gp.rule, Fingerprint: gp.fp, Value: gp.key}, gp.permit, lease)
	}
	g.permits.body = wire.AppendRequestEnd(b)
	var batch []globalPermit // a renewal's answer names the entries it did not renew
	if list == wire.Renew {
		batch = append(batch, permits...)
	}
	_, err := proxywasm.DispatchHttpCall(g.cfg.Cluster, g.headers, g.permits.body, nil, g.timeout, func(numHeaders, bodySize, _ int) {
		g.onPermitAnswer(batch, numHeaders, bodySize)
	})
	g.metrics.permitCalls.Increment(1)
	if err != nil {
		g.metrics.permitFailures.Increment(1)
	}
}

// onPermitAnswer reads the answer to a renew (batch: its entries) or release call. A permit
// the service did not renew is gone (its lease ended, or Redis restarted): it is counted once
// and no longer renewed; its stream goes on without it.
func (g *globalClient) onPermitAnswer(batch []globalPermit, numHeaders, bodySize int) {
	a, err := readPermitAnswer(numHeaders, bodySize)
	if err != nil {
		g.metrics.permitFailures.Increment(1)
		return
	}
	for i := range batch {
		if a.Lost&(1<<i) != 0 {
			g.metrics.permitsLost.Increment(1)
			g.forget(&batch[i])
		}
	}
}

// forget drops a permit from its stream's list.
func (g *globalClient) forget(gp *globalPermit) {
	held := g.permits.held[gp.stream]
	for i := range held {
		if held[i].permit == gp.permit {
			held = append(held[:i], held[i+1:]...)
			break
		}
	}
	if len(held) == 0 {
		delete(g.permits.held, gp.stream)
	} else {
		g.permits.held[gp.stream] = held
	}
}

// readPermitAnswer reads the answer to a renew or release call: a 200 with the counts.
func readPermitAnswer(numHeaders, bodySize int) (wire.Answer, error) {
	body, err := readCallBody(numHeaders, bodySize)
	if err != nil {
		return wire.Answer{}, err
	}
	return wire.DecodeFullAnswer(body, 0, answerScratch)
}

// acquireFallbackPermit decides a global concurrency item by its rule's local fallback limit
// (the service could not decide) and reports whether the request is denied. The permit, when
// one is taken, is the stream's at once: this runs in the request path or in a callback of the
// paused request, and the stream's end gives it back whichever way the request goes.
func (h *httpContext) acquireFallbackPermit(it *globalItem, now int64) bool {
	p, rs := h.plugin, it.rs
	denied, held, ok := p.acquireOwned(rs, rs.fbPermits, rs.rule.FallbackConcurrency(), []byte(it.key), now, !rs.rule.Shadow, true)
	if ok {
		h.permits = append(h.permits, held)
	}
	return denied
}
