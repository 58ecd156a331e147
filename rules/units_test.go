package rules

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"250ms", 250 * time.Millisecond, ""},
		{"30s", 30 * time.Second, ""},
		{"1m30s", 90 * time.Second, ""},
		{"1h", time.Hour, ""},
		{"7d", 7 * 24 * time.Hour, ""},
		{"1d12h", 36 * time.Hour, ""},
		{"366d", 366 * 24 * time.Hour, ""},
		{"0s", 0, ""},
		{"", 0, "empty duration"},
		{"1.5h", 0, `unknown unit "."`},
		{"-1s", 0, "want terms like"},
		{"10", 0, "missing unit"},
		{"5us", 0, `unknown unit "us"`},
		{"367d", 0, "longer than 366d"},
		{"9999999999999s", 0, "number too large"},
		{"s", 0, "want terms like"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseDuration(tc.in)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestParseRate(t *testing.T) {
	tests := []struct {
		in     string
		quota  int64
		window time.Duration
		err    string
	}{
		{"100/s", 100, time.Second, ""},
		{"100/m", 100, time.Minute, ""},
		{"1000/h", 1000, time.Hour, ""},
		{"10000/d", 10000, 24 * time.Hour, ""},
		{"5/30s", 5, 30 * time.Second, ""},
		{"10/1m30s", 10, 90 * time.Second, ""},
		{"1/250ms", 1, 250 * time.Millisecond, ""},
		{"100", 0, 0, "want \"<quota>/<window>\""},
		{"/s", 0, 0, "quota must be a positive integer"},
		{"+5/s", 0, 0, "quota must be a positive integer"},
		{"-5/s", 0, 0, "quota must be a positive integer"},
		{"1.5/s", 0, 0, "quota must be a positive integer"},
		{"5/0s", 0, 0, "window must be positive"},
		{"5/", 0, 0, "empty duration"},
		{"5/x", 0, 0, `unknown unit "x"`},
		{"5/s/s", 0, 0, `unknown unit "s/s"`},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			q, w, err := parseRate(tc.in)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.quota, q)
			assert.Equal(t, tc.window, w)
			q2, w2, err := parseRate(formatRate(q, w))
			require.NoError(t, err, "formatRate(%d, %v) = %q", q, w, formatRate(q, w))
			assert.Equal(t, [2]int64{q, int64(w)}, [2]int64{q2, int64(w2)}, "round trip")
		})
	}
	assert.Equal(t, "10/1m30s", formatRate(10, 90*time.Second))
	assert.Equal(t, "100/s", formatRate(100, time.Second))
}

func TestOptIntAcceptsIntegralNumbersOnly(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  string
	}{
		{"100", 100, ""},
		{"100.0", 100, ""},
		{"1e3", 1000, ""},
		{"-3", -3, ""},
		{"9007199254740992.0", 1 << 53, ""},
		{"9223372036854775807", 1<<63 - 1, ""},
		{"100.5", 0, "want an integer, got 100.5"},
		{"1e300", 0, "out of range"},
		{`"100"`, 0, "want an integer, got a string"},
		{"true", 0, "want an integer, got a boolean"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			var o optInt
			err := o.UnmarshalJSON([]byte(tc.in))
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, optInt{Value: tc.want, Set: true}, o)
		})
	}
}
