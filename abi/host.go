package abi

import (
	"encoding/binary"
	"strings"
)

// Status is a proxy-wasm status as the host returns it.
type Status uint32

// The statuses the filter tells apart.
const (
	StatusOK          Status = 0
	StatusNotFound    Status = 1
	StatusBadArgument Status = 2
	StatusCasMismatch Status = 8
)

// Error implements error: a host call that did not succeed.
func (s Status) Error() string {
	switch s {
	case StatusOK:
		return "proxy-wasm status OK"
	case StatusNotFound:
		return "proxy-wasm status NotFound"
	case StatusBadArgument:
		return "proxy-wasm status BadArgument"
	case StatusCasMismatch:
		return "proxy-wasm status CasMismatch"
	}
	return "proxy-wasm status " + itoa(uint32(s))
}

func itoa(n uint32) string {
	var b [10]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		if n /= 10; n == 0 {
			return string(b[i:])
		}
	}
}

// MapType names a header map of the current stream.
type MapType uint32

// The header maps the filter writes.
const (
	RequestHeaders  MapType = 0
	ResponseHeaders MapType = 2
)

// PropertyPath encodes a property path as the host reads it: the segments separated by NUL bytes.
// Encode a fixed path once and pass the result to GetProperty on every request.
func PropertyPath(segments ...string) []byte {
	return []byte(strings.Join(segments, "\x00"))
}

// AppendHeaderMap appends pairs to dst serialized as the host reads a header map: the number of
// pairs, then each pair's name and value sizes, then each name and value followed by a NUL byte, every
// number a little-endian uint32.
func AppendHeaderMap(dst []byte, pairs [][2]string) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(pairs)))
	for _, kv := range pairs {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(kv[0])))
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(kv[1])))
	}
	for _, kv := range pairs {
		dst = append(append(dst, kv[0]...), 0)
		dst = append(append(dst, kv[1]...), 0)
	}
	return dst
}
