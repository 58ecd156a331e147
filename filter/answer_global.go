package filter

import (
	"iter"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/wire"
)

// What a check's answer admitted, read item by item by the features that keep it (the settler's
// reservations and give-backs, the charger's tentative charges), and the settle-list entries that
// later name those admissions to the service (a settle, an undo).

// decidedItems yields each of items with its decisions in ds (one per limit, in order), up to the
// last item whose decisions ds holds whole (readCheck checked a check's count).
func decidedItems(items []globalItem, ds []wire.Decision) iter.Seq2[*globalItem, []wire.Decision] {
	return func(yield func(*globalItem, []wire.Decision) bool) {
		j := 0
		for i := range items {
			n := len(items[i].spec)
			if j+n > len(ds) || !yield(&items[i], ds[j:j+n]) {
				return
			}
			j += n
		}
	}
}

// chargedMask returns the bits of the limits (at most the first 64) that the service charged: a
// decision that admitted, was not skipped, and is not a concurrency limit's.
func chargedMask(spec []rules.LimitSpec, decisions []wire.Decision) uint64 {
	var charged uint64
	for k := 0; k < len(decisions) && k < 64; k++ {
		if d := &decisions[k]; d.Allowed && !d.Skipped && spec[k].Concurrency == 0 {
			charged |= 1 << k
		}
	}
	return charged
}

// admission is what the service admitted for it in a check sent at sent: the limits in charged,
// each its cost, decided at the store's times of ds. The admission is no older than sent, so an
// age taken from it is never understated.
func (it *globalItem) admission(charged uint64, sent int64, ds []wire.Decision) reservation {
	return reservation{rs: it.rs, key: it.key, at: sent, reserved: it.cost, spec: it.spec, charged: charged, taken: takenAt(ds, charged)}
}

// takenTimes holds the store's time of the decision of each limit of a rule (unix µs, the
// answer's at_us; at most rules' 8 limits), 0 where the answer carried none (a service before
// at_us): a settle or an undo of such a limit then names its age instead.
type takenTimes [8]int64

// takenAt returns the store's times of the decisions ds of the limits in charged.
func takenAt(ds []wire.Decision, charged uint64) (t takenTimes) {
	for k := 0; k < len(ds) && k < len(t); k++ {
		if charged&(1<<k) != 0 && ds[k].AtUs > 0 && ds[k].AtUs <= wire.MaxTimeUs {
			t[k] = ds[k].AtUs
		}
	}
	return t
}

// of returns the store's time of limit k's decision, 0 when not known.
func (t *takenTimes) of(k int) int64 {
	if k < len(t) {
		return t[k]
	}
	return 0
}

// entryAppender appends entry i of a settle list: wire.AppendSettle (units settled) or
// wire.AppendUndo (units given back), naming the decision's time atUs when known, else age.
type entryAppender func(b []byte, i int, k wire.Key, l algorithms.Limit, units int64, age time.Duration, atUs int64) []byte

// appendEntries appends to b one settle-list entry per limit r charged, numbered from n on, each
// of units, at the store's time of its decision (r.taken) or, where not known, at age; and
// returns b and the next entry's number.
func (s *settler) appendEntries(b []byte, n int, r *reservation, entry entryAppender, units int64, age time.Duration) ([]byte, int) {
	for k := range r.spec {
		if k < 64 && r.charged&(1<<k) != 0 {
			key := wire.Key{Plugin: s.name, Rule: r.rs.rule.Name, Fingerprint: r.spec[k].Fingerprint, Value: r.key}
			b = entry(b, n, key, r.spec[k].Limit, units, age, r.taken.of(k))
			n++
		}
	}
	return b, n
}

// listStatus returns the status of the answer to a settle-list call, "" for a reset (no headers).
func (s *settler) listStatus(numHeaders int) string {
	if numHeaders == 0 {
		return ""
	}
	headers, _ := s.host.headers(answerPart)
	return answerStatus(headers)
}
