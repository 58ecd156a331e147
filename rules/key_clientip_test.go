package rules

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// netipClientIP is the client_ip part without the plain-IPv4 shortcut: every address parsed by
// netip and rendered again. The shortcut must give exactly what it gives.
func netipClientIP(p *keyPart, s string) (string, KeyStatus) {
	addr, ok := parseClientAddr(s)
	if !ok {
		return "", KeySkip
	}
	out, st := p.appendMasked(nil, addr)
	return string(out), st
}

// clientIPCases are addresses that sit on the shortcut's edges: the forms netip accepts and those
// it refuses, with ports, brackets and zones.
var clientIPCases = []string{
	"203.0.113.77", "203.0.113.77:443", "[203.0.113.77]", "[203.0.113.77]:8080", "0.0.0.0", "255.255.255.255",
	"1.2.3.4", "10.0.0.1:80", "192.0.2.10", "100.64.0.200",
	"256.1.1.1", "1.2.3.256", "1.2.3.999", "01.2.3.4", "1.02.3.4", "1.2.3.00", "1.2.3.0", "0.0.0.00",
	"1.2.3", "1.2.3.4.5", "1..3.4", ".1.2.3", "1.2.3.", "1.2.3.4:", "1.2.3.4:99999", "1.2.3.4:abc",
	"1.2.3.4%eth0", "1234.1.1.1", "1.2.3.4 ", " 1.2.3.4", "a.b.c.d", "1.2.3.4/24", "",
	"::ffff:1.2.3.4", "[::ffff:203.0.113.77]:443", "::1", "2001:db8::1", "[2001:db8::1%eth0]:443",
	"fe80::1%eth0", "::ffff:01.2.3.4", "1:2:3:4:5:6:1.2.3.4",
}

func TestThePlainIPv4ShortcutKeysEveryAddressAsNetipDoes(t *testing.T) {
	for _, bits := range [][2]int{{32, 64}, {32, 128}, {24, 64}, {1, 1}, {31, 127}} {
		p := &keyPart{kind: keyClientIP, v4Bits: bits[0], v6Bits: bits[1]}
		for _, s := range clientIPCases {
			want, wantSt := netipClientIP(p, s)
			got, st := p.appendClientIP(nil, &fakeRequest{source: s})
			assert.Equal(t, wantSt, st, "status of %q with /%d,/%d", s, bits[0], bits[1])
			assert.Equal(t, want, string(got), "key of %q with /%d,/%d", s, bits[0], bits[1])
		}
	}
}

func TestAPlainIPv4KeyedWholeIsCopiedAsItCame(t *testing.T) {
	p := &keyPart{kind: keyClientIP, v4Bits: defaultIPv4Mask, v6Bits: defaultIPv6Mask}
	got, st := p.appendClientIP([]byte("k|"), &fakeRequest{source: "203.0.113.77:51234"})
	require.Equal(t, KeyFound, st)
	assert.Equal(t, "k|203.0.113.77", string(got))
}

func TestALeadingZeroIPv4IsNotAClientAddress(t *testing.T) {
	// netip refuses leading zeros (they read as octal elsewhere): "010.0.0.1" must not become a
	// bucket of its own next to "10.0.0.1" nor share it.
	p := &keyPart{kind: keyClientIP, v4Bits: defaultIPv4Mask, v6Bits: defaultIPv6Mask}
	_, st := p.appendClientIP(nil, &fakeRequest{source: "010.0.0.1"})
	assert.Equal(t, KeySkip, st)
}

func TestThePlainIPv4ShortcutDoesNotAllocate(t *testing.T) {
	p := &keyPart{kind: keyClientIP, v4Bits: defaultIPv4Mask, v6Bits: defaultIPv6Mask}
	req := &fakeRequest{source: "203.0.113.77:51234"}
	buf := make([]byte, 0, 64)
	assert.Zero(t, testing.AllocsPerRun(100, func() { buf, _ = p.appendClientIP(buf[:0], req) }))
}

// FuzzClientIPShortcut checks the plain-IPv4 shortcut against netip's parse and render on any
// source address and masks.
func FuzzClientIPShortcut(f *testing.F) {
	for _, s := range clientIPCases {
		f.Add(s, uint8(31), uint8(63))
	}
	f.Add(strings.Repeat("1.", 40)+"1", uint8(7), uint8(200))
	f.Fuzz(func(t *testing.T, source string, v4, v6 uint8) {
		p := &keyPart{kind: keyClientIP, v4Bits: 1 + int(v4%32), v6Bits: 1 + int(v6%128)}
		want, wantSt := netipClientIP(p, source)
		got, st := p.appendClientIP(nil, &fakeRequest{source: source})
		if st != wantSt || string(got) != want {
			t.Fatalf("%q /%d,/%d: got %q (%d), netip gives %q (%d)", source, p.v4Bits, p.v6Bits, got, st, want, wantSt)
		}
	})
}
