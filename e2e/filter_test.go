package e2e

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
	"github.com/meshlimit/meshlimit/internal/sfv"
)

const perRouteConfig = `{
  "rules": [
    {"name": "api-per-ip", "match": {"route_names": ["api"]}, "key": ["client_ip"],
     "limits": [{"name": "api-burst", "rate": "5/m"}]},
    {"name": "login", "match": {"path": {"prefix": "/login"}, "methods": ["POST"]}, "key": ["client_ip"],
     "limits": [{"name": "login", "rate": "2/m", "algorithm": "fixed_window"}]}
  ]
}`

func routed(req *envoyhost.Request, route string) *envoyhost.Request {
	req.Info.RouteName = route
	return req
}

func TestABurstOnOneRouteGets200sThen429sWithTheIETFFields(t *testing.T) {
	p := load(t, module(t, "meshlimit"), perRouteConfig, 2)
	vm := p.VM(0)
	for i := range 5 {
		res := roundTrip(t, vm, routed(get("shop.example", "/api/items", "203.0.113.9"), "api"))
		require.Nil(t, res.LocalReply, "request %d of 5 is within the burst", i+1)
		policy, ok := res.Downstream.Get("ratelimit-policy")
		require.True(t, ok, "the quota fields are added to the upstream's response")
		assert.Equal(t, `"api-burst";q=5;w=60;qu="requests"`, policy)
		rl, _ := res.Downstream.Get("ratelimit")
		ps, err := sfv.ParsePolicies(rl)
		require.NoError(t, err)
		assert.Equal(t, int64(4-i), ps[0].Params["r"], "remaining after request %d", i+1)
	}
	res := roundTrip(t, p.VM(1), routed(get("shop.example", "/api/items", "203.0.113.9"), "api"))
	require.NotNil(t, res.LocalReply, "the 6th request, on another worker, is over the shared limit")
	assert.Equal(t, 429, res.LocalReply.Status)
	assert.Nil(t, res.Upstream, "a denied request never reaches the upstream")

	h := res.LocalReply.Headers
	policy, _ := h.Get("ratelimit-policy")
	pol, err := sfv.ParsePolicies(policy)
	require.NoError(t, err)
	require.Len(t, pol, 1)
	assert.Equal(t, sfv.Policy{Name: "api-burst", Params: map[string]int64{"q": 5, "w": 60}, Unit: "requests"}, pol[0])
	rl, _ := h.Get("ratelimit")
	state, err := sfv.ParsePolicies(rl)
	require.NoError(t, err)
	assert.Equal(t, int64(0), state[0].Params["r"])
	assert.Equal(t, int64(12), state[0].Params["t"], "one token of 5/m comes back in 12 s")
	retry, _ := h.Get("retry-after")
	assert.Equal(t, "12", retry, "Retry-After is never earlier than t")

	other := roundTrip(t, vm, routed(get("shop.example", "/api/items", "203.0.113.10"), "api"))
	assert.Nil(t, other.LocalReply, "another client has its own bucket")
	elsewhere := roundTrip(t, vm, routed(get("shop.example", "/static/a.css", "203.0.113.9"), "static"))
	assert.Nil(t, elsewhere.LocalReply, "another route is not limited")
	_, hasPolicy := elsewhere.Downstream.Get("ratelimit-policy")
	assert.False(t, hasPolicy, "no rule matched, so there is no quota to report")

	p.Clock().Advance(12 * time.Second)
	again := roundTrip(t, vm, routed(get("shop.example", "/api/items", "203.0.113.9"), "api"))
	assert.Nil(t, again.LocalReply, "after Retry-After, the request is admitted")

	assert.Equal(t, int64(7), counter(p, "meshlimit.rule.api-per-ip.allowed"))
	assert.Equal(t, int64(1), counter(p, "meshlimit.rule.api-per-ip.limited"))
}

func TestRulesMatchOnPathAndMethod(t *testing.T) {
	p := load(t, module(t, "meshlimit"), perRouteConfig, 1)
	post := func() *envoyhost.Request {
		r := get("shop.example", "/login?next=/", "198.51.100.4")
		r.Headers[0][1] = "POST"
		return r
	}
	codes := []int{}
	for range 3 {
		codes = append(codes, status(roundTrip(t, p.VM(0), post())))
	}
	assert.Equal(t, []int{200, 200, 429}, codes)
	assert.Equal(t, 200, status(roundTrip(t, p.VM(0), get("shop.example", "/login", "198.51.100.4"))), "GET is not limited")
}

func TestShadowRulesCountAndTagButNeverDeny(t *testing.T) {
	p := load(t, module(t, "meshlimit"), `{"rules":[{"name":"trial","key":["client_ip"],"limits":[{"rate":"1/h"}],
		"shadow":true,"shadow_header":"x-meshlimit-shadow"}]}`, 1)
	first := roundTrip(t, p.VM(0), get("a.example", "/", "192.0.2.1"))
	require.Nil(t, first.LocalReply)
	_, tagged := first.Upstream.Get("x-meshlimit-shadow")
	assert.False(t, tagged)
	second := roundTrip(t, p.VM(0), get("a.example", "/", "192.0.2.1"))
	require.Nil(t, second.LocalReply, "shadow mode never blocks")
	v, tagged := second.Upstream.Get("x-meshlimit-shadow")
	assert.True(t, tagged, "the upstream learns the request would have been limited")
	assert.Equal(t, "trial", v)
	_, hasFields := second.Downstream.Get("ratelimit")
	assert.False(t, hasFields, "shadow rules do not change what clients see")
	assert.Equal(t, int64(1), counter(p, "meshlimit.rule.trial.shadow_limited"))
	assert.Equal(t, int64(0), counter(p, "meshlimit.rule.trial.limited"))
}

func TestGRPCRequestsAreDeniedWithResourceExhausted(t *testing.T) {
	p := load(t, module(t, "meshlimit"), `{"rules":[{"name":"rpc","key":["client_ip"],"limits":[{"rate":"1/m"}]}]}`, 1)
	call := func() envoyhost.Result {
		r := get("grpc.example", "/pkg.Service/Method", "192.0.2.7", [2]string{"content-type", "application/grpc"})
		r.Headers[0][1] = "POST"
		return roundTrip(t, p.VM(0), r)
	}
	require.Nil(t, call().LocalReply)
	res := call()
	require.NotNil(t, res.LocalReply)
	assert.Equal(t, int32(8), res.LocalReply.GRPCStatus, "RESOURCE_EXHAUSTED")
	assert.Equal(t, 200, res.LocalReply.Status, "gRPC errors travel in a 200 response")
}

func TestOneBucketPerClientIPStaysWithinMaxKeys(t *testing.T) {
	const maxKeys, clients = 64, 3000
	p := load(t, module(t, "meshlimit"), `{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"10/s"}],"max_keys":`+strconv.Itoa(maxKeys)+`}]}`, 2)
	for i := range clients {
		ip := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
		res := roundTrip(t, p.VM(i%2), get("a.example", "/", ip))
		require.Nil(t, res.LocalReply)
		if i%16 == 0 { // at most 16 clients active at once: a quarter of the slots, as max_keys should be sized
			p.Clock().Advance(time.Second) // older clients go idle, so their slots can be reused
		}
	}
	keys, bytes := p.Process().SharedDataSize("meshlimit")
	assert.LessOrEqual(t, keys, maxKeys+3, "the rule's slots, its overflow state, the sentinel and the secret")
	t.Logf("%d clients: %d shared-data keys, %d bytes; %d decided in the overflow state", clients, keys, bytes,
		counter(p, "meshlimit.rule.per-ip.overflow"))
}

func TestEightWorkerVMsOnOneKeyAdmitExactlyTheCapacity(t *testing.T) {
	const capacity = 100
	admitExactlyOnEightVMs(t, `[{"rate":"`+strconv.Itoa(capacity)+`/h"}]`, capacity)
}

// TestEightWorkerVMsOnOneKeyWithEightLimitsAdmitExactlyTheTightest: a rule's eight limits of three
// kinds live in one record, read and written with one get and one CAS; under lost races on eight
// VMs the request admitted is the one every limit admits, exactly the tightest one's capacity.
func TestEightWorkerVMsOnOneKeyWithEightLimitsAdmitExactlyTheTightest(t *testing.T) {
	admitExactlyOnEightVMs(t, `[{"rate":"150/h"},{"rate":"1000/d"},{"rate":"120/h","algorithm":"fixed_window"},`+
		`{"rate":"130/h","algorithm":"sliding_window"},{"rate":"100/d","burst":90},{"rate":"500/h","burst":200},`+
		`{"rate":"140/h","algorithm":"fixed_window"},{"rate":"1000000000000/d"}]`, 90)
}

// admitExactlyOnEightVMs sends 320 requests for one key from eight VMs that yield on every
// shared-data call, the clock frozen, and checks that exactly capacity are admitted.
func admitExactlyOnEightVMs(t *testing.T, limits string, capacity int) {
	const workers, perWorker = 8, 40
	proc := envoyhost.NewProcess()
	proc.YieldOnSharedData() // worker threads run in parallel in Envoy; make lost CAS races common here too
	p := load(t, module(t, "meshlimit"), `{"rules":[{"name":"hot","key":[{"constant":"all"}],"limits":`+limits+`}]}`,
		workers, func(c *envoyhost.Config) { c.Process = proc })
	var admitted, denied atomic.Int64
	var wg sync.WaitGroup
	for w := range workers { // the clock stays frozen: nothing refills
		vm := p.VM(w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perWorker {
				if res := roundTrip(t, vm, get("a.example", "/", "192.0.2.1")); res.LocalReply == nil {
					admitted.Add(1)
				} else {
					denied.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(capacity), admitted.Load(), "not one more, not one less")
	assert.Equal(t, int64(workers*perWorker-capacity), denied.Load())
	assert.Zero(t, counter(p, "meshlimit.rule.hot.cas_exhausted"))
	t.Logf("%d requests on %d VMs: %d CAS retries", workers*perWorker, workers, counter(p, "meshlimit.rule.hot.cas_retries"))
	for _, vm := range p.VMs() {
		assert.NoError(t, vm.Failed())
	}
}
