package wire

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
)

// Every field of an acquire, a renewal and a release that the filter writes is what the
// service decodes, in one request with a rate descriptor alongside.
func TestEveryPermitFieldTheFilterSendsIsWhatTheServiceDecodes(t *testing.T) {
	k := Key{Plugin: "ns.p", Rule: "gpu", Fingerprint: 77, Value: `tenant "a"`}
	rate := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 5, Window: time.Second}
	b := AppendRequestStart(nil)
	b = AppendDescriptor(b, 0, k, rate, 1)
	b = AppendPermitDescriptor(b, 1, k, MaxConcurrency, "proxy-1/vm-2/7/9f3c", 1500*time.Millisecond+time.Microsecond)
	b = AppendPermitListStart(b, Renew, true)
	b = AppendPermitRef(b, 0, k, "old-1", 2*time.Second)
	b = AppendPermitRef(b, 1, Key{Plugin: "p", Rule: "r", Value: "v"}, "old-2", MaxLeaseMs*time.Millisecond)
	b = AppendPermitListStart(b, Release, true)
	b = AppendPermitRef(b, 0, k, "gone-\xff", 0)
	b = AppendRequestEnd(b)

	var req Request
	require.NoError(t, DecodeRequest(b, DecodeOptions{}, &req), "%s", b)
	key := `ns.p/gpu/25/tenant "a"`
	require.Len(t, req.Descriptors, 2)
	assert.Equal(t, Descriptor{Key: key, Limit: rate, Cost: 1}, req.Descriptors[0])
	assert.Equal(t, Descriptor{Key: key, Limit: algorithms.Limit{Quota: MaxConcurrency}, Cost: 1,
		Permit: "proxy-1/vm-2/7/9f3c", Lease: 1501 * time.Millisecond}, req.Descriptors[1], "the lease is rounded up")
	assert.Equal(t, []PermitRef{{Key: key, Permit: "old-1", Lease: 2 * time.Second},
		{Key: "p/r/0/v", Permit: "old-2", Lease: MaxLeaseMs * time.Millisecond}}, req.Renew)
	require.Len(t, req.Release, 1)
	assert.Equal(t, key, req.Release[0].Key)
	assert.True(t, strings.HasPrefix(req.Release[0].Permit, "#"), "an id the service would refuse is sent hashed: %q", req.Release[0].Permit)
	assert.Equal(t, req.Release[0].Permit, string(appendPart(nil, "gone-\xff", MaxPermitBytes)), "and hashed the same way every time")
}

// A request of renewals alone, and of releases alone (what the filter's tick and end of
// stream send), decode with no descriptor.
func TestARenewOrReleaseOnlyRequestNeedsNoDescriptor(t *testing.T) {
	k := Key{Plugin: "p", Rule: "r", Value: "v"}
	for _, list := range []PermitList{Renew, Release} {
		b := AppendPermitListStart(nil, list, false)
		b = AppendPermitRef(b, 0, k, "a", time.Second)
		if list == Release {
			b = AppendPermitRef(AppendPermitListStart(nil, list, false), 0, k, "a", 0)
		}
		b = AppendRequestEnd(b)
		var req Request
		require.NoError(t, DecodeRequest(b, DecodeOptions{}, &req), "%s", b)
		assert.Empty(t, req.Descriptors)
		got := req.Renew
		if list == Release {
			got, _ = req.Release, assert.Empty(t, req.Renew)
		}
		require.Len(t, got, 1, "%s", b)
		assert.Equal(t, "a", got[0].Permit)
	}
}

// The service's counts of renewed and released permits reach the filter, and an answer
// without them (an older service, or a request without lists) reads as zero.
func TestTheRenewedAndReleasedCountsCrossTheWire(t *testing.T) {
	d := Decision{Allowed: false, Limit: 20, RetryAfterMs: -1}
	b := AppendAnswerEndPermits(AppendDecision(AppendAnswerStart(nil, false), 0, d), 3, 2, 1|1<<5|1<<63)
	a, err := DecodeFullAnswer(b, 1, nil)
	require.NoError(t, err, "%s", b)
	assert.Equal(t, Answer{Allowed: false, Decisions: []Decision{d}, Renewed: 3, Released: 2, Lost: 1 | 1<<5 | 1<<63}, a)
	assert.Contains(t, string(b), `"lost":[0,5,63]`)

	b = AppendAnswerEndPermits(AppendAnswerStart(nil, true), 0, 1, 0)
	assert.NotContains(t, string(b), "lost", "written only when a renewal was lost")
	a, err = DecodeFullAnswer(b, 0, nil)
	require.NoError(t, err)
	assert.Equal(t, Answer{Allowed: true, Released: 1}, a)

	a, err = DecodeFullAnswer(AppendAnswerEnd(AppendAnswerStart(nil, true)), 0, nil)
	require.NoError(t, err)
	assert.Zero(t, a.Renewed+a.Released)

	for body, want := range map[string]string{
		`{"allowed":true,"decisions":[],"renewed":1,"renewed":2}`: "renewed: given twice",
		`{"allowed":true,"decisions":[],"released":-1}`:           "released: negative",
		`{"allowed":true,"decisions":[],"renewed":"1"}`:           "renewed: want an integer, got a string",
		`{"allowed":true,"decisions":[],"lost":[64]}`:             "lost: index 64 out of range",
		`{"allowed":true,"decisions":[],"lost":[-1]}`:             "lost: index -1 out of range",
		`{"allowed":true,"decisions":[],"lost":[2,2]}`:            "lost: index 2 given twice",
		`{"allowed":true,"decisions":[],"lost":[],"lost":[]}`:     "lost: given twice",
		`{"allowed":true,"decisions":[],"lost":3}`:                "lost: want an array, got a number",
	} {
		_, err := DecodeFullAnswer([]byte(body), 0, nil)
		assert.EqualError(t, err, want, body)
	}
}

// A v1 service before permits refuses a permit descriptor (unknown algorithm, a 400): the
// filter then applies the rule's failure_mode, never counts it as an outage. The decoder of
// this version refuses what a permit must not carry, naming the field.
func TestAPermitDescriptorIsAsStrictAsTheAPISays(t *testing.T) {
	const head = `{"key":"k","algorithm":"concurrency","quota":2`
	for _, tc := range []struct{ name, body, err string }{
		{"a permit needs an id", `{"descriptors":[` + head + `,"lease_ms":1000}]}`, "descriptors[0].permit: required for algorithm concurrency"},
		{"a permit needs a lease", `{"descriptors":[` + head + `,"permit":"a"}]}`, "descriptors[0].lease_ms: required for algorithm concurrency"},
		{"a lease below the minimum is refused", `{"descriptors":[` + head + `,"permit":"a","lease_ms":99}]}`, "descriptors[0].lease_ms: must be between 100 and 3600000, got 99"},
		{"a lease above the maximum is refused", `{"descriptors":[` + head + `,"permit":"a","lease_ms":3600001}]}`, "descriptors[0].lease_ms: must be between 100 and 3600000, got 3600001"},
		{"a permit has no window", `{"descriptors":[` + head + `,"permit":"a","lease_ms":1000,"window_ms":1000}]}`, "descriptors[0].window_ms: not allowed for algorithm concurrency (a permit is held until released or its lease ends)"},
		{"a permit has no burst", `{"descriptors":[` + head + `,"permit":"a","lease_ms":1000,"burst":3}]}`, "descriptors[0].burst: not allowed for algorithm concurrency"},
		{"a permit costs one", `{"descriptors":[` + head + `,"permit":"a","lease_ms":1000,"cost":2}]}`, "descriptors[0].cost: must be 1 or absent for algorithm concurrency (a permit is one request), got 2"},
		{"a quota above the maximum is refused", `{"descriptors":[{"key":"k","algorithm":"concurrency","quota":1000001,"permit":"a","lease_ms":1000}]}`, "descriptors[0].quota: must be between 1 and 1000000, got 1000001 for concurrency"},
		{"a permit id with a control character is refused", `{"descriptors":[` + head + `,"permit":"a\u0085","lease_ms":1000}]}`, "descriptors[0].permit: contains a control character"},
		{"a permit id over 128 bytes is refused", `{"descriptors":[` + head + `,"permit":"` + strings.Repeat("a", 129) + `","lease_ms":1000}]}`, "descriptors[0].permit: 129 bytes, at most 128 allowed"},
		{"a rate descriptor has no permit", `{"descriptors":[{"key":"k","algorithm":"fixed_window","quota":2,"window_ms":1000,"permit":"a"}]}`, "descriptors[0].permit: only for algorithm concurrency"},
		{"a rate descriptor has no lease", `{"descriptors":[{"key":"k","algorithm":"fixed_window","quota":2,"window_ms":1000,"lease_ms":1000}]}`, "descriptors[0].lease_ms: only for algorithm concurrency"},
		{"a renewal needs a lease", `{"renew":[{"key":"k","permit":"a"}]}`, "renew[0].lease_ms: required"},
		{"a renewal's lease is bounded", `{"renew":[{"key":"k","permit":"a","lease_ms":0}]}`, "renew[0].lease_ms: must be between 100 and 3600000, got 0"},
		{"a release has no lease", `{"release":[{"key":"k","permit":"a","lease_ms":1000}]}`, "release[0].lease_ms: unknown field"},
		{"a release needs a permit", `{"release":[{"key":"k"}]}`, "release[0].permit: required"},
		{"a release needs a key", `{"release":[{"permit":"a"}]}`, "release[0].key: required"},
		{"a release entry has no quota", `{"release":[{"key":"k","permit":"a","quota":1}]}`, "release[0].quota: unknown field"},
		{"a list given twice is refused", `{"release":[],"release":[]}`, "release: given twice"},
		{"a list that is not an array is refused", `{"renew":{}}`, "renew: want an array, got an object"},
		{"an entry that is not an object names its index", `{"release":[{"key":"k","permit":"a"},3]}`, "release[1]: want an object, got a number"},
		{"empty lists are not a request", `{"renew":[],"release":[]}`, "descriptors: at least one descriptor is required (or a renew, release or settle entry)"},
		{"a 65th release is refused", `{"release":[` + strings.Repeat(`{"key":"k","permit":"a"},`, 64) + `{"key":"k","permit":"a"}]}`, "release: more than 64 entries"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var req Request
			assert.EqualError(t, DecodeRequest([]byte(tc.body), DecodeOptions{}, &req), tc.err)
		})
	}
}

// The filter encodes acquires, renewals and releases on its request path and its tick: no
// allocation.
func TestEncodingPermitsDoesNotAllocate(t *testing.T) {
	k := Key{Plugin: "ns.p", Rule: "r", Fingerprint: 12345, Value: "alice"}
	buf := make([]byte, 0, 1024)
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		b := AppendRequestStart(buf[:0])
		b = AppendPermitDescriptor(b, 0, k, 20, "p/1/2/3", time.Second)
		b = AppendPermitListStart(b, Release, true)
		b = AppendPermitRef(b, 0, k, "p/1/2/2", 0)
		_ = AppendRequestEnd(b)
	}))
	answer := []byte(`{"allowed":true,"decisions":[{"allowed":true,"limit":20,"remaining":19,"reset_ms":0,"retry_after_ms":0}],"renewed":0,"released":1,"lost":[1,4]}`)
	dst := make([]Decision, 0, 8)
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		if _, err := DecodeFullAnswer(answer, 1, dst); err != nil {
			panic(err)
		}
	}))
}
