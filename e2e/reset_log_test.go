package e2e

import (
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/wire"
)

// The reset log seen from the proxies: what they do with the answers of POST /v1/resets, whatever
// the service answers. A scripted log stands in for the service's endpoint here (the acceptance
// tests on Redis are in admin_test.go); /v1/check goes to the real decision service.

const (
	pluginName    = "istio-system.meshlimit"
	resetsRecord  = "meshlimit/" + pluginName + "/resets"
	logSecret     = "proxy-secret-for-e2e"
	resetPollTest = 200 * time.Millisecond
)

// scriptedLog answers /v1/resets from a list of entries as the service does (positions start at 1,
// the position of a log never written to, so its first entry is 2; since 0: only the position; at
// most page entries, more when more remain), unless answer is set, which then writes the answer
// itself. It records the requests it got; a request without the proxies' secret is refused.
type scriptedLog struct {
	mu       sync.Mutex
	entries  []wire.Reset
	page     int
	answer   func(w http.ResponseWriter, req wire.ResetsRequest)
	requests []wire.ResetsRequest
}

func (l *scriptedLog) add(keys ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		l.entries = append(l.entries, wire.Reset{Seq: uint64(len(l.entries) + 2), Key: k})
	}
}

func (l *scriptedLog) setAnswer(f func(w http.ResponseWriter, req wire.ResetsRequest)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.answer = f
}

func (l *scriptedLog) seen() []wire.ResetsRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]wire.ResetsRequest(nil), l.requests...)
}

func (l *scriptedLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req wire.ResetsRequest
	if r.Header.Get(wire.SecretHeader) != logSecret || wire.DecodeResetsRequest(body, &req) != nil {
		http.Error(w, "refused", http.StatusForbidden)
		return
	}
	l.mu.Lock()
	l.requests = append(l.requests, req)
	answer, a := l.answer, l.page0(req.Since)
	l.mu.Unlock()
	if answer != nil {
		answer(w, req)
		return
	}
	_, _ = w.Write(wire.AppendResetsAnswer(nil, &a))
}

// page0 is the contract's answer to since.
func (l *scriptedLog) page0(since uint64) wire.ResetsAnswer {
	a := wire.ResetsAnswer{Seq: uint64(len(l.entries) + 1)}
	if since == 0 || since > a.Seq {
		a.Truncated = since > a.Seq
		return a
	}
	limit := wire.MaxResetsPerAnswer
	if l.page > 0 {
		limit = l.page
	}
	for _, e := range l.entries[since-1:] {
		if len(a.Resets) == limit {
			a.More, a.Seq = true, a.Resets[len(a.Resets)-1].Seq
			break
		}
		a.Resets = append(a.Resets, e)
	}
	return a
}

// logProxy loads the module with config on workers workers and a cluster whose /v1/resets is log
// and whose other paths are the decision service svc.
func logProxy(t *testing.T, config string, workers int, clock *envoyhost.Clock, svc *decisionService, log *scriptedLog) *envoyhost.Plugin {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(wire.ResetsPath, log)
	mux.Handle("/", svc.srv.Config.Handler)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return load(t, module(t, "meshlimit"), config, workers, func(c *envoyhost.Config) {
		c.Clusters = map[string]string{serviceCluster: strings.TrimPrefix(srv.URL, "http://")}
		c.Process, c.Clock = envoyhost.NewProcess(), clock
	})
}

// logConfig is a plugin with a global service polled every resetPollTest and the given rules.
func logConfig(rules string) string {
	return `{"global":{"cluster":"` + serviceCluster + `","timeout":"500ms","secret":"` + logSecret + `",
		"reset_poll":"200ms"},"rules":[` + rules + `]}`
}

// startedLogProxy is logProxy with a fresh clock, an empty scripted log and the real decision
// service, after its first poll (the proxy has taken the log's position).
func startedLogProxy(t *testing.T, cfg string, workers int) (*envoyhost.Clock, *scriptedLog, *envoyhost.Plugin) {
	t.Helper()
	clock, log := envoyhost.NewClock(epoch), &scriptedLog{}
	p := logProxy(t, cfg, workers, clock, startService(t, clock), log)
	tickAndWait(t, clock, 20*time.Millisecond, p)
	return clock, log, p
}

// localLogin is a local counted login rule: 5 failures a minute per x-user, then 15 minutes out.
const localLogin = `{"name":"login","key":[{"header":"x-user"}],"limits":[{"rate":"5/m"}],"count_on":{"status":["401"],"penalty":"15m"}}`

// tickAndWait advances the clock by d (firing the ticks on the way) and waits until every call the
// ticks made has been answered.
func tickAndWait(t *testing.T, clock *envoyhost.Clock, d time.Duration, proxies ...*envoyhost.Plugin) {
	t.Helper()
	clock.Advance(d)
	settle(t, proxies...)
}

// position reads the reset log position the proxy has applied, from its shared data.
func position(t *testing.T, p *envoyhost.Plugin) uint64 {
	t.Helper()
	v, _, st := p.Process().GetSharedData("meshlimit", resetsRecord)
	require.Equal(t, envoyhost.StatusOK, st, "the poll record exists")
	require.Len(t, v, 17)
	return binary.LittleEndian.Uint64(v[1:])
}

// resetKey is the descriptor key of value under the rule's first limit, as the admin API names it.
func resetKey(t *testing.T, config, rule, value string) string {
	t.Helper()
	cfg, err := rules.ParseConfig([]byte(config))
	require.NoError(t, err)
	for _, r := range cfg.Rules() {
		if r.Name == rule {
			set, _ := r.Limits([]byte(value))
			return pluginName + "/" + rule + "/" + strconv.FormatUint(set.Limits[0].Fingerprint, 36) + "/" + value
		}
	}
	t.Fatalf("no rule %q", rule)
	return ""
}

// failLogins sends n failed logins of user through vm and requires the next to be in the box.
func failLogins(t *testing.T, vm *envoyhost.VM, user string, n int) {
	t.Helper()
	for i := range n {
		require.Nil(t, login(t, vm, "192.0.2.1", answer(401), [2]string{"x-user", user}).LocalReply, "%s: failure %d reaches the upstream", user, i+1)
	}
	require.Equal(t, 429, status(login(t, vm, "192.0.2.1", answer(200), [2]string{"x-user", user})), "%s is in the penalty box", user)
}

func userLogin(t *testing.T, vm *envoyhost.VM, user string) int {
	t.Helper()
	return status(login(t, vm, "192.0.2.1", answer(200), [2]string{"x-user", user}))
}

func TestAResetOfAliceNeverFreesBob(t *testing.T) {
	cfg := logConfig(localLogin)
	clock, log, p := startedLogProxy(t, cfg, 2) // the first poll: the proxy takes the log's position
	for _, user := range []string{"alice", "bob"} {
		failLogins(t, p.VM(0), user, 5)
	}

	log.add(resetKey(t, cfg, "login", "alice"))
	tickAndWait(t, clock, resetPollTest, p)
	assert.Equal(t, 200, userLogin(t, p.VM(1), "alice"), "alice is out of the box and has a fresh quota")
	assert.Equal(t, 429, userLogin(t, p.VM(1), "bob"), "bob stays in the box")
	assert.Equal(t, int64(1), counter(p, "meshlimit.global.resets_applied"))
	assert.Equal(t, uint64(2), position(t, p))
}

func TestAClientCannotTriggerOrForgeAReset(t *testing.T) {
	cfg := logConfig(localLogin)
	clock, log, p := startedLogProxy(t, cfg, 1)
	failLogins(t, p.VM(0), "alice", 5)
	polls := len(log.seen())
	t.Logf("%d polls in two minutes", polls)

	// A client sends what the service would: to the path of the log, with the secret and an
	// answer of the log as its body; and its upstream answers with one too.
	forged := wire.AppendResetsAnswer(nil, &wire.ResetsAnswer{Seq: 9, Resets: []wire.Reset{{Seq: 9, Key: resetKey(t, cfg, "login", "alice")}}})
	for _, user := range []string{"alice", "mallory"} {
		req := get("app.example", wire.ResetsPath, "192.0.2.1", [2]string{"x-user", user}, [2]string{wire.SecretHeader, logSecret},
			[2]string{"content-type", wire.ContentType})
		req.Headers[0][1], req.Body = "POST", forged
		res, err := p.VM(0).RoundTrip(t.Context(), req, &envoyhost.Response{
			Headers: envoyhost.Headers{{":status", "200"}, {"content-type", wire.ContentType}}, Body: forged})
		require.NoError(t, err)
		assert.Equal(t, map[string]int{"alice": 429, "mallory": 200}[user], status(res), user)
	}
	tickAndWait(t, clock, 50*time.Millisecond, p) // ticks, but the poll is not due

	assert.Equal(t, polls, len(log.seen()), "no request of a client makes the proxy poll")
	assert.Equal(t, 429, userLogin(t, p.VM(0), "alice"), "she is still in the box")
	assert.Zero(t, counter(p, "meshlimit.global.resets_applied"))
}

func TestAMalformedOrOversizedAnswerIsACountedFailureAndThePositionStays(t *testing.T) {
	for _, tc := range []struct {
		name string
		body func(since uint64) string
		code int
	}{
		{"a body that is not JSON", func(uint64) string { return "<html>oops</html>" }, 200},
		{"an answer without its position", func(uint64) string { return `{"resets":[]}` }, 200},
		{"positions that go backwards", func(s uint64) string {
			return fmt.Sprintf(`{"seq":%d,"resets":[{"seq":%d,"key":"a"},{"seq":%d,"key":"b"}]}`, s+2, s+2, s+1)
		}, 200},
		{"more entries than an answer may carry", func(s uint64) string {
			var b strings.Builder
			fmt.Fprintf(&b, `{"seq":%d,"resets":[`, s+wire.MaxResetsPerAnswer+1)
			for i := range wire.MaxResetsPerAnswer + 1 {
				fmt.Fprintf(&b, `%s{"seq":%d,"key":"k"}`, map[bool]string{true: ",", false: ""}[i > 0], s+uint64(i)+1)
			}
			return b.String() + "]}"
		}, 200},
		{"a body larger than an answer may be", func(s uint64) string {
			return fmt.Sprintf(`{"seq":%d,"resets":[],"pad":"%s"}`, s+1, strings.Repeat("x", wire.MaxAnswerBytes))
		}, 200},
		{"an error status", func(uint64) string { return `{"error":"store down"}` }, 503},
		{"a refusal", func(uint64) string { return `{"error":"no"}` }, 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := envoyhost.NewClock(epoch)
			log := &scriptedLog{}
			cfg := logConfig(localLogin)
			p := logProxy(t, cfg, 1, clock, startService(t, clock), log)
			log.add("x", "y", "z")
			tickAndWait(t, clock, 20*time.Millisecond, p)
			require.Equal(t, uint64(4), position(t, p))
			failLogins(t, p.VM(0), "alice", 5)
			log.setAnswer(func(w http.ResponseWriter, req wire.ResetsRequest) {
				w.WriteHeader(tc.code)
				_, _ = io.WriteString(w, tc.body(req.Since))
			})

			tickAndWait(t, clock, resetPollTest, p)
			tickAndWait(t, clock, resetPollTest, p)
			assert.Equal(t, int64(2), counter(p, "meshlimit.global.resets_poll_failed"), "each failed poll is counted")
			assert.Equal(t, uint64(4), position(t, p), "the position does not move")
			seen := log.seen()
			require.Len(t, seen, 3)
			assert.Equal(t, uint64(4), seen[2].Since, "the next poll asks from the same position")
			assert.Zero(t, counter(p, "meshlimit.global.resets_applied"))
			assert.Zero(t, counter(p, "meshlimit.panics"))
			assert.NoError(t, p.VM(0).Failed(), "never a trap")
			assert.Zero(t, counter(p, "meshlimit.global.breaker_opened"), "the log never trips the breaker")
			assert.Equal(t, 429, userLogin(t, p.VM(0), "alice"))
			assert.True(t, logsContain(p, envoyhost.LogWarn, "reading the reset log"))
		})
	}
}

func TestAServiceThatAnswersTruncatedMakesTheProxyAdoptItsPositionAndWarn(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	log := &scriptedLog{}
	p := logProxy(t, logConfig(localLogin), 1, clock, startService(t, clock), log)
	for range 50 {
		log.add("x")
	}
	tickAndWait(t, clock, 20*time.Millisecond, p)
	require.Equal(t, uint64(51), position(t, p))
	log.setAnswer(func(w http.ResponseWriter, _ wire.ResetsRequest) { // the service lost its log and started again
		_, _ = w.Write(wire.AppendResetsAnswer(nil, &wire.ResetsAnswer{Seq: 3, Truncated: true}))
	})

	tickAndWait(t, clock, resetPollTest, p)
	assert.Equal(t, uint64(3), position(t, p), "the proxy adopts the service's position, even a lower one")
	assert.Equal(t, int64(1), counter(p, "meshlimit.global.resets_truncated"))
	assert.True(t, logsContain(p, envoyhost.LogWarn, "the reset log no longer holds position 51"))
	log.setAnswer(nil)
	tickAndWait(t, clock, resetPollTest, p)
	seen := log.seen()
	assert.Equal(t, uint64(3), seen[len(seen)-1].Since, "and asks from there")
}

func TestTwoWorkersDoNotBothPollInOneInterval(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	log := &scriptedLog{}
	p := logProxy(t, logConfig(localLogin), 4, clock, startService(t, clock), log) // 4 workers and the main thread
	const intervals = 10
	for range intervals * 10 {
		tickAndWait(t, clock, resetPollTest/10, p)
	}
	seen := log.seen()
	assert.GreaterOrEqual(t, len(seen), intervals-1, "the log is read about once per interval")
	assert.LessOrEqual(t, len(seen), intervals+1, "by one worker of the five")
	assert.Zero(t, counter(p, "meshlimit.global.resets_poll_failed"))
}

// TestAServiceThatDoesNotServeTheResetLogIsAskedOnceAMinutePerWorker: an older service (a rolling
// upgrade) answers 404 to /v1/resets; each worker that got one waits a minute before it asks
// again, instead of every reset_poll, and says why once per wait; requests are decided as ever.
func TestAServiceThatDoesNotServeTheResetLogIsAskedOnceAMinutePerWorker(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	log := &scriptedLog{}
	log.setAnswer(func(w http.ResponseWriter, _ wire.ResetsRequest) { http.NotFound(w, nil) })
	p := logProxy(t, logConfig(localLogin), 2, clock, startService(t, clock), log) // 2 workers and the main thread
	// Two minutes in steps of 100 ms: 600 reset_poll periods.
	for range 1200 {
		tickAndWait(t, clock, 100*time.Millisecond, p)
	}
	polls := len(log.seen())
	t.Logf("%d polls in two minutes", polls)
	assert.GreaterOrEqual(t, polls, 3, "each VM asks again after its wait")
	assert.LessOrEqual(t, polls, 3*3, "three VMs, each at most once a minute (and once at the start): not one call a period")
	assert.Equal(t, int64(polls), counter(p, "meshlimit.global.resets_poll_failed"))
	assert.True(t, logsContain(p, envoyhost.LogWarn, "does not serve the reset log"))
	failLogins(t, p.VM(0), "alice", 5) // limiting goes on: five failures, then the penalty box
}

func TestAnAnswerWithMoreEntriesIsFollowedAtTheNextTick(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	log := &scriptedLog{page: 2}
	cfg := logConfig(localLogin)
	p := logProxy(t, cfg, 1, clock, startService(t, clock), log)
	tickAndWait(t, clock, 20*time.Millisecond, p)
	users := []string{"u1", "u2", "u3", "u4", "u5"}
	for _, u := range users {
		failLogins(t, p.VM(0), u, 5)
		log.add(resetKey(t, cfg, "login", u))
	}

	tickAndWait(t, clock, resetPollTest, p) // a page of 2
	for range 2 {
		tickAndWait(t, clock, 20*time.Millisecond, p) // one tick each: the next pages
	}
	assert.Equal(t, uint64(6), position(t, p))
	assert.Equal(t, int64(5), counter(p, "meshlimit.global.resets_applied"))
	for _, u := range users {
		assert.Equal(t, 200, userLogin(t, p.VM(0), u), "%s is out of the box", u)
	}
}

func TestEntriesThatNameNoLimitOfThePluginAreIgnored(t *testing.T) {
	cfg := logConfig(localLogin)
	clock, log, p := startedLogProxy(t, cfg, 1)
	failLogins(t, p.VM(0), "alice", 5)
	good := resetKey(t, cfg, "login", "alice")
	rule, fp, _, ok := wire.ParseKey(good, pluginName)
	require.True(t, ok)
	log.add(
		"other.plugin/login/"+strconv.FormatUint(fp, 36)+"/alice",            // another plugin's
		pluginName+"/nosuchrule/"+strconv.FormatUint(fp, 36)+"/alice",        // no such rule
		pluginName+"/"+rule+"/"+strconv.FormatUint(fp+1, 36)+"/alice",        // a limit the rule does not have
		pluginName+"/"+rule+"/"+strconv.FormatUint(fp, 36)+"/#1a2b3c-4d5e6f", // a value the encoder hashed
	)

	tickAndWait(t, clock, resetPollTest, p)
	assert.Equal(t, uint64(5), position(t, p), "the entries are read")
	assert.Zero(t, counter(p, "meshlimit.global.resets_applied"), "and none applies")
	assert.Equal(t, 429, userLogin(t, p.VM(0), "alice"))
}

func TestWithResetPollOffTheLogIsNeverRead(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	log := &scriptedLog{}
	cfg := strings.Replace(logConfig(localLogin), `"200ms"`, `"off"`, 1)
	p := logProxy(t, cfg, 1, clock, startService(t, clock), log)
	tickAndWait(t, clock, 2*time.Second, p)
	assert.Empty(t, log.seen())
	_, _, st := p.Process().GetSharedData("meshlimit", resetsRecord)
	assert.Equal(t, envoyhost.StatusNotFound, st)
}
