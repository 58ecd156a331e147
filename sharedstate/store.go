// Package sharedstate keeps rate-limit state in the proxy's shared data, the one key-value store that
// every worker thread's VM of a plugin can see, and updates it with compare-and-swap.
//
// Envoy's shared data (proxy-wasm-cpp-host src/shared_data.cc) has three properties this package is
// built around:
//
//   - a set with cas 0 is unconditional, and a set with any cas on a missing key succeeds, so "create
//     only if absent" cannot be asked for directly (see Updater for how it is obtained anyway);
//   - cas values come from one process-wide counter, so a cas value names one version of one key;
//   - keys can never be deleted, so one key per client would grow without end (see Records).
//
// # Bounded state and isolation
//
// Every per-key state the filter keeps (a rule's limit states, its over-limit cache, its leased units)
// lives in a Records set: a fixed number of slots, each holding at most one key's record, marked with
// the 64-bit fingerprint of the key that owns it, and updated by one bounded compare-and-swap helper
// (Cursor.Update). The design rule is isolation: a key that holds its slot is decided exactly as if it
// were alone, whatever any number of other keys do; nothing is ever written into, or read as, another
// key's state. A key without a record takes a candidate slot only when it is empty or its owner's
// record is vacant (equivalent to a fresh one: an idle bucket, an expired entry), so taking it loses
// nothing. A key that finds no room is told so (NoRoom): a Table decides it against its overflow state,
// one state that all keys without room share, under the rule's limits or its configured overflow
// limits; the over-limit cache does not cache it; a lease is not taken for it.
//
// What an attacker minting keys can therefore do is fill a table and crowd newcomers into the overflow
// state; it cannot spend a slot holder's quota. Keeping one slot taken costs one request per window
// with the window algorithms (a counted request keeps the state from being idle until its window has
// passed) and one request per Window/Quota with the buckets (a bucket is idle as soon as it has
// refilled), so keeping a whole table full costs Slots to Slots × Quota requests per window. Size Slots
// at two to four times the number of keys active within one window of the longest limit (see
// Candidates); the overflow count says when it is too small.
//
// Fingerprints and candidate slots come from SipHash-2-4 keyed by a secret that every VM of the proxy
// shares and no client knows (see Updater): a client cannot compute a key value that would share a
// victim's record or aim at its slots; two keys share a record only by chance (~n²/2^65 for n keys).
//
// The package depends on algorithms and shed for the decisions and knows nothing of the host: the filter
// gives it a Store over the proxy's shared data.
package sharedstate

import "errors"

// Errors a Store reports. Implementations return them (or wrap them) so that callers can use errors.Is.
var (
	// ErrNotFound: the key has never been set.
	ErrNotFound = errors.New("sharedstate: key not found")
	// ErrCasMismatch: the key was set by someone else since the cas passed to Set was read.
	ErrCasMismatch = errors.New("sharedstate: cas mismatch")
	// ErrContention: an update ran out of attempts because every attempt lost a CAS race.
	ErrContention = errors.New("sharedstate: update attempts exhausted by contention")
)

// Store is shared data as the filter needs it. Its semantics are Envoy's: Get of a missing key reports
// ErrNotFound; Set with cas 0, or on a missing key, always succeeds; Set with a non-zero cas that differs
// from the key's current one reports ErrCasMismatch and changes nothing; every successful Set gives the
// key a new cas that no other version of any key has (until the 32-bit counter wraps).
//
// The bytes Get returns are the caller's until its next Get on the store, which may reuse their
// memory (the filter's host fills one guest buffer): the caller may modify them, and a Table's
// update edits a record there before writing it back. They must therefore never alias the
// stored value itself.
type Store interface {
	Get(key string) (value []byte, cas uint32, err error)
	Set(key string, value []byte, cas uint32) error
}
