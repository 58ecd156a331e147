package filter

import (
	"time"

	"github.com/meshlimit/meshlimit/wire"
)

// A denied request spends nothing of the global rules either. What the decision service admitted
// for a request (the limits of its rules that neither settle, whose reservations the settler
// refunds, nor count responses, whose charges the charger gives back, nor are concurrency limits,
// whose permits are released) is recorded in the stream when the answer comes (takeGlobal). When
// the request is denied after all (another global limit of the same answer, a body-stage rule or
// call, the over-limit cache), giveBackGlobal sends the service one settle call of undo entries
// (service/API.md, "Undo"): each gives back exactly what the admission took, for every algorithm,
// whatever others took since, in the window and state that took it: the entry names the store's
// time of the decision, which the answer carried (at_us; takenTimes), however soon after a window
// began the take was and however late the undo comes. (Only an answer without it, from a service
// before at_us, leaves the entry an age: the time since the check was sent plus the call's
// timeout, which names the window before for a take within that margin of its window's start, and
// gives back nothing there; undoAge.) A global counted rule's charge, made in the check, is given back the
// same way when its answer does not count (charge_global.go), by the response or the stream's end
// (giveBackCounted: only those charges; an admitted request's other admissions are spent). The call
// is never waited for, and is one per denied request or uncounted response, of at most the
// descriptors its checks carried (rules.checkGlobalBounds bounds them all to wire.MaxDescriptors).
// What is given back is counted per rule in given_back when its call is sent (not when the breaker
// is open or the cluster refuses it: then nothing is given back); the calls in:
//
//	meshlimit.global.give_back_calls   undo calls sent to the service
//	meshlimit.global.give_back_failed  those that could not be sent (breaker open, cluster refused) or were not applied (an answer other than 200 while the stream lived)
//
// A give-back that is lost leaves the admission spent, as it was before give-backs.

// takeGlobal records the limits the service admitted for the request's global rules that neither
// settle nor count responses, so that a later denial gives them back. sent is when the check was
// sent: the admission is no older, so its age never understates it.
func (s *settler) takeGlobal(h *httpContext, items []globalItem, decisions []wire.Decision, sent int64) {
	for it, ds := range decidedItems(items, decisions) {
		if it.rs.rule.Settle() != nil || it.rs.rule.CountOn != nil {
			continue
		}
		if charged := chargedMask(it.spec, ds); charged != 0 {
			h.taken.global = append(h.taken.global, it.admission(charged, sent, ds))
		}
	}
}

// giveBackGlobal gives back, through the service, what the global rules admitted for a request
// that is denied, and forgets it.
func (s *settler) giveBackGlobal(h *httpContext, now int64) {
	list := h.taken.global
	h.taken.global = list[:0]
	s.sendGiveBacks(list, now)
}

// giveBackCounted gives back, through the service, the charges of counted rules that the stream
// recorded (their answers did not count), and forgets them. The other admissions it holds stay: the
// request was admitted, and only its own denial (at the body stage) gives them back.
func (s *settler) giveBackCounted(h *httpContext, now int64) {
	list, k := h.taken.global, 0
	for i := range list {
		if list[i].rs.rule.CountOn == nil {
			list[k], list[i] = list[i], list[k]
			k++
		}
	}
	h.taken.global = list[:k]
	s.sendGiveBacks(list[k:], now)
}

// sendGiveBacks sends the service one call of undo entries that give back list, counted per rule in
// given_back once the call is sent; the call is never waited for.
func (s *settler) sendGiveBacks(list []reservation, now int64) {
	g := s.g
	if len(list) == 0 || g == nil {
		return
	}
	if g.breaker.open() { // no call, and no probe taken: nothing is given back
		g.metrics.giveBackFailed.inc(1)
		return
	}
	b := wire.AppendSettleListStart(g.body[:0], false)
	n := 0
	for i := range list {
		r := &list[i]
		b, n = s.appendEntries(b, n, r, wire.AppendUndo, r.reserved, undoAge(r.at, now, g.cfg.Timeout))
	}
	g.body = wire.AppendRequestEnd(b)
	g.metrics.giveBackCalls.inc(1)
	err := s.host.dispatch(g.cfg.Cluster, g.headers, g.body, g.timeout, func(numHeaders, _, _ int) {
		s.onGiveBackAnswer(g, numHeaders)
	})
	if err != nil {
		g.metrics.giveBackFailed.inc(1)
		logf(s.host, logWarn, "meshlimit: giving back global admissions (of a denied request, or count_on charges not counted) in cluster %q: %v", g.cfg.Cluster, err)
		return
	}
	for i := range list {
		list[i].rs.metrics.givenBack.inc(1)
	}
}

// onGiveBackAnswer counts a give-back the service did not apply (anything but a 200). It runs only
// while the calling stream's context lives.
func (s *settler) onGiveBackAnswer(g *globalClient, numHeaders int) {
	defer s.panics.recoverPanic("a give-back answer")
	if s.listStatus(numHeaders) != "200" {
		g.metrics.giveBackFailed.inc(1)
	}
}

// undoAge is the age sent with the undo of an admission whose check was sent at sent, when its
// answer did not carry the store's time of the decision: the time since, plus the call's timeout, which the undo takes at most to reach the service. The service
// gives back the admission's units at or after now - age (a sliding log drops the oldest units from
// then on; a window gives back into the one holding that time), so the age must not understate
// the admission's: an older one only ever gives back less (another admission's units, just as
// many, in a sliding log; nothing of a fixed window, or the previous window's count of a sliding
// one, when it reaches into the window before).
func undoAge(sent, now int64, timeout time.Duration) time.Duration {
	return time.Duration(max(now-sent, 0)) + timeout
}
