package rules

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/sfv"
)

// policy is one parsed member of RateLimit-Policy or RateLimit.
type policy struct {
	name   string
	params map[string]int64
}

// parsePolicies parses a RateLimit-Policy or RateLimit field strictly (see sfv.ParsePolicies).
func parsePolicies(t *testing.T, field string) []policy {
	t.Helper()
	ps, err := sfv.ParsePolicies(field)
	require.NoError(t, err)
	out := make([]policy, len(ps))
	for i, p := range ps {
		out[i] = policy{name: p.Name, params: p.Params}
	}
	return out
}

// header returns the value of the one field named name, failing if it occurs more than once.
func header(t *testing.T, fields []Field, name string) (string, bool) {
	t.Helper()
	var v string
	n := 0
	for _, f := range fields {
		if f.Name == name {
			v = string(f.Value)
			n++
		}
	}
	require.LessOrEqual(t, n, 1, "header %s appears %d times", name, n)
	return v, n == 1
}

func spec(name string, quota int64, window time.Duration) *LimitSpec {
	return &LimitSpec{Name: name, Limit: algorithms.Limit{Kind: algorithms.TokenBucket, Quota: quota, Window: window}}
}

func allowed(remaining int64, reset time.Duration) algorithms.Decision {
	return algorithms.Decision{Allowed: true, Remaining: remaining, Reset: reset}
}

func denied(retry, reset time.Duration) algorithms.Decision {
	return algorithms.Decision{Remaining: 0, RetryAfter: retry, Reset: reset}
}

func responseOf(t *testing.T, response string) *Response {
	t.Helper()
	return mustParse(t, `{"response": `+response+`, "rules": [{"name": "r", "limits": [{"rate": "1/s"}]}]}`).Response
}

func TestEveryPolicyMemberNamesItsQuotaUnit(t *testing.T) {
	bytes := spec("bytes", 1000, time.Second)
	bytes.ContentBytes = true
	slots := &LimitSpec{Name: "slots", Concurrency: 20}
	compiledSet, _ := mustParse(t, `{"rules": [{"name": "r", "limits": [{"rate": "5/m", "name": "api"}]}]}`).Rules()[0].Limits([]byte("k"))
	for _, tt := range []struct {
		name  string
		limit *LimitSpec
		unit  string
	}{
		{"a request limit built by hand counts requests", spec("calls", 10, time.Second), "requests"},
		{"a compiled request limit counts requests", &compiledSet.Limits[0], "requests"},
		{"a limit charged in body bytes counts content bytes", bytes, "content-bytes"},
		{"a concurrency limit counts concurrent requests", slots, "concurrent-requests"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fields, _ := responseOf(t, `{}`).AppendAllowed(nil, nil, []Outcome{{Limit: tt.limit, Decision: allowed(1, time.Second)}}, 0)
			pol, ok := header(t, fields, HeaderRateLimitPolicy)
			require.True(t, ok)
			ps, err := sfv.ParsePolicies(pol)
			require.NoError(t, err)
			require.Len(t, ps, 1)
			assert.Equal(t, tt.unit, ps[0].Unit, pol)
		})
	}
}

func TestAppendAllowedRendersIETFFieldsThatParse(t *testing.T) {
	r := responseOf(t, `{}`)
	outcomes := []Outcome{
		{Limit: spec("per-hour", 1000, time.Hour), Decision: allowed(958, 150*time.Second+time.Millisecond)},
		{Limit: spec("per-second", 10, time.Second), Decision: allowed(3, 700*time.Millisecond)},
	}
	fields, buf := r.AppendAllowed(nil, nil, outcomes, 0)
	assert.NotEmpty(t, buf)
	require.Len(t, fields, 2)

	pol, ok := header(t, fields, HeaderRateLimitPolicy)
	require.True(t, ok)
	assert.Equal(t, `"per-second";q=10;w=1;qu="requests", "per-hour";q=1000;w=3600;qu="requests"`, pol, "fewest remaining first")
	assert.Equal(t, []policy{
		{"per-second", map[string]int64{"q": 10, "w": 1}},
		{"per-hour", map[string]int64{"q": 1000, "w": 3600}},
	}, parsePolicies(t, pol))

	rl, ok := header(t, fields, HeaderRateLimit)
	require.True(t, ok)
	assert.Equal(t, []policy{
		{"per-second", map[string]int64{"r": 3, "t": 1}}, // the next unit in 100ms rounds up
		{"per-hour", map[string]int64{"r": 958, "t": 3}}, // 42 units missing: full in 150.001s, the first back in 2.401s
	}, parsePolicies(t, rl))
}

// TestTOfABucketDecisionWithoutAnEffectiveWindowIsDerivedFromRemainingAndReset covers the decisions
// that reach the renderer without Decision.EffectiveWindow (the service's answers): t is still the
// bucket's effective window, never 0.
func TestTOfABucketDecisionWithoutAnEffectiveWindowIsDerivedFromRemainingAndReset(t *testing.T) {
	r := responseOf(t, `{}`)
	for _, tc := range []struct {
		name      string
		remaining int64
		reset     time.Duration
		want      int64
	}{
		{"a full bucket reports one unit's refill, as every client can use no more than its quota within it", 10, 0, 1},
		{"a unit due in a nanosecond rounds up to 1", 9, time.Nanosecond, 1},
		{"a unit due in a second reports 1", 9, time.Second, 1},
		{"a unit due just after a second reports 2", 9, time.Second + 1, 2},
		{"with five missing, the first is back four units before the bucket is full", 5, 5500 * time.Millisecond, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fields, _ := r.AppendAllowed(nil, nil, []Outcome{{Limit: spec("p", 10, 10*time.Second), Decision: allowed(tc.remaining, tc.reset)}}, 0)
			rl, _ := header(t, fields, HeaderRateLimit)
			assert.Equal(t, tc.want, parsePolicies(t, rl)[0].params["t"])
		})
	}
}

func TestWindowIsWholeSecondsRoundedUpAndAtLeastOne(t *testing.T) {
	r := responseOf(t, `{}`)
	for _, tc := range []struct {
		window time.Duration
		want   int64
	}{{250 * time.Millisecond, 1}, {time.Second, 1}, {1500 * time.Millisecond, 2}, {90 * time.Second, 90}, {24 * time.Hour, 86400}} {
		fields, _ := r.AppendAllowed(nil, nil, []Outcome{{Limit: spec("p", 10, tc.window), Decision: allowed(5, 0)}}, 0)
		pol, _ := header(t, fields, HeaderRateLimitPolicy)
		assert.Equal(t, tc.want, parsePolicies(t, pol)[0].params["w"], "window %v", tc.window)
	}
}

func TestAppendAllowedHonoursTheConfiguration(t *testing.T) {
	outcomes := func() []Outcome {
		return []Outcome{{Limit: spec("p", 10, time.Second), Decision: allowed(5, time.Second)}}
	}
	t.Run("quota_headers_on_allowed false renders nothing", func(t *testing.T) {
		fields, _ := responseOf(t, `{"quota_headers_on_allowed": false}`).AppendAllowed(nil, nil, outcomes(), 0)
		assert.Empty(t, fields)
	})
	t.Run("none renders nothing", func(t *testing.T) {
		fields, _ := responseOf(t, `{"rate_limit_headers": ["none"]}`).AppendAllowed(nil, nil, outcomes(), 0)
		assert.Empty(t, fields)
	})
	t.Run("an empty list renders nothing", func(t *testing.T) {
		fields, _ := responseOf(t, `{"rate_limit_headers": []}`).AppendAllowed(nil, nil, outcomes(), 0)
		assert.Empty(t, fields)
	})
	t.Run("no outcomes render nothing", func(t *testing.T) {
		fields, _ := responseOf(t, `{}`).AppendAllowed(nil, nil, nil, 0)
		assert.Empty(t, fields)
	})
	t.Run("draft03 renders Envoy's X-RateLimit fields", func(t *testing.T) {
		r := responseOf(t, `{"rate_limit_headers": ["draft03"]}`)
		fields, _ := r.AppendAllowed(nil, nil, []Outcome{
			{Limit: spec("per-hour", 1000, time.Hour), Decision: allowed(999, time.Minute)},
			{Limit: spec("per-second", 10, time.Second), Decision: allowed(9, 100*time.Millisecond)},
		}, 0)
		require.Len(t, fields, 3)
		limit, _ := header(t, fields, HeaderXRateLimitLimit)
		assert.Equal(t, `10, 10;w=1;name="per-second", 1000;w=3600;name="per-hour"`, limit)
		members, err := sfv.ParseList(limit)
		require.NoError(t, err, "X-RateLimit-Limit is a valid structured field too")
		assert.Equal(t, int64(10), members[0].Value)
		remaining, _ := header(t, fields, HeaderXRateLimitRemaining)
		assert.Equal(t, "9", remaining)
		reset, _ := header(t, fields, HeaderXRateLimitReset)
		assert.Equal(t, "1", reset)
	})
	t.Run("both sets together", func(t *testing.T) {
		fields, _ := responseOf(t, `{"rate_limit_headers": ["draft03", "ietf"]}`).AppendAllowed(nil, nil, outcomes(), 0)
		assert.Len(t, fields, 5)
	})
}

func TestValuesAreClampedToTheStructuredFieldRange(t *testing.T) {
	r := responseOf(t, `{}`)
	big := spec("p", algorithms.MaxQuota*10000, time.Second)
	big.Limit.Kind = algorithms.FixedWindow // t is the reset time
	fields, _ := r.AppendAllowed(nil, nil, []Outcome{{Limit: big, Decision: allowed(-5, 1<<62)}}, 0)
	pol, _ := header(t, fields, HeaderRateLimitPolicy)
	assert.Equal(t, int64(sfv.MaxInteger), parsePolicies(t, pol)[0].params["q"])
	rl, _ := header(t, fields, HeaderRateLimit)
	assert.Equal(t, map[string]int64{"r": 0, "t": 4611686019}, parsePolicies(t, rl)[0].params, "negative remaining is 0")
}

func TestDenyRendersTheConfiguredTextResponse(t *testing.T) {
	r := responseOf(t, `{"status": 503, "body": "go away\n", "headers": {"X-Envoy-RateLimited": "true", "cache-control": "no-store"}}`)
	var lr LocalResponse
	buf := r.Deny(&lr, nil, []Outcome{
		{Limit: spec("per-second", 10, time.Second), Decision: denied(300*time.Millisecond, time.Second)},
		{Limit: spec("per-hour", 1000, time.Hour), Decision: allowed(990, 36*time.Second)},
	}, false, 0)
	assert.NotEmpty(t, buf)
	assert.Equal(t, uint32(503), lr.Status)
	assert.Equal(t, NoGRPCStatus, lr.GRPCStatus)
	assert.Equal(t, "go away\n", string(lr.Body))

	ct, _ := header(t, lr.Headers, "content-type")
	assert.Equal(t, "text/plain; charset=utf-8", ct)
	retry, ok := header(t, lr.Headers, HeaderRetryAfter)
	require.True(t, ok)
	assert.Equal(t, "1", retry)
	v, _ := header(t, lr.Headers, "x-envoy-ratelimited")
	assert.Equal(t, "true", v)
	v, _ = header(t, lr.Headers, "cache-control")
	assert.Equal(t, "no-store", v)

	rl, _ := header(t, lr.Headers, HeaderRateLimit)
	assert.Equal(t, []policy{
		{"per-second", map[string]int64{"r": 0, "t": 1}},
		{"per-hour", map[string]int64{"r": 990, "t": 4}}, // the first of 10 missing units is back in 3.6s
	}, parsePolicies(t, rl), "the denying policy comes first, its t is the retry time")
}

func TestDenyRendersAProblemDocument(t *testing.T) {
	for _, tc := range []struct {
		name, response, detail string
	}{
		{"with the body as detail", `{"body_format": "problem_json", "body": "Slow down, \"please\"."}`, `Slow down, "please".`},
		{"without a detail when no body is set", `{"body_format": "problem_json"}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := responseOf(t, tc.response)
			var lr LocalResponse
			r.Deny(&lr, nil, []Outcome{
				{Limit: spec("per-minute", 100, time.Minute), Decision: denied(20*time.Second, 50*time.Second)},
				{Limit: spec("per-second", 10, time.Second), Decision: denied(time.Second, time.Second)},
				{Limit: spec("per-day", 1e5, 24*time.Hour), Decision: allowed(5, time.Hour)},
			}, false, 0)
			ct, _ := header(t, lr.Headers, "content-type")
			assert.Equal(t, "application/problem+json", ct)
			var doc map[string]any
			require.NoError(t, json.Unmarshal(lr.Body, &doc), "body %s", lr.Body)
			want := map[string]any{
				"type":              "https://iana.org/assignments/http-problem-types#quota-exceeded",
				"title":             "Request cannot be satisfied as assigned quota has been exceeded",
				"status":            float64(429),
				"violated-policies": []any{"per-minute", "per-second"},
			}
			if tc.detail != "" {
				want["detail"] = tc.detail
			}
			assert.Equal(t, want, doc)
			retry, _ := header(t, lr.Headers, HeaderRetryAfter)
			assert.Equal(t, "20", retry, "the longest wait of the denying policies")
		})
	}
}

func TestAPenaltyBoxDenialHasTheAbnormalUsageProblemType(t *testing.T) {
	r := responseOf(t, `{"body_format": "problem_json"}`)
	for _, tc := range []struct {
		name     string
		abnormal bool
		want     string
	}{
		{"a key in a penalty box is told it was denied for abnormal usage", true, "abnormal-usage-detected"},
		{"a key over its quota is told so", false, "quota-exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var lr LocalResponse
			r.Deny(&lr, nil, []Outcome{
				{Limit: spec("signin", 3, time.Minute), Decision: denied(10*time.Minute, 10*time.Minute), Abnormal: tc.abnormal},
				{Limit: spec("per-day", 100, 24*time.Hour), Decision: allowed(5, time.Hour)},
			}, false, 0)
			var doc map[string]any
			require.NoError(t, json.Unmarshal(lr.Body, &doc), "body %s", lr.Body)
			assert.Equal(t, "https://iana.org/assignments/http-problem-types#"+tc.want, doc["type"])
			assert.Equal(t, []any{"signin"}, doc["violated-policies"])
		})
	}
}

func TestDenyAnswersGRPCWithResourceExhausted(t *testing.T) {
	r := responseOf(t, `{"body_format": "problem_json", "body": "quota exceeded", "headers": {"content-type": "text/html", "x-a": "b"}}`)
	var lr LocalResponse
	r.Deny(&lr, nil, []Outcome{{Limit: spec("p", 10, time.Second), Decision: denied(2*time.Second, 2*time.Second)}}, true, 0)
	assert.Equal(t, uint32(200), lr.Status)
	assert.Equal(t, GRPCResourceExhausted, lr.GRPCStatus)
	assert.Equal(t, "quota exceeded", string(lr.Body), "the body becomes grpc-message")
	_, hasCT := header(t, lr.Headers, "content-type")
	assert.False(t, hasCT, "the host sets application/grpc")
	for _, name := range []string{"grpc-status", "grpc-message"} {
		_, has := header(t, lr.Headers, name)
		assert.False(t, has, "the host sets %s from GRPCStatus", name)
	}
	v, _ := header(t, lr.Headers, "x-a")
	assert.Equal(t, "b", v)
	retry, _ := header(t, lr.Headers, HeaderRetryAfter)
	assert.Equal(t, "2", retry)

	t.Run("the default message has no trailing newline", func(t *testing.T) {
		var lr LocalResponse
		responseOf(t, `{}`).Deny(&lr, nil, nil, true, 0)
		assert.Equal(t, "rate limit exceeded", string(lr.Body))
	})
}

func TestIsGRPC(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/grpc": true, "application/grpc+proto": true, "application/grpc;charset=utf-8": true,
		"Application/GRPC": true, "application/grpc-web": false, "application/grpc-web+proto": false,
		"application/json": false, "": false, "application/grp": false,
	} {
		assert.Equal(t, want, IsGRPC(ct), ct)
	}
}

func TestRetryAfterIsNeverEarlierThanTAndJittersWithinBounds(t *testing.T) {
	r := responseOf(t, `{"retry_after_jitter": "2500ms"}`)
	outcomes := []Outcome{
		{Limit: spec("a", 10, time.Second), Decision: denied(1500*time.Millisecond, time.Second)},
		{Limit: spec("b", 100, time.Minute), Decision: denied(42*time.Second+time.Microsecond, time.Minute)},
	}
	seen := map[int64]bool{}
	var lr LocalResponse
	buf := make([]byte, 0, 512)
	for random := uint64(0); random < 64; random++ {
		buf = r.Deny(&lr, buf[:0], outcomes, false, random)
		rl, _ := header(t, lr.Headers, HeaderRateLimit)
		maxT := int64(0)
		for _, p := range parsePolicies(t, rl) {
			maxT = max(maxT, p.params["t"])
		}
		assert.Equal(t, int64(43), maxT)
		v, _ := header(t, lr.Headers, HeaderRetryAfter)
		retry, err := strconv.ParseInt(v, 10, 64)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, retry, maxT, "Retry-After never points earlier than t")
		assert.LessOrEqual(t, retry, maxT+3, "jitter of 2500ms rounds up to at most 3s")
		seen[retry] = true
	}
	assert.Len(t, seen, 4, "every jitter value 0..3 occurs")
	var again LocalResponse
	r.Deny(&again, nil, outcomes, false, 7)
	v, _ := header(t, again.Headers, HeaderRetryAfter)
	assert.Equal(t, "46", v, "the same random value gives the same Retry-After")
}

func TestDenyWithoutOutcomesIsAFailClosedAnswer(t *testing.T) {
	r := responseOf(t, `{"body_format": "problem_json"}`)
	var lr LocalResponse
	r.Deny(&lr, nil, nil, false, 0)
	assert.Equal(t, uint32(429), lr.Status)
	_, has := header(t, lr.Headers, HeaderRateLimit)
	assert.False(t, has)
	retry, _ := header(t, lr.Headers, HeaderRetryAfter)
	assert.Equal(t, "1", retry)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(lr.Body, &doc))
	assert.NotContains(t, doc, "violated-policies")
}

func TestDenyOmitsRetryAfterWhenTheCostCanNeverFit(t *testing.T) {
	r := responseOf(t, `{}`)
	var lr LocalResponse
	r.Deny(&lr, nil, []Outcome{
		{Limit: spec("small", 10, time.Second), Decision: algorithms.Decision{Remaining: 10, RetryAfter: algorithms.RetryNever}},
		{Limit: spec("other", 10, time.Second), Decision: denied(time.Second, time.Second)},
	}, false, 0)
	_, has := header(t, lr.Headers, HeaderRetryAfter)
	assert.False(t, has)
	rl, _ := header(t, lr.Headers, HeaderRateLimit)
	got := parsePolicies(t, rl)
	assert.Equal(t, "small", got[0].name, "RetryNever sorts first")
	assert.Equal(t, map[string]int64{"r": 10, "t": 1}, got[0].params, "t is the effective window of the full bucket: one unit's refill, 0.1 s")
}

func TestOutcomesAreOrderedMostRestrictiveFirst(t *testing.T) {
	o := []Outcome{
		{Limit: spec("allowed-many", 1, time.Second), Decision: allowed(50, time.Second)},
		{Limit: spec("denied-short", 1, time.Second), Decision: denied(time.Second, time.Second)},
		{Limit: spec("allowed-few-early", 1, time.Second), Decision: allowed(2, time.Second)},
		{Limit: spec("allowed-few-late", 1, time.Second), Decision: allowed(2, time.Minute)},
		{Limit: spec("denied-long", 1, time.Second), Decision: denied(time.Minute, time.Minute)},
		{Limit: spec("allowed-few-early-2", 1, time.Second), Decision: allowed(2, time.Second)},
	}
	sortOutcomes(o)
	var names []string
	for _, x := range o {
		names = append(names, x.Limit.Name)
	}
	assert.Equal(t, []string{"denied-long", "denied-short", "allowed-few-late", "allowed-few-early", "allowed-few-early-2", "allowed-many"}, names)
}

func TestDenyReusesTheLocalResponse(t *testing.T) {
	r := responseOf(t, `{"body_format": "problem_json"}`)
	var lr LocalResponse
	outcomes := []Outcome{{Limit: spec("p", 10, time.Second), Decision: denied(time.Second, time.Second)}}
	buf := r.Deny(&lr, nil, outcomes, false, 0)
	first := len(lr.Headers)
	buf = r.Deny(&lr, buf[:0], outcomes, false, 0)
	assert.Len(t, lr.Headers, first, "headers are reset, not accumulated")
	assert.True(t, json.Valid(lr.Body))
	assert.NotEmpty(t, buf)
}

func TestRenderingDoesNotAllocate(t *testing.T) {
	r := responseOf(t, `{"body_format": "problem_json", "rate_limit_headers": ["ietf", "draft03"], "headers": {"x-a": "b"},
		"retry_after_jitter": "2s", "effective_window_jitter": "3s"}`)
	outcomes := []Outcome{
		{Limit: spec("per-second", 10, time.Second), Decision: denied(time.Second, time.Second)},
		{Limit: spec("per-hour", 1000, time.Hour), Decision: allowed(5, time.Minute)},
	}
	fields := make([]Field, 0, 16)
	buf := make([]byte, 0, 1024)
	var lr LocalResponse
	lr.Headers = make([]Field, 0, 16)
	assert.Zero(t, testing.AllocsPerRun(200, func() {
		fields, buf = r.AppendAllowed(fields[:0], buf[:0], outcomes, 5)
	}), "AppendAllowed")
	assert.Zero(t, testing.AllocsPerRun(200, func() {
		buf = r.Deny(&lr, buf[:0], outcomes, false, 3)
	}), "Deny")
}

// BenchmarkAllowedRequest is the pure part of an allowed request: match every rule, build
// keys, pick limits and cost, and render the quota headers from (given) decisions.
func BenchmarkAllowedRequest(b *testing.B) {
	c := mustParse(b, benchConfig)
	req := benchRequest()
	keyBuf := make([]byte, 0, 256)
	fields := make([]Field, 0, 8)
	buf := make([]byte, 0, 512)
	outcomes := make([]Outcome, 0, 8)
	b.ReportAllocs()
	for b.Loop() {
		outcomes = outcomes[:0]
		for _, r := range c.Rules() {
			if !r.Matches(req) {
				continue
			}
			key, st := r.AppendKey(keyBuf[:0], req)
			ok := st == KeyFound
			if !ok {
				continue
			}
			limits, unlimited := specs(r.Limits(key))
			if unlimited {
				continue
			}
			_, _ = r.Cost(req)
			for i := range limits {
				outcomes = append(outcomes, Outcome{Limit: &limits[i], Decision: allowed(limits[i].Limit.Quota-1, time.Second)})
			}
		}
		fields, buf = c.Response.AppendAllowed(fields[:0], buf[:0], outcomes, 0)
	}
}

func BenchmarkDeny(b *testing.B) {
	c := mustParse(b, `{"response": {"body_format": "problem_json", "retry_after_jitter": "1s"}, "rules": [{"name": "r", "limits": [{"rate": "10/s"}, {"rate": "1000/h"}]}]}`)
	limits, _ := specs(c.Rules()[0].Limits(nil))
	outcomes := []Outcome{{Limit: &limits[0], Decision: denied(time.Second, time.Second)}, {Limit: &limits[1], Decision: allowed(10, time.Minute)}}
	var lr LocalResponse
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		buf = c.Response.Deny(&lr, buf[:0], outcomes, false, 1)
	}
}

// decisions runs costs through l at the given offsets from a fixed start and returns each decision.
func decisions(t *testing.T, l algorithms.Limit, steps ...[2]int64) (ds []algorithms.Decision, state []byte, now int64) {
	t.Helper()
	start := int64(1_800_000_000) * int64(time.Second)
	for _, s := range steps {
		now = start + s[0]
		var d algorithms.Decision
		var err error
		state, d, err = l.Decide(state, now, s[1], nil)
		require.NoError(t, err)
		ds = append(ds, d)
	}
	return ds, state, now
}

func rateLimitT(t *testing.T, r *Response, o Outcome) int64 {
	t.Helper()
	fields, _ := r.AppendAllowed(nil, nil, []Outcome{o}, 0)
	rl, _ := header(t, fields, HeaderRateLimit)
	return parsePolicies(t, rl)[0].params["t"]
}

// TestTOfAnUnusedLimitIsItsEffectiveWindowWhateverTheAlgorithm: draft -11 defines t as "the number
// of seconds within which the client can use no more than the available quota" (§4.1.2), which an
// unused limit has too (draft -10's "until additional quota is made available" gave 0): the whole
// quota now, and nothing more until the first unit spent comes back.
func TestTOfAnUnusedLimitIsItsEffectiveWindowWhateverTheAlgorithm(t *testing.T) {
	r := responseOf(t, `{}`)
	want := map[algorithms.Kind]int64{
		algorithms.TokenBucket:   1,  // one unit's refill: 0.6 s
		algorithms.LeakyBucket:   1,  // the same
		algorithms.FixedWindow:   60, // the window's end: 1.8e9 s is a multiple of a minute
		algorithms.SlidingLog:    60, // the first unit spent expires
		algorithms.SlidingWindow: 61, // 100 spent now weigh 99 after 0.6 s of the next window
	}
	for _, k := range algorithms.Kinds {
		l := algorithms.Limit{Kind: k, Quota: 100, Window: time.Minute}
		d, err := l.Peek(nil, int64(1_800_000_000)*int64(time.Second))
		require.NoError(t, err)
		assert.Equal(t, want[k], rateLimitT(t, r, Outcome{Limit: &LimitSpec{Name: "big", Limit: l}, Decision: d}), "%v", k)
	}
}

// TestADenialReportsTheOtherLimitsUncharged is finding 10 of issue 10: a request denied by one limit
// reports the others as they are (the decision without the request, algorithms.Limit.Peek), so their r
// and t are what the previous allowed response said, and a full limit says its effective window.
func TestADenialReportsTheOtherLimitsUncharged(t *testing.T) {
	r := responseOf(t, `{}`)
	hourly := algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 100, Window: time.Hour}
	ds, state, now := decisions(t, hourly, [2]int64{0, 1}, [2]int64{0, 1})
	allowedT := rateLimitT(t, r, Outcome{Limit: &LimitSpec{Name: "hourly", Limit: hourly}, Decision: ds[1]})
	uncharged, err := hourly.Peek(state, now)
	require.NoError(t, err)
	big := algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 100, Window: time.Minute}
	full, err := big.Peek(nil, now)
	require.NoError(t, err)

	var lr LocalResponse
	r.Deny(&lr, nil, []Outcome{
		{Limit: &LimitSpec{Name: "burst", Limit: hourly}, Decision: denied(2*time.Second, 2*time.Second)},
		{Limit: &LimitSpec{Name: "hourly", Limit: hourly}, Decision: uncharged},
		{Limit: &LimitSpec{Name: "big", Limit: big}, Decision: full},
	}, false, 0)
	rl, _ := header(t, lr.Headers, HeaderRateLimit)
	assert.Equal(t, []policy{
		{"burst", map[string]int64{"r": 0, "t": 2}},
		{"hourly", map[string]int64{"r": 98, "t": allowedT}},
		{"big", map[string]int64{"r": 100, "t": 1}}, // one unit's refill, 0.6 s
	}, parsePolicies(t, rl))
	assert.Equal(t, int64(36), allowedT)
}
