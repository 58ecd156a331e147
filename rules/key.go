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
	v4Bits      int      // client_ip: prefix length for IPv4, 1 to 32 (32: the whole address)
	v6Bits      int      // client_ip: prefix length for IPv6, 1 to 128 (128: the whole address)
}

// Default prefix lengths of the client_ip key part. An IPv4 address is what one subscriber
// usually gets; an IPv6 subscriber usually gets a whole /64 (RFC 6177, and SLAAC needs one), so
// keying on the whole IPv6 address would give one client 2^64 buckets.
const (
	DefaultIPv4Mask = 32
	DefaultIPv6Mask = 64
)

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

// appendClientIP appends the client address, masked as configured. The address comes from
// source.address when trustedHops is 0, else from the trustedHops-th entry of
// x-forwarded-for counted from the right (1 = the rightmost); a repeated x-forwarded-for
// header counts as its values joined with ",", in order. Fewer entries than that, or an entry
// that is not an IP address (with an optional port, brackets or zone), make the part missing:
// the header's untrusted left side is never consulted.
func (p *keyPart) appendClientIP(dst []byte, req Request) ([]byte, KeyStatus) {
	var s string
	if p.trustedHops == 0 {
		s = req.SourceAddress()
	} else {
		var ok bool
		if s, ok = forwardedFromRight(req, p.trustedHops); !ok {
			return dst, KeySkip
		}
	}
	host, ok := clientHost(s)
	if !ok {
		return dst, KeySkip
	}
	// The usual case, a plain IPv4 address keyed whole, is already in key form: netip would
	// render exactly the canonical text it parsed.
	if p.v4Bits >= 32 && isCanonicalIPv4(host) {
		return append(dst, host...), KeyFound
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return dst, KeySkip
	}
	return p.appendMasked(dst, addr.Unmap())
}

// isCanonicalIPv4 reports whether s is an IPv4 address in the one form netip accepts and renders:
// four decimal fields from 0 to 255, without leading zeros.
func isCanonicalIPv4(s string) bool {
	fields, v, digits := 0, 0, 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			if digits == 0 || v > 255 {
				return false
			}
			if fields++; fields > 4 {
				return false
			}
			v, digits = 0, 0
			continue
		}
		c := s[i]
		if c < '0' || c > '9' || digits == 3 || digits == 1 && v == 0 {
			return false
		}
		v = v*10 + int(c-'0')
		digits++
	}
	return fields == 4
}

// forwardedFromRight returns the n-th (n ≥ 1) entry of the x-forwarded-for values counted from
// the right, reading the values from the last one backwards.
func forwardedFromRight(req Request, n int) (string, bool) {
	first, ok := req.HeaderValue("x-forwarded-for", 0)
	if !ok {
		return "", false
	}
	count := 1
	for ; ; count++ {
		if _, ok := req.HeaderValue("x-forwarded-for", count); !ok {
			break
		}
	}
	if count == 1 { // the usual case: one value, already read
		s, _, ok := nthFromRight(first, n)
		return s, ok
	}
	for i := count - 1; i >= 0; i-- {
		v, _ := req.HeaderValue("x-forwarded-for", i)
		s, seen, ok := nthFromRight(v, n)
		if ok {
			return s, true
		}
		n -= seen
	}
	return "", false
}

// appendMasked appends addr in key form: the masked prefix in CIDR form when the part's prefix
// length for the address's family is shorter than the address, else the address.
func (p *keyPart) appendMasked(dst []byte, addr netip.Addr) ([]byte, KeyStatus) {
	bits := p.v6Bits
	if addr.Is4() {
		bits = p.v4Bits
	}
	if bits < addr.BitLen() {
		prefix, err := addr.Prefix(bits)
		if err != nil {
			return dst, KeySkip
		}
		return prefix.AppendTo(dst), KeyFound
	}
	return addr.AppendTo(dst), KeyFound
}

// nthFromRight returns the n-th (n ≥ 1) comma-separated item of list counted from the right,
// trimmed of spaces and tabs; when list has fewer items, ok is false and seen is how many it
// has. It reads only the last n items, so a header with thousands of hops costs no more than a
// short one.
func nthFromRight(list string, n int) (item string, seen int, ok bool) {
	end := len(list)
	for i := 1; ; i++ {
		start := strings.LastIndexByte(list[:end], ',') + 1
		if i == n {
			return trimOWS(list[start:end]), i, true
		}
		if start == 0 {
			return "", i, false
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
	host, ok := clientHost(s)
	if !ok {
		return netip.Addr{}, false
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return addr.Unmap(), true
}

// clientHost returns the address text of s (see parseClientAddr) without brackets, port and zone,
// or false when s cannot hold an address: it rejects cheaply what netip would reject with an
// allocated error.
func clientHost(s string) (string, bool) {
	if s == "" || len(s) > maxXFFItem {
		return "", false
	}
	host := s
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", false
		}
		host = s[1:end]
		if rest := s[end+1:]; rest != "" && (rest[0] != ':' || !isPort(rest[1:])) {
			return "", false
		}
	} else if i := strings.IndexByte(s, ':'); i >= 0 && strings.LastIndexByte(s, ':') == i {
		// Exactly one colon: IPv4 with a port.
		if !isPort(s[i+1:]) {
			return "", false
		}
		host = s[:i]
	}
	// Drop the zone before parsing: netip interns zones, which allocates.
	if i := strings.IndexByte(host, '%'); i >= 0 {
		if i == 0 || strings.IndexByte(host, '.') >= 0 && strings.IndexByte(host, ':') < 0 {
			return "", false // an IPv4 address has no zone
		}
		host = host[:i]
	}
	// netip's parse errors allocate; most garbage ("unknown", host names, binary) is
	// rejected here first, so only address-like garbage costs one small allocation.
	for i := 0; i < len(host); i++ {
		if c := host[i]; !isHex(c) && c != '.' && c != ':' {
			return "", false
		}
	}
	return host, true
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
// is also reported as a non-nil error, for the caller to log or count. A repeated cost header
// is charged its highest value, so a client cannot hide a cost behind a cheaper one.
func (r *Rule) Cost(req Request) (int64, error) {
	c := &r.cost
	if c.header == "" {
		return c.constant, nil
	}
	cost := int64(0)
	var err error
	for i := 0; ; i++ {
		v, ok := req.HeaderValue(c.header, i)
		if !ok {
			break
		}
		n, ok := parseCost(v)
		if !ok {
			n = c.def
			if err == nil {
				err = fmt.Errorf("filter: rule %q: cost header %q: invalid value %.32q: want a positive integer", r.Name, c.header, v)
			}
		}
		cost = max(cost, min(n, c.max))
	}
	if cost == 0 {
		return c.def, nil
	}
	return cost, err
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
