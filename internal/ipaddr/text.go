package ipaddr

import "strconv"

// AppendTo appends a's text as netip.Addr.AppendTo does: dotted decimal for IPv4, "::ffff:" and
// dotted decimal for an IPv4-mapped IPv6 address, else RFC 5952 (lower-case hex groups without
// leading zeros, the first longest run of two or more zero groups as "::"). The zero Addr
// appends nothing.
func (a Addr) AppendTo(dst []byte) []byte {
	switch {
	case a.Is4():
		return append4(dst, a.b[12:])
	case a.Is4In6():
		return append4(append(dst, "::ffff:"...), a.b[12:])
	case a.bits == 128:
		return append6(dst, &a.b)
	}
	return dst
}

// AppendPrefix appends the prefix of a's first bits in CIDR form, as netip.Prefix.AppendTo does
// for a.Prefix(bits): the masked address, "/" and bits. ok is false when bits is not between 0
// and a.BitLen().
func (a Addr) AppendPrefix(dst []byte, bits int) ([]byte, bool) {
	m, ok := a.Masked(bits)
	if !ok {
		return dst, false
	}
	return strconv.AppendInt(append(m.AppendTo(dst), '/'), int64(bits), 10), true
}

func append4(dst []byte, b []byte) []byte {
	for i, v := range b[:4] {
		if i > 0 {
			dst = append(dst, '.')
		}
		dst = strconv.AppendUint(dst, uint64(v), 10)
	}
	return dst
}

func append6(dst []byte, b *[16]byte) []byte {
	group := func(i int) uint64 { return uint64(b[2*i])<<8 | uint64(b[2*i+1]) }
	runStart, runLen := -1, 1 // the first longest run of zero groups, if longer than 1
	for i := 0; i < 8; {
		j := i
		for j < 8 && group(j) == 0 {
			j++
		}
		if j-i > runLen {
			runStart, runLen = i, j-i
		}
		i = max(j, i+1)
	}
	for i := 0; i < 8; i++ {
		if i == runStart {
			dst = append(dst, ':', ':')
			i += runLen - 1
			continue
		}
		if i > 0 && i != runStart+runLen {
			dst = append(dst, ':')
		}
		dst = strconv.AppendUint(dst, group(i), 16)
	}
	return dst
}
