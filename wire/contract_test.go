package wire

import (
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
)

// encodeRequest is what the filter does for one check.
func encodeRequest(keys []Key, limits []algorithms.Limit, costs []int64) []byte {
	b := AppendRequestStart(nil)
	for i := range keys {
		b = AppendDescriptor(b, i, keys[i], limits[i], costs[i])
	}
	return AppendRequestEnd(b)
}

// The filter's encoder feeds the service's decoder: every field of every descriptor arrives
// as sent, for every algorithm, with and without a burst.
func TestEveryRequestFieldTheFilterSendsIsWhatTheServiceDecodes(t *testing.T) {
	var keys []Key
	var limits []algorithms.Limit
	var costs []int64
	for i, k := range algorithms.Kinds {
		l := algorithms.Limit{Kind: k, Quota: k.MaxQuota() - int64(i), Window: time.Duration(1+i*7919) * time.Millisecond}
		if k.TakesBurst() {
			l.Quota, l.Burst = 1000+int64(i), 2000+int64(i)
		}
		require.NoError(t, l.Validate())
		keys = append(keys, Key{Plugin: "ns.plugin", Rule: "rule-" + strconv.Itoa(i), Fingerprint: uint64(1) << (60 - i), Value: `v "quoted" \ é/` + k.String()})
		limits = append(limits, l)
		costs = append(costs, algorithms.MaxQuota-int64(i))
	}
	body := encodeRequest(keys, limits, costs)

	var req Request
	require.NoError(t, DecodeRequest(body, DecodeOptions{}, &req), "%s", body)
	require.Len(t, req.Descriptors, len(keys))
	assert.False(t, req.HasNow)
	for i, d := range req.Descriptors {
		want := keys[i].Plugin + "/" + keys[i].Rule + "/" + strconv.FormatUint(keys[i].Fingerprint, 36) + "/" + keys[i].Value
		assert.Equal(t, want, d.Key, "descriptor %d", i)
		assert.Equal(t, limits[i], d.Limit, "descriptor %d", i)
		assert.Equal(t, costs[i], d.Cost, "descriptor %d", i)
	}
}

// The service's encoder feeds the filter's decoder: every field of every decision arrives as
// sent, and the optional ones are absent when zero.
func TestEveryAnswerFieldTheServiceSendsIsWhatTheFilterDecodes(t *testing.T) {
	sent := []Decision{
		{Allowed: true, Limit: 100, Remaining: 42, ResetMs: 580, DelayMs: 90},
		{Allowed: true, Limit: 10, Remaining: 5, ResetMs: 95000, EffectiveMs: 40001},
		{Allowed: false, Limit: 1000, Remaining: 0, ResetMs: 119000, RetryAfterMs: 2350},
		{Allowed: false, Limit: 3, RetryAfterMs: -1, ResetMs: 1},
		{Limit: 10, Skipped: true},
		{Allowed: true, Limit: algorithms.MaxQuota, Remaining: algorithms.MaxQuota - 1, ResetMs: int64(algorithms.MaxWindow / time.Millisecond)},
	}
	b := AppendAnswerStart(nil, false)
	for i, d := range sent {
		b = AppendDecision(b, i, d)
	}
	b = AppendAnswerEnd(b)
	allowed, got, err := DecodeAnswer(b, len(sent), make([]Decision, 0, 64))
	require.NoError(t, err, "%s", b)
	assert.False(t, allowed)
	assert.Equal(t, sent, got)
	assert.NotContains(t, string(b[:strings.Index(string(b), "},{")]), "skipped", "skipped is written only when true")

	allowed, got, err = DecodeAnswer(AppendAnswerEnd(AppendDecision(AppendAnswerStart(nil, true), 0, sent[0])), 1, nil)
	require.NoError(t, err)
	assert.True(t, allowed)
	assert.Equal(t, sent[:1], got)
}

// What the filter renders from a decision is what the service decided, rounded up to
// milliseconds.
func TestADecisionCrossesTheWireRoundedUpToMilliseconds(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   algorithms.Decision
		want algorithms.Decision
	}{
		{"an admission keeps its remaining, reset and delay",
			algorithms.Decision{Allowed: true, Limit: 10, Remaining: 4, Reset: 1500 * time.Microsecond, Delay: time.Microsecond},
			algorithms.Decision{Allowed: true, Limit: 10, Remaining: 4, Reset: 2 * time.Millisecond, Delay: time.Millisecond}},
		{"a denial keeps its retry time, never early",
			algorithms.Decision{Limit: 10, Reset: time.Second, RetryAfter: 999_001 * time.Microsecond},
			algorithms.Decision{Limit: 10, Reset: time.Second, RetryAfter: time.Second}},
		{"the effective window crosses, never shorter",
			algorithms.Decision{Allowed: true, Limit: 10, Remaining: 5, Reset: 95 * time.Second, EffectiveWindow: 40_000_001 * time.Microsecond},
			algorithms.Decision{Allowed: true, Limit: 10, Remaining: 5, Reset: 95 * time.Second, EffectiveWindow: 40_001 * time.Millisecond}},
		{"a cost above capacity stays never",
			algorithms.Decision{Limit: 10, RetryAfter: algorithms.RetryNever},
			algorithms.Decision{Limit: 10, RetryAfter: algorithms.RetryNever}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := AppendAnswerEnd(AppendDecision(AppendAnswerStart(nil, tc.in.Allowed), 0, FromAlgorithms(tc.in, false)))
			_, got, err := DecodeAnswer(b, 1, nil)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got[0].Algorithms())
		})
	}
}

// A key value with a C1 control character (U+0085, NEL) used to be sent as is and refused by
// the service with a 400, which the filter treats as an outage: a client could switch its
// global limit off by sending one. It is now sent hashed, and accepted.
func TestAKeyValueWithAC1ControlCharacterIsAcceptedByTheService(t *testing.T) {
	for _, v := range []string{"a\u0085b", "\u009f", "a\x7fb", "a\nb", "\xff", "\xc0\xaf", "\xed\xa0\x80", strings.Repeat("é", MaxValueBytes)} {
		body := encodeRequest([]Key{{Plugin: "p", Rule: "r", Value: v}}, []algorithms.Limit{{Kind: algorithms.FixedWindow, Quota: 1, Window: time.Second}}, []int64{1})
		var req Request
		require.NoError(t, DecodeRequest(body, DecodeOptions{}, &req), "value %q: %s", v, body)
		assert.True(t, strings.HasPrefix(req.Descriptors[0].Key, "p/r/0/#"), "value %q is sent hashed: %s", v, req.Descriptors[0].Key)
	}
}

// Whatever the plugin name, rule name and key value, the key the filter writes is one the
// service accepts: at most MaxKeyBytes of clean UTF-8; distinct values stay distinct.
func TestEveryKeyTheFilterWritesFitsTheServiceBound(t *testing.T) {
	long := strings.Repeat("x", 4096)
	seen := map[string]string{}
	for _, k := range []Key{
		{Plugin: strings.Repeat("p", MaxPluginBytes), Rule: strings.Repeat("r", MaxRuleBytes), Fingerprint: 1<<64 - 1, Value: strings.Repeat("v", MaxValueBytes)},
		{Plugin: long, Rule: long, Fingerprint: 1<<64 - 1, Value: long},
		{Plugin: long, Rule: long, Fingerprint: 1<<64 - 1, Value: long + "y"},
		{Plugin: "p\x00", Rule: "r\xff", Value: "\u0085"},
		{Plugin: "p", Rule: "r", Value: "ordinary"},
		{Plugin: "p", Rule: "r", Value: ""},
	} {
		b := appendKey(nil, k)
		key := strings.NewReplacer(`\"`, `"`, `\\`, `\`).Replace(string(b))
		require.NoError(t, CheckKey(key, MaxKeyBytes), "%q", key)
		assert.True(t, utf8.ValidString(key))
		if prev, dup := seen[key]; dup {
			t.Fatalf("%q and %q share the key %q", prev, k.Value, key)
		}
		seen[key] = k.Value
	}
}

// AppendKey is the key the service decodes from a descriptor the filter writes, for every kind
// of part: as is, escaped for JSON, hashed for its length or for its bytes.
func TestAppendKeyIsTheKeyTheServiceDecodes(t *testing.T) {
	l := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 1, Window: time.Second}
	for _, k := range []Key{
		{Plugin: "istio-system.meshlimit", Rule: "per-ip", Fingerprint: 1<<64 - 1, Value: "203.0.113.7"},
		{Plugin: `a"b\c`, Rule: `"`, Fingerprint: 0, Value: `\|"`},
		{Plugin: strings.Repeat("p", MaxPluginBytes+1), Rule: strings.Repeat("r", MaxRuleBytes+1), Value: strings.Repeat("v", MaxValueBytes+1)},
		{Plugin: "p\x00", Rule: "r\xff", Value: "\u0085"},
		{Plugin: "", Rule: "", Value: ""},
	} {
		var req Request
		require.NoError(t, DecodeRequest(AppendRequestEnd(AppendDescriptor(AppendRequestStart(nil), 0, k, l, 1)), DecodeOptions{}, &req), "%+v", k)
		assert.Equal(t, req.Descriptors[0].Key, string(AppendKey(nil, k)), "%+v", k)
	}
}

// The encoder runs on the filter's request path: it must not allocate.
func TestEncodingARequestAndDecodingAnAnswerDoNotAllocate(t *testing.T) {
	k := Key{Plugin: "ns.p", Rule: "r", Fingerprint: 12345, Value: "\xff-hashed"}
	l := algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 10, Window: time.Second, Burst: 20}
	buf := make([]byte, 0, 1024)
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		b := AppendRequestStart(buf[:0])
		b = AppendDescriptor(b, 0, k, l, 1)
		b = AppendDescriptor(b, 1, Key{Plugin: "p", Rule: "r", Value: "alice"}, l, 1)
		b = AppendRequestEnd(b)
		_ = AppendKey(b[:0], k)
	}))
	answer := []byte(`{"allowed":true,"decisions":[{"allowed":true,"limit":10,"remaining":9,"reset_ms":100,"retry_after_ms":0,"future":{"x":[1,"y"]}},{"allowed":true,"limit":10,"remaining":9,"reset_ms":100,"retry_after_ms":0}]}`)
	dst := make([]Decision, 0, 8)
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		if _, _, err := DecodeAnswer(answer, 2, dst); err != nil {
			panic(err)
		}
	}))
}
