// Package fnv is the project's one FNV-1a (64-bit): the hash that names shared-data slots, keys
// and fingerprints. Unlike hash/fnv it needs no interface value, so it never allocates, and it
// hashes strings and byte slices alike.
package fnv

// FNV-1a's 64-bit parameters.
const (
	Offset64 = 14695981039346656037
	Prime64  = 1099511628211
)

// String returns the FNV-1a hash of s.
func String(s string) uint64 { return AddString(Offset64, s) }

// AddString continues hash h over s.
func AddString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= Prime64
	}
	return h
}

// AddBytes continues hash h over b.
func AddBytes(h uint64, b []byte) uint64 {
	for _, c := range b {
		h ^= uint64(c)
		h *= Prime64
	}
	return h
}

// Mix folds the 64-bit value v into h as one step (combining fingerprints, not hashing bytes).
func Mix(h, v uint64) uint64 { return (h ^ v) * Prime64 }
