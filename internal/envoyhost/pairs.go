package envoyhost

import (
	"encoding/binary"
	"strings"
)

// Limits of cpp-host src/pairs_util.cc: larger inputs decode as no pairs (§3).
const (
	pairsMaxBytes = 1 << 20
	pairsMaxCount = 1024
)

// appendPairs appends h in the proxy-wasm pairs format: u32 count, count × (u32
// key length, u32 value length), then each key and value followed by a NUL.
func appendPairs(dst []byte, h Headers) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(h)))
	for _, kv := range h {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(kv[0])))
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(kv[1])))
	}
	for _, kv := range h {
		dst = append(dst, kv[0]...)
		dst = append(dst, 0)
		dst = append(dst, kv[1]...)
		dst = append(dst, 0)
	}
	return dst
}

// parsePairs decodes the pairs format. Malformed input, more than 1 MiB or more than
// 1024 pairs gives no pairs, as in cpp-host.
func parsePairs(b []byte) Headers {
	if len(b) < 4 || len(b) > pairsMaxBytes {
		return nil
	}
	n := binary.LittleEndian.Uint32(b)
	if n > pairsMaxCount || uint64(len(b)) < 4+8*uint64(n) {
		return nil
	}
	sizes := b[4 : 4+8*n]
	data := b[4+8*n:]
	h := make(Headers, 0, n)
	for i := uint32(0); i < n; i++ {
		kl := binary.LittleEndian.Uint32(sizes[8*i:])
		vl := binary.LittleEndian.Uint32(sizes[8*i+4:])
		if uint64(len(data)) < uint64(kl)+uint64(vl)+2 {
			return nil
		}
		k := string(data[:kl])
		val := string(data[kl+1 : kl+1+vl])
		data = data[kl+vl+2:]
		h = append(h, [2]string{k, val})
	}
	return h
}

// lower returns the header map form of a header name.
func lower(name string) string { return strings.ToLower(name) }

// lowerHeaders returns h with lower-case names, reusing h when it already is.
func lowerHeaders(h Headers) Headers {
	for i, kv := range h {
		if l := lower(kv[0]); l != kv[0] {
			out := h.Clone()
			for j := i; j < len(out); j++ {
				out[j][0] = lower(out[j][0])
			}
			return out
		}
	}
	return h
}

// headersByteSize is Envoy's HeaderMap::byteSize: the sum of key and value lengths.
func headersByteSize(h Headers) int {
	n := 0
	for _, kv := range h {
		n += len(kv[0]) + len(kv[1])
	}
	return n
}
