package sharedstate

import "fmt"

// Check decides a request of the given cost for key at now against every limit of t without
// consuming anything and without writing: the Outcome is what Take would decide now, with
// Attempts 0. A key that holds no record is decided against fresh state (Placement Claimed), as
// Take would decide it if it found room; its Take may still land in the overflow state. It is
// the request-time half of a rule that charges after the response (rules.CountOn), and reads one
// record: a check never claims a slot or evicts another key.
func (l *Limiter) Check(t *Table, key []byte, now, cost int64) (Outcome, error) {
	l.ed.reset(t.limits, &t.layout, now, cost)
	payload, found, err := l.c.Find(t.records, key)
	if err != nil {
		return Outcome{}, err
	}
	out := Outcome{Placement: Claimed}
	fresh := !found || !t.layout.split(payload, l.ed.states)
	if found {
		out.Placement = Owned
	}
	out.Allowed = true
	for i := range t.limits {
		var st []byte
		if !fresh {
			st = l.ed.states[i]
		}
		next, d, err := l.ed.decide(i, st, l.ed.scratch[:0])
		if err != nil {
			return Outcome{}, fmt.Errorf("sharedstate: limit %d: %w", i, err)
		}
		l.ed.scratch = next
		l.ed.decisions[i] = d
		out.Allowed = out.Allowed && d.Allowed
	}
	out.Decisions = l.ed.decisions
	return out, nil
}
