package rules

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/meshlimit/meshlimit/internal/fnv"
)

// maxPartLen is the longest part value kept verbatim in a key.
const maxPartLen = 256

// maxXFFItem bounds one x-forwarded-for entry or source address worth parsing:
// "[" + a full IPv6 literal with an IPv4 tail + "%" + a zone + "]:65535" fits in it.
const maxXFFItem = 96

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
	v4Bits      int      // client_ip: prefix length for IPv4; 0 = whole address
	v6Bits      int      // client_ip: prefix length for IPv6; 0 = whole address
}

// AppendKey appends the rule's key value for req to dst and returns the extended buffer;
// the key is the appended suffix. ok is false when a key part is missing and the rule's
// missing_key is "skip": the rule does not apply to req, and dst comes back unchanged.
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
//   - header, property: the value as the host returns it.
//   - query: the first value of the parameter, percent-decoded, with '+' read as a space.
//   - path: the :path without the query, as Envoy passes it on (not decoded).
//   - method, route_name: as is. host: lower-cased, without its port.
//   - constant: the configured string.
//
// An empty value counts as missing. A part longer than 256 bytes is replaced by `\#` and 16
// hex digits of its FNV-64a hash, so hostile values cannot grow keys: they still get their
// own bucket, but no override can name them.
//
// When a part is missing, missing_key decides: "skip" (ok is false) or "default" (the key
// value is empty: every such request shares one bucket, which an override with value ""
// can size). A rule without key parts has the single key value "".
func (r *Rule) AppendKey(dst []byte, req Request) (key []byte, ok bool) {
	start := len(dst)
	for i := range r.key {
		if i > 0 {
			dst = append(dst, '|')
		}
		var present bool
		dst, present = r.key[i].appendValue(dst, req)
		if !present {
			if r.MissingKey == MissingKeyDefault {
				return dst[:start], true
			}
			return dst[:start], false
		}
	}
	return dst, true
}

// appendValue appends the escaped value of the part; present is false when the request
// lacks it (and then dst may hold a partial value the caller discards).
func (p *keyPart) appendValue(dst []byte, req Request) ([]byte, bool) {
	var v string
	var ok bool
	switch p.kind {
	case keyClientIP:
		return p.appendClientIP(dst, req)
	case keyHeader:
		v, ok = req.Header(p.name)
	case keyPath:
		v, ok = urlPath(req.Path()), true
	case keyMethod:
		v, ok = req.Method(), true
	case keyHost:
		return appendLower(dst, stripPort(req.Host()))
	case keyRouteName:
		v, ok = req.RouteName(), true
	case keyQuery:
		return appendQueryParam(dst, req.Path(), p.name)
	case keyConstant:
		v, ok = p.name, true
	case keyProperty:
		v, ok = req.Property(p.property)
	}
	if !ok || v == "" {
		return dst, false
	}
	return appendPart(dst, v), true
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
func appendLower(dst []byte, host string) ([]byte, bool) {
	if host == "" {
		return dst, false
	}
	if len(host) > maxPartLen {
		return appendHashed(dst, fnv.String(strings.ToLower(host))), true
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
	return dst, true
}

// appendQueryParam appends the percent-decoded first value of the query parameter name in
// the :path p. A parameter whose name matches after decoding counts. A value longer than
// maxPartLen (after decoding) is appended in hashed form.
func appendQueryParam(dst []byte, p, name string) ([]byte, bool) {
	q := p
	if i := strings.IndexByte(q, '?'); i >= 0 {
		q = q[i+1:]
	} else {
		return dst, false
	}
	for q != "" {
		var pair string
		pair, q, _ = strings.Cut(q, "&")
		k, v, _ := strings.Cut(pair, "=")
		if !queryEqual(k, name) {
			continue
		}
		if v == "" {
			return dst, false
		}
		start := len(dst)
		n := 0
		for i := 0; i < len(v); {
			var c byte
			c, i = queryByte(v, i)
			n++
			if n > maxPartLen {
				// Rare and hostile: hash the decoded value instead.
				return appendHashed(dst[:start], fnv.String(decodeQuery(v))), true
			}
			if c == '\\' || c == '|' {
				dst = append(dst, '\\')
			}
			dst = append(dst, c)
		}
		return dst, true
	}
	return dst, false
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

// appendClientIP appends the client address, masked as configured. The address comes from
// source.address when trustedHops is 0, else from the trustedHops-th entry of
// x-forwarded-for counted from the right (1 = the rightmost). Fewer entries than that, or
// an entry that is not an IP address (with an optional port, brackets or zone), make the
// part missing: the header's untrusted left side is never consulted.
func (p *keyPart) appendClientIP(dst []byte, req Request) ([]byte, bool) {
	var s string
	if p.trustedHops == 0 {
		s = req.SourceAddress()
	} else {
		xff, ok := req.Header("x-forwarded-for")
		if !ok {
			return dst, false
		}
		if s, ok = nthFromRight(xff, p.trustedHops); !ok {
			return dst, false
		}
	}
	addr, ok := parseClientAddr(s)
	if !ok {
		return dst, false
	}
	return p.appendMasked(dst, addr)
}

// appendMasked appends addr in key form: the prefix in CIDR form when the part masks addresses of
// its family, else the address.
func (p *keyPart) appendMasked(dst []byte, addr netip.Addr) ([]byte, bool) {
	bits := p.v6Bits
	if addr.Is4() {
		bits = p.v4Bits
	}
	if bits > 0 && bits < addr.BitLen() {
		prefix, err := addr.Prefix(bits)
		if err != nil {
			return dst, false
		}
		return prefix.AppendTo(dst), true
	}
	return addr.AppendTo(dst), true
}

// nthFromRight returns the n-th (n ≥ 1) comma-separated item of list counted from the right,
// trimmed of spaces and tabs. It reads only the last n items, so a header with thousands of
// hops costs no more than a short one.
func nthFromRight(list string, n int) (string, bool) {
	end := len(list)
	for i := 1; ; i++ {
		start := strings.LastIndexByte(list[:end], ',') + 1
		if i == n {
			return trimOWS(list[start:end]), true
		}
		if start == 0 {
			return "", false
		}
		end = start - 1
	}
}

// trimOWS trims HTTP optional whitespace (spaces and tabs) from both ends of s.
func trimOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// parseClientAddr parses an address as found in source.address or x-forwarded-for:
// "192.0.2.1", "192.0.2.1:443", "2001:db8::1", "[2001:db8::1]", "[2001:db8::1]:443", with an
// optional "%zone" on IPv6. The result is unmapped (::ffff:192.0.2.1 becomes 192.0.2.1) and
// has no zone. It does not allocate.
func parseClientAddr(s string) (netip.Addr, bool) {
	if s == "" || len(s) > maxXFFItem {
		return netip.Addr{}, false
	}
	host := s
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		host = s[1:end]
		if rest := s[end+1:]; rest != "" && (rest[0] != ':' || !isPort(rest[1:])) {
			return netip.Addr{}, false
		}
	} else if i := strings.IndexByte(s, ':'); i >= 0 && strings.LastIndexByte(s, ':') == i {
		// Exactly one colon: IPv4 with a port.
		if !isPort(s[i+1:]) {
			return netip.Addr{}, false
		}
		host = s[:i]
	}
	// Drop the zone before parsing: netip interns zones, which allocates.
	if i := strings.IndexByte(host, '%'); i >= 0 {
		if i == 0 || strings.IndexByte(host, '.') >= 0 && strings.IndexByte(host, ':') < 0 {
			return netip.Addr{}, false // an IPv4 address has no zone
		}
		host = host[:i]
	}
	// netip's parse errors allocate; most garbage ("unknown", host names, binary) is
	// rejected here first, so only address-like garbage costs one small allocation.
	for i := 0; i < len(host); i++ {
		if c := host[i]; !isHex(c) && c != '.' && c != ':' {
			return netip.Addr{}, false
		}
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return addr.Unmap(), true
}

// isPort reports whether s is a decimal port number (1 to 5 digits).
func isPort(s string) bool {
	if s == "" || len(s) > 5 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Limits returns the set of limits that applies to the key value key (as returned by
// AppendKey): the set of the override whose value equals key, else the rule's own. unlimited
// is true when an override declares the key unlimited; set is then nil. The returned set is
// shared and must not be modified. Limits does not allocate.
func (r *Rule) Limits(key []byte) (set *LimitSet, unlimited bool) {
	if len(r.overrides) > 0 {
		if i, ok := r.overrides[string(key)]; ok {
			if i < 0 {
				return nil, true
			}
			return &r.sets[i], false
		}
	}
	return &r.sets[0], false
}

// Cost returns the number of quota units req consumes: the rule's constant cost, or the
// value of its cost header. Cost always returns a usable cost of at least 1. For a header
// cost, a missing header costs the configured default; a value above the configured max
// is charged max; and a value that is not a positive decimal integer costs the default and
// is also reported as a non-nil error, for the caller to log or count.
func (r *Rule) Cost(req Request) (int64, error) {
	c := &r.cost
	if c.header == "" {
		return c.constant, nil
	}
	v, ok := req.Header(c.header)
	if !ok {
		return c.def, nil
	}
	n, ok := parseCost(v)
	if !ok {
		return c.def, fmt.Errorf("filter: rule %q: cost header %q: invalid value %.32q: want a positive integer", r.Name, c.header, v)
	}
	if n > c.max {
		return c.max, nil
	}
	return n, nil
}

// parseCost parses a positive decimal integer surrounded by optional spaces or tabs. It
// rejects signs, fractions and values that do not fit in 18 digits.
func parseCost(s string) (int64, bool) {
	s = trimOWS(s)
	if s == "" || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, n > 0
}
