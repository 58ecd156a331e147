package sharedstate

// TakeLocal decides a request of the given cost at now against every limit of t, like Take, but
// on a record the caller keeps instead of one in shared data: state that lives in one VM only
// (one stream's, which never leaves its worker) takes no slot of the table and so cannot crowd
// any key into the overflow state. rec is the record's payload (empty: fresh); it is rewritten
// in place only when every limit admits the request. Attempts is 1 and Placement Owned; err is
// non-nil only for an invalid limit or cost.
func (l *Limiter) TakeLocal(t *Table, rec *[]byte, now, cost int64) (Outcome, error) {
	l.ed.reset(t.limits, &t.layout, now, cost)
	out := Outcome{Attempts: 1, Placement: Owned}
	if _, fits := l.ed.editInScratch(*rec); fits { // the record of a fixed layout is edited where it lies
		out.Allowed, out.Decisions = l.ed.allowed, l.ed.decisions
		return out, l.ed.err
	}
	next, ok, _ := l.ed.Edit(l.local[:0], *rec)
	l.local = next
	if ok {
		*rec = append((*rec)[:0], next...)
	}
	out.Allowed, out.Decisions = l.ed.allowed, l.ed.decisions
	return out, l.ed.err
}
