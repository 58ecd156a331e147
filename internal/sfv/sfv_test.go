package sfv

import (
	"math"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDecimalsInHeadersAreWhatStrconvWrites(t *testing.T) {
	for _, n := range []int64{0, 1, 9, 10, 99, 100, 12345, MaxInteger, math.MaxInt64, -1, -10, math.MinInt64} {
		assert.Equal(t, strconv.FormatInt(n, 10), string(appendDecimal([]byte("x"), n)[1:]), "%d", n)
	}
	for n := int64(-1000); n <= 100000; n++ { // every digit pair at every position of a short number
		if got, want := string(appendDecimal(nil, n)), strconv.FormatInt(n, 10); got != want {
			require.Equal(t, want, got, "%d", n)
		}
	}
	for n := uint64(1); n < math.MaxInt64/10; n = n*10 + n%7 { // every length
		require.Equal(t, strconv.FormatUint(n, 10), string(appendDecimal(nil, int64(n))))
	}
}

func TestAnIntegerOutsideTheRangeIsWrittenAtItsBound(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0", 42: "42", -42: "-42", MaxInteger: "999999999999999", MaxInteger + 1: "999999999999999",
		math.MaxInt64: "999999999999999", math.MinInt64: "-999999999999999",
	} {
		assert.Equal(t, want, string(AppendInteger(nil, n)), "%d", n)
	}
}

// Whatever the string, the encoder writes one sf-string that the parser reads back: the text
// itself when it is printable ASCII, with '?' for each byte that is not.
func TestEveryStringIsWrittenAsAnSFStringThatParsesBack(t *testing.T) {
	for s, want := range map[string]string{
		"api-per-ip-0": "api-per-ip-0", `a"b\c`: `a"b\c`, "tab\there": "tab?here", "é": "??", "": "",
		"example7.key_2_value_2": "example7.key_2_value_2",
	} {
		members, err := ParseList(string(AppendString(nil, s)))
		require.NoError(t, err, "%q", s)
		require.Len(t, members, 1)
		assert.Equal(t, String(want), members[0].Value, "%q", s)
	}
}

func TestAByteSequenceParsesBackToItsBytes(t *testing.T) {
	for _, b := range [][]byte{{}, {0}, []byte("hi"), {0xff, 0xfe, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05}} {
		members, err := ParseList(string(AppendByteSequence(nil, b)))
		require.NoError(t, err, "%x", b)
		assert.Equal(t, b, members[0].Value, "%x", b)
	}
}

// The filter renders the quota fields of every response with the encoder: it must not allocate.
func TestTheEncoderDoesNotAllocate(t *testing.T) {
	buf := make([]byte, 0, 128)
	pk := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		b := AppendString(buf[:0], "api-per-ip-0")
		b = AppendInteger(append(b, ";q="...), 1000)
		_ = AppendByteSequence(append(b, ";pk="...), pk)
	}))
}

func FuzzAppendString(f *testing.F) {
	f.Add("api")
	f.Add("\"\\\x00\xff")
	f.Fuzz(func(t *testing.T, s string) {
		members, err := ParseList(string(AppendString(nil, s)))
		require.NoError(t, err, "%q", s)
		require.Len(t, members, 1)
		got, ok := members[0].Value.(String)
		require.True(t, ok)
		assert.Len(t, got, len(s), "one byte written for each byte of %q", s)
	})
}

// appendDecimal counts a number's digits before writing them in place: each side of every power of
// ten, whatever room dst has, gets exactly the digits strconv writes and leaves dst's bytes alone.
func TestADecimalOnEitherSideOfAPowerOfTenGetsExactlyItsDigits(t *testing.T) {
	for p := uint64(10); p <= 1e18; p *= 10 {
		for _, n := range []int64{int64(p) - 1, int64(p), int64(p) + 1, -int64(p), -int64(p) + 1} {
			for _, room := range []int{0, 3, 40} {
				dst := append(make([]byte, 0, 2+room), "ab"...)
				got := appendDecimal(dst, n)
				require.Equal(t, "ab"+strconv.FormatInt(n, 10), string(got), "%d with room %d", n, room)
			}
		}
	}
}
