package rules

import (
	"strings"

	"github.com/meshlimit/meshlimit/internal/fnv"
)

// keyKind is the kind of one key part.
type keyKind uint8

const (
	keyClientIP keyKind = iota + 1
	keyHeader
	keyPath
	keyMethod
	keyHost
	keyRouteName
	keyQuery
	keyConstant
	keyProperty
)

var keyKindNames = [...]string{
	keyClientIP: "client_ip", keyHeader: "header", keyPath: "path", keyMethod: "method",
	keyHost: "host", keyRouteName: "route_name", keyQuery: "query", keyConstant: "constant",
	keyProperty: "property",
}

func (k keyKind) String() string {
	if int(k) < len(keyKindNames) && keyKindNames[k] != "" {
		return keyKindNames[k]
	}
	return "unknown"
}

// keyPart is one compiled key part.
type keyPart struct {
	kind        keyKind
	name        string   // header (lower-case), query parameter, or constant value
	property    []string // property path segments
	trustedHops int      // client_ip: 0 = source.address, N = Nth x-forwarded-for entry from the right
	v4Bits      int      // client_ip: prefix length for IPv4, 1 to 32 (32: the whole address)
	v6Bits      int      // client_ip: prefix length for IPv6, 1 to 128 (128: the whole address)
}

// KeyStatus is the outcome of AppendKey.
type KeyStatus uint8

const (
	// KeyFound means the key value was appended.
	KeyFound KeyStatus = iota
	// KeySkip means a key part is missing and missing_key is "skip": the rule does not apply.
	KeySkip
	// KeyConflict means a key part has two different values in the request: a repeated key
	// header or query parameter. The rule refuses such a request (it is denied, and only
	// counted in shadow mode) instead of charging one value's bucket while the upstream may
	// serve another.
	KeyConflict
)

// AppendKey appends the rule's key value for req to dst and returns the extended buffer;
// the key is the appended suffix, valid when st is KeyFound. With KeySkip (a key part is
// missing and the rule's missing_key is "skip": the rule does not apply) and KeyConflict (a
// key part has two different values: the rule refuses the request) dst comes back unchanged.
// AppendKey allocates only when dst must grow.
//
// The key value is the values of the rule's key parts, in order, joined by '|'. Inside a
// part, '\' and '|' are escaped by a preceding '\', so the joining is unambiguous and a part
// never produces the sequence `\#` by itself. This human form is what overrides
// name in "value", what debug logs print, and what the plugin hashes into a slot. Parts:
//   - client_ip: the address, IPv4-mapped IPv6 unmapped and zone dropped ("192.0.2.7",
//     "2001:db8::1"); with a mask shorter than the address, the masked prefix in CIDR form
//     ("192.0.2.0/24", "2001:db8::/64"). It is taken from source.address, or with
//     trusted_hops N from the N-th x-forwarded-for entry counted from the right.
//   - header, property: the value as the host returns it. A header that is repeated with
//     different values is a conflict; repeated equal values count once.
//   - query: the value of the parameter, percent-decoded, with '+' read as a space; a
//     parameter that is repeated with different values is a conflict.
//   - path: the normalized path (AppendNormalizedPath: no query, unreserved characters
//     decoded, slashes merged, dot segments resolved; case kept).
//   - method, route_name: as is. host: lower-cased, without its port and trailing dot.
//   - constant: the configured string.
//
// An empty value counts as missing. A part longer than 256 bytes is replaced by `\#` and 16
// hex digits of its FNV-64a hash, so hostile values cannot grow keys: they still get their
// own bucket, but no override can name them.
//
// When a part is missing, missing_key decides: "skip" (ok is false) or "default" (the key
// value is empty: every such request shares one bucket, which an override with value ""
// can size). A conflict is decided before missing parts: a rule never skips a request that
// also has a conflicting part. A rule without key parts has the single key value "".
func (r *Rule) AppendKey(dst []byte, req Request) (key []byte, st KeyStatus) {
	start := len(dst)
	missing := false
	for i := range r.key {
		if i > 0 {
			dst = append(dst, '|')
		}
		var ps KeyStatus
		dst, ps = r.key[i].appendValue(dst, req)
		switch ps {
		case KeyConflict:
			return dst[:start], KeyConflict
		case KeySkip:
			missing = true
		}
	}
	if missing {
		if r.MissingKey == MissingKeyDefault {
			return dst[:start], KeyFound
		}
		return dst[:start], KeySkip
	}
	return dst, KeyFound
}

// appendValue appends the escaped value of the part. KeySkip means the request lacks it, and
// KeyConflict that it has two different values; dst may then hold a partial value the
// caller discards.
func (p *keyPart) appendValue(dst []byte, req Request) ([]byte, KeyStatus) {
	var v string
	ok := true
	switch p.kind {
	case keyClientIP:
		return p.appendClientIP(dst, req)
	case keyHeader:
		return appendHeaderValue(dst, req, p.name)
	case keyPath:
		v = req.NormalizedPath()
	case keyMethod:
		v = req.Method()
	case keyHost:
		return appendLower(dst, hostName(req.Host()))
	case keyRouteName:
		v = req.RouteName()
	case keyQuery:
		return appendQueryParam(dst, req.Path(), p.name)
	case keyConstant:
		v = p.name
	case keyProperty:
		v, ok = req.Property(p.property)
	}
	if !ok || v == "" {
		return dst, KeySkip
	}
	return appendPart(dst, v), KeyFound
}

// appendHeaderValue appends the value of the header name: its only value, or the value all of
// its occurrences share. Different values are a conflict, and an empty value is missing.
func appendHeaderValue(dst []byte, req Request, name string) ([]byte, KeyStatus) {
	v, ok := req.HeaderValue(name, 0)
	for i := 1; ok; i++ {
		var w string
		if w, ok = req.HeaderValue(name, i); ok && w != v {
			return dst, KeyConflict
		}
	}
	if v == "" {
		return dst, KeySkip
	}
	return appendPart(dst, v), KeyFound
}

// appendPart appends the escaped form of v, or its hashed form when v is longer than
// maxPartLen.
func appendPart(dst []byte, v string) []byte {
	if len(v) > maxPartLen {
		return appendHashed(dst, fnv.String(v))
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c == '\\' || c == '|' {
			dst = append(dst, '\\')
		}
		dst = append(dst, c)
	}
	return dst
}

// appendHashed appends `\#` and h as 16 lower-case hex digits.
func appendHashed(dst []byte, h uint64) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '\\', '#')
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, hexDigits[(h>>uint(shift))&0xf])
	}
	return dst
}

// appendLower appends the escaped, lower-cased host; an empty host is missing.
func appendLower(dst []byte, host string) ([]byte, KeyStatus) {
	if host == "" {
		return dst, KeySkip
	}
	if len(host) > maxPartLen {
		return appendHashed(dst, fnv.String(strings.ToLower(host))), KeyFound
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c == '\\' || c == '|' {
			dst = append(dst, '\\')
		}
		dst = append(dst, c)
	}
	return dst, KeyFound
}
