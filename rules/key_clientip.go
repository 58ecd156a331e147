package rules

import (
	"strings"

	"github.com/meshlimit/meshlimit/internal/ipaddr"
)

// ClientAddr is a client address parsed once: what source.address or an x-forwarded-for entry
// holds, unmapped and without zone, plus its text when that text is already the key form of the
// whole address (a canonical IPv4 address, the usual case), so that a part keying the whole
// address appends it without rendering. Every key part and shedder share key of a request reads
// the one parse of source.address (Request.SourceAddr).
type ClientAddr struct {
	addr ipaddr.Addr
	text string // the canonical IPv4 text of addr, or "" (render addr)
	ok   bool   // false: not an address (the part is missing)
}

// ParseClientAddr parses s as parseClientAddr does. A canonical IPv4 address with an optional
// port is parsed in one pass; every other form goes through package ipaddr. It does not allocate.
func ParseClientAddr(s string) ClientAddr {
	if a, n, ok := parseIPv4Prefix(s); ok && (n == len(s) || s[n] == ':' && isPort(s[n+1:])) {
		return ClientAddr{addr: a, text: s[:n], ok: true}
	}
	addr, ok := parseClientAddr(s)
	return ClientAddr{addr: addr, ok: ok}
}

// parseIPv4Prefix parses the canonical IPv4 address s starts with (four decimal fields from 0 to
// 255 without leading zeros: the one form ipaddr, like net/netip, accepts and renders) and returns how many bytes
// it took; ok is false when s does not start with one.
func parseIPv4Prefix(s string) (addr ipaddr.Addr, n int, ok bool) {
	var b [4]byte
	i := 0
	for f := 0; f < 4; f++ {
		if f > 0 {
			if i >= len(s) || s[i] != '.' {
				return addr, 0, false
			}
			i++
		}
		v, start := 0, i
		for i < len(s) && i-start < 3 && s[i] >= '0' && s[i] <= '9' {
			v = v*10 + int(s[i]-'0')
			i++
		}
		if i == start || v > 255 || i-start > 1 && s[start] == '0' || i < len(s) && s[i] >= '0' && s[i] <= '9' {
			return addr, 0, false
		}
		b[f] = byte(v)
	}
	return ipaddr.From4(b), i, true
}

// appendClientIP appends the client address, masked as configured. The address comes from
// source.address when trustedHops is 0, else from the trustedHops-th entry of
// x-forwarded-for counted from the right (1 = the rightmost); a repeated x-forwarded-for
// header counts as its values joined with ",", in order. Fewer entries than that, or an entry
// that is not an IP address (with an optional port, brackets or zone), make the part missing:
// the header's untrusted left side is never consulted.
func (p *keyPart) appendClientIP(dst []byte, req Request) ([]byte, KeyStatus) {
	var a ClientAddr
	if p.trustedHops == 0 {
		a = req.SourceAddr()
	} else {
		s, ok := forwardedFromRight(req, p.trustedHops)
		if !ok {
			return dst, KeySkip
		}
		a = ParseClientAddr(s)
	}
	if !a.ok {
		return dst, KeySkip
	}
	if p.v4Bits >= 32 && a.text != "" { // already in key form
		return append(dst, a.text...), KeyFound
	}
	return p.appendMasked(dst, a.addr)
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
func (p *keyPart) appendMasked(dst []byte, addr ipaddr.Addr) ([]byte, KeyStatus) {
	bits := p.v6Bits
	if addr.Is4() {
		bits = p.v4Bits
	}
	if bits < addr.BitLen() {
		dst, ok := addr.AppendPrefix(dst, bits)
		if !ok {
			return dst, KeySkip
		}
		return dst, KeyFound
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
func parseClientAddr(s string) (ipaddr.Addr, bool) {
	host, ok := clientHost(s)
	if !ok {
		return ipaddr.Addr{}, false
	}
	addr, ok := ipaddr.ParseAddr(host)
	if !ok {
		return ipaddr.Addr{}, false
	}
	return addr.Unmap(), true
}

// clientHost returns the address text of s (see parseClientAddr) without brackets, port and zone,
// or false when s cannot hold an address: brackets, port and zone are checked here, the address
// itself by ipaddr.ParseAddr.
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
	// Drop the zone: the key names the address without it.
	if i := strings.IndexByte(host, '%'); i >= 0 {
		if i == 0 || strings.IndexByte(host, '.') >= 0 && strings.IndexByte(host, ':') < 0 {
			return "", false // an IPv4 address has no zone
		}
		host = host[:i]
	}
	// Most garbage ("unknown", host names, binary) is rejected here, in one pass.
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
