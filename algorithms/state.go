package algorithms

import (
	"encoding/binary"
	"fmt"
)

// Every state encoding starts with one byte, version<<4 | kind, followed by big-endian
// fixed-width fields (layouts in doc.go). Version 1 is the only version.
const stateVersion = 1

// header returns the first byte of a version-1 state of kind k.
func header(k Kind) byte { return stateVersion<<4 | byte(k) }

// checkHeader verifies the first byte of a non-empty state of kind k, and reports sizeOK ==
// false (the caller's check of len(b)) as an error that names wantSize.
func checkHeader(b []byte, k Kind, sizeOK bool, wantSize string) error {
	if v := b[0] >> 4; v != stateVersion {
		return fmt.Errorf("%w: version %d, want %d", ErrMalformedState, v, stateVersion)
	}
	if got := Kind(b[0] & 0xf); got != k {
		return fmt.Errorf("%w: kind %v, want %v", ErrMalformedState, got, k)
	}
	if !sizeOK {
		return fmt.Errorf("%w: %v state of %d bytes, want %s", ErrMalformedState, k, len(b), wantSize)
	}
	return nil
}

// field reads the big-endian uint64 at b[off:] and checks that it is at most max.
func field(b []byte, off int, max int64, name string, k Kind) (int64, error) {
	u := binary.BigEndian.Uint64(b[off:])
	if u > uint64(max) {
		return 0, fmt.Errorf("%w: %v %s %d out of range [0, %d]", ErrMalformedState, k, name, u, max)
	}
	return int64(u), nil
}

func appendField(dst []byte, v int64) []byte { return binary.BigEndian.AppendUint64(dst, uint64(v)) }
