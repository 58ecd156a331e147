package filter

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/sharedstate"
	"github.com/meshlimit/meshlimit/shed"
)

// Priority load shedding (the top-level shed object, or the shedders list; docs/shedding.md).
// After the rules, the first shedder whose match holds governs the request (none may): the
// request gets a class (its route's, its class_from identity's, its class header's, or the
// default) and is admitted by
// shed.Policy against the capacity: the configured one, or the adaptive controller's. The
// requests in flight per class are one owned record (sharedstate.OwnedEditor) shared by every worker, with
// the same owners, leases and renewals as concurrency permits, so a dead VM's slots are
// reclaimed. A shed request gets a 503 with the temporary-reduced-capacity problem type and a
// jittered Retry-After. In shadow mode the shedder counts what it would shed and sheds nothing;
// with enforce_percent below 100 it is in shadow mode for the requests whose key is not enforced.
// Each shedder has its own shared-data records (under …/shed/<name>/) and metrics. With
// key_share, a request also takes a slot of its share_key value, held to shed.Policy.KeySlots of
// the capacity across the workers (shed_keys.go), and gives it back with the shedder's.
//
// A request holds its slot until the response headers arrive (or until its stream ends, if none
// come): a long answer (an event stream, a download) holds no slot once it has begun, and a
// request whose body never ends holds one until Envoy's timeouts end it (the highest class's
// reserve survives any number of those: shed.Policy.Reserved). The response headers are
// classified (answerOf) as an upstream answer that did work (shed.Served: status 100 to 399), an
// upstream error (shed.Refused: 400 to 599), or no upstream answer at all (shed.Local: Envoy's
// response.code_details is not "via_upstream": a router's 503 or 504, another filter's local
// reply; or no response headers). With adaptive capacity, each worker records through the
// shed.Sampler of the state its last tick read (Served answers; Refused ones slower than the
// target; during a probe, only Served answers to requests admitted after the probe's first
// interval) the latency from the end of the request (its admission, or its body's end or its
// trailers, if later: requestEnded) to the response headers in a local shed.Histogram, a memory
// write. Its timer
// (period: the controller's interval) merges that histogram into the interval's shared one,
// then runs Gradient.Update on the shared GradientState with the merged histogram and the
// interval's peak in flight. Update changes nothing for a call within 9/10 of an interval of
// the last run, so only the first worker's tick of an interval updates; the worker whose CAS of
// the updated state wins also empties the shared histogram and starts the next interval's peak.
// Samples merged by another worker between that worker's read and its reset are lost (a few at
// most, of one interval). Every worker reads the capacity from the shared state on its tick, so
// the request path uses a capacity at most one interval old and never reads the controller.
//
// Metrics (names with the class; P is "meshlimit.shed." for the shed object and
// "meshlimit.shed.<name>." for a shedder of the shedders list):
//
//	P<class>.admitted      requests admitted
//	P<class>.shed          requests shed (503)
//	P<class>.shadow_shed   requests the shedder would have shed (shadow mode, or a key not enforced)
//	P<class>.in_flight     gauge: requests in flight (all workers), updated on ticks
//	Pcapacity              gauge: the capacity in force
//	Preclaimed             slots reclaimed from owners whose lease ended
//	Pkey_limited           requests whose share_key value held its key_share (shed, or counted in shadow)
type shedState struct {
	cfg      *rules.Shed
	stateKey string // the owned record of in-flight counts
	gradKey  string // the controller's state
	histKey  string // the interval's merged histogram
	capacity int64
	held     [shed.MaxClasses]int64 // slots this plugin's streams hold
	local    shed.Histogram
	sampler  shed.Sampler           // which answers the interval records (Gradient.Sampler of the last state)
	share    sharedstate.OwnedShare // slots this plugin's streams hold in the record's shared entry
	ed       sharedstate.OwnedEditor
	gradEd   sharedstate.GradientEditor
	histEd   sharedstate.HistogramEditor
	metrics  shedMetrics
	buf      []byte
	hdrs     [2][2]string     // the shed reply's headers
	kbuf     []byte           // scratch of the class, enforcement and share keys
	keys     keyShare         // key_share: the slots each share_key value holds (shed_keys.go)
	taken    keySlot          // admitOne's output: the key share slot of the request it admitted
	samples  shed.SampleShare // the weight of each share_key value in the samples (adaptive only)
	keyed    bool             // admitOne's output: taken is held
}

type shedMetrics struct {
	admitted, shed, shadowShed [shed.MaxClasses]counter
	inFlight                   [shed.MaxClasses]gauge
	capacity                   gauge
	reclaimed, keyLimited      counter
}

// shedSlot is the shedding slot a stream holds.
type shedSlot struct {
	class    int     // the shedder's class of the slot, if held
	idx      int     // the index in shedder.list of that shedder
	held     bool    //
	shared   bool    // counted in the record's shared entry (sharedstate.SharedOwner)
	admitted int64   // when the shedder admitted the stream (unix ns)
	sent     int64   // when its request ended (unix ns; 0 until then): its latency starts there
	key      keySlot // the key share slot, if keyed
	keyed    bool
	client   uint64 // the hash of its share_key value (adaptive only): its samples' share
}

// shedder is a plugin's load shedders, in configuration order.
type shedder struct {
	*env
	owner     uint64
	permits   *permits // a shed request gives back the permits its rules took
	list      []shedState
	lastRenew int64
	pbuf      []byte // receives response.code_details
}

// start prepares the shedders of cfgs under keys that start with base.
func (s *shedder) start(e *env, owner uint64, permits *permits, cfgs []*rules.Shed, base string) {
	*s = shedder{env: e, owner: owner, permits: permits, list: make([]shedState, len(cfgs))}
	for i, c := range cfgs {
		b := base
		if c.Name != "" {
			b += c.Name + "/"
		}
		s.startOne(&s.list[i], c, b)
	}
}

// startOne prepares the shedder of cfg under keys that start with base.
func (s *shedder) startOne(st *shedState, cfg *rules.Shed, base string) {
	st.cfg = cfg
	n := strconv.Itoa(cfg.Policy.Classes())
	st.stateKey, st.gradKey, st.histKey = base+"state/"+n, base+"gradient", base+"histogram"
	st.capacity = cfg.Capacity
	for i, c := range cfg.Classes {
		pre := cfg.MetricPrefix + c + "."
		st.metrics.admitted[i] = newCounter(s.host, pre+"admitted")
		st.metrics.shed[i] = newCounter(s.host, pre+"shed")
		st.metrics.shadowShed[i] = newCounter(s.host, pre+"shadow_shed")
		st.metrics.inFlight[i] = newGauge(s.host, pre+"in_flight")
	}
	st.metrics.capacity = newGauge(s.host, cfg.MetricPrefix+"capacity")
	st.metrics.reclaimed = newCounter(s.host, cfg.MetricPrefix+"reclaimed")
	if cfg.KeyShared() {
		st.metrics.keyLimited = newCounter(s.host, cfg.MetricPrefix+"key_limited")
		var err error
		if st.keys.recs, err = sharedstate.NewRecords(base+"keys/"+strconv.FormatUint(uint64(cfg.Policy.KeyShare()), 10), cfg.KeyShareSlots()); err != nil {
			logf(s.host, logWarn, "meshlimit: shed: key_share: %v", err) // unreachable: the slots are in range
		}
	}
	if cfg.Adaptive != nil {
		st.capacity = cfg.Adaptive.InitialLimit
		s.tickOne(st, 0) // read a state other workers may have made
	}
	st.metrics.capacity.set(st.capacity)
}

// tickMillis is the timer period the shedders need: the shortest adaptive controller's interval,
// else a second (renewals run every permitRenew); 0 without a shedder. A controller with a longer
// interval updates on the first tick past it (Gradient.Update).
func (s *shedder) tickMillis() uint32 {
	tick := int64(0)
	for i := range s.list {
		ms := int64(1000)
		if g := s.list[i].cfg.Adaptive; g != nil {
			ms = max(g.Interval.Milliseconds(), 1)
		}
		if tick == 0 || ms < tick {
			tick = ms
		}
	}
	return uint32(tick)
}

// admit runs the first shedder that matches the current request, if any, and reports whether the
// request was shed (the response is then sent, and the rules' permits given back). Without a
// shedder, nothing runs: the check is inlined at the caller.
func (s *shedder) admit(h *httpContext, now int64) bool {
	return len(s.list) > 0 && s.admitFirst(h, now)
}

func (s *shedder) admitFirst(h *httpContext, now int64) bool {
	idx := -1
	for i := range s.list {
		if s.list[i].cfg.Matches(&s.d.req) {
			idx = i
			break
		}
	}
	if idx < 0 {
		return false
	}
	st := &s.list[idx]
	client := s.clientOf(st)
	class, shedIt := s.admitOne(st, now)
	if shedIt && st.cfg.Adaptive != nil {
		st.samples.Shed(client)
	}
	if class >= 0 {
		h.shed = shedSlot{class: class, idx: idx, held: true, shared: st.ed.Shared, admitted: now, key: st.taken, keyed: st.keyed, client: client}
	}
	if !shedIt {
		return false
	}
	s.permits.releaseAcquired(now)
	s.reply(st)
	return true
}

// clientOf returns the hash of the current request's share_key value for an adaptive shedder st
// (its samples' share, shed.SampleShare), 0 without a controller.
func (s *shedder) clientOf(st *shedState) uint64 {
	if st.cfg.Adaptive == nil {
		return 0
	}
	st.kbuf = st.cfg.ShareKey(&s.d.req, st.kbuf)
	return fnv64(st.kbuf)
}

// fnv64 is the 64-bit FNV-1a hash of b.
func fnv64(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return h
}

// admitOne decides the current request with the shedder st; it returns the class when a slot was
// taken (released at the response headers, or at the end of a stream that got none), -1
// otherwise, and whether the request is shed (false in shadow, where a request the shedder would
// shed is admitted and counted).
func (s *shedder) admitOne(st *shedState, now int64) (class int, shedIt bool) {
	cfg := st.cfg
	req := &s.d.req
	var c int
	c, st.kbuf = cfg.Class(req, st.kbuf)
	shadow := cfg.Shadow
	if !shadow && cfg.EnforcePercent < 100 {
		var enforced bool
		enforced, st.kbuf = cfg.Enforced(req, st.kbuf)
		shadow = !enforced
	}
	keyAllowed := s.takeKey(st, now, shadow)
	if !keyAllowed && !shadow {
		st.metrics.keyLimited.inc(1)
		st.metrics.shed[c].inc(1)
		return -1, true
	}
	e := &st.ed
	k := cfg.Policy.Classes()
	e.Op, e.Classes, e.Class, e.Owner, e.Now, e.Policy, e.Capacity, e.Force = sharedstate.OwnedAcquire, k, c, s.owner, now, &cfg.Policy, st.capacity, shadow
	e.Share, e.NewShare = st.share, st.share
	_, err := s.records.UpdateShared(st.stateKey, e)
	if err != nil {
		if !errors.Is(err, sharedstate.ErrContention) {
			logf(s.host, logWarn, "meshlimit: shed: %v", err)
		}
		s.dropKey(st, now)
		return -1, false // the shedder fails open: it protects the upstream, it is no limit
	}
	if e.Reclaimed > 0 {
		st.metrics.reclaimed.inc(uint64(e.Reclaimed))
	}
	if !keyAllowed {
		st.metrics.keyLimited.inc(1)
	}
	switch {
	case e.Allowed && keyAllowed:
		st.metrics.admitted[c].inc(1)
	case shadow:
		st.metrics.shadowShed[c].inc(1)
	default:
		st.metrics.shed[c].inc(1)
	}
	if !e.Admitted {
		s.dropKey(st, now)
		return -1, !shadow
	}
	if e.Shared {
		st.share = e.NewShare
	} else {
		st.held[c]++
	}
	return c, false
}

// codeDetailsPath is Envoy's response.code_details: "via_upstream" for an upstream's answer.
var codeDetailsPath = propertyPath("response", "code_details")

// takeKey takes the current request's key share slot when the shedder has a key share (st.taken,
// st.keyed), and reports whether its key was under its share (true without a key share, or when the
// record could not be written: the share fails open, like the shedder). In shadow, the slot is
// taken over the share too.
func (s *shedder) takeKey(st *shedState, now int64, shadow bool) bool {
	st.keyed = false
	cfg := st.cfg
	if !cfg.KeyShared() || st.keys.recs == nil {
		return true
	}
	st.kbuf = cfg.ShareKey(&s.d.req, st.kbuf)
	ks, allowed, taken, ok := st.keys.acquire(s.records, st.kbuf, s.owner, now, cfg.Policy.KeySlots(st.capacity), shadow)
	st.taken, st.keyed = ks, taken
	return allowed || !ok
}

// dropKey gives back the key share slot takeKey took for a request that holds no shedder slot.
func (s *shedder) dropKey(st *shedState, now int64) {
	if st.keyed {
		st.keyed = false
		st.keys.release(s.records, st.taken, s.owner, now)
	}
}

// responded gives back the stream's shedding slot when the response headers arrive, and records
// the upstream latency of an answer the shedder's Sampler keeps.
func (s *shedder) responded(h *httpContext) {
	sl := &h.shed
	if !sl.held {
		return
	}
	st, now := &s.list[sl.idx], s.host.now()
	if st.cfg.Adaptive != nil {
		st.sampler.RecordShared(&st.local, &st.samples, sl.client, sl.admitted, sl.sent, now, s.answer())
	}
	s.release(st, sl, now)
}

// requestEnded notes when the stream's request ended (its body's last byte, or its trailers):
// the upstream latency sampled at its response headers starts there, not at admission, so the
// time a client takes to upload is not the upstream's (shed.Sampler.RecordFrom). Only the first
// end counts.
func (s *shedder) requestEnded(h *httpContext) {
	if sl := &h.shed; sl.held && sl.sent == 0 {
		sl.sent = s.host.now()
	}
}

// answer classifies the current response (see shedState).
func (s *shedder) answer() shed.Answer {
	v, ok := s.host.property(codeDetailsPath, s.pbuf[:0])
	if cap(v) > cap(s.pbuf) {
		s.pbuf = v // keep the grown buffer
	}
	if ok && string(v) != "via_upstream" {
		return shed.Local
	}
	status := 0
	if v, ok := s.resp.header(":status"); ok {
		status, _ = strconv.Atoi(v)
	}
	return answerOf(status)
}

// answerOf classifies an upstream's status.
func answerOf(status int) shed.Answer {
	switch {
	case status >= 100 && status < 400:
		return shed.Served
	case status >= 400 && status < 600:
		return shed.Refused
	}
	return shed.Local
}

// endStream gives back the slot of a stream that got no response headers: no sample.
func (s *shedder) endStream(h *httpContext) {
	if sl := &h.shed; sl.held {
		s.release(&s.list[sl.idx], sl, s.host.now())
	}
}

// release gives back the slot sl of the shedder st.
func (s *shedder) release(st *shedState, sl *shedSlot, now int64) {
	sl.held = false
	class := sl.class
	if !sl.shared {
		st.held[class] = max(st.held[class]-1, 0)
	}
	if sl.keyed {
		sl.keyed = false
		st.keys.release(s.records, sl.key, s.owner, now)
	}
	e := &st.ed
	e.Op, e.Classes, e.Class, e.Owner, e.Now, e.Shared = sharedstate.OwnedRelease, st.cfg.Policy.Classes(), class, s.owner, now, sl.shared
	e.Share, e.NewShare = st.share, st.share
	_, err := s.records.UpdateShared(st.stateKey, e)
	if sl.shared {
		st.share = sharedAfter(e, err)
	}
	if err == nil && e.Reclaimed > 0 {
		st.metrics.reclaimed.inc(uint64(e.Reclaimed))
	}
}

// tick renews this plugin's entries of the shedders' records every permitRenew (as the permits
// are), and runs the adaptive controllers.
func (s *shedder) tick(now int64) {
	if len(s.list) == 0 {
		return
	}
	if now-s.lastRenew >= permitRenew {
		s.lastRenew = now
		for i := range s.list {
			s.renew(&s.list[i], now)
		}
	}
	for i := range s.list {
		s.tickOne(&s.list[i], now)
	}
}

// renew rewrites this plugin's entry of the shedder's record with the slots its streams hold (see
// permits.renew).
func (s *shedder) renew(st *shedState, now int64) {
	if st.keys.recs != nil {
		st.keys.renew(s.records, s.owner, now)
	}
	e := &st.ed
	if !st.share.Empty() { // keep this plugin's slots in the shared entry live (moved to its current generation)
		e.Op, e.Classes, e.Owner, e.Now, e.Shared = sharedstate.OwnedRenew, st.cfg.Policy.Classes(), s.owner, now, true
		e.Share, e.NewShare = st.share, st.share
		_, err := s.records.UpdateShared(st.stateKey, e)
		st.share = sharedAfter(e, err)
	}
	e.Op, e.Classes, e.Owner, e.Now, e.Counts, e.Shared = sharedstate.OwnedRenew, st.cfg.Policy.Classes(), s.owner, now, st.held, false
	if _, err := s.records.UpdateShared(st.stateKey, e); err == nil {
		if e.Reclaimed > 0 {
			st.metrics.reclaimed.inc(uint64(e.Reclaimed))
		}
		in := e.InFlight()
		for c := range e.Classes {
			st.metrics.inFlight[c].set(int64(in.InFlight[c]))
		}
	}
}

// reply answers a shed request: 503, the temporary-reduced-capacity problem, Retry-After with
// jitter.
func (s *shedder) reply(st *shedState) {
	retry := st.cfg.RetryAfter
	if j := st.cfg.RetryAfterJitter; j > 0 {
		retry += time.Duration(rand.Int64N(int64(j) + 1))
	}
	secs := int64((retry + time.Second - 1) / time.Second)
	st.buf = strconv.AppendInt(st.buf[:0], secs, 10)
	st.hdrs = [2][2]string{{"retry-after", bytesString(st.buf)}, {"content-type", "application/problem+json"}}
	reply(s.host, 503, st.hdrs[:], shedProblem, -1)
}

// shedProblem is the RFC 9457 body of a shed request (the RateLimit draft's problem type).
var shedProblem = []byte(`{"type":"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity",` +
	`"title":"Temporary Reduced Capacity","status":503}`)

// tickOne runs the adaptive controller's part of a tick (see shedState): merge, update at most once
// per interval across workers, and refresh the capacity the request path uses. now 0 only reads the
// capacity.
func (s *shedder) tickOne(st *shedState, now int64) {
	g := st.cfg.Adaptive
	if g == nil {
		return
	}
	he, ge := &st.histEd, &st.gradEd
	*ge = sharedstate.GradientEditor{G: g, Now: now}
	if now > 0 {
		*he = sharedstate.HistogramEditor{Add: &st.local}
		if _, err := s.records.UpdateShared(st.histKey, he); err != nil {
			return // contention: the samples stay local until the next tick
		}
		st.local.Reset()
		peak := s.peek(st, now)
		ge.Run, ge.Sum = true, g.Summarize(&he.Merged, peak)
	}
	res, err := s.records.UpdateShared(st.gradKey, ge)
	if err != nil {
		return
	}
	if res.Written && ge.Step.Updated {
		*he = sharedstate.HistogramEditor{Reset: true}
		_, _ = s.records.UpdateShared(st.histKey, he)
		e := &st.ed
		e.Op, e.Classes, e.Owner, e.Now = sharedstate.OwnedEndInterval, st.cfg.Policy.Classes(), s.owner, now
		_, _ = s.records.UpdateShared(st.stateKey, e)
	}
	if c := ge.State.Capacity(); c > 0 {
		st.capacity = c
	}
	next := g.Sampler(&ge.State)
	if now > 0 {
		st.samples.Next(st.sampler, next)
	}
	st.sampler = next
	st.metrics.capacity.set(st.capacity)
}

// peek returns the peak in flight of the current interval (at least the current total), without
// writing.
func (s *shedder) peek(st *shedState, now int64) int64 {
	e := &st.ed
	e.Op, e.Classes, e.Owner, e.Now = sharedstate.OwnedPeek, st.cfg.Policy.Classes(), s.owner, now
	if _, err := s.records.UpdateShared(st.stateKey, e); err != nil {
		return 0
	}
	return e.Peak
}
