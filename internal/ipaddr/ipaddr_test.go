package ipaddr

import (
	"math/rand/v2"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// agree checks ParseAddr and every rendering of its result against net/netip for s.
func agree(t testing.TB, s string) {
	t.Helper()
	got, ok := ParseAddr(s)
	want, err := netip.ParseAddr(s)
	if strings.IndexByte(s, '%') >= 0 { // zones are refused, whatever netip says
		require.False(t, ok, "%q", s)
		return
	}
	require.Equal(t, err == nil, ok, "%q: netip says %v", s, err)
	if !ok {
		return
	}
	require.Equal(t, want.AsSlice(), got.b[16-got.BitLen()/8:], "%q", s)
	require.Equal(t, want.BitLen(), got.BitLen(), "%q", s)
	require.Equal(t, want.Is4In6(), got.Is4In6(), "%q", s)
	require.Equal(t, want.String(), string(got.AppendTo(nil)), "%q", s)
	u, wu := got.Unmap(), want.Unmap()
	require.Equal(t, wu.String(), string(u.AppendTo(nil)), "%q unmapped", s)
	for _, bits := range prefixBits {
		if bits > u.BitLen()+1 {
			break
		}
		pfx, err := wu.Prefix(bits)
		text, ok := u.AppendPrefix(nil, bits)
		require.Equal(t, err == nil, ok, "%q/%d", s, bits)
		if ok {
			require.Equal(t, pfx.String(), string(text), "%q/%d", s, bits)
		}
	}
}

// prefixBits are the prefix lengths tried: each byte's edges, and past both ends.
var prefixBits = []int{-1, 0, 1, 7, 8, 9, 15, 16, 17, 23, 24, 25, 31, 32, 33, 47, 48, 56, 63, 64, 65, 80, 95, 96, 97, 112, 120, 127, 128, 129}

// edgeCases sit on the grammar's edges: both families, "::" anywhere, the dotted tail, leading
// zeros, overflows, too many and too few groups, zones, garbage.
var edgeCases = []string{
	"", ".", ":", "::", ":::", "1.2.3.4", "0.0.0.0", "255.255.255.255", "256.1.1.1", "01.2.3.4", "1.2.3.04",
	"1.2.3", "1.2.3.4.5", "1..2.3", ".1.2.3", "1.2.3.", "1.2.3.4:80", "1.2.3.4%eth0", "a.b.c.d", "1000.1.1.1",
	"::1", "1::", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8:9", "1:2:3:4:5:6:7::", "::2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8::",
	"::1:2:3:4:5:6:7:8", "1::2::3", "1:::2", ":1::", "1:", "12345::", "ABCD:ef01::", "0:0:0:0:0:0:0:0", "0:0:1:0:0:0:1:0",
	"1:0:0:2:0:0:0:3", "1:0:0:2:0:0:3:0", "::ffff:1.2.3.4", "::ffff:0102:0304", "::1.2.3.4", "1:2:3:4:5:6:1.2.3.4",
	"1:2:3:4:5:6:7:1.2.3.4", "1:2:3:4:5::1.2.3.4", "1:2:3:4:5:6::1.2.3.4", "1::2:3:4:5:6:7:1.2.3.4", "1:2:3:4:5:6:7::1.2.3.4", "::1234.1.2.3", "::12345.1.2.3", "::01.2.3.4",
	"::1.2.3", "fe80::1%eth0", "%eth0", "::ffff:256.1.1.1", "2001:db8::", "2001:0db8:0000:0000:0000:ff00:0042:8329",
	"::ffff:0:0", "::ffff:ffff:ffff", "0::ffff:1.2.3.4", "1.2.3.4::", "g::", "::g", " 1.2.3.4", "1.2.3.4 ",
}

func TestAddressesParseAndRenderAsNetipDoes(t *testing.T) {
	for _, s := range edgeCases {
		agree(t, s)
	}
}

// randomAddress writes a string near the grammar: groups of hex, decimal fields, colons and dots
// in random numbers, so that most are almost addresses.
func randomAddress(r *rand.Rand) string {
	const alphabet = "0123456789abcdefABCDEF.:%g"
	var b strings.Builder
	if r.IntN(2) == 0 { // built from parts
		for n := r.IntN(10); n >= 0; n-- {
			switch r.IntN(5) {
			case 0:
				b.WriteString(strconv.Itoa(r.IntN(300)))
			case 1, 2:
				b.WriteString(strconv.FormatUint(uint64(r.IntN(1<<16+2)), 16))
			case 3:
				b.WriteByte(".:"[r.IntN(2)])
			default:
				b.WriteString("::")
			}
			if r.IntN(3) > 0 {
				b.WriteByte(".:"[r.IntN(2)])
			}
		}
		return b.String()
	}
	for n := r.IntN(40); n > 0; n-- {
		b.WriteByte(alphabet[r.IntN(len(alphabet))])
	}
	return b.String()
}

func TestRandomAddressesParseAndRenderAsNetipDoes(t *testing.T) {
	r := rand.New(rand.NewPCG(22, 1))
	valid := 0
	for range 100000 {
		s := randomAddress(r)
		agree(t, s)
		if _, ok := ParseAddr(s); ok {
			valid++
		}
	}
	assert.Greater(t, valid, 500, "the generator must reach valid addresses too")
}

func TestEveryAddressRendersAsNetipDoes(t *testing.T) {
	// Addresses drawn from their bytes, most with runs of zero groups, rendered and parsed back.
	r := rand.New(rand.NewPCG(22, 2))
	for range 20000 {
		var b [16]byte
		for i := 0; i < 16; i += 2 {
			if r.IntN(2) == 0 {
				b[i], b[i+1] = byte(r.IntN(256)), byte(r.IntN(256))
			}
		}
		if r.IntN(8) == 0 { // IPv4-mapped
			clear(b[:10])
			b[10], b[11] = 0xff, 0xff
		}
		want := netip.AddrFrom16(b)
		got := From16(b)
		require.Equal(t, want.String(), string(got.AppendTo(nil)))
		agree(t, want.String())
		var v4 [4]byte
		copy(v4[:], b[12:])
		require.Equal(t, netip.AddrFrom4(v4).String(), string(From4(v4).AppendTo(nil)))
	}
}

func TestTheZeroAddrIsNoAddress(t *testing.T) {
	var a Addr
	assert.False(t, a.IsValid())
	assert.Empty(t, a.AppendTo(nil))
	_, ok := a.AppendPrefix(nil, 0)
	assert.False(t, ok)
}

func TestParsingAndRenderingDoNotAllocate(t *testing.T) {
	dst := make([]byte, 0, 64)
	allocs := testing.AllocsPerRun(100, func() {
		a, _ := ParseAddr("2001:db8::ffff:1.2.3.4")
		dst, _ = a.AppendPrefix(dst[:0], 64)
		b, _ := ParseAddr("203.0.113.77")
		dst = b.Unmap().AppendTo(dst[:0])
	})
	assert.Zero(t, allocs)
}

func FuzzParseAddrAgreesWithNetip(f *testing.F) {
	for _, s := range edgeCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 64 { // longer than any address: bounded, netip refuses them all the same
			s = s[:64]
		}
		agree(t, s)
	})
}
