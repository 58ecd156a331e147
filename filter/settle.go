package filter

import (
	"hash/maphash"
	"strconv"
	"strings"

	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/rules/body"
	"github.com/meshlimit/meshlimit/sharedstate"
)

// Reserve, then settle (rules/settle.go). A settling rule is decided like any other, with its
// reservation as the cost: the requests in flight together are admitted only while their
// reservations fit, so they overshoot a limit by at most what they use beyond their reservations,
// and that over-run is charged when they settle (the key goes into debt, which a bucket or a fixed window carries
// whole up to algorithms.MaxDebt capacities, and waits). When the stream ends, each reservation is settled from what the answer said:
//
//   - the cost read (a response header, the body bytes, a JSON field of the response body, or of the
//     last event of a text/event-stream that carries it) replaces the reservation: the unused part is
//     refunded, an over-run is charged;
//   - a 5xx response refunds the whole reservation, or keeps it with on_error "keep"; Envoy's own
//     5xx after the upstream worked (a timeout, a reset: response.code_details) always keeps it;
//   - an answer without a usable cost (the field missing or not an integer, a body that is not JSON or
//     is larger than max_body, a response cut short, no response at all) is charged per on_missing,
//     and counted (settle_kept): by default the rule's max, so a client that never reads its
//     answer, or asks for one without usage, pays the most a request may cost, never the
//     reservation it chose (on_missing "reservation" keeps the reservation); an event stream cut
//     short settles to the usage of its last event seen only when that is above the reservation
//     (partialEvents);
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
//	meshlimit.rule.<rule>.settle_kept    answers without a usable cost (charged per on_missing)
//	meshlimit.rule.<rule>.settle_refund  units refunded (unused reservations and 5xx responses)
//	meshlimit.rule.<rule>.settle_overrun units charged beyond reservations
//	meshlimit.rule.<rule>.bad_body       request bodies that reserved the default (malformed, missing field, past max_body)
//	meshlimit.rule.<rule>.settle_call_failed  global rules: settles not sent (breaker open, call refused) or
//	                                          answered with a failure while the stream lived (settle_global.go)

// settler settles the reservations of the plugin's streams: it reserves with the request (the body
// stage, body.go, with the body), reads the answer's cost from the response, and settles when the
// stream ends, locally or with the service (settle_global.go). Its per-request part is the
// decision's settleScratch, its per-stream part each stream's settling.
type settler struct {
	*env
	g       *globalClient        // nil without a global service
	settler *sharedstate.Settler // created on first use
	// held is what the VM's streams hold at once to read a JSON field of their answers (the body
	// copied so far, or max_body for an event stream's splitter), at most cfg.SettleMemory: a
	// stream that would pass it settles without a copy (charged per on_missing), counted in
	// copyRefused. Many slow readers never take the VM's memory, whatever max_body says.
	held        int
	copyRefused counter
	// keyHeld is what the streams of each key hold of it (memKey: a rule's key value), at most
	// keyShare each, so that one client's slow readers cannot take the memory the others settle
	// with. Created on first use, with seed.
	keyHeld map[uint64]int
	seed    maphash.Seed
	// holders are the streams that hold a copy (settling.holder is the index + 1): when
	// settle_memory is full, a newcomer's copy evicts those of the key holding the most (evict).
	holders []*settling
}

// settleKeyShares is how many keys' shares settle_memory holds: a key's streams hold at most
// 1/settleKeyShares of it (or one stream's max_body, when that is more), so an attacker needs
// settleKeyShares keys, each admitted by the rule and paying its reservations, to fill it.
const settleKeyShares = 16

// settleMetrics are the counters of a settling rule, defined on first use.
type settleMetrics struct {
	settled, kept, refund, overrun, badBody counter
	callFailed                              counter // global rules: settles the service did not apply
}

// settleMetrics returns the rule's settle counters.
func (rs *ruleState) settleMetrics(h host) *settleMetrics {
	if rs.settle == nil {
		p := "meshlimit.rule." + rs.rule.Name + "."
		rs.settle = &settleMetrics{
			settled:    newCounter(h, p+"settled"),
			kept:       newCounter(h, p+"settle_kept"),
			refund:     newCounter(h, p+"settle_refund"),
			overrun:    newCounter(h, p+"settle_overrun"),
			badBody:    newCounter(h, p+"bad_body"),
			callFailed: newCounter(h, p+"settle_call_failed"),
		}
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
	// taken is the store's time of each charged limit's decision (wire.Decision.AtUs): what its
	// settle or undo names, so that the service applies it in the window and state that took it.
	taken takenTimes
}

// pendingBody is a rule whose reservation waits for the request body.
type pendingBody struct {
	rs  *ruleState
	set int
	key string
}

// settleScratch collects the reservations of the request being decided.
type settleScratch struct {
	eos  bool // the request headers ended the request: no body will come
	res  []reservation
	pend []pendingBody
	keys []byte // the bytes of the keys of res (resolveKeys)
}

func (s *settleScratch) reset(eos bool) {
	s.res, s.pend, s.keys, s.eos = s.res[:0], s.pend[:0], s.keys[:0], eos
}

// settling is what a stream with reservations keeps until it ends.
type settling struct {
	res       []reservation
	pend      []pendingBody
	buffering bool // the request body is held until it ends, for a pending reservation
	global    bool // global items that read the body wait for it (bodyItems; body.go)
	sent      bool // the body stage paused the request: for the service's answer or a shaping delay
	reqBytes  int64
	respBytes int64
	status    int    // the response status, 0 before one
	worked    bool   // a 5xx that Envoy sent after the upstream worked: a timeout, a reset
	respEnded bool   // the response body (or headers) ended the stream
	readJSON  bool   // a reservation settles from a JSON field of the response body
	identity  bool   // the request asks the upstream for an answer without content coding
	sse       bool   // the response is a text/event-stream
	maxBody   int    // the largest max_body of the reservations that read a JSON field
	body      []byte // the response body copied so far, at most maxBody
	held      int    // what the copy counts in the VM's settle memory (settler.hold)
	cut       bool   // the response body passed maxBody, or the VM's settle memory
	refused   bool   // the copy was refused for want of settle memory: charged max (UnreadCost)
	memKey    uint64 // the key its copy counts against (keyHeld), set by its first hold
	holder    int    // its index in settler.holders + 1 while it holds a copy, else 0
	events    body.SSE
	dropsSeen int // events.Dropped when the last event was read (onEvent)
	// bodyItems are the request's global items that wait for the body (body.go).
	bodyItems []globalItem
	keys      []byte // the bytes of the keys of the reservations reserve made
}

// reset clears st for another stream, keeping its arrays (nothing of an old stream keeps its
// rules alive).
func (st *settling) reset() {
	res, pend, items, keys := st.res, st.pend, st.bodyItems, st.keys
	clear(res[:cap(res)])
	clear(pend[:cap(pend)])
	clear(items[:cap(items)])
	*st = settling{res: res[:0], pend: pend[:0], bodyItems: items[:0], keys: keys[:0]}
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

// reserve records an admitted cost of a settling rule.
func (s *settler) reserve(rs *ruleState, set int, key []byte, out *sharedstate.Outcome, cost, now int64) {
	if !out.Allowed || rs.rule.Settle() == nil {
		return
	}
	ss := &s.d.settle
	ss.keys = append(ss.keys, key...) // adopt gives the reservation its key
	ss.res = append(ss.res, reservation{rs: rs, set: set, keyLen: len(key), placement: out.Placement, at: now, reserved: cost})
}

// adopt hands the current request's reservations to its stream; a denied request refunds them at
// once. A plain request has none: the check is inlined at the caller.
func (s *settler) adopt(h *httpContext, denied bool, now int64) {
	if len(s.d.settle.res)+len(s.d.settle.pend) > 0 {
		s.adoptAll(h, denied, now)
	}
}

func (s *settler) adoptAll(h *httpContext, denied bool, now int64) {
	ss := &s.d.settle
	if denied {
		resolveKeys(ss.res, ss.keys)
		for i := range ss.res {
			s.adjust(&ss.res[i], -ss.res[i].reserved, now)
		}
		return
	}
	st := h.newSettling()
	st.keys = append(st.keys, ss.keys...)
	st.res = append(st.res, ss.res...)
	resolveKeys(st.res, st.keys)
	st.pend = append(st.pend, ss.pend...)
	for i := range st.res {
		s.askReadable(st, st.res[i].rs)
	}
	for i := range st.pend {
		s.askReadable(st, st.pend[i].rs)
	}
}

// askReadable asks the upstream for an answer the filter can read when rs settles from a JSON field
// of the response: the request's accept-encoding becomes "identity". A compressed answer is not
// JSON to the filter, so a client that asks for gzip (most HTTP clients do by default) would keep
// its reservation and never be charged an over-run. Compression towards the client stays the
// business of Envoy's compressor filter, placed before meshlimit. It works while the request
// headers are the filter's (their callback, or a callout answered before they continue); later it
// is a no-op. Once per stream.
func (s *settler) askReadable(st *settling, rs *ruleState) {
	if st.identity || rs.rule.Settle() == nil || rs.rule.Settle().Source != rules.SettleResponseJSON {
		return
	}
	st.identity = s.host.replaceHeader(requestPart, "accept-encoding", "identity")
}

// refund refunds every reservation of a stream the filter denies (a later rule, the global
// service): it never reached the upstream.
func (s *settler) refund(h *httpContext) {
	st := h.settle
	if st == nil {
		return
	}
	h.settle = nil
	s.release(st)
	now := s.host.now()
	for i := range st.res {
		s.adjust(&st.res[i], -st.res[i].reserved, now)
	}
}

// responseHeaders reads what the response headers say for the reservations: the status, the cost
// headers, and whether the body is an event stream. A stream without reservations reads nothing:
// the check is inlined at the caller.
func (s *settler) responseHeaders(h *httpContext, eos bool) {
	if h.settle != nil {
		s.readHeaders(h.settle, eos)
	}
}

func (s *settler) readHeaders(st *settling, eos bool) {
	resp := &s.resp
	v, _ := resp.header(":status")
	st.status, _ = strconv.Atoi(v)
	st.respEnded = eos
	if st.status >= 500 {
		st.worked = s.upstreamWorked()
	}
	ct, _ := resp.header("content-type")
	st.sse = len(ct) >= 17 && strings.EqualFold(ct[:17], "text/event-stream")
	for i := range st.res {
		r := &st.res[i]
		set := r.rs.rule.Settle()
		switch set.Source {
		case rules.SettleResponseHeader:
			if hv, ok := resp.header(set.Header); ok {
				r.value, r.found = r.rs.rule.SettledHeader(hv)
			}
		case rules.SettleResponseJSON:
			st.readJSON = true
			st.maxBody = max(st.maxBody, r.rs.rule.MaxBody())
		}
	}
	st.events.Max = st.maxBody
}

// endStream settles every reservation of the stream, which has ended.
func (s *settler) endStream(h *httpContext) {
	st := h.settle
	if st == nil {
		return
	}
	h.settle = nil
	s.release(st)
	now := s.host.now()
	for _, pb := range st.pend { // the body never ended: the default is charged
		def, _ := pb.rs.rule.Cost(&s.d.req)
		r := reservation{rs: pb.rs, set: pb.set, key: pb.key, at: now}
		pb.rs.settleMetrics(s.host).kept.inc(1)
		s.adjust(&r, def, now)
	}
	if st.global {
		s.chargeUnsent(st, now) // settle_global.go: the same, for the global items that waited
	}
	if st.readJSON && !st.sse && st.respEnded && !st.cut {
		for i := range st.res {
			r := &st.res[i]
			if set := r.rs.rule.Settle(); set.Source == rules.SettleResponseJSON {
				if n, err := body.JSONInt(st.body, set.Path); err == nil {
					r.value, r.found = r.rs.rule.SettledValue(n), true
				}
			}
		}
	}
	if st.sse {
		st.afterDrops() // an event dropped after the last one read: what the stream used is unknown
	}
	if st.refused {
		st.forgetUsage() // its copy was evicted: an early event's usage does not settle it
	}
	if st.sse && !st.respEnded {
		st.partialEvents()
	}
	for i := range st.res {
		s.settleOne(st, &st.res[i], now)
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
func (s *settler) settleOne(st *settling, r *reservation, now int64) {
	set, m := r.rs.rule.Settle(), r.rs.settleMetrics(s.host)
	switch {
	case st.status >= 500:
		if !set.KeepOnError && !st.worked && r.reserved > 0 {
			m.refund.inc(uint64(r.reserved))
			s.adjust(r, -r.reserved, now)
		}
		return
	case set.Source == rules.SettleBodyBytes && (st.status != 0 || set.Bytes == rules.BytesRequest):
		r.found = true
		if set.Bytes&rules.BytesRequest != 0 {
			r.value += st.reqBytes
		}
		if set.Bytes&rules.BytesResponse != 0 {
			r.value += st.respBytes
		}
		r.value = r.rs.rule.SettledValue(r.value)
	}
	if !r.found { // charged per on_missing: the rule's max by default, never the client's choice
		m.kept.inc(1)
		cost := r.rs.rule.MissingCost(r.reserved)
		if st.refused && set.Source == rules.SettleResponseJSON {
			cost = r.rs.rule.UnreadCost(r.reserved) // not read for want of memory: on_missing does not apply
		}
		if delta := cost - r.reserved; delta > 0 {
			m.overrun.inc(uint64(delta))
			s.adjust(r, delta, now)
		}
		return
	}
	m.settled.inc(1)
	delta := r.value - r.reserved
	switch { // Envoy refuses to increment a counter by 0 (the SDK panics)
	case delta < 0:
		m.refund.inc(uint64(-delta))
	case delta > 0:
		m.overrun.inc(uint64(delta))
	}
	s.adjust(r, delta, now)
}

// adjust applies delta units to a reservation's state.
func (s *settler) adjust(r *reservation, delta, now int64) {
	if delta == 0 {
		return
	}
	if r.spec != nil {
		s.settleGlobal(r, delta, now)
		return
	}
	if s.settler == nil {
		s.settler = sharedstate.NewSettler(s.limiter.Updater())
	}
	t := r.rs.tables[r.set]
	if _, err := s.settler.Adjust(t, []byte(r.key), r.placement, now, r.at, delta); err != nil {
		logf(s.host, logWarn, "meshlimit: rule %s: settling %d units: %v", r.rs.rule.Name, delta, err)
	}
}

// responseBody is the settler's part of OnHttpResponseBody. Only a stream with reservations looks
// at the response body: it counts the bytes and copies what a JSON field needs (at most max_body
// bytes, or one SSE event at a time), while the body passes on.
func (s *settler) responseBody(h *httpContext, size int, eos bool) {
	st := h.settle
	if st == nil {
		return
	}
	st.respBytes += int64(size)
	st.respEnded = eos
	if !st.readJSON || st.status >= 500 || size == 0 {
		return
	}
	if !st.sse && (st.cut || len(st.body)+size > st.maxBody) {
		s.drop(st)
		return
	}
	if st.cut || !s.hold(st, size) {
		return
	}
	if !st.sse {
		chunk, err := s.host.body(responsePart, 0, size)
		if err != nil {
			return
		}
		st.body = append(st.body, chunk...)
		return
	}
	// An event stream is read in pieces of at most max_body (or minSSEPiece, when max_body is
	// smaller: a tiny max_body must not make a host call per byte): one large chunk from the
	// upstream never becomes one large copy in the guest (the splitter keeps at most one event's
	// data).
	step := max(st.maxBody, minSSEPiece)
	for off := 0; off < size; off += step {
		piece, err := s.host.body(responsePart, off, min(step, size-off))
		if err != nil {
			return
		}
		st.events.Write(piece, st.onEvent)
	}
	if eos {
		st.events.Close(st.onEvent)
	}
}

// hold accounts for the size more bytes a stream copies (an event stream: max_body once, the most
// its splitter keeps), and reports false, dropping what the stream held, when the VM's settle
// memory would pass its bound: the stream then settles as cut short (per on_missing).
func (s *settler) hold(st *settling, size int) bool {
	if st.sse {
		if st.held > 0 {
			return true
		}
		size = st.maxBody
	}
	if s.keyHeld == nil {
		s.keyHeld, s.seed = map[uint64]int{}, maphash.MakeSeed()
	}
	if st.held == 0 {
		st.memKey = s.memKey(st)
	}
	if st.memKey != 0 && s.keyHeld[st.memKey]+size > s.keyShare(st) || !s.evict(st, size) {
		s.refuse(st)
		return false
	}
	if st.holder == 0 {
		s.holders = append(s.holders, st)
		st.holder = len(s.holders)
	}
	s.held += size
	st.held += size
	if st.memKey != 0 {
		s.keyHeld[st.memKey] += size
	}
	return true
}

// refuse stops a stream's copy for want of settle memory: it settles charged max (UnreadCost).
func (s *settler) refuse(st *settling) {
	s.copyRefused.inc(1)
	s.drop(st)
	st.refused = true
}

// evict makes room for size more bytes of st's copy in a full settle memory by refusing the
// copies of the key that holds the most, while that key holds more than st's would: many keys
// that fill the memory together lose their copies to a newcomer, which keeps its own (the key
// shares are max-min fair). It reports whether the bytes fit. Its scan of the holders runs only
// when the memory is full.
func (s *settler) evict(st *settling, size int) bool {
	for s.held+size > s.cfg.SettleMemory {
		mine := s.keyHeld[st.memKey] + size
		var v *settling
		for _, h := range s.holders {
			if h != st && h.memKey != 0 && (v == nil || s.keyHeld[h.memKey] > s.keyHeld[v.memKey]) {
				v = h
			}
		}
		if v == nil || st.memKey == 0 || s.keyHeld[v.memKey] <= mine {
			return false
		}
		s.refuse(v)
	}
	return true
}

// keyShare is the most the streams of one key hold at once: 1/settleKeyShares of settle_memory,
// or st's max_body when that is more (a key always has room for one stream's copy).
func (s *settler) keyShare(st *settling) int {
	return max(s.cfg.SettleMemory/settleKeyShares, st.maxBody)
}

// memKey returns the key a stream's copy counts against: a hash of the name and key value of its
// first reservation that settles from a JSON field, 0 when that rule has no key (its clients are
// not told apart: only settle_memory bounds them).
func (s *settler) memKey(st *settling) uint64 {
	for i := range st.res {
		r := &st.res[i]
		if r.rs.rule.Settle().Source != rules.SettleResponseJSON || r.key == "" {
			continue
		}
		var h maphash.Hash
		h.SetSeed(s.seed)
		h.WriteString(r.rs.rule.Name)
		h.WriteByte(0)
		h.WriteString(r.key)
		return h.Sum64() | 1 // never 0
	}
	return 0
}

// drop stops a stream's copy: it settles as cut short, and what it held is given back.
func (s *settler) drop(st *settling) {
	st.cut, st.body = true, nil
	s.release(st)
}

// release gives back what a stream held for its copy (it ended, or stopped copying).
func (s *settler) release(st *settling) {
	s.held = max(s.held-st.held, 0) // a stream of an earlier configuration may release into this one
	if st.memKey != 0 && st.held > 0 {
		if n := s.keyHeld[st.memKey] - st.held; n > 0 {
			s.keyHeld[st.memKey] = n
		} else {
			delete(s.keyHeld, st.memKey)
		}
	}
	if i := st.holder - 1; i >= 0 && i < len(s.holders) && s.holders[i] == st {
		last := len(s.holders) - 1
		s.holders[i], s.holders[last] = s.holders[last], nil
		s.holders = s.holders[:last]
		if i < last {
			s.holders[i].holder = i + 1
		}
	}
	st.holder = 0
	st.held = 0
}

// upstreamWorked reports whether a 5xx response is Envoy's own after the upstream had the request
// and worked on it (response.code_details: a timeout, or a reset once the upstream had the
// request), which keeps the reservation whatever on_error says: the model used its tokens until
// the route's timeout. An upstream's own 5xx ("via_upstream"), or Envoy's reply when no upstream
// took the request (no healthy host, a connection failure, an overflow), follows on_error.
func (s *settler) upstreamWorked() bool {
	var buf [96]byte
	d, ok := s.host.property(codeDetailsPath, buf[:0])
	if !ok {
		return false
	}
	details := bytesString(d)
	switch {
	case strings.Contains(details, "timeout"):
		return true
	case strings.HasPrefix(details, "upstream_reset"):
		return !strings.Contains(details, "connection_failure") && !strings.Contains(details, "overflow")
	}
	return false
}

// minSSEPiece is the least piece an event stream is read in.
const minSSEPiece = 4 << 10

// onEvent reads the JSON fields of the reservations from one SSE event's data: the last event
// that carries a field settles it, unless an event dropped after it (over max_body) may have
// carried a later one (afterDrops).
func (st *settling) onEvent(data []byte) {
	st.afterDrops()
	for i := range st.res {
		r := &st.res[i]
		if s := r.rs.rule.Settle(); s.Source == rules.SettleResponseJSON {
			if n, err := body.JSONInt(data, s.Path); err == nil {
				r.value, r.found = r.rs.rule.SettledValue(n), true
			}
		}
	}
}

// afterDrops forgets the usage read so far when an event was dropped since (longer than
// max_body): that event may have carried the stream's last usage, which then settles it, so what
// the stream used is unknown and it is charged per on_missing, unless a later event carries a
// usage. Without this, a client asking for a long answer (whose final event carries the whole
// output and its usage) would pay an early, smaller usage.
func (st *settling) afterDrops() {
	if st.events.Dropped == st.dropsSeen {
		return
	}
	st.dropsSeen = st.events.Dropped
	st.forgetUsage()
}

// forgetUsage forgets the usage read so far of the reservations settling from a JSON field.
func (st *settling) forgetUsage() {
	for i := range st.res {
		if r := &st.res[i]; r.rs.rule.Settle().Source == rules.SettleResponseJSON {
			r.value, r.found = 0, false
		}
	}
}

// responseTrailers is the settler's part of OnHttpResponseTrailers. Trailers end a response whose
// body did not (HTTP/2, gRPC): the answer is whole, as if its last body chunk had said
// end_of_stream, so it settles as one (an event stream's last event without its blank line is
// passed on).
func (s *settler) responseTrailers(h *httpContext) {
	if st := h.settle; st != nil {
		st.respEnded = true
		if st.readJSON && st.sse && st.status < 500 {
			st.events.Close(st.onEvent)
		}
	}
}
