package rules

import (
	"strings"

	"github.com/meshlimit/meshlimit/internal/fnv"
)

// appendQueryParam appends the percent-decoded value of the query parameter name in the :path
// p. A parameter whose name matches after decoding counts. A parameter given several times
// with different (decoded) values is a conflict; an empty value is missing. A value longer
// than maxPartLen (after decoding) is appended in hashed form.
func appendQueryParam(dst []byte, p, name string) ([]byte, KeyStatus) {
	i := strings.IndexByte(p, '?')
	if i < 0 {
		return dst, KeySkip
	}
	q := p[i+1:]
	found := false
	var first string
	for q != "" {
		var pair string
		pair, q, _ = strings.Cut(q, "&")
		k, v, _ := strings.Cut(pair, "=")
		if !queryEqual(k, name) {
			continue
		}
		if !found {
			found, first = true, v
		} else if !queryValuesEqual(first, v) {
			return dst, KeyConflict
		}
	}
	if !found || first == "" {
		return dst, KeySkip
	}
	return appendQueryValue(dst, first), KeyFound
}

// appendQueryValue appends the decoded, escaped raw query value v, or its hashed form when it
// decodes to more than maxPartLen bytes.
func appendQueryValue(dst []byte, v string) []byte {
	start := len(dst)
	n := 0
	for i := 0; i < len(v); {
		var c byte
		c, i = queryByte(v, i)
		n++
		if n > maxPartLen {
			// Rare and hostile: hash the decoded value instead.
			return appendHashed(dst[:start], fnv.String(decodeQuery(v)))
		}
		if c == '\\' || c == '|' {
			dst = append(dst, '\\')
		}
		dst = append(dst, c)
	}
	return dst
}

// queryValuesEqual reports whether the raw query values a and b decode to the same bytes.
func queryValuesEqual(a, b string) bool {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		var ca, cb byte
		ca, i = queryByte(a, i)
		cb, j = queryByte(b, j)
		if ca != cb {
			return false
		}
	}
	return i == len(a) && j == len(b)
}

// queryByte decodes the byte of a raw query component s at i ('+' is a space, %XX a byte) and
// returns it with the index of the next one.
func queryByte(s string, i int) (byte, int) {
	switch c := s[i]; {
	case c == '+':
		return ' ', i + 1
	case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
		return unhex(s[i+1])<<4 | unhex(s[i+2]), i + 3
	default:
		return c, i + 1
	}
}

// queryEqual reports whether the raw (percent-encoded) query key k decodes to name.
func queryEqual(k, name string) bool {
	j := 0
	for i := 0; i < len(k); {
		var c byte
		c, i = queryByte(k, i)
		if j >= len(name) || name[j] != c {
			return false
		}
		j++
	}
	return j == len(name)
}

// decodeQuery percent-decodes v; it allocates, and is only used on the hashed slow path.
func decodeQuery(v string) string {
	b := make([]byte, 0, len(v))
	for i := 0; i < len(v); {
		var c byte
		c, i = queryByte(v, i)
		b = append(b, c)
	}
	return string(b)
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}
