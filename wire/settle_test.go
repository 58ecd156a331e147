package wire

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
)

// The filter's settle entries reach the service as sent, for every algorithm that settles,
// with and without a burst, a refund and an over-run, with and without an age.
func TestEverySettleFieldTheFilterSendsIsWhatTheServiceDecodes(t *testing.T) {
	type entry struct {
		k     Key
		l     algorithms.Limit
		delta int64
		age   time.Duration
	}
	var sent []entry
	for i, kind := range algorithms.Kinds {
		if !kind.Settles() {
			continue
		}
		l := algorithms.Limit{Kind: kind, Quota: 1000 + int64(i), Window: time.Duration(1+i*7919) * time.Millisecond}
		if kind.TakesBurst() {
			l.Burst = 2000 + int64(i)
		}
		require.NoError(t, l.Validate())
		k := Key{Plugin: "ns.plugin", Rule: "rule", Fingerprint: uint64(i), Value: `v "q" \ ` + kind.String()}
		sent = append(sent,
			entry{k, l, -algorithms.MaxQuota, 1500 * time.Millisecond},
			entry{k, l, algorithms.MaxQuota, 0})
	}
	b := AppendDescriptor(AppendRequestStart(nil), 0, Key{Plugin: "p", Rule: "r", Value: "v"}, sent[0].l, 3)
	b = AppendSettleListStart(b, true)
	for i, e := range sent {
		b = AppendSettle(b, i, e.k, e.l, e.delta, e.age, 0)
	}
	b = AppendRequestEnd(b)

	var req Request
	require.NoError(t, DecodeRequest(b, DecodeOptions{}, &req), "%s", b)
	require.Len(t, req.Descriptors, 1)
	require.Len(t, req.Settle, len(sent))
	for i, s := range req.Settle {
		e := sent[i]
		assert.Equal(t, Settle{Key: "ns.plugin/rule/" + strconv.FormatUint(e.k.Fingerprint, 36) + "/" + e.k.Value, Limit: e.l, Delta: e.delta, Age: e.age}, s, "entry %d", i)
	}
}

// A settle list alone is a request (the filter sends it after the response), and an age is
// sent rounded up to whole milliseconds: the reservation looks older, never younger.
func TestASettleOnlyRequestNeedsNoDescriptor(t *testing.T) {
	l := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 10, Window: time.Second}
	b := AppendSettleListStart(nil, false)
	b = AppendSettle(b, 0, Key{Plugin: "p", Rule: "r", Value: "v"}, l, -4, 1200*time.Microsecond, 0)
	b = AppendRequestEnd(b)
	assert.Equal(t, `{"settle":[{"key":"p/r/0/v","algorithm":"fixed_window","quota":10,"window_ms":1000,"delta":-4,"age_ms":2}]}`, string(b))
	var req Request
	require.NoError(t, DecodeRequest(b, DecodeOptions{}, &req))
	assert.Empty(t, req.Descriptors)
	require.Len(t, req.Settle, 1)
	assert.Equal(t, 2*time.Millisecond, req.Settle[0].Age)

	require.NoError(t, DecodeRequest([]byte(`{"descriptors":[{"key":"k","algorithm":"fixed_window","quota":1,"window_ms":1000}]}`), DecodeOptions{}, &req))
	assert.Empty(t, req.Settle, "a v1 request without settle decodes as before, and a reused Request forgets the last list")
}

// The service's settled count reaches the filter; an answer without it (an older service, or a
// request without a settle list) reads as zero; an older filter skips it.
func TestTheSettledCountCrossesTheWire(t *testing.T) {
	d := Decision{Allowed: true, Limit: 20, Remaining: 19}
	b := AppendSettled(AppendAnswerEnd(AppendDecision(AppendAnswerStart(nil, true), 0, d)), 3)
	a, err := DecodeFullAnswer(b, 1, nil)
	require.NoError(t, err, "%s", b)
	assert.Equal(t, Answer{Allowed: true, Decisions: []Decision{d}, Settled: 3}, a)
	assert.True(t, strings.HasSuffix(string(b), `],"settled":3}`+"\n"), "%s", b)

	b = AppendSettled(AppendAnswerEndPermits(AppendAnswerStart(nil, true), 1, 0, 0), 2)
	a, err = DecodeFullAnswer(b, 0, nil)
	require.NoError(t, err, "%s", b)
	assert.Equal(t, Answer{Allowed: true, Renewed: 1, Settled: 2}, a)

	a, err = DecodeFullAnswer(AppendAnswerEnd(AppendAnswerStart(nil, true)), 0, nil)
	require.NoError(t, err)
	assert.Zero(t, a.Settled)

	for body, want := range map[string]string{
		`{"allowed":true,"decisions":[],"settled":1,"settled":2}`: "settled: given twice",
		`{"allowed":true,"decisions":[],"settled":-1}`:            "settled: negative",
		`{"allowed":true,"decisions":[],"settled":"1"}`:           "settled: want an integer, got a string",
	} {
		_, err := DecodeFullAnswer([]byte(body), 0, nil)
		assert.EqualError(t, err, want, body)
	}
}

// A service before settles refuses a settle list (unknown field, a 400), so a settle is never
// mistaken for a descriptor; this version refuses what an entry must not carry, naming it.
func TestASettleEntryIsAsStrictAsTheAPISays(t *testing.T) {
	const head = `{"key":"k","algorithm":"token_bucket","quota":10,"window_ms":1000`
	for _, tc := range []struct{ name, body, err string }{
		{"a settle needs a delta", `{"settle":[` + head + `}]}`, "settle[0].delta: required"},
		{"a delta of zero is refused", `{"settle":[` + head + `,"delta":0}]}`, "settle[0].delta: must be between -1000000000000 and 1000000000000 and not 0, got 0"},
		{"a refund beyond the largest quota is refused", `{"settle":[` + head + `,"delta":-1000000000001}]}`, "settle[0].delta: must be between -1000000000000 and 1000000000000 and not 0, got -1000000000001"},
		{"a fractional delta is refused", `{"settle":[` + head + `,"delta":1.5}]}`, "settle[0].delta: want an integer between -2^63 and 2^63-1, got 1.5"},
		{"a negative age is refused", `{"settle":[` + head + `,"delta":1,"age_ms":-1}]}`, "settle[0].age_ms: must be between 0 and 34560000000, got -1"},
		{"a settle has no cost", `{"settle":[` + head + `,"delta":1,"cost":1}]}`, "settle[0].cost: unknown field"},
		{"a settle has no permit", `{"settle":[` + head + `,"delta":1,"permit":"a"}]}`, "settle[0].permit: unknown field"},
		{"a delta given twice is refused", `{"settle":[` + head + `,"delta":1,"delta":2}]}`, "settle[0].delta: given twice"},
		{"a sliding log does not settle", `{"settle":[{"key":"k","algorithm":"sliding_log","quota":10,"window_ms":1000,"delta":1}]}`, "settle[0].algorithm: sliding_log does not settle (want token_bucket, leaky_bucket or fixed_window)"},
		{"a sliding window does not settle", `{"settle":[{"key":"k","algorithm":"sliding_window","quota":10,"window_ms":1000,"delta":-1}]}`, "settle[0].algorithm: sliding_window does not settle (want token_bucket, leaky_bucket or fixed_window)"},
		{"a permit does not settle", `{"settle":[{"key":"k","algorithm":"concurrency","quota":10,"delta":-1}]}`, "settle[0].algorithm: concurrency does not settle (want token_bucket, leaky_bucket or fixed_window)"},
		{"a settle names its counter in full", `{"settle":[{"key":"k","algorithm":"token_bucket","quota":10,"delta":-1}]}`, "settle[0].window_ms: must be between 1 and 34560000000, got 0"},
		{"a settle needs a key", `{"settle":[{"algorithm":"token_bucket","quota":10,"window_ms":1000,"delta":-1}]}`, "settle[0].key: required"},
		{"a fixed window takes no burst", `{"settle":[{"key":"k","algorithm":"fixed_window","quota":10,"window_ms":1000,"burst":20,"delta":-1}]}`, "settle[0].burst: must be 0 or absent for fixed_window, got 20"},
		{"a list given twice is refused", `{"settle":[],"settle":[]}`, "settle: given twice"},
		{"a list that is not an array is refused", `{"settle":{}}`, "settle: want an array, got an object"},
		{"an entry that is not an object names its index", `{"settle":[` + head + `,"delta":1},3]}`, "settle[1]: want an object, got a number"},
		{"an empty list is not a request", `{"settle":[]}`, "descriptors: at least one descriptor is required (or a renew, release or settle entry)"},
		{"a 65th entry is refused", `{"settle":[` + strings.Repeat(head+`,"delta":1},`, 64) + head + `,"delta":1}]}`, "settle: more than 64 entries"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var req Request
			assert.EqualError(t, DecodeRequest([]byte(tc.body), DecodeOptions{}, &req), tc.err)
		})
	}
}

// The filter encodes settles after the response, on its request path's budget: no allocation.
func TestEncodingSettlesDoesNotAllocate(t *testing.T) {
	k := Key{Plugin: "ns.p", Rule: "r", Fingerprint: 12345, Value: "alice"}
	l := algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 1000, Window: time.Minute, Burst: 2000}
	buf := make([]byte, 0, 1024)
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		b := AppendSettleListStart(buf[:0], false)
		b = AppendSettle(b, 0, k, l, -120, time.Second, 0)
		_ = AppendRequestEnd(b)
	}))
}
