package filter

import (
	"strconv"
	"strings"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"

	"github.com/meshlimit/meshlimit/abi"
	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/rules/body"
	"github.com/meshlimit/meshlimit/sharedstate"
)

// Reserve, then settle (rules/settle.go). A settling rule is decided like any other, with its
// reservation as the cost: the requests in flight together are admitted only while their
// reservations fit, so they overshoot a limit by at most what they use beyond their reservations,
// and that over-run is charged when they settle (the key goes into debt, up to one capacity, and
// waits). When the stream ends, each reservation is settled from what the answer said:
//
//   - the cost read (a response header, the body bytes, a JSON field of the response body, or of the
//     last event of a text/event-stream that carries it) replaces the reservation: the unused part is
//     refunded, an over-run is charged;
//   - a 5xx response refunds the whole reservation, or keeps it with on_error "keep";
//   - an answer without a usable cost (the field missing or not an integer, a body that is not JSON or
//     is larger than max_body, a response cut short, no response at all) keeps the reservation, and is
//     counted (settle_kept): a client that never reads its answer, or an upstream that never reports
//     usage, pays what it reserved and no less; an event stream cut short settles to the usage of
//     its last event seen only when that is above the reservation (partialEvents);
//   - a request denied by any rule refunds what its earlier rules reserved: it never reached upstream.
//
// A rule that reserves from the request body (request_json) decides when the body has arrived:
// the filter holds at most max_body bytes of it (StopIterationAndBuffer); a body that is larger,
// not JSON, or lacks a positive integer at the path reserves the rule's default (bad_body). A request
// whose body never ends is charged its default when the stream ends. The filter never holds a
// response: it copies at most max_body bytes of a JSON response, and at most one SSE event of
// max_body bytes, while the body passes on.
//
// Metrics (per settling rule):
//
//	meshlimit.rule.<rule>.settled        reservations settled to a cost read from the answer
//	meshlimit.rule.<rule>.settle_kept    reservations kept: no usable cost in the answer
//	meshlimit.rule.<rule>.settle_refund  units refunded (unused reservations and 5xx responses)
//	meshlimit.rule.<rule>.settle_overrun units charged beyond reservations
//	meshlimit.rule.<rule>.bad_body       request bodies that reserved the default (malformed, missing field, past max_body)
//	meshlimit.rule.<rule>.settle_call_failed  global rules: settles not sent (breaker open, call refused) or
//	                                          answered with a failure while the stream lived (settle_global.go)

// settleRule is what a settling rule keeps: its counters, defined on first use.
type settleRule struct {
	settled, kept, refund, overrun, badBody proxywasm.MetricCounter
	callFailed                              proxywasm.MetricCounter // global rules: settles the service did not apply
}

func newSettleRule(rule string) *settleRule {
	p := "meshlimit.rule." + rule + "."
	return &settleRule{
		settled:    proxywasm.DefineCounterMetric(p + "settled"),
		kept:       proxywasm.DefineCounterMetric(p + "settle_kept"),
		refund:     proxywasm.DefineCounterMetric(p + "settle_refund"),
		overrun:    proxywasm.DefineCounterMetric(p + "settle_overrun"),
		badBody:    proxywasm.DefineCounterMetric(p + "bad_body"),
		callFailed: proxywasm.DefineCounterMetric(p + "settle_call_failed"),
	}
}

// settleMetrics returns the rule's settle counters.
func (rs *ruleState) settleMetrics() *settleRule {
	if rs.settle == nil {
		rs.settle = newSettleRule(rs.rule.Name)
	}
	return rs.settle
}

// reservation is one admitted cost waiting for its settlement.
type reservation struct {
	rs        *ruleState
	set       int // the index of the limit set in rs.tables
	key       string
	keyLen    int // set by reserve: the key's bytes are in keys until resolveKeys
	placement sharedstate.Placement
	at        int64 // when it was admitted (unix ns)
	reserved  int64
	value     int64 // the cost read from the answer, when found
	found     bool
	// spec is a global rule's limits: the reservation was charged by the service, which settles it
	// (settle_global.go); charged has bit k set when it charged spec[k].
	spec    []rules.LimitSpec
	charged uint64
}

// pendingBody is a rule whose reservation waits for the request body.
type pendingBody struct {
	rs  *ruleState
	set int
	key string
}

// settleScratch collects the reservations of the request being decided.
type settleScratch struct {
	settler *sharedstate.Settler
	eos     bool // the request headers ended the request: no body will come
	res     []reservation
	pend    []pendingBody
	keys    []byte // the bytes of the keys of res (resolveKeys)
}

// settling is what a stream with reservations keeps until it ends.
type settling struct {
	res       []reservation
	pend      []pendingBody
	buffering bool // the request body is held until it ends, for a pending reservation
	global    bool // global items that read the body wait for it (bodyItems; settle_global.go)
	sent      bool // the body stage paused the request: for the service's answer or a shaping delay
	reqBytes  int64
	respBytes int64
	status    int    // the response status, 0 before one
	respEnded bool   // the response body (or headers) ended the stream
	readJSON  bool   // a reservation settles from a JSON field of the response body
	identity  bool   // the request asks the upstream for an answer without content coding
	sse       bool   // the response is a text/event-stream
	maxBody   int    // the largest max_body of the reservations that read a JSON field
	body      []byte // the response body copied so far, at most maxBody
	cut       bool   // the response body passed maxBody
	events    body.SSE
	// bodyItems are the request's global items that wait for the body (settle_global.go).
	bodyItems []globalItem
	keys      []byte // the bytes of the keys of the reservations reserve made
}

// newSettling gives the stream a fresh settling: the one its context kept from an earlier stream
// (arrays kept, everything else cleared), so that a warm request with reservations allocates none.
func (h *httpContext) newSettling() *settling {
	st := h.settleMem
	if st == nil {
		st = &settling{}
		h.settleMem = st
	} else {
		res, pend, items, keys := st.res, st.pend, st.bodyItems, st.keys
		clear(res[:cap(res)]) // nothing of an old stream keeps its rules alive
		clear(pend[:cap(pend)])
		clear(items[:cap(items)])
		*st = settling{res: res[:0], pend: pend[:0], bodyItems: items[:0], keys: keys[:0]}
	}
	h.settle = st
	return st
}

// resolveKeys gives the reservations reserve made (keyLen > 0, key unset) their keys, in keys.
func resolveKeys(res []reservation, keys []byte) {
	off := 0
	for i := range res {
		if r := &res[i]; r.keyLen > 0 && r.key == "" {
			r.key = bytesString(keys[off : off+r.keyLen])
			off += r.keyLen
		}
	}
}

// deferToBody records a rule that reserves from the request body, instead of deciding it now, and
// reports whether it did: its local part as pending, its global part as a global item whose cost
// the body will say (settle_global.go).
func (p *pluginContext) deferToBody(rs *ruleState, set *rules.LimitSet, key []byte) bool {
	r := rs.rule
	if !r.ReservesFromBody() || p.scratch.settle.eos {
		return false
	}
	if r.Scope != rules.ScopeLocal {
		p.scratch.globals = append(p.scratch.globals, globalItem{rs: rs, spec: set.Limits, key: string(key), fromBody: true})
	}
	if r.Scope != rules.ScopeGlobal {
		s := &p.scratch.settle
		s.pend = append(s.pend, pendingBody{rs: rs, set: set.Index, key: string(key)})
	}
	return true
}

// reserve records an admitted cost of a settling rule.
func (p *pluginContext) reserve(rs *ruleState, set int, key []byte, out *sharedstate.Outcome, cost, now int64) {
	if !out.Allowed || rs.rule.Settle() == nil {
		return
	}
	s := &p.scratch.settle
	s.keys = append(s.keys, key...) // adoptSettles gives the reservation its key
	s.res = append(s.res, reservation{rs: rs, set: set, keyLen: len(key), placement: out.Placement, at: now, reserved: cost})
}

// adoptSettles hands the current request's reservations to its stream; a denied request refunds
// them at once.
func (h *httpContext) adoptSettles(denied bool, now int64) {
	s := &h.plugin.scratch.settle
	if len(s.res) == 0 && len(s.pend) == 0 { // a plain request: nothing to adopt, no deferred reset
		s.eos = false
		return
	}
	defer func() { s.res, s.pend, s.keys, s.eos = s.res[:0], s.pend[:0], s.keys[:0], false }()
	if denied {
		resolveKeys(s.res, s.keys)
		for i := range s.res {
			h.plugin.adjust(&s.res[i], -s.res[i].reserved, now)
		}
		return
	}
	st := h.newSettling()
	st.keys = append(st.keys, s.keys...)
	st.res = append(st.res, s.res...)
	resolveKeys(st.res, st.keys)
	st.pend = append(st.pend, s.pend...)
	for i := range st.res {
		st.askReadable(st.res[i].rs)
	}
	for i := range st.pend {
		st.askReadable(st.pend[i].rs)
	}
}

// askReadable asks the upstream for an answer the filter can read when rs settles from a JSON field
// of the response: the request's accept-encoding becomes "identity". A compressed answer is not
// JSON to the filter, so a client that asks for gzip (most HTTP clients do by default) would keep
// its reservation and never be charged an over-run. Compression towards the client stays the
// business of Envoy's compressor filter, placed before meshlimit. It works while the request
// headers are the filter's (their callback, or a callout answered before they continue); later it
// is a no-op. Once per stream.
func (st *settling) askReadable(rs *ruleState) {
	if st.identity || rs.rule.Settle() == nil || rs.rule.Settle().Source != rules.SettleResponseJSON {
		return
	}
	st.identity = proxywasm.ReplaceHttpRequestHeader("accept-encoding", "identity") == nil
}

// refundSettles refunds every reservation of a stream the filter denies (a later rule, the global
// service): it never reached the upstream.
func (h *httpContext) refundSettles() {
	st := h.settle
	if st == nil {
		return
	}
	h.settle = nil
	now := abi.UnixNano()
	for i := range st.res {
		h.plugin.adjust(&st.res[i], -st.res[i].reserved, now)
	}
}

// settleHeaders reads what the response headers say for the reservations: the status, the cost
// headers, and whether the body is an event stream.
func (h *httpContext) settleHeaders(eos bool) {
	st := h.settle
	if st == nil {
		return
	}
	p := h.plugin
	v, _ := p.responseHeader(":status")
	st.status, _ = strconv.Atoi(v)
	st.respEnded = eos
	ct, _ := p.responseHeader("content-type")
	st.sse = len(ct) >= 17 && strings.EqualFold(ct[:17], "text/event-stream")
	for i := range st.res {
		r := &st.res[i]
		s := r.rs.rule.Settle()
		switch s.Source {
		case rules.SettleResponseHeader:
			if hv, ok := p.responseHeader(s.Header); ok {
				r.value, r.found = r.rs.rule.SettledHeader(hv)
			}
		case rules.SettleResponseJSON:
			st.readJSON = true
			st.maxBody = max(st.maxBody, r.rs.rule.MaxBody())
		}
	}
	st.events.Max = st.maxBody
}

// settleDone settles every reservation of the stream, which has ended.
func (h *httpContext) settleDone() {
	st := h.settle
	if st == nil {
		return
	}
	h.settle = nil
	p, now := h.plugin, abi.UnixNano()
	for _, pb := range st.pend { // the body never ended: the default is charged
		def, _ := pb.rs.rule.Cost(&p.scratch.req)
		r := reservation{rs: pb.rs, set: pb.set, key: pb.key, at: now}
		pb.rs.settleMetrics().kept.Increment(1)
		p.adjust(&r, def, now)
	}
	if st.global {
		h.chargeUnsent(st, now) // settle_global.go: the same, for the global items that waited
	}
	if st.readJSON && !st.sse && st.respEnded && !st.cut {
		for i := range st.res {
			r := &st.res[i]
			if s := r.rs.rule.Settle(); s.Source == rules.SettleResponseJSON {
				if n, err := body.JSONInt(st.body, s.Path); err == nil {
					r.value, r.found = r.rs.rule.SettledValue(n), true
				}
			}
		}
	}
	if st.sse && !st.respEnded {
		st.partialEvents()
	}
	for i := range st.res {
		p.settleOne(st, &st.res[i], now)
	}
}

// partialEvents lets an event stream cut short (the client went away, or the stream was reset)
// charge an over-run but never refund: the usage of the last event seen may be an early count (an
// upstream that reports usage as it goes), so below the reservation it is not taken, and the
// reservation is kept. Without this, a client could read what it wanted and leave before the
// event that carries the whole usage, paying for the first one.
func (st *settling) partialEvents() {
	for i := range st.res {
		r := &st.res[i]
		if r.found && r.value < r.reserved && r.rs.rule.Settle().Source == rules.SettleResponseJSON {
			r.found = false
		}
	}
}

// settleOne settles one reservation (see the comment at the top of the file).
func (p *pluginContext) settleOne(st *settling, r *reservation, now int64) {
	s, m := r.rs.rule.Settle(), r.rs.settleMetrics()
	switch {
	case st.status >= 500:
		if !s.KeepOnError && r.reserved > 0 {
			m.refund.Increment(uint64(r.reserved))
			p.adjust(r, -r.reserved, now)
		}
		return
	case s.Source == rules.SettleBodyBytes && (st.status != 0 || s.Bytes == rules.BytesRequest):
		r.found = true
		if s.Bytes&rules.BytesRequest != 0 {
			r.value += st.reqBytes
		}
		if s.Bytes&rules.BytesResponse != 0 {
			r.value += st.respBytes
		}
		r.value = r.rs.rule.SettledValue(r.value)
	}
	if !r.found {
		m.kept.Increment(1)
		return
	}
	m.settled.Increment(1)
	delta := r.value - r.reserved
	switch { // Envoy refuses to increment a counter by 0 (the SDK panics)
	case delta < 0:
		m.refund.Increment(uint64(-delta))
	case delta > 0:
		m.overrun.Increment(uint64(delta))
	}
	p.adjust(r, delta, now)
}

// adjust applies delta units to a reservation's state.
func (p *pluginContext) adjust(r *reservation, delta, now int64) {
	if delta == 0 {
		return
	}
	if r.spec != nil {
		p.settleGlobal(r, delta, now)
		return
	}
	s := &p.scratch.settle
	if s.settler == nil {
		s.settler = sharedstate.NewSettler(p.limiter.Updater())
	}
	t := r.rs.tables[r.set]
	if _, err := s.settler.Adjust(t, []byte(r.key), r.placement, now, r.at, delta); err != nil {
		proxywasm.LogWarnf("meshlimit: rule %s: settling %d units: %v", r.rs.rule.Name, delta, err)
	}
}
