package e2e

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// concConfig is one local rule with a concurrency limit of n per tenant.
func concConfig(n string, extra ...string) string {
	rules := `{"name":"gpu","key":[{"header":"x-tenant"}],"limits":[{"concurrency":` + n + `,"name":"gpu-slots"}]}`
	for _, e := range extra {
		rules += "," + e
	}
	return `{"rules":[` + rules + `]}`
}

// openStream sends a request's headers on a new stream of vm and leaves the stream open; it
// reports whether the filter let the request through (no local reply).
func openStream(t testing.TB, vm *envoyhost.VM, req *envoyhost.Request) (*envoyhost.Stream, bool) {
	t.Helper()
	s := vm.NewStream(req.Info)
	_, err := s.SendRequestHeaders(req.Headers, true)
	require.NoError(t, err)
	return s, s.LocalReply() == nil
}

func tenant(name string) *envoyhost.Request {
	return get("api.example", "/v1/generate", "192.0.2.7", [2]string{"x-tenant", name})
}

func TestEightWorkersAdmitExactlyTheConcurrencyLimitOf400HeldStreams(t *testing.T) {
	p := load(t, module(t, "meshlimit"), concConfig("50"), 8)
	p.Process().YieldOnSharedData() // interleave the workers' CAS rounds as much as possible
	vms := p.VMs()[:8]
	var admitted atomic.Int64
	var mu sync.Mutex
	var streams []*envoyhost.Stream
	var wg sync.WaitGroup
	for i := range 400 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, ok := openStream(t, vms[i%8], tenant("acme"))
			if ok {
				admitted.Add(1)
			}
			mu.Lock()
			streams = append(streams, s)
			mu.Unlock()
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(50), admitted.Load(), "exactly the limit is admitted while every stream is held")
	assert.Equal(t, int64(50), counter(p, "meshlimit.rule.gpu.allowed"))
	assert.Equal(t, int64(350), counter(p, "meshlimit.rule.gpu.limited"))
	for _, s := range streams {
		require.NoError(t, s.Close())
	}
	for _, vm := range vms { // every permit came back: a fresh burst gets the whole limit again
		_, ok := openStream(t, vm, tenant("acme"))
		assert.True(t, ok)
	}
}

func TestChurningStreamsOnEightWorkersNeverExceedTheLimitInFlight(t *testing.T) {
	p := load(t, module(t, "meshlimit"), concConfig("50"), 8)
	p.Process().YieldOnSharedData()
	vms := p.VMs()[:8]
	var inFlight, peak, admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 400 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				s, ok := openStream(t, vms[g%8], tenant("acme"))
				if ok {
					admitted.Add(1)
					n := inFlight.Add(1)
					for old := peak.Load(); n > old && !peak.CompareAndSwap(old, n); old = peak.Load() {
					}
					_, _ = s.SendResponseHeaders(envoyhost.Headers{{":status", "200"}}, true)
					inFlight.Add(-1) // before the release: the test's count never exceeds the filter's
				}
				require.NoError(t, s.Close())
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, peak.Load(), int64(50), "never more than the limit in flight at once")
	assert.Greater(t, admitted.Load(), int64(50), "permits were released and taken again")
	assert.Equal(t, int64(2000), counter(p, "meshlimit.rule.gpu.allowed")+counter(p, "meshlimit.rule.gpu.limited"))
}

func TestAConcurrencyDenialIs429WithTheConcurrentRequestsQuotaUnitAndNoRetryAfter(t *testing.T) {
	p := load(t, module(t, "meshlimit"), concConfig("2"), 1)
	vm := p.VM(0)
	for range 2 {
		_, ok := openStream(t, vm, tenant("acme"))
		require.True(t, ok)
	}
	s, ok := openStream(t, vm, tenant("acme"))
	require.False(t, ok)
	lr := s.LocalReply()
	assert.Equal(t, 429, lr.Status)
	policy, _ := lr.Headers.Get("ratelimit-policy")
	rl, _ := lr.Headers.Get("ratelimit")
	assert.Equal(t, `"gpu-slots";q=2;qu="concurrent-requests"`, policy)
	assert.Equal(t, `"gpu-slots";r=0`, rl)
	_, retry := lr.Headers.Get("retry-after")
	assert.False(t, retry, "no Retry-After: when a permit comes back cannot be promised")
	_, other := openStream(t, vm, tenant("globex"))
	assert.True(t, other, "another key has its own permits")
}

func TestEveryWayAStreamEndsReleasesItsPermit(t *testing.T) {
	deny := `{"name":"blocked","match":{"headers":[{"name":"x-block","present":true}]},"limits":[{"rate":"1/h"}]}`
	tests := []struct {
		name string
		end  func(t *testing.T, vm *envoyhost.VM, s *envoyhost.Stream)
	}{
		{"a normal end releases", func(t *testing.T, _ *envoyhost.VM, s *envoyhost.Stream) {
			_, err := s.SendResponseHeaders(envoyhost.Headers{{":status", "200"}}, false)
			require.NoError(t, err)
			_, err = s.SendResponseBody([]byte("done"), true)
			require.NoError(t, err)
			require.NoError(t, s.Close())
		}},
		{"a client reset before the response releases", func(t *testing.T, _ *envoyhost.VM, s *envoyhost.Stream) {
			require.NoError(t, s.Close())
		}},
		{"an upstream failure (a 503 from the proxy) releases", func(t *testing.T, _ *envoyhost.VM, s *envoyhost.Stream) {
			_, err := s.SendResponseHeaders(envoyhost.Headers{{":status", "503"}, {"x-envoy-overloaded", "true"}}, true)
			require.NoError(t, err)
			require.NoError(t, s.Close())
		}},
		{"a timeout in the middle of the response releases", func(t *testing.T, _ *envoyhost.VM, s *envoyhost.Stream) {
			_, err := s.SendResponseHeaders(envoyhost.Headers{{":status", "200"}}, false)
			require.NoError(t, err)
			_, err = s.SendResponseBody([]byte("partial"), false)
			require.NoError(t, err)
			require.NoError(t, s.Close())
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := load(t, module(t, "meshlimit"), concConfig("1", deny), 1)
			vm := p.VM(0)
			s, ok := openStream(t, vm, tenant("acme"))
			require.True(t, ok)
			_, ok = openStream(t, vm, tenant("acme"))
			require.False(t, ok, "the permit is held")
			tt.end(t, vm, s)
			_, ok = openStream(t, vm, tenant("acme"))
			assert.True(t, ok, "the permit came back")
		})
	}
	t.Run("a local reply by a later rule gives the permit back at once", func(t *testing.T) {
		p := load(t, module(t, "meshlimit"), concConfig("1", deny), 1)
		vm := p.VM(0)
		blocked := tenant("acme")
		blocked.Headers = append(blocked.Headers, [2]string{"x-block", "1"})
		s, ok := openStream(t, vm, blocked) // admitted by gpu, charged by blocked (1/h: allowed)
		require.True(t, ok)
		require.NoError(t, s.Close())
		s, ok = openStream(t, vm, blocked) // gpu takes the permit, blocked denies: 429
		require.False(t, ok)
		assert.Equal(t, 429, s.LocalReply().Status)
		_, ok = openStream(t, vm, tenant("acme")) // the denied stream is not even closed yet
		assert.True(t, ok, "the permit taken before the denial was given back")
	})
}

func TestAKilledPluginsPermitsAreReclaimedAfterTheLease(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	proc := envoyhost.NewProcess()
	shared := func(c *envoyhost.Config) { c.Clock, c.Process = clock, proc }
	wasm := module(t, "meshlimit")
	doomed := load(t, wasm, concConfig("50"), 4, shared)
	survivor := load(t, wasm, concConfig("50"), 4, shared)
	for i := range 30 {
		_, ok := openStream(t, doomed.VM(i%4), tenant("acme"))
		require.True(t, ok)
	}
	var held []*envoyhost.Stream
	for i := range 20 {
		s, ok := openStream(t, survivor.VM(i%4), tenant("acme"))
		require.True(t, ok)
		held = append(held, s)
	}
	require.NoError(t, doomed.Close()) // its VMs die mid-stream: no stream end is ever seen
	_, ok := openStream(t, survivor.VM(0), tenant("acme"))
	require.False(t, ok, "the dead plugin's 30 permits still count before their lease ends")

	clock.Advance(9 * time.Second) // renewals keep the survivor's 20; the lease is 10 s
	_, ok = openStream(t, survivor.VM(1), tenant("acme"))
	require.False(t, ok, "within the lease nothing is reclaimed")
	clock.Advance(2 * time.Second)
	admitted := 0
	for i := range 40 {
		if _, ok := openStream(t, survivor.VM(i%4), tenant("acme")); ok {
			admitted++
		}
	}
	assert.Equal(t, 30, admitted, "after the lease the dead plugin's permits are free; the survivor's 20 stay held")
	assert.Equal(t, int64(30), counter(survivor, "meshlimit.rule.gpu.permits_reclaimed"))
	for _, s := range held {
		require.NoError(t, s.Close())
	}
}

func TestALiveWorkersPermitsOutliveTheLeaseThroughRenewals(t *testing.T) {
	p := load(t, module(t, "meshlimit"), concConfig("3"), 2)
	for i := range 3 {
		_, ok := openStream(t, p.VM(i%2), tenant("acme"))
		require.True(t, ok)
	}
	p.Clock().Advance(time.Minute) // six leases: only renewals keep the permits
	_, ok := openStream(t, p.VM(0), tenant("acme"))
	assert.False(t, ok, "streams still open keep their permits")
	assert.Zero(t, counter(p, "meshlimit.rule.gpu.permits_reclaimed"))
}

// shedConfig is a pass-through rule and a shedder of capacity 10 whose class comes from
// x-priority (defaults: critical keeps 10%, default 20% more, sheddable the rest).
func shedConfig(extra string) string {
	return `{"rules":[{"name":"all","limits":[{"rate":"1000000/s"}]}],
		"shed":{"class_header":"x-priority","capacity":10` + extra + `}}`
}

func classed(class string) *envoyhost.Request {
	return get("api.example", "/", "192.0.2.9", [2]string{"x-priority", class})
}

func TestUnderLoadSheddableIsShedFirstAndCriticalKeepsItsReserve(t *testing.T) {
	p := load(t, module(t, "meshlimit"), shedConfig(""), 4)
	admit := func(class string, n int) (admitted int, last *envoyhost.Stream) {
		for i := range n {
			s, ok := openStream(t, p.VM(i%4), classed(class))
			if ok {
				admitted++
			}
			last = s
		}
		return admitted, last
	}
	n, shedStream := admit("sheddable", 20)
	assert.Equal(t, 7, n, "sheddable stops at 70% of the capacity")
	n, _ = admit("default", 20)
	assert.Equal(t, 2, n, "default takes the next 20%")
	n, _ = admit("", 5)
	assert.Equal(t, 0, n, "a request without a class is default")
	n, _ = admit("critical", 5)
	assert.Equal(t, 1, n, "critical keeps the last 10% for itself")

	lr := shedStream.LocalReply()
	require.NotNil(t, lr)
	assert.Equal(t, 503, lr.Status)
	assert.Contains(t, string(lr.Body), `"type":"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"`)
	ct, _ := lr.Headers.Get("content-type")
	assert.Equal(t, "application/problem+json", ct)
	retry, _ := lr.Headers.Get("retry-after")
	assert.Contains(t, []string{"1", "2", "3"}, retry, "retry_after 1s plus up to 2s of jitter")

	flushCounters(p)
	m := p.Process().Metrics()
	assert.Equal(t, int64(7), m["meshlimit.shed.sheddable.admitted"].Value)
	assert.Equal(t, int64(13), m["meshlimit.shed.sheddable.shed"].Value)
	assert.Equal(t, int64(2), m["meshlimit.shed.default.admitted"].Value)
	assert.Equal(t, int64(1), m["meshlimit.shed.critical.admitted"].Value)
	assert.Equal(t, int64(4), m["meshlimit.shed.critical.shed"].Value)
	p.Clock().Advance(2 * time.Second) // a renewal publishes the in-flight gauges
	assert.Equal(t, int64(7), p.Process().Metrics()["meshlimit.shed.sheddable.in_flight"].Value)
	assert.Equal(t, int64(10), p.Process().Metrics()["meshlimit.shed.capacity"].Value)
}

func TestCriticalTrafficAloneMayUseTheWholeCapacity(t *testing.T) {
	p := load(t, module(t, "meshlimit"), shedConfig(""), 2)
	admitted := 0
	for i := range 15 {
		if _, ok := openStream(t, p.VM(i%2), classed("critical")); ok {
			admitted++
		}
	}
	assert.Equal(t, 10, admitted)
}

func TestAShedSlotIsReleasedWhenItsStreamEnds(t *testing.T) {
	p := load(t, module(t, "meshlimit"), shedConfig(`,"classes":[{"name":"only"}],"default_class":"only"`), 1)
	var held []*envoyhost.Stream
	for range 10 {
		s, ok := openStream(t, p.VM(0), classed("only"))
		require.True(t, ok)
		held = append(held, s)
	}
	_, ok := openStream(t, p.VM(0), classed("only"))
	require.False(t, ok)
	_, err := held[0].SendResponseHeaders(envoyhost.Headers{{":status", "200"}}, true)
	require.NoError(t, err)
	require.NoError(t, held[0].Close())
	require.NoError(t, held[1].Close()) // a reset
	for range 2 {
		_, ok = openStream(t, p.VM(0), classed("only"))
		assert.True(t, ok)
	}
}

func TestAShadowShedderShedsNothingAndCountsWhatItWouldHaveShed(t *testing.T) {
	p := load(t, module(t, "meshlimit"), shedConfig(`,"shadow":true`), 1)
	for range 12 {
		_, ok := openStream(t, p.VM(0), classed("sheddable"))
		require.True(t, ok)
	}
	assert.Equal(t, int64(7), counter(p, "meshlimit.shed.sheddable.admitted"))
	assert.Equal(t, int64(5), counter(p, "meshlimit.shed.sheddable.shadow_shed"))
	assert.Zero(t, counter(p, "meshlimit.shed.sheddable.shed"))
}

func TestAShedDecisionGivesBackTheConcurrencyPermitsTakenBeforeIt(t *testing.T) {
	cfg := `{"rules":[{"name":"gpu","key":[{"header":"x-priority"}],"limits":[{"concurrency":100}]}],
		"shed":{"class_header":"x-priority","capacity":1,"classes":[{"name":"only"}],"default_class":"only"}}`
	p := load(t, module(t, "meshlimit"), cfg, 1)
	_, ok := openStream(t, p.VM(0), classed("only"))
	require.True(t, ok)
	for range 5 {
		_, ok = openStream(t, p.VM(0), classed("only"))
		require.False(t, ok, "shed")
	}
	p.Clock().Advance(3 * time.Second) // renewals rewrite the entries from the plugin's own counts
	assert.Equal(t, int64(6), counter(p, "meshlimit.rule.gpu.allowed"))
	// 99 permits remain: a larger shedder would admit them all (checked by the permit count).
	p2 := load(t, module(t, "meshlimit"), `{"rules":[{"name":"gpu","key":[{"header":"x-priority"}],"limits":[{"concurrency":100}]}]}`, 1,
		func(c *envoyhost.Config) { c.Process, c.Clock = p.Process(), p.Clock() })
	admitted := 0
	for range 120 {
		if _, ok := openStream(t, p2.VM(0), classed("only")); ok {
			admitted++
		}
	}
	assert.Equal(t, 99, admitted, "the shed requests hold no permit")
}

// TestAdaptiveCapacityFollowsASlowUpstreamAndShedsTheLowestClassFirst drives 2 workers in
// virtual time against a synthetic upstream that serves a request in 20 ms while at most K =
// 20 are in flight and slows down in proportion above that (a queue), offering twice what it
// can serve: sheddable 1 request per ms, default 0.8, critical 0.05.
func TestAdaptiveCapacityFollowsASlowUpstreamAndShedsTheLowestClassFirst(t *testing.T) {
	const K, base = 20, 20 * time.Millisecond
	cfg := `{"rules":[{"name":"all","limits":[{"rate":"1000000/s"}]}],
		"shed":{"class_header":"x-priority","adaptive":{"interval":"100ms","probe_samples":30}}}`
	p := load(t, module(t, "meshlimit"), cfg, 2)
	clock := p.Clock()
	type pending struct {
		s    *envoyhost.Stream
		done time.Time
	}
	var open []pending
	offered, shed := map[string]int{}, map[string]int{}
	lateShed := map[string]int{}
	var caps []int64
	const steps = 5000
	for ms := range steps {
		now := clock.Now()
		kept := open[:0]
		for _, o := range open {
			if o.done.After(now) {
				kept = append(kept, o)
				continue
			}
			_, err := o.s.SendResponseHeaders(envoyhost.Headers{{":status", "200"}}, true)
			require.NoError(t, err)
			require.NoError(t, o.s.Close())
		}
		open = kept
		var classes []string
		classes = append(classes, "sheddable")
		if ms%5 != 0 {
			classes = append(classes, "default")
		}
		if ms%20 == 0 {
			classes = append(classes, "critical")
		}
		for i, c := range classes {
			offered[c]++
			s, ok := openStream(t, p.VM((ms+i)%2), classed(c))
			if !ok {
				shed[c]++
				if ms >= steps/2 {
					lateShed[c]++
				}
				require.NoError(t, s.Close())
				continue
			}
			lat := base * time.Duration(max(len(open)+1, K)) / K
			open = append(open, pending{s, now.Add(lat)})
		}
		clock.Advance(time.Millisecond)
		if ms%100 == 99 {
			caps = append(caps, counter(p, "meshlimit.shed.capacity"))
		}
	}
	t.Logf("capacity every 100 ms: %v", caps)
	t.Logf("offered %v, shed %v, shed in the second half %v", offered, shed, lateShed)
	late := caps[len(caps)/2:]
	for _, c := range late {
		assert.GreaterOrEqual(t, c, int64(K*7/10), "the capacity stays near the upstream's knee")
		assert.LessOrEqual(t, c, int64(K*2))
	}
	assert.Zero(t, lateShed["critical"], "critical is never shed once the capacity has settled")
	assert.Greater(t, float64(shed["sheddable"])/float64(offered["sheddable"]),
		float64(shed["default"])/float64(offered["default"]), "sheddable is shed more than default")
}

func TestEnforcePercentEnforcesAStableShareOfKeysAndShadowsTheRest(t *testing.T) {
	cfg := `{"rules":[{"name":"tenant","key":[{"header":"x-tenant"}],"limits":[{"rate":"1/h"}],"enforce_percent":40}]}`
	p := load(t, module(t, "meshlimit"), cfg, 2)
	denied := map[string]bool{}
	for i := range 300 {
		name := "t" + strconv.Itoa(i)
		for j := range 3 {
			res := roundTrip(t, p.VM(j%2), tenant(name))
			if status(res) == 429 {
				denied[name] = true
			}
		}
	}
	assert.InDelta(t, 120, len(denied), 30, "about 40%% of 300 tenants are enforced")
	assert.Equal(t, int64(2*len(denied)), counter(p, "meshlimit.rule.tenant.limited"))
	assert.Equal(t, int64(2*(300-len(denied))), counter(p, "meshlimit.rule.tenant.shadow_limited"))
	for name := range denied { // the same tenants stay enforced
		assert.Equal(t, 429, status(roundTrip(t, p.VM(0), tenant(name))))
	}
}

func TestAKilledPluginsSheddingSlotsAreReclaimedAfterTheLease(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	proc := envoyhost.NewProcess()
	shared := func(c *envoyhost.Config) { c.Clock, c.Process = clock, proc }
	cfg := shedConfig(`,"classes":[{"name":"only"}],"default_class":"only"`)
	doomed := load(t, module(t, "meshlimit"), cfg, 2, shared)
	survivor := load(t, module(t, "meshlimit"), cfg, 2, shared)
	for i := range 10 {
		_, ok := openStream(t, doomed.VM(i%2), classed("only"))
		require.True(t, ok)
	}
	require.NoError(t, doomed.Close())
	_, ok := openStream(t, survivor.VM(0), classed("only"))
	require.False(t, ok, "the dead plugin's slots still count within their lease")
	clock.Advance(11 * time.Second)
	admitted := 0
	for i := range 15 {
		if _, ok := openStream(t, survivor.VM(i%2), classed("only")); ok {
			admitted++
		}
	}
	assert.Equal(t, 10, admitted, "the whole capacity is back")
	assert.Equal(t, int64(10), counter(survivor, "meshlimit.shed.reclaimed"))
}
