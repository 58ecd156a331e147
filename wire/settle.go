package wire

import (
	"strconv"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
)

// Settles: a request reserves an estimate of its cost through a descriptor; once its real cost
// is known, the request's optional "settle" list applies the difference to the same counter,
// without a decision (algorithms.Limit.Adjust):
//
//	{"settle":[{"key":"<key>","algorithm":"token_bucket","quota":1000,"window_ms":60000,
//	  "delta":-350,"age_ms":1200}]}
//
// An entry names the counter as its descriptor did (key, algorithm, quota, window_ms, burst).
// delta < 0 refunds -delta units of the reservation, delta > 0 charges an over-run even when it
// does not fit (the key may go into debt, which a bucket or a fixed window carries whole up to 64 capacities, and wait); age_ms (optional,
// default 0) is how long ago the reservation was decided, so that a fixed window refunds only
// into the window that held it. Only the algorithms that settle take part (token_bucket,
// leaky_bucket, fixed_window; see algorithms.Kind.Settles). The answer to a request with a
// settle list also carries "settled": how many entries were applied.
//
// An entry with "undo":true gives back an admission instead, for every algorithm
// (algorithms.Limit.Undo): -delta units (delta < 0) that a descriptor admitted age_ms ago, for a
// request that was then not served (a later rule denied it; a count_on rule's answer did not
// count). A service older than undo refuses the member (400, naming settle[i].undo).
//
// An entry may name, instead of an age, the store's time of the decision that took what it
// settles or gives back: at_us, the decision's own (Decision.AtUs), carried back unchanged. The
// store then applies it as of that time, exactly: in the window that counted it, to the log's
// entries of that instant, however soon after a window began it was taken (an age, measured by
// the proxy, can only be an upper bound, which names the window before when the take was that
// early in its own). at_us and age_ms are exclusive. A service older than at_us refuses it (400,
// naming settle[i].at_us).

// Settle is one entry of a settle list: apply Delta cost units to Key under Limit, for a
// reservation decided Age ago; with Undo, give back -Delta units admitted Age ago. A non-zero AtUs
// is the time the store decided it at (unix µs, the store's clock): Age is then 0 and unused.
type Settle struct {
	Key   string
	Limit algorithms.Limit
	Delta int64
	Age   time.Duration
	AtUs  int64
	Undo  bool
}

// MaxSettleAgeMs is the largest age_ms: a reservation older than the longest window settles
// nothing a fixed window would refund, and a bucket ignores the age.
const MaxSettleAgeMs = int64(algorithms.MaxWindow / time.Millisecond)

// AppendSettleListStart appends the start of a settle list: as the request's first member when
// afterDescriptors is false (b is empty), else after its descriptors (closing their array).
// AppendSettle then appends each entry and AppendRequestEnd closes the request.
func AppendSettleListStart(b []byte, afterDescriptors bool) []byte {
	if afterDescriptors {
		return append(b, `],"settle":[`...)
	}
	return append(b, `{"settle":[`...)
}

// AppendSettle appends entry i (0 for the first) of a settle list: delta units to key k under
// l, for a reservation decided age ago (sent in whole milliseconds, rounded up: a reservation
// looks older, never younger, so a fixed window never refunds into a window that did not hold
// it). With atUs > 0, the store's time of the reservation's decision (its Decision.AtUs), the entry
// names that instead of age. The caller keeps l valid, of a kind that settles, and delta non-zero
// within ±algorithms.MaxQuota.
func AppendSettle(b []byte, i int, k Key, l algorithms.Limit, delta int64, age time.Duration, atUs int64) []byte {
	b = appendKeyAndLimit(b, i, k, l)
	return appendDeltaWhen(b, delta, age, atUs)
}

// AppendUndo appends entry i (0 for the first) of a settle list that gives back cost units key k
// took under l age ago (an undo, of any algorithm): sent as AppendSettle sends a refund, the age
// rounded up (an admission looks older, never younger, so a window never gives back into one that
// did not count it). With atUs > 0, the store's time of the admission's decision (its
// Decision.AtUs), the entry names that instead of age: the undo is then exact whenever it comes.
// The caller keeps l valid and cost within 1 to algorithms.MaxQuota.
func AppendUndo(b []byte, i int, k Key, l algorithms.Limit, cost int64, age time.Duration, atUs int64) []byte {
	b = appendKeyAndLimit(b, i, k, l)
	b = append(b, `,"undo":true`...)
	return appendDeltaWhen(b, -cost, age, atUs)
}

// appendDeltaWhen appends an entry's delta and its time: at_us when atUs > 0 (within MaxTimeUs),
// else age_ms when age > 0.
func appendDeltaWhen(b []byte, delta int64, age time.Duration, atUs int64) []byte {
	b = append(b, `,"delta":`...)
	b = strconv.AppendInt(b, delta, 10)
	if atUs > 0 {
		b = append(b, `,"at_us":`...)
		b = strconv.AppendInt(b, min(atUs, MaxTimeUs), 10)
	} else if age > 0 {
		b = append(b, `,"age_ms":`...)
		b = strconv.AppendInt(b, min(ceilMs(age), MaxSettleAgeMs), 10)
	}
	return append(b, '}')
}

// AppendSettled adds the settled count n to an answer that b ends (with AppendAnswerEnd or
// AppendAnswerEndPermits: b ends with "}\n").
func AppendSettled(b []byte, n int) []byte {
	b = append(b[:len(b)-2], `,"settled":`...)
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, "}\n"...)
}

// settleList decodes the request's settle list into req.Settle.
func (d *requestDecoder) settleList(req *Request) *FieldError {
	return d.array(loc{desc: -1, field: "settle"}, d.opts.MaxDescriptors, "entries", func(i int) *FieldError {
		req.Settle = append(req.Settle, Settle{})
		return d.settleEntry(i, &req.Settle[i])
	})
}

// The members of a settle entry besides a descriptor's limit members.
const (
	fDelta = 1 << (iota + 16)
	fAge
	fUndo
	fAt
)

// settleEntry decodes and validates entry i of the settle list into out.
func (d *requestDecoder) settleEntry(i int, out *Settle) *FieldError {
	here := loc{desc: i, arr: "settle"}
	var seen int
	var x extras
	var desc Descriptor
	var ageMs int64
	err := d.object(here, "an object", func(name []byte) *FieldError {
		bit, field := descriptorField(name)
		switch string(name) {
		case "delta":
			bit, field = fDelta, "delta"
		case "age_ms":
			bit, field = fAge, "age_ms"
		case "undo":
			bit, field = fUndo, "undo"
		case "at_us":
			bit, field = fAt, "at_us"
		}
		at := loc{desc: i, arr: "settle", field: field}
		switch {
		case bit == 0 || bit&(fCost|fPermit|fLease) != 0:
			return loc{desc: i, arr: "settle", field: fieldName(name)}.err(false, "unknown field")
		case seen&bit != 0:
			return at.err(false, "given twice")
		}
		seen |= bit
		var err *FieldError
		switch bit {
		case fDelta:
			out.Delta, err = d.integer(at)
		case fAge:
			ageMs, err = d.integer(at)
		case fUndo:
			out.Undo, err = d.boolean(at)
		case fAt:
			out.AtUs, err = d.integer(at)
		default:
			err = d.descriptorValue(bit, at, &desc, &x)
		}
		return err
	})
	if err != nil {
		return err
	}
	return validateSettle(here, seen, out, &desc, x, ageMs, d.opts.MaxKeyBytes)
}

// validateSettle checks a decoded settle entry and fills out from desc.
func validateSettle(here loc, seen int, out *Settle, desc *Descriptor, x extras, ageMs int64, maxKeyBytes int) *FieldError {
	at := func(field string) loc { here.field = field; return here }
	if x.concurrency {
		return at("algorithm").err(false, "concurrency does not settle (want token_bucket, leaky_bucket or fixed_window)")
	}
	desc.Cost = 1
	if err := validate(here, seen, desc, x.windowMs, maxKeyBytes); err != nil {
		return err
	}
	if !out.Undo && !desc.Limit.Kind.Settles() {
		return at("algorithm").err(false, desc.Limit.Kind.String()+" does not settle (want token_bucket, leaky_bucket or fixed_window)")
	}
	switch {
	case seen&fDelta == 0:
		return at("delta").err(false, "required")
	case out.Undo && out.Delta >= 0:
		return at("delta").err(false, "an undo gives back a cost: must be < 0, got "+strconv.FormatInt(out.Delta, 10))
	case out.Delta == 0 || out.Delta < -algorithms.MaxQuota || out.Delta > algorithms.MaxQuota:
		return at("delta").err(false, "must be between -"+strconv.FormatInt(algorithms.MaxQuota, 10)+" and "+
			strconv.FormatInt(algorithms.MaxQuota, 10)+" and not 0, got "+strconv.FormatInt(out.Delta, 10))
	case ageMs < 0 || ageMs > MaxSettleAgeMs:
		return at("age_ms").err(false, between(0, MaxSettleAgeMs, ageMs))
	case seen&fAt != 0 && (out.AtUs < 1 || out.AtUs > MaxTimeUs):
		return at("at_us").err(false, between(1, MaxTimeUs, out.AtUs))
	case seen&fAt != 0 && seen&fAge != 0:
		return at("at_us").err(false, "given with age_ms: an entry names its time once")
	}
	out.Key, out.Limit, out.Age = desc.Key, desc.Limit, time.Duration(ageMs)*time.Millisecond
	return nil
}
