package sharedstate

import (
	"encoding/binary"

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
// now + ownedLease whenever it writes it, and its timer rewrites the entry (OwnedRenew) with
// the counts the owner itself tracks (the streams it saw start and not yet end), so the shared
// counts converge to the owners' truth. An entry whose owner stopped renewing (the VM died, the
// plugin was reconfigured, its tick no longer runs) expires within ownedLease of its last
// renewal; the next write of the record drops it and reports its counts in Reclaimed. An entry
// whose counts fall to zero is removed, so the record holds only the owners that hold
// something.

// ownedLease is how long an entry stays live without a renewal. Its owner renews it well within
// (the filter: every 2 s), so a slow tick does not drop a live owner.
const ownedLease = int64(10e9)

// maxOwners bounds the entries of a record: maxOwners−2 owners of their own, and the two
// generations of the shared entry. The worker threads of one proxy (and the plugin instances
// being replaced) that hold something for one key at the same time may be more (Envoy runs a
// worker per hardware thread): the owners that find no entry of their own count their requests
// in the shared one.
const maxOwners = 64

// SharedOwner is the owner id of the shared entry: where the owners without an entry of their
// own (the record holds maxOwners−2 others) count their requests, so that an acquire is always
// counted, whatever the number of workers. No plugin draws it as its id (nor SharedOwner−1).
//
// The shared entry is attributed by generation: time is cut into generations of sharedGen, and
// the shared entry is one sub-entry per generation, the current one and the one before (owner
// id SharedOwner−gen%2, expiry (gen+2)·sharedGen, so that the generic expiry drops a
// generation two after its own). Each owner keeps an OwnedShare per record: how many requests
// it holds in the shared entry and in which generation. Every write of an owner's shared
// requests (an acquire, a release, a renewal) first moves them all to the current generation,
// so an owner that writes at least once a generation (the filter renews every 2 s) keeps its
// requests live, and the requests of an owner that died (its VM, or its whole plugin) expire
// with their generation, within 2·sharedGen = ownedLease of its last write, whoever else keeps
// using the shared entry. Every move is a CAS of the whole record: the shared counts are
// exact, never admitting uncounted.
const SharedOwner = ^uint64(0)

// sharedGen is the length of a generation of the shared entry: half a lease.
const sharedGen = ownedLease / 2

// OwnedShare is what one owner holds in the shared entry of one record: its counts per class
// and the generation they are counted in. The owner keeps it (zero: nothing) and passes it to
// every shared acquire, release and renewal (OwnedEditor.Share); the editor returns the new
// one (OwnedEditor.NewShare), to keep when the write succeeded.
type OwnedShare struct {
	Gen    int64
	Counts [shed.MaxClasses]int64
}

// Empty reports whether the owner holds nothing in the shared entry.
func (s *OwnedShare) Empty() bool { return s.Counts == [shed.MaxClasses]int64{} }

func sharedID(gen int64) uint64    { return SharedOwner - uint64(gen&1) }
func sharedExpiry(gen int64) int64 { return (gen + 2) * sharedGen }

const ownedHeader = 5

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

// find returns owner's entry, creating an empty one (expiring at now+ownedLease) if create;
// -1 when it has none (or no room: the last two entries are kept for the shared entry).
func (r *ownedRecord) find(owner uint64, now int64, create bool) int {
	for i := range r.n {
		if r.owner[i] == owner {
			return i
		}
	}
	if !create || r.n >= maxOwners-2 {
		return -1
	}
	i := r.n
	r.owner[i], r.expiry[i], r.counts[i] = owner, now+ownedLease, [shed.MaxClasses]uint32{}
	r.n++
	return i
}

// generation returns the shared entry's sub-entry of gen, creating an empty one if create (when
// the record has room: -1 otherwise).
func (r *ownedRecord) generation(gen int64, create bool) int {
	id, exp := sharedID(gen), sharedExpiry(gen)
	for i := range r.n {
		if r.owner[i] == id && r.expiry[i] == exp {
			return i
		}
	}
	if !create || r.n == maxOwners {
		return -1
	}
	i := r.n
	r.owner[i], r.expiry[i], r.counts[i] = id, exp, [shed.MaxClasses]uint32{}
	r.n++
	return i
}

// share moves the owner's shared requests s to the generation of now and returns its index (-1:
// the record has no room for it, and nothing moved) and the share as moved. Requests whose
// generation expired are counted again (the owner still holds them).
func (r *ownedRecord) share(s OwnedShare, now int64) (int, OwnedShare) {
	gen := now / sharedGen
	if s.Empty() {
		return r.generation(gen, true), OwnedShare{Gen: gen}
	}
	from := r.generation(s.Gen, false)
	if from >= 0 && s.Gen == gen {
		return from, s
	}
	to := r.generation(gen, true)
	if to < 0 {
		return -1, s
	}
	for c := range r.k {
		n := uint32(min(max(s.Counts[c], 0), 1<<32-1))
		if from >= 0 {
			r.counts[from][c] -= min(n, r.counts[from][c])
		}
		r.counts[to][c] = min(r.counts[to][c], 1<<32-1-n) + n
	}
	s.Gen = gen
	return to, s
}

// OwnedOp is an operation of an OwnedEditor.
type OwnedOp uint8

// The operations on an owned record.
const (
	OwnedAcquire     OwnedOp = iota // admit one request of Class if the decision says so
	OwnedRelease                    // end one request of Class
	OwnedRenew                      // set the owner's counts to Counts, renewing its lease
	OwnedEndInterval                // end the shedder's interval: peak = total (shed.State.EndInterval)
	OwnedPeek                       // read the interval's peak (max of peak and total)
)

// OwnedEditor is the Editor of one operation on an owned record (see the top of owned.go) of
// Classes counts per entry. An acquire is decided from the live totals: against Policy at
// Capacity when Policy is set (the shedder), else total < Limit (a concurrency limit). With
// Force, the request is counted even when the decision says no (shadow mode), so that the
// counts stay those of the traffic.
//
// Set the inputs before each operation; the outputs describe the round that was written (Edit
// recomputes them on every CAS round). The editor is large (it holds a decoded record): reuse
// one rather than copy it.
type OwnedEditor struct {
	Op       OwnedOp
	Classes  int // counts per entry: 1 for a concurrency limit, the classes of a shedder
	Class    int
	Owner    uint64
	Now      int64
	Limit    int64
	Policy   *shed.Policy
	Capacity int64
	Force    bool
	Counts   [shed.MaxClasses]int64 // OwnedRenew: the owner's own counts
	// Shared is an output of an acquire: the request was counted in the shared entry (the
	// record had no entry left for Owner), and the owner must release it with Shared set. It
	// is an input of a release (the request is one of the shared entry's) and of a renewal (of
	// the owner's requests in the shared entry, Share; Counts is then unused).
	Shared bool
	// Share is an input of every acquire, and of the releases and renewals with Shared: what
	// the owner holds in this record's shared entry. NewShare is the output: the share as the
	// written round left it (unchanged when the request did not go to the shared entry), for
	// the owner to keep when the write succeeded.
	Share, NewShare OwnedShare

	Allowed   bool  // output of an acquire: the decision
	Admitted  bool  // output of an acquire: the request was counted (and must be released)
	Total     int64 // output: the live total before the operation
	Peak      int64 // output of OwnedEndInterval and OwnedPeek: the interval's peak
	Reclaimed int64 // output: counts of expired entries dropped by the written round

	rec ownedRecord
}

// InFlight returns the live counts per class, and the peak, of the record as the last round
// left it.
func (e *OwnedEditor) InFlight() shed.State { return e.rec.state() }

func (e *OwnedEditor) decide(st shed.State) bool {
	if e.Policy != nil {
		_, d := e.Policy.Admit(st, e.Capacity, e.Class)
		return d.Admitted
	}
	return st.Total() < e.Limit
}

// Vacant implements Editor: a record whose entries all expired holds nothing.
func (e *OwnedEditor) Vacant(p []byte) bool {
	e.rec.decode(p, e.Classes)
	e.rec.expire(e.Now)
	return e.rec.n == 0
}

// Edit implements Editor.
func (e *OwnedEditor) Edit(dst, cur []byte) ([]byte, bool, error) {
	r := &e.rec
	r.decode(cur, e.Classes)
	e.Reclaimed = r.expire(e.Now)
	e.Allowed, e.Admitted, e.NewShare = false, false, e.Share
	st := r.state()
	e.Total = st.Total()
	changed := e.Reclaimed > 0
	switch e.Op {
	case OwnedAcquire:
		e.Allowed = e.decide(st)
		e.Shared = false
		if e.Allowed || e.Force {
			i := r.find(e.Owner, e.Now, true)
			if i >= 0 {
				r.expiry[i] = e.Now + ownedLease
			} else {
				i, e.NewShare = r.share(e.Share, e.Now)
				e.Shared = true
				e.NewShare.Counts[e.Class]++
			}
			if i < 0 { // maxOwners others, as an older build could leave: deny, never admit uncounted
				e.Allowed, e.Shared, e.NewShare = false, false, e.Share
				break
			}
			r.counts[i][e.Class]++
			r.peak = max(r.peak, uint32(min(e.Total+1, 1<<32-1)))
			e.Admitted, changed = true, true
		}
	case OwnedRelease:
		if e.Shared {
			changed = e.releaseShared() || changed
		} else if i := r.find(e.Owner, e.Now, false); i >= 0 && r.counts[i][e.Class] > 0 {
			r.counts[i][e.Class]--
			changed = true
		}
	case OwnedRenew:
		if e.Shared {
			if !e.Share.Empty() {
				_, e.NewShare = r.share(e.Share, e.Now)
				changed = true
			}
			break
		}
		i := r.find(e.Owner, e.Now, e.countsTotal() > 0)
		if i >= 0 {
			for c := range e.Classes {
				r.counts[i][c] = uint32(min(max(e.Counts[c], 0), 1<<32-1))
			}
			r.expiry[i] = e.Now + ownedLease
			changed = true
		}
	case OwnedPeek:
		e.Peak = max(int64(r.peak), e.Total)
	case OwnedEndInterval:
		e.Peak = max(int64(r.peak), e.Total)
		r.peak = uint32(min(e.Total, 1<<32-1))
		changed = true
	}
	if !changed {
		return dst, false, nil
	}
	r.expire(e.Now) // drops entries a release or renew emptied
	return r.append(dst), true, nil
}

// releaseShared ends one of the owner's requests of Class in the shared entry, moving the rest
// of its share to the current generation, and reports whether the record changed.
func (e *OwnedEditor) releaseShared() bool {
	if e.Share.Counts[e.Class] <= 0 {
		return false // nothing of the owner's (a repaired count): the generation's expiry settles it
	}
	i, s := e.rec.share(e.Share, e.Now)
	if i < 0 {
		return false
	}
	s.Counts[e.Class]--
	if e.rec.counts[i][e.Class] > 0 {
		e.rec.counts[i][e.Class]--
	}
	e.NewShare = s
	return true
}

func (e *OwnedEditor) countsTotal() (n int64) {
	for c := range e.Classes {
		n += e.Counts[c]
	}
	return n
}
