package rules

import (
	"encoding/binary"
	"unsafe"

	"github.com/meshlimit/meshlimit/internal/siphash"
)

// PartitionKey is the pk parameter of a RateLimit-Policy or RateLimit member: 8 bytes of a keyed
// hash of a rule's key value, never the value itself. The zero value is "no pk".
type PartitionKey struct {
	sum [8]byte
	set bool
}

// Partition returns the partition key of the key value key of rule: when response.partition_key
// is on, the first 8 bytes (big-endian) of SipHash-2-4 of the rule's fingerprint followed by key,
// keyed with response.partition_key_secret; otherwise the zero PartitionKey. Key values are often
// client identities (an IP address, an API key, a user), which the response must not disclose to
// whoever reads it on the way (caches, logs, browser scripts): a keyed hash names the partition
// without revealing it, and without the secret nobody can confirm a guessed value, even for a
// low-entropy key such as an IPv4 address (2^32 guesses). The fingerprint makes the pk of one key
// differ between rules, and change when a rule's limits change (when its counters start afresh).
// The same key gets the same pk on every worker and every proxy with the same configuration.
// Partition does not allocate.
func (r *Response) Partition(rule *Rule, key []byte) PartitionKey {
	if !r.partitionKey || rule == nil { // inlined at the caller: no call when partition_key is off
		return PartitionKey{}
	}
	return r.partition(rule, key)
}

func (r *Response) partition(rule *Rule, key []byte) PartitionKey {
	pk := PartitionKey{set: true}
	binary.BigEndian.PutUint64(pk.sum[:], siphash.Sum64(r.pkKey[0], r.pkKey[1], rule.fingerprint, key))
	return pk
}

// PartitionIn is Partition for a key decided in its own state, or, with overflow, in the rule's
// overflow state: the one count that the keys finding no slot of their own in the rule's table
// share (sharedstate: the bounded table's overflow record), so they all show that count's one pk,
// as they share one quota. The overflow's pk is SipHash-2-4 of the rule's fingerprint alone under
// a key derived from the secret (its first half flipped): no key value's pk, and like them it
// reveals nothing. It does not allocate, and is inlined as Partition is.
func (r *Response) PartitionIn(rule *Rule, key []byte, overflow bool) PartitionKey {
	if !r.partitionKey || rule == nil {
		return PartitionKey{}
	}
	return r.partitionIn(rule, key, overflow)
}

func (r *Response) partitionIn(rule *Rule, key []byte, overflow bool) PartitionKey {
	if !overflow {
		return r.partition(rule, key)
	}
	pk := PartitionKey{set: true}
	binary.BigEndian.PutUint64(pk.sum[:], siphash.Sum64(^r.pkKey[0], r.pkKey[1], rule.fingerprint, nil))
	return pk
}

// PartitionString is Partition for a key held as a string.
func (r *Response) PartitionString(rule *Rule, key string) PartitionKey {
	if !r.partitionKey || rule == nil {
		return PartitionKey{}
	}
	return r.Partition(rule, unsafe.Slice(unsafe.StringData(key), len(key))) // read only
}
