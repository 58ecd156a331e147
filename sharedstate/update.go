package sharedstate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
)

// DefaultMaxAttempts is the number of read-compute-write rounds an update may take before it gives up
// with ErrContention, which the filter leaves to the rule's failure mode (allow by default): every
// exhausted update of a limit is an admission that charged nothing. An attempt fails only when another
// worker wrote the same key between this one's read and write, so a request loses at most one round per
// write the others make meanwhile, and a limit's writes are its admissions (a denial writes nothing).
// That is not bounded by the number of workers: under a convoy, where the winner of a round reaches its
// next read and write before the losers do (a first-in-first-out scheduler; the e2e host yielding on
// every shared-data call), one worker can win round after round, and a loser loses one round per
// admission of the others until the bucket runs dry. With 8 VMs on a bucket of 100, requests were seen
// losing 90 rounds, and the former bound of 64 let about one run in ten admit 101 or more (see
// TestARequestStarvedWhileAnotherWorkerDrainsTheBucketIsDeniedNotWavedThrough). The bound must therefore
// exceed the admissions the others can make while one request retries: 1024 keeps decisions exact under
// any interleaving for a burst below 1024 (refill aside), and still bounds the work of one request (two
// host calls a round, a few milliseconds at most) should a store break its contract.
const DefaultMaxAttempts = 1024

// Updater performs bounded compare-and-swap updates on a Store.
//
// Creating a key is where Envoy's semantics bite: a Set on a missing key succeeds whatever cas it
// carries, so two workers that both read "not found" would both write, and one admission would be lost.
// The Updater therefore creates keys with the cas of a sentinel key it owns: that cas belongs to a
// version of the sentinel and can be no other key's current cas, so the Set succeeds if the key is still
// missing and fails with ErrCasMismatch if another worker created it meanwhile, which sends this worker
// back to read what the other wrote. (Uniqueness holds until the host's 32-bit cas counter wraps, i.e.
// for 2^32 writes between two updates of the same key.)
//
// The Updater also holds the proxy's secret, which keys the fingerprints of Records: 128 random bits
// that the first Updater stores next to the sentinel (created that same create-if-absent way, so that
// every VM of the proxy reads the same secret).
type Updater struct {
	store       Store
	maxAttempts int
	createCas   uint32
	k0, k1      uint64 // the secret
}

// NewUpdater returns an Updater on s whose updates take at most maxAttempts rounds (DefaultMaxAttempts
// when maxAttempts ≤ 0). It makes sure sentinelKey exists and remembers its cas, so it must not be
// called where the host forbids shared-data calls (Envoy forbids them during _initialize; call it from
// OnPluginStart). The sentinel's value is not meaningful; any number of Updaters may share it.
func NewUpdater(s Store, sentinelKey string, maxAttempts int) (*Updater, error) {
	if maxAttempts <= 0 {
		maxAttempts = DefaultMaxAttempts
	}
	_, cas, err := s.Get(sentinelKey)
	if errors.Is(err, ErrNotFound) {
		if err = s.Set(sentinelKey, []byte("meshlimit"), 0); err != nil {
			return nil, fmt.Errorf("sharedstate: creating sentinel %q: %w", sentinelKey, err)
		}
		_, cas, err = s.Get(sentinelKey)
	}
	if err != nil {
		return nil, fmt.Errorf("sharedstate: reading sentinel %q: %w", sentinelKey, err)
	}
	if cas == 0 {
		return nil, fmt.Errorf("sharedstate: sentinel %q has cas 0; the host does not number versions", sentinelKey)
	}
	u := &Updater{store: s, maxAttempts: maxAttempts, createCas: cas}
	if err := u.readSecret(sentinelKey + "/secret"); err != nil {
		return nil, err
	}
	return u, nil
}

// readSecret reads the proxy's secret from key, creating it (16 random bytes) if it is missing.
func (u *Updater) readSecret(key string) error {
	for range u.maxAttempts {
		v, cas, err := u.Read(key)
		if err != nil {
			return err
		}
		if v != nil {
			if len(v) != 16 {
				return fmt.Errorf("sharedstate: secret %q has %d bytes, want 16", key, len(v))
			}
			u.k0, u.k1 = binary.LittleEndian.Uint64(v), binary.LittleEndian.Uint64(v[8:])
			return nil
		}
		secret := binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, rand.Uint64()), rand.Uint64())
		if err := u.Write(key, secret, cas); err != nil && !errors.Is(err, ErrCasMismatch) {
			return err
		} // created, or another VM created it first: read what is there
	}
	return ErrContention
}

// Read returns the value of key and the cas to pass to Write to replace exactly that version. A missing
// key reads as (nil, the creation cas, nil), so that Write creates it only if it is still missing.
func (u *Updater) Read(key string) ([]byte, uint32, error) {
	v, cas, err := u.store.Get(key)
	if err != nil && errors.Is(err, ErrNotFound) {
		return nil, u.createCas, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("sharedstate: get %q: %w", key, err)
	}
	return v, cas, nil
}

// Write stores value under key if the key is still at the version Read returned cas for. It reports
// ErrCasMismatch (unwrapped) when it is not, and wraps any other store error.
func (u *Updater) Write(key string, value []byte, cas uint32) error {
	err := u.store.Set(key, value, cas)
	if err == nil || errors.Is(err, ErrCasMismatch) {
		return err
	}
	return fmt.Errorf("sharedstate: set %q: %w", key, err)
}

// MaxAttempts is the bound on rounds an update may take.
func (u *Updater) MaxAttempts() int { return u.maxAttempts }
