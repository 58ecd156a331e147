package rls

import (
	"crypto/sha256"
	"encoding/hex"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/meshlimit/meshlimit/service/rlsconfig"
)

// appendKey appends the counter key of a descriptor: "rls:" then the domain, each entry as
// "|key=value" (or "|key~pattern" where shared[j] names the pattern of a level that shares its
// threshold), and "@unit", with '\', '|', '=', '~' and '@' escaped by '\' so that two
// different descriptors never share a key. A key longer than MaxKey bytes (a client's long
// value) is stored hashed: "rls#", the SHA-256 of the whole key in hex, ':' and the key's first
// hashedPrefix bytes (for an operator reading Redis), so every stored key is at most MaxKey
// bytes; no unhashed key starts with "rls#", so a hashed key never meets an unhashed one.
func appendKey(b []byte, domain string, d *pb.RateLimitRequest, i int, unit rlsconfig.Unit, shared []string) []byte {
	start := len(b)
	b = appendFullKey(b, domain, d, i, unit, shared)
	if len(b)-start <= MaxKey {
		return b
	}
	sum := sha256.Sum256(b[start:])
	var prefix [hashedPrefix]byte
	copy(prefix[:], b[start:])
	b = append(b[:start], "rls#"...)
	b = hex.AppendEncode(b, sum[:])
	b = append(b, ':')
	return append(b, prefix[:]...)
}

// MaxKey bounds the bytes of an RLS counter key as stored (before the store's own prefix):
// longer ones are hashed (appendKey). /v1/check refuses keys past 512 bytes; the RLS front
// keeps envoyproxy/ratelimit's semantics for values of any length, and bounds what it stores.
const MaxKey = 512

// hashedPrefix is how much of a hashed key is kept readable after its hash.
const hashedPrefix = 128

func appendFullKey(b []byte, domain string, d *pb.RateLimitRequest, i int, unit rlsconfig.Unit, shared []string) []byte {
	b = append(b, "rls:"...)
	b = appendEscaped(b, domain)
	for j, e := range d.GetDescriptors()[i].GetEntries() {
		b = append(b, '|')
		b = appendEscaped(b, e.GetKey())
		if j < len(shared) && shared[j] != "" {
			b = append(b, '~')
			b = appendEscaped(b, shared[j])
			continue
		}
		b = append(b, '=')
		b = appendEscaped(b, e.GetValue())
	}
	b = append(b, '@')
	return append(b, unit.String()...)
}

func appendEscaped(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\', '|', '=', '~', '@':
			b = append(b, '\\', c)
		default:
			b = append(b, c)
		}
	}
	return b
}
