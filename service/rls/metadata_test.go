package rls

import (
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	rlext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/meshlimit/meshlimit/service/rlsconfig"
)

// routingRules holds the rules of envoyproxy/ratelimit's integration test #1114
// (examples/ratelimit/config/example.yaml: two quota-mode services whose metadata names them)
// and one rule per case of the tests below.
const routingRules = `domain: routing
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata:
      service_with_quota: {name: service_1}
  - key: service
    value: service_2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
    metadata:
      service_with_quota: {name: service_2}
  - key: regular
    rate_limit: {unit: minute, requests_per_unit: 100}
    metadata: {name: regular, tier: {level: 1, tags: [a, b]}}
  - key: nested
    rate_limit: {unit: minute, requests_per_unit: 100}
    metadata: {name: nested, tier: {level: 2, zone: eu, tags: [c]}}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 0}
    metadata: {name: shadow}
  - key: free
    rate_limit: {unlimited: true}
    metadata: {name: free}
  - key: old
    rate_limit: {name: old, unit: minute, requests_per_unit: 10}
    metadata: {name: old}
  - key: new
    rate_limit: {unit: minute, requests_per_unit: 10, replaces: [{name: old}]}
  - key: types
    rate_limit: {unit: minute, requests_per_unit: 10}
    metadata: {n: 1.5, b: yes, z: ~, l: [1, x, {k: v}], s: "007", big: 0x10}
  - key: norule
    metadata: {name: norule}
  - key: detailed
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
    metadata: {name: detailed}
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 10}
    metadata: {name: wildcard}
`

// newRoutingFixture is a fixture on routingRules, returning dynamic metadata when dm is set.
func newRoutingFixture(t *testing.T, dm bool) *fixture {
	t.Helper()
	return newRulesFixture(t, dm, routingRules)
}

// newRulesFixture is a fixture on the rules of one file, returning dynamic metadata when dm is
// set.
func newRulesFixture(t *testing.T, dm bool, rules string) *fixture {
	t.Helper()
	f := newFixtureOf(t, Config{Store: memoryStore(t), DynamicMetadata: dm})
	c, err := rlsconfig.Load([]rlsconfig.File{{Name: "rules.yaml", Data: []byte(rules)}})
	require.NoError(t, err)
	f.setRules(c)
	return f
}

// metadataJSON is the answer's dynamic_metadata in protobuf's JSON mapping.
func metadataJSON(t *testing.T, resp *pb.RateLimitResponse) string {
	t.Helper()
	b, err := protojson.Marshal(resp.GetDynamicMetadata())
	require.NoError(t, err)
	return string(b)
}

// routedTo is the service named by an answer's metadata, as Envoy's
// %DYNAMIC_METADATA(envoy.filters.http.ratelimit:metadata:service_with_quota:name)% reads it.
func routedTo(resp *pb.RateLimitResponse) string {
	return resp.GetDynamicMetadata().GetFields()["metadata"].GetStructValue().GetFields()["service_with_quota"].
		GetStructValue().GetFields()["name"].GetStringValue()
}

func TestWithoutTheSettingAnAnswerHasNoDynamicMetadata(t *testing.T) {
	f := newRoutingFixture(t, false)
	resp := f.call(req("routing", desc("service", "service_1")))
	assert.Nil(t, resp.GetDynamicMetadata())
}

// The answers follow envoyproxy/ratelimit's (src/service/ratelimit.go, ratelimitToMetadata, and
// the expectations of its TestRatelimitToMetadata and test/service's TestMetadata* tests).
func TestTheDynamicMetadataIsThePeers(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  *pb.RateLimitRequest
		want string // the dynamic_metadata in JSON
		code pb.RateLimitResponse_Code
	}{
		{"a descriptor that matches no rule gives the domain and its entries, and no metadata",
			req("routing", desc("key1", "val1")),
			`{"descriptors":[{"entries":["key1=val1"]}],"domain":"routing"}`, ok},
		{"a quota-mode descriptor that passed returns its rule's metadata",
			req("routing", desc("service", "service_1")),
			`{"descriptors":[{"entries":["service=service_1"]}],"domain":"routing","metadata":{"service_with_quota":{"name":"service_1"}}}`, ok},
		{"a descriptor over its limit returns none, and the first that passed wins a key both have, also when the answer is OVER_LIMIT",
			req("routing", withHits(desc("regular", "r"), 101), desc("service", "service_2"), desc("service", "service_1")),
			`{"descriptors":[{"entries":["regular=r"],"hitsAddend":101},{"entries":["service=service_2"]},{"entries":["service=service_1"]}],
			  "domain":"routing","metadata":{"service_with_quota":{"name":"service_2"}}}`, over},
		{"the request's hits_addend is returned when it is not 0",
			&pb.RateLimitRequest{Domain: "routing", HitsAddend: 5, Descriptors: []*rlext.RateLimitDescriptor{desc("test_key", "test_val")}},
			`{"descriptors":[{"entries":["test_key=test_val"]}],"domain":"routing","hitsAddend":5}`, ok},
		{"a descriptor's own hits_addend (0 too) and override are in its entry, and an override returns no metadata",
			req("routing", withOverride(withHits(desc("regular", "r", "sub", "s"), 0), 5, typev3.RateLimitUnit_MINUTE)),
			`{"descriptors":[{"entries":["regular=r","sub=s"],"hitsAddend":0,"limit":"requests_per_unit:5 unit:MINUTE"}],"domain":"routing"}`, ok},
		{"a shadow-mode descriptor over its limit passed, so returns its metadata",
			req("routing", desc("shadow", "x")),
			`{"descriptors":[{"entries":["shadow=x"]}],"domain":"routing","metadata":{"name":"shadow"}}`, ok},
		{"a quota-mode descriptor over its limit returns none though the answer is OK",
			req("routing", withHits(desc("service", "service_1"), 2), desc("service", "service_2")),
			`{"descriptors":[{"entries":["service=service_1"],"hitsAddend":2},{"entries":["service=service_2"]}],
			  "domain":"routing","metadata":{"service_with_quota":{"name":"service_2"}}}`, ok},
		{"an unlimited descriptor, a replaced limit and a rule without a limit return none",
			req("routing", desc("free", "f"), desc("old", "o"), desc("new", "n"), desc("norule", "x")),
			`{"descriptors":[{"entries":["free=f"]},{"entries":["old=o"]},{"entries":["new=n"]},{"entries":["norule=x"]}],"domain":"routing"}`, ok},
		{"mappings merge key by key at every depth, the first value winning, and lists are not merged",
			req("routing", desc("regular", "r"), desc("nested", "n")),
			`{"descriptors":[{"entries":["regular=r"]},{"entries":["nested=n"]}],"domain":"routing",
			  "metadata":{"name":"regular","tier":{"level":1,"tags":["a","b"],"zone":"eu"}}}`, ok},
		{"numbers, booleans, null, lists and strings keep their types",
			req("routing", desc("types", "t")),
			`{"descriptors":[{"entries":["types=t"]}],"domain":"routing",
			  "metadata":{"n":1.5,"b":true,"z":null,"l":[1,"x",{"k":"v"}],"s":"007","big":16}}`, ok},
		{"a wildcard rule and a detailed_metric rule return their metadata",
			req("routing", desc("path", "/api/users"), desc("detailed", "d")),
			`{"descriptors":[{"entries":["path=/api/users"]},{"entries":["detailed=d"]}],"domain":"routing","metadata":{"name":"wildcard"}}`, ok},
		{"a domain the rules lack gives the domain and the entries",
			req("nowhere", desc("service", "service_1")),
			`{"descriptors":[{"entries":["service=service_1"]}],"domain":"nowhere"}`, ok},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newRoutingFixture(t, true)
			resp := f.call(tc.req)
			assert.Equal(t, tc.code, resp.GetOverallCode())
			assert.JSONEq(t, tc.want, metadataJSON(t, resp))
		})
	}
}

// A detailed_metric rule's metadata is returned; envoyproxy/ratelimit drops it (its GetLimit
// rebuilds such a limit without the metadata), as it does for value_to_metric.
func TestADetailedMetricRuleReturnsItsMetadata(t *testing.T) {
	f := newRoutingFixture(t, true)
	resp := f.call(req("routing", desc("detailed", "d")))
	assert.JSONEq(t, `{"name":"detailed"}`, rulesMetadataJSON(t, resp))
}

// rulesMetadataJSON is the metadata field of the answer's dynamic_metadata in JSON.
func rulesMetadataJSON(t *testing.T, resp *pb.RateLimitResponse) string {
	t.Helper()
	b, err := protojson.Marshal(resp.GetDynamicMetadata().GetFields()["metadata"])
	require.NoError(t, err)
	return string(b)
}

// envoyproxy/ratelimit merges into the configuration's own Structs, so that after an answer
// that merged two rules' mappings, the first rule's metadata holds the second's keys (and
// concurrent answers race). meshlimit builds each answer afresh.
func TestAnAnswerNeverChangesTheConfigurationsMetadata(t *testing.T) {
	f := newRoutingFixture(t, true)
	f.call(req("routing", desc("regular", "r"), desc("nested", "n")))
	resp := f.call(req("routing", desc("regular", "r")))
	assert.JSONEq(t, `{"name":"regular","tier":{"level":1,"tags":["a","b"]}}`, rulesMetadataJSON(t, resp))
}

// The override's text is protobuf's text format of the override, as the peer's String() is.
func TestTheOverrideIsWrittenInProtobufsTextFormat(t *testing.T) {
	for _, o := range []*rlext.RateLimitDescriptor_RateLimitOverride{
		{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_MINUTE},
		{RequestsPerUnit: 4294967295, Unit: typev3.RateLimitUnit_YEAR},
		{Unit: typev3.RateLimitUnit_SECOND},
		{RequestsPerUnit: 7},
		{},
	} {
		text := overrideText(o)
		var back rlext.RateLimitDescriptor_RateLimitOverride
		require.NoError(t, prototext.Unmarshal([]byte(text), &back), text)
		assert.Equal(t, o.GetRequestsPerUnit(), back.GetRequestsPerUnit(), text)
		assert.Equal(t, o.GetUnit(), back.GetUnit(), text)
		assert.Equal(t, strings.Join(strings.Fields(o.String()), " "), text, "the peer's String(), spaces aside")
	}
}

func TestTheJSONFrontReturnsTheDynamicMetadata(t *testing.T) {
	f := newRoutingFixture(t, true)
	ts := httptest.NewServer(f.srv.JSONHandler())
	t.Cleanup(ts.Close)
	resp, err := http.Post(ts.URL, "application/json", strings.NewReader(`{"domain":"routing","descriptors":[{"entries":[{"key":"service","value":"service_1"}]}]}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Contains(t, strings.ReplaceAll(string(body), " ", ""),
		`"dynamicMetadata":{"descriptors":[{"entries":["service=service_1"]}],"domain":"routing","metadata":{"service_with_quota":{"name":"service_1"}}}`)
}

// Protobuf's JSON mapping cannot write the special doubles of .inf or .nan in metadata: /json
// answers 500, as the peer's does, while gRPC carries them.
func TestTheJSONFrontCannotWriteAnInfiniteNumber(t *testing.T) {
	f := newRulesFixture(t, true, "domain: inf\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 10}\n    metadata: {x: .inf}\n")
	resp := f.call(req("inf", desc("k", "v")))
	assert.True(t, math.IsInf(resp.GetDynamicMetadata().GetFields()["metadata"].GetStructValue().GetFields()["x"].GetNumberValue(), 1))
	ts := httptest.NewServer(f.srv.JSONHandler())
	t.Cleanup(ts.Close)
	hresp, err := http.Post(ts.URL, "application/json", strings.NewReader(`{"domain":"inf","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`))
	require.NoError(t, err)
	body, _ := io.ReadAll(hresp.Body)
	hresp.Body.Close()
	assert.Equal(t, http.StatusInternalServerError, hresp.StatusCode)
	assert.Contains(t, string(body), "encoding the response")
}

// envoyproxy/ratelimit's integration test #1114 (integration-test/scripts/multiservice-tokenquota.sh):
// Envoy asks with both services' descriptors at hits_addend 0, routes to the service the
// metadata names, and charges it with hits_addend 1 when the stream is done. service_1 has 1
// request a minute and service_2 2, each checked before it is charged: requests 1 and 2 go to
// service_1, 3 to 5 to service_2, the 6th is refused, and a minute later service_1 serves again.
func TestQuotaAwareRoutingFollowsThePeersIntegrationTest(t *testing.T) {
	f := newRoutingFixture(t, true)
	request := func() string {
		resp := f.call(req("routing", withHits(desc("service", "service_1"), 0), withHits(desc("service", "service_2"), 0)))
		if resp.GetOverallCode() == over {
			return "429"
		}
		served := routedTo(resp)
		f.call(req("routing", withHits(desc("service", served), 1)))
		return served
	}
	var got []string
	for range 6 {
		got = append(got, request())
	}
	assert.Equal(t, []string{"service_1", "service_1", "service_2", "service_2", "service_2", "429"}, got)
	f.setNow(minuteStart.Add(time.Minute))
	assert.Equal(t, "service_1", request(), "the quotas are refreshed")
}
