package sharedstate

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/shed"
)

// apply runs one round of e on payload p, as a CAS round would, and returns the payload after
// it (p itself when the editor did not write).
func apply(t *testing.T, e *OwnedEditor, p []byte) []byte {
	t.Helper()
	next, write, err := e.Edit(nil, p)
	require.NoError(t, err)
	if !write {
		return p
	}
	return next
}

func acquire(owner uint64, now, limit int64) *OwnedEditor {
	return &OwnedEditor{Op: OwnedAcquire, Classes: 1, Owner: owner, Now: now, Limit: limit}
}

func TestOwnersTogetherNeverHoldMoreThanTheLimit(t *testing.T) {
	var p []byte
	admitted := 0
	for i := range 40 {
		e := acquire(uint64(i%4+1), 1, 25)
		p = apply(t, e, p)
		if e.Admitted {
			admitted++
		}
	}
	assert.Equal(t, 25, admitted)
	var r ownedRecord
	r.decode(p, 1)
	assert.Equal(t, 4, r.n, "one entry per owner")
	assert.Equal(t, int64(25), total(&r))
}

func TestAReleaseEndsOneOfTheOwnersPermitsAndNeverUnderflows(t *testing.T) {
	var p []byte
	for range 2 {
		p = apply(t, acquire(7, 1, 5), p)
	}
	rel := &OwnedEditor{Op: OwnedRelease, Classes: 1, Owner: 7, Now: 2}
	p = apply(t, rel, p)
	assert.Equal(t, int64(2), rel.Total, "the total before the release")
	p = apply(t, rel, p)
	var r ownedRecord
	r.decode(p, 1)
	assert.Zero(t, r.n, "an owner holding nothing has no entry")
	p2 := apply(t, rel, p)
	assert.Equal(t, p, p2, "a release with nothing held writes nothing")
	other := &OwnedEditor{Op: OwnedRelease, Classes: 1, Owner: 8, Now: 2}
	p = apply(t, acquire(7, 3, 5), p)
	p = apply(t, other, p)
	r.decode(p, 1)
	assert.Equal(t, int64(1), total(&r), "another owner cannot release this one's permit")
}

func TestAnOwnerThatStopsRenewingLosesItsPermitsAfterTheLease(t *testing.T) {
	var p []byte
	for range 3 {
		p = apply(t, acquire(1, 0, 4), p) // owner 1 dies after this
	}
	p = apply(t, acquire(2, 0, 4), p)
	renew := &OwnedEditor{Op: OwnedRenew, Classes: 1, Owner: 2, Now: ownedLease - 1}
	renew.Counts[0] = 1
	p = apply(t, renew, p)
	assert.Zero(t, renew.Reclaimed, "within the lease nothing is reclaimed")
	e := acquire(2, ownedLease, 4)
	p = apply(t, e, p)
	assert.Equal(t, int64(3), e.Reclaimed, "owner 1's three permits come back at its lease's end")
	assert.True(t, e.Admitted)
	assert.Equal(t, int64(1), e.Total, "owner 2's renewed permit still counts")
	var r ownedRecord
	r.decode(p, 1)
	assert.Equal(t, 1, r.n)
	assert.Equal(t, int64(2), total(&r))
}

func TestARenewalWritesTheOwnersOwnCount(t *testing.T) {
	var p []byte
	for range 3 {
		p = apply(t, acquire(5, 0, 10), p)
	}
	renew := &OwnedEditor{Op: OwnedRenew, Classes: 1, Owner: 5, Now: 1}
	renew.Counts[0] = 1 // two releases were lost: the owner knows of one stream
	p = apply(t, renew, p)
	var r ownedRecord
	r.decode(p, 1)
	assert.Equal(t, int64(1), total(&r))
	assert.Equal(t, int64(1)+ownedLease, r.expiry[0])
	renew.Counts[0] = 0
	p = apply(t, renew, p)
	r.decode(p, 1)
	assert.Zero(t, r.n, "a renewal with nothing held removes the entry")
}

func TestOwnersBeyondTheRecordsEntriesAreCountedInTheSharedEntryAndNeverAdmittedUncounted(t *testing.T) {
	var p []byte
	shared := 0
	for i := range 100 { // 100 owners, each holding one: more than the record has entries
		e := acquire(uint64(i+1), 0, 70)
		p = apply(t, e, p)
		if i < 70 {
			require.True(t, e.Admitted, "owner %d", i+1)
		} else {
			require.False(t, e.Admitted, "owner %d: the limit of 70 holds across the shared entry", i+1)
		}
		if e.Shared {
			shared++
		}
	}
	assert.Equal(t, 70-(maxOwners-2), shared, "the owners without an entry of their own share one")
	var r ownedRecord
	r.decode(p, 1)
	assert.Equal(t, maxOwners-1, r.n, "62 owners and the shared entry's current generation")
	assert.Equal(t, int64(70), total(&r))

	e := acquire(1, 0, 1000) // an owner with an entry keeps using it
	_ = apply(t, e, p)
	assert.True(t, e.Admitted)
	assert.False(t, e.Shared)
}

func TestARecordFullOfOwnersWithoutASharedEntryDeniesANewOwner(t *testing.T) {
	r := ownedRecord{k: 1, n: maxOwners} // as an older build, with no entry kept back, could leave it
	for i := range maxOwners {
		r.owner[i], r.expiry[i], r.counts[i][0] = uint64(i+1), ownedLease, 1
	}
	p := r.append(nil)
	e := acquire(999, 0, 1000)
	_, _, err := e.Edit(nil, p)
	require.NoError(t, err)
	assert.False(t, e.Allowed)
	assert.False(t, e.Admitted, "denied, never admitted uncounted")
	e = acquire(1, 0, 1000)
	_ = apply(t, e, p)
	assert.True(t, e.Admitted, "an owner with an entry keeps using it")
}

// fillOwners has owners 1..maxOwners−2 take one request each at now: every entry of an owner's own
// is taken, and the next owners count in the shared entry.
func fillOwners(t *testing.T, p []byte, now int64) []byte {
	for i := range maxOwners - 2 {
		e := acquire(uint64(i+1), now, 1000)
		p = apply(t, e, p)
		require.False(t, e.Shared)
	}
	return p
}

// sharedOp runs op for owner's requests in the shared entry with its share *s, kept as the
// written round left it.
func sharedOp(t *testing.T, p []byte, op OwnedOp, owner uint64, now int64, s *OwnedShare) ([]byte, *OwnedEditor) {
	e := &OwnedEditor{Op: op, Classes: 1, Owner: owner, Now: now, Limit: 1000, Shared: op != OwnedAcquire, Share: *s}
	p = apply(t, e, p)
	if op != OwnedAcquire || e.Shared {
		*s = e.NewShare
	}
	return p, e
}

func TestASharedRequestIsReleasedFromTheSharedEntryAndKeptLiveByItsOwnersWrites(t *testing.T) {
	p := fillOwners(t, nil, 0)
	var s500, s501 OwnedShare
	p, e := sharedOp(t, p, OwnedAcquire, 500, 0, &s500)
	require.True(t, e.Shared)
	p, e = sharedOp(t, p, OwnedAcquire, 501, 0, &s501)
	require.True(t, e.Shared)
	assert.Equal(t, int64(1), s501.Counts[0], "the owner's share counts its request")
	for now := int64(2e9); now <= 20e9; now += 2e9 { // owner 500 renews; the others stop
		p, _ = sharedOp(t, p, OwnedRenew, 500, now, &s500)
	}
	e = acquire(600, 20e9, 1000)
	p = apply(t, e, p)
	assert.Equal(t, int64(1), e.Total, "owner 500's request is still counted, owner 501's expired with its generation")
	p, _ = sharedOp(t, p, OwnedRelease, 500, 21e9, &s500)
	assert.True(t, s500.Empty())
	e = acquire(600, 21e9, 1000)
	_ = apply(t, e, p)
	assert.Equal(t, int64(1), e.Total, "only owner 600's own request is left")
}

func TestADeadOwnersSharedRequestsExpireWhileOthersKeepUsingTheSharedEntry(t *testing.T) {
	p := fillOwners(t, nil, 0)
	var dead, live OwnedShare
	for range 3 {
		p, _ = sharedOp(t, p, OwnedAcquire, 500, 1e9, &dead)
	}
	p, _ = sharedOp(t, p, OwnedAcquire, 501, 1e9, &live)
	reclaimed := int64(0)
	now := int64(1e9)
	for ; now <= 11e9; now += 1e9 { // the live owner writes every second: acquires, releases, renewals
		var e *OwnedEditor
		p, e = sharedOp(t, p, OwnedAcquire, 501, now, &live)
		require.True(t, e.Admitted)
		reclaimed += e.Reclaimed
		if e.Shared {
			p, e = sharedOp(t, p, OwnedRelease, 501, now, &live)
		} else { // the owners of their own entries expired: there is room again
			e = &OwnedEditor{Op: OwnedRelease, Classes: 1, Owner: 501, Now: now}
			p = apply(t, e, p)
		}
		reclaimed += e.Reclaimed
		p, e = sharedOp(t, p, OwnedRenew, 501, now, &live)
		reclaimed += e.Reclaimed
	}
	assert.Equal(t, int64(maxOwners-2+3), reclaimed, "the owners of their own entries and the dead owner's 3 shared requests")
	var r ownedRecord
	r.decode(p, 1)
	r.expire(now)
	assert.Equal(t, int64(1), total(&r), "only the live owner's request is counted")
	assert.Equal(t, int64(1), live.Counts[0])
}

func TestASharedRequestWhoseGenerationExpiredIsCountedAgainByItsOwner(t *testing.T) {
	p := fillOwners(t, nil, 0)
	var s OwnedShare
	p, _ = sharedOp(t, p, OwnedAcquire, 500, 0, &s)
	p, _ = sharedOp(t, p, OwnedRenew, 500, 30e9, &s) // a tick late by far more than a lease
	var r ownedRecord
	r.decode(p, 1)
	r.expire(30e9)
	assert.Equal(t, int64(1), total(&r), "the owner still holds it: its renewal counts it again")
}

func TestAMalformedOrForeignPayloadReadsAsEmpty(t *testing.T) {
	tests := []struct {
		name    string
		payload []byte
	}{
		{"a truncated header", []byte{1, 0}},
		{"a partial entry", append([]byte{1, 0, 0, 0, 0}, make([]byte, 7)...)},
		{"another shape (the shedder's three classes)", append([]byte{3, 0, 0, 0, 0}, make([]byte, 28)...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r ownedRecord
			r.decode(tt.payload, 1)
			assert.Zero(t, r.n)
			e := acquire(1, 0, 1)
			_ = apply(t, e, tt.payload)
			assert.True(t, e.Admitted)
		})
	}
}

func TestTheShedderEditorAdmitsByClassAndKeepsThePeak(t *testing.T) {
	pol := shed.DefaultPolicy()
	var p []byte
	admitted := [3]int{}
	for i := range 30 {
		c := i % 3
		e := &OwnedEditor{Op: OwnedAcquire, Classes: 3, Class: c, Owner: 1, Now: 0, Policy: &pol, Capacity: 10}
		p = apply(t, e, p)
		if e.Admitted {
			admitted[c]++
		}
	}
	var r ownedRecord
	r.decode(p, 3)
	assert.Equal(t, int64(10), total(&r), "the capacity is reached")
	assert.Equal(t, uint32(10), r.peak)
	assert.GreaterOrEqual(t, admitted[0], 1, "critical keeps its reserve")
	rel := &OwnedEditor{Op: OwnedRelease, Classes: 3, Class: 2, Owner: 1, Now: 0}
	p = apply(t, rel, p)
	iv := &OwnedEditor{Op: OwnedEndInterval, Classes: 3, Owner: 1, Now: 0}
	p = apply(t, iv, p)
	assert.Equal(t, int64(10), iv.Peak, "the ended interval's peak")
	r.decode(p, 3)
	assert.Equal(t, uint32(9), r.peak, "the next interval starts at the current total")
}

func TestAShadowAcquireCountsTheRequestItWouldHaveRefused(t *testing.T) {
	var p []byte
	p = apply(t, acquire(1, 0, 1), p)
	e := acquire(1, 0, 1)
	e.Force = true
	p = apply(t, e, p)
	assert.False(t, e.Allowed)
	assert.True(t, e.Admitted, "counted, so that it is released like the others")
	var r ownedRecord
	r.decode(p, 1)
	assert.Equal(t, int64(2), total(&r))
}

// FuzzOwnedRecordNeverExceedsTheLimit runs acquires, releases and lease expiries of up to 100
// owners (more than a record has entries: the others count in the shared entry) against limits
// of up to 120.
func FuzzOwnedRecordNeverExceedsTheLimit(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 0, 1, 2, 3}, uint8(5))
	f.Add([]byte{1, 1, 1, 9, 9, 9, 200, 200}, uint8(1))
	seq := make([]byte, 0, 200)
	for i := range 100 {
		seq = append(seq, byte(i), byte(i+100)&63)
	}
	f.Add(seq, uint8(119))
	f.Fuzz(func(t *testing.T, ops []byte, limit uint8) {
		if len(ops) > 1024 {
			ops = ops[:1024]
		}
		lim := int64(limit%120) + 1
		held := map[uint64][]bool{} // per owner, whether each of its requests is in the shared entry
		shares := map[uint64]OwnedShare{}
		var p []byte
		now := int64(0)
		for i, op := range ops {
			owner := uint64((int(op&63)+i/64*37)%100) + 1
			var e *OwnedEditor
			switch op >> 6 {
			case 0, 1:
				e = acquire(owner, now, lim)
			case 2:
				e = &OwnedEditor{Op: OwnedRelease, Classes: 1, Owner: owner, Now: now}
				if h := held[owner]; len(h) > 0 {
					e.Shared, held[owner] = h[len(h)-1], h[:len(h)-1]
				}
			default:
				now += ownedLease / 4
				continue
			}
			e.Share = shares[owner]
			next, write, err := e.Edit(nil, p)
			require.NoError(t, err)
			if write {
				p = next
			}
			shares[owner] = e.NewShare
			if e.Op == OwnedAcquire && e.Admitted {
				held[owner] = append(held[owner], e.Shared)
			}
			var r ownedRecord
			r.decode(p, 1)
			r.expire(now)
			require.LessOrEqual(t, total(&r), lim)
			require.LessOrEqual(t, r.n, maxOwners)
		}
	})
}

func total(r *ownedRecord) int64 {
	s := r.state()
	return s.Total()
}
