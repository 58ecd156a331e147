package rules

import (
	"net/netip"
	"strings"
)

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
