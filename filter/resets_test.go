//go:build !tinygo

package filter

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/wire"
)

func TestOnlyTheKeyEncodersHashedFormIsTakenForAHashedValue(t *testing.T) {
	// The key of a descriptor whose value is too long to send as is, as the filter writes it.
	long := strings.Repeat("a", wire.MaxValueBytes+1)
	body := wire.AppendRequestEnd(wire.AppendDescriptor(wire.AppendRequestStart(nil), 0,
		wire.Key{Plugin: "p", Rule: "r", Fingerprint: 1, Value: long}, algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 1, Window: time.Second}, 1))
	var req struct{ Descriptors []struct{ Key string } }
	require.NoError(t, json.Unmarshal(body, &req))
	_, _, hashed, ok := wire.ParseKey(req.Descriptors[0].Key, "p")
	require.True(t, ok)
	for _, tc := range []struct {
		name, value string
		want        bool
	}{
		{"the encoder's form of a value too long to send", hashed, true},
		{"a plain value", "alice", false},
		{"a value that starts with # but is not hex", "#hello-world", false},
		{"a hash without its second half", "#1a2b-", false},
		{"a hash without its first half", "#-1a2b", false},
		{"upper-case hex is not the encoder's", "#1A2B-3C4D", false},
		{"a lone #", "#", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, hashedValue(tc.value), tc.value)
		})
	}
}
