package ipaddr

// ParseAddr parses s as netip.ParseAddr does, zones aside: an IPv4 address in dotted decimal (four
// fields from 0 to 255, no leading zeros) or an IPv6 address (up to eight groups of one to four hex
// digits, one "::" for one or more zero groups, optionally ending in a dotted IPv4 address in place
// of the last two groups). An IPv6 zone ("%eth0") is refused: strip it first. ok is false when s is
// not an address.
func ParseAddr(s string) (a Addr, ok bool) {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '.':
			b, ok := parse4(s)
			return From4(b), ok
		case ':':
			return parse6(s)
		case '%':
			return Addr{}, false
		}
	}
	return Addr{}, false
}

// parse4 parses the dotted-decimal IPv4 address s.
func parse4(s string) (b [4]byte, ok bool) {
	field, start := 0, 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] != '.' {
			continue
		}
		v, ok := decimalByte(s[start:i])
		if !ok || field > 3 {
			return b, false
		}
		b[field] = v
		field, start = field+1, i+1
	}
	return b, field == 4
}

// decimalByte parses a field of an IPv4 address: 1 to 3 decimal digits, no leading zero (but "0"),
// at most 255.
func decimalByte(s string) (byte, bool) {
	if s == "" || len(s) > 3 || len(s) > 1 && s[0] == '0' {
		return 0, false
	}
	v := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		v = v*10 + int(s[i]-'0')
	}
	return byte(v), v <= 255
}

// parse6 parses the IPv6 address s (see ParseAddr).
func parse6(s string) (Addr, bool) {
	var b [16]byte
	n, gap := 0, -1 // bytes filled; where "::" stands, -1 for none
	if len(s) >= 2 && s[0] == ':' && s[1] == ':' {
		gap, s = 0, s[2:]
	}
	for s != "" {
		end := 0
		for end < len(s) && end <= 4 && hexDigit(s[end]) >= 0 {
			end++
		}
		if end < len(s) && s[end] == '.' { // the dotted IPv4 tail
			v4, ok := parse4(s)
			if !ok || n > 12 || gap < 0 && n != 12 {
				return Addr{}, false
			}
			copy(b[n:], v4[:])
			n, s = n+4, ""
			break
		}
		if end == 0 || end > 4 || n == 16 {
			return Addr{}, false
		}
		g := 0
		for i := 0; i < end; i++ {
			g = g<<4 | hexDigit(s[i])
		}
		b[n], b[n+1] = byte(g>>8), byte(g)
		n, s = n+2, s[end:]
		if s == "" {
			break
		}
		if s[0] != ':' || len(s) == 1 {
			return Addr{}, false
		}
		s = s[1:]
		if s[0] == ':' {
			if gap >= 0 {
				return Addr{}, false
			}
			gap, s = n, s[1:]
		}
	}
	switch {
	case gap < 0 && n < 16, gap >= 0 && n == 16:
		return Addr{}, false // too short; a "::" standing for no group
	case gap >= 0:
		shift := 16 - n
		copy(b[gap+shift:], b[gap:n])
		clear(b[gap : gap+shift])
	}
	return From16(b), true
}

// hexDigit returns the value of the hex digit c, or -1.
func hexDigit(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
