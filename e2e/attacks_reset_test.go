package e2e

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/envoyhost"
	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/wire"
)

// Attacks on the reset log through the proxies: key values crafted so that a reset of one key frees
// another, and a flood of resets.

// TestAResetOfAKeyValueHoldingSlashesFreesThatValueOnly: key values are the rest of a descriptor key
// after the fingerprint, so they may hold '/'. Users "a/b", "a" and "b", all in the penalty box: the
// reset of "a/b" frees "a/b" alone, and a value that imitates the rest of a key ("<fp>/a") is its own.
func TestAResetOfAKeyValueHoldingSlashesFreesThatValueOnly(t *testing.T) {
	cfg := logConfig(localLogin)
	clock, log, p := startedLogProxy(t, cfg, 1)
	key := resetKey(t, cfg, "login", "a/b")
	_, fp, _, ok := wire.ParseKey(key, pluginName)
	require.True(t, ok)
	imitation := strconv.FormatUint(fp, 36) + "/a"
	users := []string{"a/b", "a", "b", imitation}
	for _, u := range users {
		failLogins(t, p.VM(0), u, 5)
	}

	log.add(key)
	tickAndWait(t, clock, resetPollTest, p)
	assert.Equal(t, 200, userLogin(t, p.VM(0), "a/b"))
	for _, u := range users[1:] {
		assert.Equal(t, 429, userLogin(t, p.VM(0), u), "%q stays in the box", u)
	}
}

// compositeLogin is a local login rule keyed by two headers: the key value joins them with '|' and
// escapes a '|' inside a part, so ("a|b", "c") and ("a", "b|c") are two keys.
const compositeLogin = `{"name":"login","key":[{"header":"x-user"},{"header":"x-org"}],"limits":[{"rate":"5/m"}],"count_on":{"status":["401"],"penalty":"15m"}}`

// TestAResetOfAKeyOfTwoPartsNeverFreesTheKeyThatJoinsTheSameText: ("a|b", "c") and ("a", "b|c") both
// in the penalty box; the reset of the first (as the admin names it: its escaped key value) frees it
// alone.
func TestAResetOfAKeyOfTwoPartsNeverFreesTheKeyThatJoinsTheSameText(t *testing.T) {
	cfg := logConfig(compositeLogin)
	clock, log, p := startedLogProxy(t, cfg, 1)
	pairs := [][2]string{{"a|b", "c"}, {"a", "b|c"}}
	for _, pr := range pairs {
		for i := range 5 {
			res := login(t, p.VM(0), "192.0.2.1", answer(401), [2]string{"x-user", pr[0]}, [2]string{"x-org", pr[1]})
			require.Nil(t, res.LocalReply, "%v: failure %d", pr, i+1)
		}
		require.Equal(t, 429, status(login(t, p.VM(0), "192.0.2.1", answer(200), [2]string{"x-user", pr[0]}, [2]string{"x-org", pr[1]})))
	}

	log.add(resetKey(t, cfg, "login", `a\|b|c`))
	tickAndWait(t, clock, resetPollTest, p)
	assert.Equal(t, 200, status(login(t, p.VM(0), "192.0.2.1", answer(200), [2]string{"x-user", "a|b"}, [2]string{"x-org", "c"})))
	assert.Equal(t, 429, status(login(t, p.VM(0), "192.0.2.1", answer(200), [2]string{"x-user", "a"}, [2]string{"x-org", "b|c"})),
		"the key that joins to the same text stays in the box")
}

// hashedWireValue is the value part of the descriptor key the filter writes for value: its hashed
// form when the service could not take it as is.
func hashedWireValue(t *testing.T, value string) string {
	t.Helper()
	body := wire.AppendRequestEnd(wire.AppendDescriptor(wire.AppendRequestStart(nil), 0,
		wire.Key{Plugin: pluginName, Rule: "login", Fingerprint: 1, Value: value}, algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 1, Window: time.Second}, 1))
	var req struct{ Descriptors []struct{ Key string } }
	require.NoError(t, json.Unmarshal(body, &req))
	_, _, v, ok := wire.ParseKey(req.Descriptors[0].Key, pluginName)
	require.True(t, ok)
	return v
}

// TestAClientImitatingTheHashedFormOfAnotherKeyIsNotFreedByItsReset: a user whose key value the
// filter cannot send as is (200 '|' characters escape to 400 bytes, past the 256 a descriptor value
// holds) is written to the service in its hashed form "#<hex>-<hex>". Mallory sends that very text
// as her own key value. When the admin resets the victim's descriptor key, the proxies cannot know
// which value it stood for, and forget none: Mallory is not freed by another's reset.
func TestAClientImitatingTheHashedFormOfAnotherKeyIsNotFreedByItsReset(t *testing.T) {
	cfg := logConfig(localLogin)
	clock, log, p := startedLogProxy(t, cfg, 1)
	victim := strings.Repeat("|", 200)
	imitation := hashedWireValue(t, strings.Repeat(`\|`, 200)) // the victim's key value, escaped
	require.True(t, strings.HasPrefix(imitation, "#"), "the victim's key value is hashed on the wire")
	failLogins(t, p.VM(0), imitation, 5)
	failLogins(t, p.VM(0), victim, 5)

	log.add(resetKey(t, cfg, "login", imitation))
	tickAndWait(t, clock, resetPollTest, p)
	assert.Equal(t, uint64(2), position(t, p), "the entry is read")
	assert.Equal(t, 429, userLogin(t, p.VM(0), imitation), "the imitation is not freed by the victim's reset")
	assert.Equal(t, 429, userLogin(t, p.VM(0), victim), "nor is the victim: its value is not known to the proxies")
	assert.Zero(t, counter(p, "meshlimit.global.resets_applied"))
}

// TestAFloodOfResetsIsAppliedAPageATickAndFreesItsUsers: an admin resets 1000 keys at once (a
// script gone wrong, or a stolen admin token). The proxy applies at most one page (256 entries) per
// tick, so no tick's work grows with the flood, follows the pages tick after tick, and every user of
// the flood is freed while the others stay in the box.
func TestAFloodOfResetsIsAppliedAPageATickAndFreesItsUsers(t *testing.T) {
	cfg := logConfig(localLogin)
	clock, log, p := startedLogProxy(t, cfg, 1)
	failLogins(t, p.VM(0), "alice", 5)
	failLogins(t, p.VM(0), "bob", 5)
	for i := range 999 {
		log.add(resetKey(t, cfg, "login", "flood"+strconv.Itoa(i)))
	}
	log.add(resetKey(t, cfg, "login", "alice"))

	// Tick by tick until the first poll's page is applied: one advance over the whole poll period
	// could fire a tick after the poll's answer arrived, which polls the next page.
	for i := 0; counter(p, "meshlimit.global.resets_applied") == 0; i++ {
		require.Less(t, i, int(2*resetPollTest/(20*time.Millisecond)), "the proxy polls within two poll periods")
		tickAndWait(t, clock, 20*time.Millisecond, p)
	}
	assert.Equal(t, int64(wire.MaxResetsPerAnswer), counter(p, "meshlimit.global.resets_applied"), "one page in the first tick")
	for range 3 {
		tickAndWait(t, clock, 20*time.Millisecond, p)
	}
	assert.Equal(t, int64(1000), counter(p, "meshlimit.global.resets_applied"))
	assert.Equal(t, uint64(1001), position(t, p))
	assert.Equal(t, 200, userLogin(t, p.VM(0), "alice"))
	assert.Equal(t, 429, userLogin(t, p.VM(0), "bob"))
	assert.Zero(t, counter(p, "meshlimit.panics"))
}

// TestALateAnswerOfTheResetLogNeverFreesAKeyThatWasBoxedAgainAfterItsReset: one worker's poll is
// answered slowly; in the next period another worker polls from the same position and applies
// alice's reset; alice fails her logins again and is back in the box. Then the slow answer arrives
// with the same entry: it is not applied again (the position already covers it), so alice stays in
// the box she earned after her reset.
func TestALateAnswerOfTheResetLogNeverFreesAKeyThatWasBoxedAgainAfterItsReset(t *testing.T) {
	cfg := logConfig(localLogin)
	clock, log, p := startedLogProxy(t, cfg, 2)
	failLogins(t, p.VM(0), "alice", 5)
	log.add(resetKey(t, cfg, "login", "alice"))
	release := make(chan struct{})
	var held atomic.Bool
	log.setAnswer(func(w http.ResponseWriter, req wire.ResetsRequest) {
		a := log.page0(req.Since)
		if held.CompareAndSwap(false, true) {
			<-release // the first poll's answer is slow (within the call's timeout)
		}
		_, _ = w.Write(wire.AppendResetsAnswer(nil, &a))
	})

	clock.Advance(resetPollTest)
	require.Eventually(t, held.Load, patience, time.Millisecond, "a worker polled and waits")
	clock.Advance(resetPollTest) // the next period: another worker polls and applies the reset
	require.Eventually(t, func() bool { return counter(p, "meshlimit.global.resets_applied") == 1 }, patience, time.Millisecond)
	require.Equal(t, uint64(2), position(t, p))
	failLogins(t, p.VM(0), "alice", 5) // freed, then boxed again

	close(release)
	settle(t, p) // the slow answer arrived
	assert.Equal(t, 429, userLogin(t, p.VM(1), "alice"), "the stale entry does not free her again")
	assert.Equal(t, int64(1), counter(p, "meshlimit.global.resets_applied"))
	assert.Equal(t, uint64(2), position(t, p))
	assert.Len(t, log.seen(), 3, "the first poll, the slow one, the one that applied")
}

// TestAnAdminResetAlsoFreesAKeyFromTheFallbackWhileTheServiceIsOutOfReach: the decision service is
// unreachable (the breaker opens) and the global rule's fallback (2/m) has limited alice. An admin
// reset of alice's key reaches the proxy through the log: the fallback forgets her too, so she
// passes at once, while bob, also limited, stays so.
func TestAnAdminResetAlsoFreesAKeyFromTheFallbackWhileTheServiceIsOutOfReach(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	log := &scriptedLog{}
	svc := startService(t, clock)
	cfg := logConfig(`{"name":"api","scope":"global","key":[{"header":"x-user"}],"limits":[{"rate":"100/h"}],"fallback":[{"rate":"2/m"}]}`)
	p := logProxy(t, cfg, 1, clock, svc, log)
	tickAndWait(t, clock, 20*time.Millisecond, p)
	svc.down.Store(true)
	call := func(user string) int {
		return status(roundTrip(t, p.VM(0), get("app.example", "/", "192.0.2.1", [2]string{"x-user", user})))
	}
	for _, user := range []string{"alice", "bob"} {
		assert.Equal(t, []int{200, 200, 429}, []int{call(user), call(user), call(user)}, "%s: the fallback's 2/m", user)
	}

	log.add(resetKey(t, cfg, "api", "alice"))
	tickAndWait(t, clock, resetPollTest, p)
	assert.Equal(t, int64(1), counter(p, "meshlimit.global.resets_applied"))
	assert.Equal(t, 200, call("alice"), "the reset reached the fallback")
	assert.Equal(t, 429, call("bob"))
}

// TestAfterRedisLosesTheResetLogTheProxiesStartAgainAndMissNoLaterReset: on a real Redis, a reset of
// a local rule's key reaches two proxies (position 2); then Redis loses everything (FLUSHALL). At
// their next poll the proxies are ahead of the log: told it is truncated, they take its position (1)
// and count it; the next admin reset is logged at position 2 again, and reaches them.
func TestAfterRedisLosesTheResetLogTheProxiesStartAgainAndMissNoLaterReset(t *testing.T) {
	redis := redistest.Start(t)
	addr := startAdminService(t, redis.Addr())
	cfg := loginResetConfig(``)
	a, b, clock := twoProxies(t, addr, cfg)
	const alice, bob = "203.0.113.9", "203.0.113.10"
	box := func(ip string) {
		for _, p := range []*envoyhost.Plugin{a, b} {
			for range 5 {
				require.Nil(t, login(t, p.VM(0), ip, answer(401)).LocalReply)
			}
			require.Equal(t, 429, status(login(t, p.VM(1), ip, answer(200))))
		}
	}
	box(alice)
	adminResetKeys(t, addr, cfg, "login", alice)
	tickAndWait(t, clock, resetPollTest, a, b)
	for _, p := range []*envoyhost.Plugin{a, b} {
		require.Equal(t, uint64(2), position(t, p))
	}

	_, err := redis.Do("FLUSHALL")
	require.NoError(t, err)
	tickAndWait(t, clock, resetPollTest, a, b)
	for i, p := range []*envoyhost.Plugin{a, b} {
		assert.Equal(t, uint64(1), position(t, p), "proxy %d takes the position of the lost log", i)
		assert.Equal(t, int64(1), counter(p, "meshlimit.global.resets_truncated"))
	}

	box(bob)
	adminResetKeys(t, addr, cfg, "login", bob)
	tickAndWait(t, clock, resetPollTest, a, b)
	for i, p := range []*envoyhost.Plugin{a, b} {
		assert.Nil(t, login(t, p.VM(1), bob, answer(200)).LocalReply, "proxy %d: bob's reset, logged at position 2 again, reached it", i)
		assert.Equal(t, uint64(2), position(t, p))
	}
}
