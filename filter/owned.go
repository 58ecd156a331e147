package filter

import (
	"encoding/binary"
	"errors"

	"github.com/meshlimit/meshlimit/shed"
)

// Owned counts: the shared record behind concurrency permits and shedding slots.
//
// Counts of requests in flight are only as good as their releases, and a VM that dies (or a
// plugin that is replaced) never releases what it holds. So every count is held by an owner,
// one plugin instance in one VM, under a lease that the owner renews on its timer:
//
//	payload = k uint8 | peak uint32 | n entries of (owner uint64, expiry int64, k × count uint32)
//
// little-endian, one entry per owner holding something (at most maxOwners), k counts per
// entry: 1 for a concurrency limit, one per class for the shedder. The total in flight is the
// sum over the entries whose expiry is after now. An owner sets its entry's expiry to
// now + permitLease whenever it writes it, and its timer rewrites the entry every
// permitRenew with the counts the owner itself tracks (the streams it saw start and not yet
// end), so the shared counts converge to the owners' truth. An entry whose owner stopped
// renewing (the VM died, the plugin was reconfigured, its tick no longer runs) expires within
// permitLease of its last renewal; the next write of the record drops it and counts its permits
// in the reclaimed metric. An entry whose counts fall to zero is removed, so the record holds
// only the owners that hold something.
//
// The owner id is a random 32-bit VM instance id (drawn once per VM) and a 32-bit epoch (the
// number of plugin starts in that VM): a reconfigured plugin is a new owner, and the permits
// of the old one expire unless its streams end and release them.

// permitLease is how long an entry stays live without a renewal; permitRenew is how often its
// owner renews it. Four renewals fit in a lease, so a slow tick does not drop a live owner.
const (
	permitLease = int64(10e9)
	permitRenew = int64(2e9)
)

// maxOwners bounds the entries of a record: the worker threads of one proxy (and the plugin
// instances being replaced) that hold something for one key at the same time.
const maxOwners = 64

const ownedHeader = 5

// errOwnersFull is returned when a record has maxOwners live entries and a new owner needs one;
// the rule's failure_mode decides the request.
var errOwnersFull = errors.New("meshlimit: too many owners hold permits for one key")

// ownedRecord is a decoded payload. Its arrays are fixed so that decoding does not allocate.
type ownedRecord struct {
	k      int
	n      int
	peak   uint32
	owner  [maxOwners]uint64
	expiry [maxOwners]int64
	counts [maxOwners][shed.MaxClasses]uint32
}

// decode reads p with k counts per entry; a payload of another shape reads as empty (a record
// written for another configuration holds nothing this one can use).
func (r *ownedRecord) decode(p []byte, k int) {
	r.k, r.n, r.peak = k, 0, 0
	size := 16 + 4*k
	if len(p) < ownedHeader || int(p[0]) != k || (len(p)-ownedHeader)%size != 0 || (len(p)-ownedHeader)/size > maxOwners {
		return
	}
	r.peak = binary.LittleEndian.Uint32(p[1:])
	for off := ownedHeader; off < len(p); off += size {
		i := r.n
		r.owner[i] = binary.LittleEndian.Uint64(p[off:])
		r.expiry[i] = int64(binary.LittleEndian.Uint64(p[off+8:]))
		r.counts[i] = [shed.MaxClasses]uint32{}
		for c := range k {
			r.counts[i][c] = binary.LittleEndian.Uint32(p[off+16+4*c:])
		}
		r.n++
	}
}

func (r *ownedRecord) append(dst []byte) []byte {
	dst = append(dst, byte(r.k))
	dst = binary.LittleEndian.AppendUint32(dst, r.peak)
	for i := range r.n {
		dst = binary.LittleEndian.AppendUint64(dst, r.owner[i])
		dst = binary.LittleEndian.AppendUint64(dst, uint64(r.expiry[i]))
		for c := range r.k {
			dst = binary.LittleEndian.AppendUint32(dst, r.counts[i][c])
		}
	}
	return dst
}

// expire removes the entries whose lease ended at now, and the empty ones, and returns the
// counts the expired entries held.
func (r *ownedRecord) expire(now int64) (reclaimed int64) {
	j := 0
	for i := range r.n {
		held := r.held(i)
		if r.expiry[i] <= now {
			reclaimed += held
			continue
		}
		if held == 0 {
			continue
		}
		r.owner[j], r.expiry[j], r.counts[j] = r.owner[i], r.expiry[i], r.counts[i]
		j++
	}
	r.n = j
	return reclaimed
}

func (r *ownedRecord) held(i int) (n int64) {
	for c := range r.k {
		n += int64(r.counts[i][c])
	}
	return n
}

// state sums the live entries (call expire first) per class, with the record's peak.
func (r *ownedRecord) state() shed.State {
	var s shed.State
	for i := range r.n {
		for c := range r.k {
			s.InFlight[c] += r.counts[i][c]
		}
	}
	s.Peak = r.peak
	return s
}

// find returns owner's entry, creating an empty one (expiring at now+permitLease) if create;
// -1 when it has none (or no room).
func (r *ownedRecord) find(owner uint64, now int64, create bool) int {
	for i := range r.n {
		if r.owner[i] == owner {
			return i
		}
	}
	if !create || r.n == maxOwners {
		return -1
	}
	i := r.n
	r.owner[i], r.expiry[i], r.counts[i] = owner, now+permitLease, [shed.MaxClasses]uint32{}
	r.n++
	return i
}

// Operations of ownedEditor.
const (
	opAcquire  = iota // admit one request of class if the decision says so
	opRelease         // end one request of class
	opRenew           // set the owner's counts to set, renewing its lease
	opInterval        // end the shedder's interval: peak = total (shed.State.EndInterval)
	opPeek            // read the interval's peak (max of peak and total)
)

// ownedEditor is the sharedstate.Editor of one operation on an owned record. An acquire is
// decided from the live totals: against policy at capacity when policy is set (the shedder),
// else total < limit (a concurrency limit). With force, the request is counted even when the
// decision says no (shadow mode), so that the counts stay those of the traffic.
type ownedEditor struct {
	op       int
	k, class int
	owner    uint64
	now      int64
	limit    int64
	policy   *shed.Policy
	capacity int64
	force    bool
	set      [shed.MaxClasses]int64
	rec      ownedRecord

	allowed   bool  // output of an acquire: the decision
	admitted  bool  // output of an acquire: the request was counted (and must be released)
	total     int64 // output: the live total before the operation
	peak      int64 // output of opInterval: the ended interval's peak
	reclaimed int64 // output: counts of expired entries dropped by the written round
}

func (e *ownedEditor) decide(st shed.State) bool {
	if e.policy != nil {
		_, d := e.policy.Admit(st, e.capacity, e.class)
		return d.Admitted
	}
	return st.Total() < e.limit
}

// Vacant implements sharedstate.Editor: a record whose entries all expired holds nothing.
func (e *ownedEditor) Vacant(p []byte) bool {
	e.rec.decode(p, e.k)
	e.rec.expire(e.now)
	return e.rec.n == 0
}

// Edit implements sharedstate.Editor.
func (e *ownedEditor) Edit(dst, cur []byte) ([]byte, bool, error) {
	r := &e.rec
	r.decode(cur, e.k)
	e.reclaimed = r.expire(e.now)
	e.allowed, e.admitted = false, false
	st := r.state()
	e.total = st.Total()
	changed := e.reclaimed > 0
	switch e.op {
	case opAcquire:
		e.allowed = e.decide(st)
		if e.allowed || e.force {
			i := r.find(e.owner, e.now, true)
			if i < 0 {
				return dst, false, errOwnersFull
			}
			r.counts[i][e.class]++
			r.expiry[i] = e.now + permitLease
			r.peak = max(r.peak, uint32(min(e.total+1, 1<<32-1)))
			e.admitted, changed = true, true
		}
	case opRelease:
		if i := r.find(e.owner, e.now, false); i >= 0 && r.counts[i][e.class] > 0 {
			r.counts[i][e.class]--
			changed = true
		}
	case opRenew:
		i := r.find(e.owner, e.now, e.setTotal() > 0)
		if i >= 0 {
			for c := range e.k {
				r.counts[i][c] = uint32(min(max(e.set[c], 0), 1<<32-1))
			}
			r.expiry[i] = e.now + permitLease
			changed = true
		}
	case opPeek:
		e.peak = max(int64(r.peak), e.total)
	case opInterval:
		e.peak = max(int64(r.peak), e.total)
		r.peak = uint32(min(e.total, 1<<32-1))
		changed = true
	}
	if !changed {
		return dst, false, nil
	}
	r.expire(e.now) // drops entries a release or renew emptied
	return r.append(dst), true, nil
}

func (e *ownedEditor) setTotal() (n int64) {
	for c := range e.k {
		n += e.set[c]
	}
	return n
}
