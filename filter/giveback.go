package filter

import (
	"errors"

	"github.com/meshlimit/meshlimit/sharedstate"
)

// A denied request spends nothing. Every local take a rule admits while the request headers are
// decided is recorded (taken); when a later rule, the over-limit cache of a global rule, a shedder
// or the decision service's answer (the takes wait for it in the stream) denies the request,
// giveBack undoes each of them
// (sharedstate.Settler.Undo: exact for every algorithm, whatever other VMs took since), so a
// client over its own limit cannot drain the quotas of the rules before it. Reservations of
// settling rules are the settler's (refunded by it) and permits the permits' (released); they
// are not recorded here. What is given back is counted:
//
//	meshlimit.rule.<rule>.given_back  admissions given back because a later decision denied the request (and count_on charges whose answer did not count: charge.go)

// taken is one admitted local take of the request being decided.
type taken struct {
	rs        *ruleState
	set       int
	keyLen    int
	placement sharedstate.Placement
	cost      int64
}

// takenScratch collects the takes of the request being decided: valid only while its request
// headers are decided (reset clears it, requestHeaders drops it when it returns).
type takenScratch struct {
	list []taken
	keys []byte
	at   int64
	// global is what the service admitted for the request, given back through it on a denial
	// (giveback_global.go): only a stream's, recorded when the answer comes.
	global []reservation
}

func (t *takenScratch) reset(now int64) {
	t.list, t.keys, t.at, t.global = t.list[:0], t.keys[:0], now, t.global[:0]
}

// add records an admitted take of a rule that does not settle.
func (t *takenScratch) add(rs *ruleState, set int, key []byte, out *sharedstate.Outcome, cost int64) {
	if !out.Allowed || rs.rule.Settle() != nil {
		return
	}
	t.keys = append(t.keys, key...)
	t.list = append(t.list, taken{rs: rs, set: set, keyLen: len(key), placement: out.Placement, cost: cost})
}

// keep moves the takes of a request whose decision waits for the service into its stream, where a
// denial of the service gives them back (giveBackStream).
func (t *takenScratch) keep(h *httpContext) {
	if len(t.list) == 0 {
		return
	}
	hs := &h.taken
	hs.list = append(hs.list[:0], t.list...)
	hs.keys = append(hs.keys[:0], t.keys...)
	hs.at = t.at
	t.reset(0)
}

// giveBack undoes every take recorded for the request being decided, which is denied, and those
// its stream kept while it waited for the service, and forgets them.
func (s *settler) giveBack(h *httpContext, now int64) {
	s.giveBackFrom(&s.d.taken, now)
	s.giveBackFrom(&h.taken, now)
	s.giveBackGlobal(h, now)
}

func (s *settler) giveBackFrom(t *takenScratch, now int64) {
	if len(t.list) == 0 {
		return
	}
	if s.settler == nil {
		s.settler = sharedstate.NewSettler(s.limiter.Updater())
	}
	off := 0
	for i := range t.list {
		tk := &t.list[i]
		key := t.keys[off : off+tk.keyLen]
		off += tk.keyLen
		tk.rs.metrics.givenBack.inc(1)
		_, err := s.settler.Undo(tk.rs.tables[tk.set], key, tk.placement, now, t.at, tk.cost)
		if err != nil && !errors.Is(err, sharedstate.ErrContention) {
			logf(s.host, logWarn, "meshlimit: rule %s: giving back a denied request's take: %v", tk.rs.rule.Name, err)
		}
	}
	t.list, t.keys = t.list[:0], t.keys[:0]
}

// spendNothing undoes what the rules decided for a request the shedder denied (its 503 is sent),
// as deny does for a rule's denial: its reservations are refunded (else, answered by no response,
// each would settle to its rule's max), its rules' takes given back and its charges dropped.
func (h *httpContext) spendNothing(now int64) {
	p := h.plugin
	p.settle.refund(h)
	p.charges.drop(h) // before giveBack, which sends the service the global charges it gives back
	p.settle.giveBack(h, now)
}
