package body

import (
	"encoding/binary"
	"testing"
	"unicode/utf16"

	"github.com/stretchr/testify/assert"
)

func TestJSONIntFindsTheFieldAndRejectsTheRest(t *testing.T) {
	path := []string{"usage", "total_tokens"}
	tests := []struct {
		name, doc string
		want      int64
		err       error
	}{
		{"the field after others", `{"id": "x", "choices": [{"usage": {"total_tokens": 1}}], "usage": {"prompt_tokens": 3, "total_tokens": 42}}`, 42, nil},
		{"zero is a valid usage", `{"usage": {"total_tokens": 0}}`, 0, nil},
		{"a missing field", `{"usage": {"prompt_tokens": 3}}`, 0, ErrNoField},
		{"a field that is an object", `{"usage": {"total_tokens": {}}}`, 0, ErrNotInteger},
		{"a negative number", `{"usage": {"total_tokens": -1}}`, 0, ErrNotInteger},
		{"usage is not an object", `{"usage": 5}`, 0, ErrNoField},
		{"a field given twice counts at its highest, first", `{"usage": {"total_tokens": 900, "total_tokens": 1}}`, 900, nil},
		{"a field given twice counts at its highest, last", `{"usage": {"total_tokens": 1}, "x": [{}], "usage": {"total_tokens": 900}}`, 900, nil},
		{"a parent given twice, one without the field", `{"usage": {"total_tokens": 7}, "usage": null}`, 7, nil},
		{"a duplicate holding a number as a string counts at that number", `{"usage": {"total_tokens": 7, "total_tokens": "9"}}`, 9, nil},
		{"a duplicate that is no number never lowers the field", `{"usage": {"total_tokens": 700, "total_tokens": "x"}}`, 700, nil},
		{"an echoed member in another case never lowers the field", `{"usage": {"total_tokens": 700}, "Usage": {"total_tokens": null}}`, 700, nil},
		{"an exponent counts at its value", `{"usage": {"total_tokens": 1.5e3}}`, 1500, nil},
		{"a string that is no number", `{"usage": {"total_tokens": "x"}}`, 0, ErrNotInteger},
		{"a NaN is no number, never 0", `{"usage": {"total_tokens": NaN}}`, 0, ErrNotInteger},
		{"a NaN duplicate never lowers the field", `{"usage": {"total_tokens": 700, "total_tokens": NaN}}`, 700, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := JSONInt([]byte(tt.doc), path)
			assert.Equal(t, tt.want, got)
			assert.ErrorIs(t, err, tt.err)
		})
	}
	_, err := JSONInt([]byte(`{"usage": {"total_tokens"`), path)
	assert.Error(t, err, "a truncated document")
}

// utf16LE is s in UTF-16, little-endian, without a byte order mark.
func utf16LE(s string) []byte {
	var b []byte
	for _, u := range utf16.Encode([]rune(s)) {
		b = binary.LittleEndian.AppendUint16(b, u)
	}
	return b
}

func FuzzJSONInt(f *testing.F) {
	f.Add([]byte(`{"usage": {"total_tokens": 42}}`))
	f.Add([]byte(`{"usage": [`))
	f.Add([]byte(`{"a": {"b": [1, {"c": 2}]}, "usage": {"total_tokens": 1e3}}`))
	f.Add(utf16LE(`{"usage": {"total_tokens": "\ud83d\ude00"}}`))
	f.Add([]byte("\xff\xfe\x00\x00{\x00\x00\x00}\x00\x00\x00"))
	f.Add([]byte("\xff\xfe=\xd8\x00\xde"))
	f.Fuzz(func(t *testing.T, doc []byte) {
		n, err := JSONInt(doc, []string{"usage", "total_tokens"})
		if err == nil {
			assert.GreaterOrEqual(t, n, int64(0))
		}
	})
}

func TestAPlainIntegerIsEighteenDigitsAtMostAndNothingElse(t *testing.T) {
	for s, want := range map[string]int64{"0": 0, "7": 7, "000": 0, "999999999999999999": 999999999999999999} {
		n, ok := PlainInt(s)
		assert.True(t, ok, "%q", s)
		assert.Equal(t, want, n, "%q", s)
	}
	for _, s := range []string{"", "-1", "+1", " 1", "1 ", "1.0", "1e3", "0x1", "1000000000000000000"} {
		_, ok := PlainInt(s)
		assert.False(t, ok, "%q", s)
	}
}
