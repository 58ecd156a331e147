package e2e

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
	"github.com/meshlimit/meshlimit/internal/redistest"
)

// The global concurrency path on the compiled module: permits held by the real decision
// service in a real Redis, acquired in the check, renewed on the tick, released at the end of
// the stream.

// globalConcConfig is one global rule with a concurrency limit of n per tenant.
func globalConcConfig(n int, failureMode string) string {
	return globalConfig(`{"name":"gpu","scope":"global","key":[{"header":"x-tenant"}],"failure_mode":"` + failureMode + `",
		"limits":[{"concurrency":` + strconv.Itoa(n) + `,"name":"gpu-slots"}]}`)
}

// openGlobal sends a request's headers on a new stream of vm, waits for the filter's decision
// (the service's answer) and leaves the stream open; it reports whether the request was let
// through.
func openGlobal(t testing.TB, vm *envoyhost.VM, req *envoyhost.Request) (*envoyhost.Stream, bool) {
	t.Helper()
	s := vm.NewStream(req.Info)
	_, err := s.SendRequestHeaders(req.Headers, true)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	_, err = s.Wait(ctx)
	require.NoError(t, err, "the filter decides within its timeout")
	return s, s.LocalReply() == nil
}

// heldInRedis returns the permits of the rule's one key held in Redis (0 when none).
func heldInRedis(t testing.TB, addr string) int {
	t.Helper()
	key, err := redistest.Do(addr, "RANDOMKEY")
	require.NoError(t, err)
	if !strings.Contains(key, ":concurrency:") {
		return 0
	}
	n, err := redistest.Do(addr, "ZCARD", key)
	require.NoError(t, err)
	c, err := strconv.Atoi(n)
	require.NoError(t, err)
	return c
}

// openMany opens n streams at once, spread over the VMs of proxies, and returns the admitted
// and the denied ones.
func openMany(t *testing.T, proxies []*envoyhost.Plugin, n int) (admitted, denied []*envoyhost.Stream) {
	vms := vmsOf(proxies)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, ok := openGlobal(t, vms[i%len(vms)], tenant("acme"))
			mu.Lock()
			defer mu.Unlock()
			if ok {
				admitted = append(admitted, s)
			} else {
				denied = append(denied, s)
			}
		}()
	}
	wg.Wait()
	return admitted, denied
}

func TestTwoProxiesOnTwoServiceReplicasHoldExactlyTheGlobalConcurrencyLimit(t *testing.T) {
	t.Parallel()
	redis := redistest.Start(t)
	cfg := globalConcConfig(5, "allow")
	proxies := []*envoyhost.Plugin{
		load(t, module(t, "meshlimit"), cfg, 2, toReplica(startRealClockRedisService(t, redis.Addr()))),
		load(t, module(t, "meshlimit"), cfg, 2, toReplica(startRealClockRedisService(t, redis.Addr()))),
	}
	admitted, denied := openMany(t, proxies, 24)
	require.Len(t, admitted, 5, "24 streams held open on 6 VMs of 2 proxies share 5 permits")
	assert.Equal(t, 5, heldInRedis(t, redis.Addr()))

	lr := denied[0].LocalReply()
	assert.Equal(t, 429, lr.Status)
	policy, _ := lr.Headers.Get("ratelimit-policy")
	rl, _ := lr.Headers.Get("ratelimit")
	assert.Equal(t, `"gpu-slots";q=5;qu="concurrent-requests"`, policy)
	assert.Equal(t, `"gpu-slots";r=0`, rl)
	_, retry := lr.Headers.Get("retry-after")
	assert.False(t, retry, "no Retry-After: when a request in flight ends is not known")

	// Two streams end: one answered, one reset by the client before any response.
	_, err := admitted[0].SendResponseHeaders(envoyhost.Headers{{":status", "200"}}, true)
	require.NoError(t, err)
	require.NoError(t, admitted[0].Close())
	require.NoError(t, admitted[1].Close())
	eventually(t, "the two releases reach Redis", func() bool { return heldInRedis(t, redis.Addr()) == 3 })
	more, _ := openMany(t, proxies, 6)
	assert.Len(t, more, 2, "the two released permits, and no more, are taken again")
	for _, s := range append(append(admitted, more...), denied...) {
		require.NoError(t, s.Close())
	}
	eventually(t, "every permit is released", func() bool { return heldInRedis(t, redis.Addr()) == 0 })
	for _, p := range proxies {
		assert.Zero(t, counter(p, "meshlimit.global.failures"))
		assert.Zero(t, counter(p, "meshlimit.global.permit_failures"))
	}
}

func TestAPermitWhoseReleaseIsLostIsReclaimedAtTheEndOfItsLease(t *testing.T) {
	t.Parallel()
	redis := redistest.Start(t)
	cfg := globalConcConfig(2, "allow")
	dropped := load(t, module(t, "meshlimit"), cfg, 1, toReplica(startRealClockRedisService(t, redis.Addr())))
	other := load(t, module(t, "meshlimit"), cfg, 1, toReplica(startRealClockRedisService(t, redis.Addr())))
	for range 2 {
		_, ok := openGlobal(t, dropped.VM(0), tenant("acme"))
		require.True(t, ok)
	}
	require.NoError(t, dropped.Close()) // the proxy goes away: its streams never end, no release is sent
	start := time.Now()
	_, ok := openGlobal(t, other.VM(0), tenant("acme"))
	assert.False(t, ok, "the dropped proxy's permits are still held")
	eventually(t, "the leases end and the other proxy is admitted", func() bool {
		s, ok := openGlobal(t, other.VM(0), tenant("acme"))
		require.NoError(t, s.Close())
		return ok
	})
	t.Logf("admitted %v after the proxy was dropped (lease 5s)", time.Since(start).Round(100*time.Millisecond))
}

func TestLiveStreamsKeepTheirPermitsBeyondTheLeaseByRenewingThem(t *testing.T) {
	t.Parallel()
	redis := redistest.Start(t)
	cfg := globalConcConfig(2, "allow")
	holder := load(t, module(t, "meshlimit"), cfg, 2, toReplica(startRealClockRedisService(t, redis.Addr())))
	other := load(t, module(t, "meshlimit"), cfg, 1, toReplica(startRealClockRedisService(t, redis.Addr())))
	var held []*envoyhost.Stream
	for _, vm := range holder.VMs()[:2] {
		s, ok := openGlobal(t, vm, tenant("acme"))
		require.True(t, ok)
		held = append(held, s)
	}
	// 7 s of real time (past the 5 s lease in Redis TIME: Redis's clock is real), with the proxy's
	// clock moved a second, a tick at a time with every renewal answered, every half second of it: its
	// renewals go out on the ticks. Only a machine that took over 4 s for one such second would lose a
	// permit (it survives four lost renewals).
	for deadline := time.Now().Add(7 * time.Second); time.Now().Before(deadline); {
		advanceSettled(t, holder.Clock(), time.Second, holder)
		time.Sleep(500 * time.Millisecond)
	}
	assert.Equal(t, 2, heldInRedis(t, redis.Addr()))
	_, ok := openGlobal(t, other.VM(0), tenant("acme"))
	assert.False(t, ok, "the renewed permits are still held")
	assert.Positive(t, counter(holder, "meshlimit.global.permit_calls"))
	assert.Zero(t, counter(holder, "meshlimit.global.permits_lost"))
	assert.Zero(t, counter(holder, "meshlimit.global.permit_failures"))
	for _, s := range held {
		require.NoError(t, s.Close())
	}
	eventually(t, "the releases reach Redis", func() bool { return heldInRedis(t, redis.Addr()) == 0 })
}

func TestARedisRestartLosesTheGlobalPermitsAndTheFilterCountsThemLost(t *testing.T) {
	t.Parallel()
	redis := redistest.Start(t)
	svc := startRealClockRedisService(t, redis.Addr())
	open := load(t, module(t, "meshlimit"), globalConcConfig(2, "allow"), 1, toReplica(svc))
	for range 2 {
		_, ok := openGlobal(t, open.VM(0), tenant("acme"))
		require.True(t, ok)
	}
	redis.Stop()
	_, ok := openGlobal(t, open.VM(0), tenant("acme"))
	assert.True(t, ok, "failure_mode allow: the request goes on without a permit while Redis is down")
	assert.Equal(t, int64(1), counter(open, "meshlimit.global.failures"))
	redis.Start()
	waitReady(t, svc)
	// The service's client may still meet a broken connection once (a failure: admitted without
	// a permit); every request is admitted until 2 permits are held again.
	eventually(t, "the restart forgot the 2 permits in flight: 2 more are taken (API.md)", func() bool {
		_, ok := openGlobal(t, open.VM(0), tenant("acme"))
		require.True(t, ok)
		return heldInRedis(t, redis.Addr()) == 2
	})
	eventually(t, "then the limit holds again", func() bool {
		failures := counter(open, "meshlimit.global.failures")
		_, ok := openGlobal(t, open.VM(0), tenant("acme"))
		if ok {
			require.Greater(t, counter(open, "meshlimit.global.failures"), failures, "admitted only by failure_mode allow")
		}
		return !ok
	})
	// Each renewal round (a second of the proxy's clock) renews the 4 streams' permits: the 2
	// forgotten ones come back not renewed, are counted once and renewed no more. (A round whose
	// call meets the service's last broken connection counts in permit_failures instead.)
	eventually(t, "the renewals of the forgotten permits come back not renewed", func() bool {
		advanceSettled(t, open.Clock(), time.Second, open)
		return counter(open, "meshlimit.global.permits_lost") >= 2
	})
	advanceSettled(t, open.Clock(), 3*time.Second, open)
	assert.Equal(t, int64(2), counter(open, "meshlimit.global.permits_lost"), "each lost permit is counted once")
	assert.Equal(t, 2, heldInRedis(t, redis.Addr()), "the renewals keep the 2 live permits")
}

func TestAGlobalConcurrencyLimitOnARedisClusterOfThreeMasters(t *testing.T) {
	t.Parallel()
	nodes := redistest.StartCluster(t)
	p := load(t, module(t, "meshlimit"), globalConcConfig(2, "allow"), 2, toReplica(startRealClockRedisService(t, nodes[0].Addr())))
	var streams []*envoyhost.Stream
	for i := range 24 { // over the slots: 24 tenants miss one of 3 masters with odds 3 × (2/3)^24, 2 in 10,000
		name := "tenant-" + strconv.Itoa(i)
		for j, want := range []bool{true, true, false} {
			s, ok := openGlobal(t, p.VM(j%2), tenant(name))
			assert.Equal(t, want, ok, "%s request %d", name, j)
			streams = append(streams, s)
		}
	}
	assert.Zero(t, counter(p, "meshlimit.global.failures"))
	used := 0
	for _, n := range nodes {
		if k, err := n.Do("DBSIZE"); err == nil && k != "0" {
			used++
		}
	}
	assert.Equal(t, len(nodes), used, "the tenants' permits spread over every master")
	for _, s := range streams {
		require.NoError(t, s.Close())
	}
	eventually(t, "every permit is released", func() bool {
		for _, n := range nodes {
			if k, err := n.Do("DBSIZE"); err != nil || k != "0" {
				return false
			}
		}
		return true
	})
}

func TestAStreamThatEndsBeforeItsCheckIsAnsweredLeavesNoPermitBehind(t *testing.T) {
	t.Parallel()
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	p := load(t, module(t, "meshlimit"), globalConcConfig(1, "allow"), 1, withService(svc, nil), func(c *envoyhost.Config) { c.Clock = clock })
	release := svc.hold()
	req := tenant("acme")
	s := p.VM(0).NewStream(req.Info)
	_, err := s.SendRequestHeaders(req.Headers, true) // paused on the check
	require.NoError(t, err)
	require.NoError(t, s.Close()) // the client leaves before the answer; the service still acquires
	release()
	settle(t, p)
	other, ok := openGlobal(t, p.VM(0), tenant("acme"))
	require.NoError(t, other.Close())
	assert.False(t, ok, "the gone stream's permit is held until its release is due")
	clock.Advance(500 * time.Millisecond) // two call timeouts: the tick sends the release
	eventually(t, "the release frees the permit", func() bool {
		s, ok := openGlobal(t, p.VM(0), tenant("acme"))
		require.NoError(t, s.Close())
		return ok
	})
	assert.Positive(t, counter(p, "meshlimit.global.permit_calls"))
}
