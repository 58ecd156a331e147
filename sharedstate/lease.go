package sharedstate

import "encoding/binary"

// A lease record holds the quota units a proxy leased from the decision service for one key,
// which every worker thread spends locally (the filter's rules[].lease). Each grant keeps its own
// expiry: a record holds the two most recent grants, spent oldest first. When a third grant lands
// while both are live, the older two are merged under the earlier expiry, so no unit is ever
// spendable later than its ttl after the grant that brought it (some may expire early). A
// worker claims a lease only while the key holds less than one batch and no lease is in flight,
// both checked in the same compare-and-swap that marks the lease in flight, so a proxy holds
// fewer than 2 × batch units of a key.

// leasePayloadSize is the size of a lease record's payload: two grants (units, expiry) and the time
// until which a lease is in flight, all 8-byte little-endian.
const leasePayloadSize = 40

// leaseRecord is a decoded lease payload.
type leaseRecord struct {
	units, expiry [2]int64 // [0] the older grant, [1] the newer
	inflight      int64
}

func decodeLease(p []byte) (r leaseRecord) {
	if len(p) != leasePayloadSize {
		return r // none (or unreadable): nothing leased
	}
	for i := range 2 {
		r.units[i] = int64(binary.LittleEndian.Uint64(p[16*i:]))
		r.expiry[i] = int64(binary.LittleEndian.Uint64(p[16*i+8:]))
	}
	r.inflight = int64(binary.LittleEndian.Uint64(p[32:]))
	return r
}

func (r *leaseRecord) append(dst []byte) []byte {
	for i := range 2 {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(r.units[i]))
		dst = binary.LittleEndian.AppendUint64(dst, uint64(r.expiry[i]))
	}
	return binary.LittleEndian.AppendUint64(dst, uint64(r.inflight))
}

// expire drops the units of grants that expired at now and returns how many, then moves the newer
// grant into the older's place when the older is empty.
func (r *leaseRecord) expire(now int64) (dropped int64) {
	for i := range 2 {
		if r.units[i] > 0 && r.expiry[i] <= now {
			dropped += r.units[i]
			r.units[i] = 0
		}
	}
	if r.units[0] == 0 {
		r.units[0], r.expiry[0], r.units[1], r.expiry[1] = r.units[1], r.expiry[1], 0, 0
	}
	return dropped
}

func (r *leaseRecord) live() int64 { return r.units[0] + r.units[1] }

// spend takes cost units, oldest grant first; the caller checked that live() >= cost.
func (r *leaseRecord) spend(cost int64) {
	from0 := min(cost, r.units[0])
	r.units[0] -= from0
	r.units[1] -= cost - from0
	r.expire(0) // shift only: expiry times are positive
}

// grant adds units that expire at expiry. With two live grants already, the older two merge under
// the earlier expiry (the older grant's).
func (r *leaseRecord) grant(units, expiry int64) {
	switch {
	case r.units[0] == 0:
		r.units[0], r.expiry[0] = units, expiry
	case r.units[1] == 0:
		r.units[1], r.expiry[1] = units, expiry
	default:
		r.units[0] += r.units[1]
		r.expiry[0] = min(r.expiry[0], r.expiry[1])
		r.units[1], r.expiry[1] = units, expiry
	}
}

// LeaseOp is an operation of a LeaseEditor.
type LeaseOp uint8

// The operations on a lease record.
const (
	LeaseSpend LeaseOp = iota // take Cost units if there are enough
	LeaseClaim                // mark a lease in flight until Until, if fewer than Batch units are live and none is in flight
	LeaseEnd                  // end the lease in flight, adding Cost granted units that expire at Expiry
)

// LeaseEditor is the Editor of one lease operation. Its outputs describe the round that was
// written (Edit recomputes them on every CAS round).
type LeaseEditor struct {
	Op                              LeaseOp
	Now, Cost, Batch, Until, Expiry int64

	Done    bool  // output: spent, claimed, or ended
	Low     bool  // output of a spend: the key runs low (less than a batch left, no lease in flight)
	Dropped int64 // output: units that expired unspent
}

// Vacant implements Editor: a record with no live units and no lease in flight holds nothing.
func (e *LeaseEditor) Vacant(p []byte) bool {
	r := decodeLease(p)
	r.expire(e.Now)
	return r.live() == 0 && r.inflight <= e.Now
}

// Edit implements Editor.
func (e *LeaseEditor) Edit(dst, cur []byte) ([]byte, bool, error) {
	r := decodeLease(cur)
	e.Done, e.Low = false, false
	e.Dropped = r.expire(e.Now)
	switch e.Op {
	case LeaseSpend:
		e.Low = r.live()-e.Cost < e.Batch && r.inflight <= e.Now
		if r.live() < e.Cost {
			return dst, e.Dropped > 0, nil // write only to drop what expired (then a fresh record is vacant)
		}
		r.spend(e.Cost)
	case LeaseClaim:
		if r.inflight > e.Now || r.live() >= e.Batch {
			return dst, false, nil
		}
		r.inflight = e.Until
	case LeaseEnd:
		r.inflight = 0
		if e.Cost > 0 {
			r.grant(e.Cost, e.Expiry)
		}
	}
	e.Done = true
	return r.append(dst), true, nil
}
