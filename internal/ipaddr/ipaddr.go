// Package ipaddr parses, masks and renders IP addresses exactly as net/netip does for addresses
// without a zone, without linking net/netip: netip's package initialiser interns its zone records
// with unique.Make, whose weak pointers and hash-trie map the filter's every VM would otherwise
// compile and run at start-up (on V8 the most expensive initialiser after the runtime's and
// unicode's). Nothing here allocates. Its tests hold it to net/netip on every input they try.
package ipaddr

// Addr is an IPv4 or IPv6 address, or the zero Addr (no address). An IPv4 address keeps its four
// bytes in b[12:16].
type Addr struct {
	b    [16]byte
	bits uint8 // 32 (IPv4), 128 (IPv6), 0 (the zero Addr)
}

// From4 returns the IPv4 address of b.
func From4(b [4]byte) Addr {
	var a Addr
	copy(a.b[12:], b[:])
	a.bits = 32
	return a
}

// From16 returns the IPv6 address of b (an IPv4-mapped one stays IPv6, as netip.AddrFrom16).
func From16(b [16]byte) Addr { return Addr{b: b, bits: 128} }

// IsValid reports whether a is an address (not the zero Addr).
func (a Addr) IsValid() bool { return a.bits != 0 }

// Is4 reports whether a is an IPv4 address.
func (a Addr) Is4() bool { return a.bits == 32 }

// Is4In6 reports whether a is an IPv4-mapped IPv6 address (::ffff:a.b.c.d).
func (a Addr) Is4In6() bool {
	return a.bits == 128 && a.b[10] == 0xff && a.b[11] == 0xff && zero(a.b[:10])
}

// BitLen returns 32 for IPv4, 128 for IPv6 and 0 for the zero Addr.
func (a Addr) BitLen() int { return int(a.bits) }

// Unmap returns a with an IPv4-mapped IPv6 address turned into its IPv4 address.
func (a Addr) Unmap() Addr {
	if a.Is4In6() {
		a.bits = 32
		clear(a.b[:12])
	}
	return a
}

// Masked returns a with every bit after the first bits cleared; ok is false when bits is not
// between 0 and a.BitLen() (as netip.Addr.Prefix's error).
func (a Addr) Masked(bits int) (Addr, bool) {
	if !a.IsValid() || bits < 0 || bits > a.BitLen() {
		return Addr{}, false
	}
	start := 16 - a.BitLen()/8 // IPv4: b[12:]
	for i := start; i < 16; i++ {
		kept := bits - (i-start)*8 // bits of this byte kept
		switch {
		case kept <= 0:
			a.b[i] = 0
		case kept < 8:
			a.b[i] &= 0xff << (8 - kept)
		}
	}
	return a, true
}

func zero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
