package service_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/memstore"
	"github.com/meshlimit/meshlimit/wire"
)

const resetsSecret = "proxy-secret"

// resetsRig is a service with a secret and an admin token.
type resetsRig struct{ h *service.Handler }

func newResetsRig(t *testing.T, s service.Store) resetsRig {
	return resetsRig{h: newTestHandler(t, service.Config{Store: s, Secret: resetsSecret, AdminToken: adminToken})}
}

// poll is a proxy of plugin asking for the entries after since.
func (r resetsRig) poll(t *testing.T, plugin string, since uint64) wire.ResetsAnswer {
	t.Helper()
	code, body := serve(r.h, http.MethodPost, wire.ResetsPath, string(wire.AppendResetsRequest(nil, plugin, since)), wire.SecretHeader, resetsSecret)
	require.Equal(t, http.StatusOK, code, body)
	a, err := wire.DecodeResetsAnswer([]byte(body), nil)
	require.NoError(t, err, body)
	return a
}

// reset is an operator resetting the keys of plugin's rule "login" for values; it returns the
// answer's seq.
func (r resetsRig) reset(t *testing.T, plugin string, values ...string) uint64 {
	t.Helper()
	l := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 5, Window: time.Minute}
	b := wire.AppendRequestStart(nil)
	for i, v := range values {
		b = wire.AppendDescriptor(b, i, wire.Key{Plugin: plugin, Rule: "login", Fingerprint: 7, Value: v}, l, 1)
	}
	code, out := adminCall(t, r.h, "reset", adminToken, string(wire.AppendRequestEnd(b)))
	require.Equal(t, http.StatusOK, code, "%v", out)
	seq, ok := out["seq"].(float64)
	require.True(t, ok, "the answer of a reset has its log position: %v", out)
	return uint64(seq)
}

// appendN appends n keys of plugin to the log directly.
func appendN(t *testing.T, s service.Store, plugin string, n int) uint64 {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = plugin + "/login/7/user-" + strconv.Itoa(i)
	}
	seq, err := s.AppendResets(context.Background(), keys)
	require.NoError(t, err)
	return seq
}

func resetKeys(a wire.ResetsAnswer) []string {
	keys := make([]string, 0, len(a.Resets))
	for _, r := range a.Resets {
		keys = append(keys, r.Key)
	}
	return keys
}

func TestAnAdminResetIsLoggedForTheProxiesOfItsPlugin(t *testing.T) {
	eachStore(t, func(t *testing.T, s service.Store) {
		r := newResetsRig(t, s)
		pos := r.poll(t, "ns.p", 0).Seq
		require.Positive(t, pos)

		seq := r.reset(t, "ns.p", "alice", "bob", "alice")
		a := r.poll(t, "ns.p", pos)
		assert.Equal(t, []string{"ns.p/login/7/alice", "ns.p/login/7/bob"}, resetKeys(a), "one entry per distinct key, in order")
		assert.Equal(t, seq, a.Seq, "the admin's seq is the log position of its last entry")
		assert.Equal(t, seq, a.Resets[1].Seq)
		assert.False(t, a.More || a.Truncated)

		again := r.poll(t, "ns.p", a.Seq)
		assert.Empty(t, again.Resets, "a proxy that applied the entries gets none again")
		assert.Equal(t, seq, again.Seq)

		_, metrics := serve(r.h, http.MethodGet, "/metrics", "")
		assert.Contains(t, metrics, "meshlimit_resets_logged_total 2")
	})
}

func TestAProxyWithNoPositionLearnsTheLatestSeqAndNoEntries(t *testing.T) {
	eachStore(t, func(t *testing.T, s service.Store) {
		r := newResetsRig(t, s)
		fresh := r.poll(t, "ns.p", 0)
		assert.Equal(t, uint64(1), fresh.Seq, "a log never written to is at its origin, 1")
		assert.Empty(t, fresh.Resets)

		// A proxy that learned the origin hears of the very first reset.
		seq := r.reset(t, "ns.p", "alice")
		assert.Equal(t, []string{"ns.p/login/7/alice"}, resetKeys(r.poll(t, "ns.p", fresh.Seq)))

		a := r.poll(t, "ns.p", 0)
		assert.Equal(t, seq, a.Seq)
		assert.Empty(t, a.Resets, "a proxy without a position has fresh state: it needs no entry")
		assert.False(t, a.Truncated)
	})
}

func TestAProxyThatFellBehindTheLogIsToldItIsTruncated(t *testing.T) {
	eachStore(t, func(t *testing.T, s service.Store) {
		r := newResetsRig(t, s)
		pos := r.poll(t, "ns.p", 0).Seq
		latest := appendN(t, s, "ns.p", service.ResetLogSize+10)

		a := r.poll(t, "ns.p", pos)
		assert.True(t, a.Truncated, "10 entries after its position were dropped")
		require.Len(t, a.Resets, wire.MaxResetsPerAnswer, "it still gets what the log holds")
		assert.Equal(t, latest-service.ResetLogSize+1, a.Resets[0].Seq, "from the oldest entry kept")

		edge := r.poll(t, "ns.p", latest-service.ResetLogSize)
		assert.False(t, edge.Truncated, "a proxy right before the oldest entry kept missed nothing")

		ahead := r.poll(t, "ns.p", latest+100)
		assert.True(t, ahead.Truncated, "a position beyond the log: the store lost it")
		assert.Equal(t, latest, ahead.Seq, "the proxy adopts the log's position")
		assert.Empty(t, ahead.Resets)
	})
}

func TestAProxyIsToldOfTruncationWhenRedisLostTheLog(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	r := newResetsRig(t, newRedisStore(t, srv.Addr()))
	seq := r.reset(t, "ns.p", "alice", "bob")
	_, err := srv.Do("FLUSHALL")
	require.NoError(t, err)

	a := r.poll(t, "ns.p", seq)
	assert.True(t, a.Truncated)
	assert.Equal(t, uint64(1), a.Seq, "the log starts over at its origin")
	next := r.reset(t, "ns.p", "carol")
	assert.Equal(t, []string{"ns.p/login/7/carol"}, resetKeys(r.poll(t, "ns.p", a.Seq)), "a proxy that adopted the new origin hears of the next reset")
	assert.Equal(t, uint64(2), next)
}

func TestLosingTheRedisPositionKeyAloneNeverReusesAPosition(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	r := newResetsRig(t, newRedisStore(t, srv.Addr()))
	seq := r.reset(t, "ns.p", "alice", "bob")
	_, err := srv.Do("DEL", "ml:{resets}:seq")
	require.NoError(t, err)
	assert.Equal(t, seq, r.poll(t, "ns.p", 0).Seq)
	assert.Equal(t, seq+1, r.reset(t, "ns.p", "carol"))
	assert.Equal(t, []string{"ns.p/login/7/carol"}, resetKeys(r.poll(t, "ns.p", seq)))
}

func TestResetsOfAnotherPluginAreNotServed(t *testing.T) {
	eachStore(t, func(t *testing.T, s service.Store) {
		r := newResetsRig(t, s)
		pos := r.poll(t, "ns.p", 0).Seq
		r.reset(t, "ns.q", "alice")
		r.reset(t, "ns.pp", "alice")
		r.reset(t, "ns.p", "bob")
		r.reset(t, "ns", "carol") // a plugin whose name is a prefix of ours
		long := strings.Repeat("x", wire.MaxPluginBytes+1)
		r.reset(t, long, "dave")

		assert.Equal(t, []string{"ns.p/login/7/bob"}, resetKeys(r.poll(t, "ns.p", pos)))
		longKeys := resetKeys(r.poll(t, long, pos))
		require.Len(t, longKeys, 1, "a plugin written hashed has its entries too")
		assert.True(t, strings.HasPrefix(longKeys[0], "#"))
	})
}

func TestAPageOfTheLogHoldsAtMost256EntriesAndTellsOfTheRest(t *testing.T) {
	eachStore(t, func(t *testing.T, s service.Store) {
		r := newResetsRig(t, s)
		pos := r.poll(t, "ns.p", 0).Seq
		appendN(t, s, "ns.q", 50)
		latest := appendN(t, s, "ns.p", 300)

		first := r.poll(t, "ns.p", pos)
		require.Len(t, first.Resets, wire.MaxResetsPerAnswer)
		assert.True(t, first.More)
		assert.Equal(t, first.Resets[len(first.Resets)-1].Seq, first.Seq, "seq is the page's last entry: ask again from there")
		second := r.poll(t, "ns.p", first.Seq)
		assert.Len(t, second.Resets, 300-wire.MaxResetsPerAnswer)
		assert.False(t, second.More)
		assert.Equal(t, latest, second.Seq)
		assert.Equal(t, "ns.p/login/7/user-299", second.Resets[len(second.Resets)-1].Key)
	})
}

func TestTheResetsPathRefusesACallerWithoutTheSecret(t *testing.T) {
	r := newResetsRig(t, newMemoryStore(t))
	r.reset(t, "ns.p", "alice")
	body := string(wire.AppendResetsRequest(nil, "ns.p", 1))
	for _, tc := range []struct {
		name   string
		header []string
	}{
		{"no secret", nil},
		{"a wrong secret", []string{wire.SecretHeader, "proxy-secreT"}},
		{"a prefix of the secret", []string{wire.SecretHeader, "proxy"}},
		{"the admin token instead", []string{wire.SecretHeader, adminToken}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := serve(r.h, http.MethodPost, wire.ResetsPath, body, tc.header...)
			assert.Equal(t, http.StatusUnauthorized, code)
			assert.NotContains(t, out, "alice", "nothing of the log leaks")
		})
	}
}

func TestABadResetsRequestIsRefused(t *testing.T) {
	r := newResetsRig(t, newMemoryStore(t))
	for _, tc := range []struct {
		name, method, body, want string
		code                     int
	}{
		{"a negative since", http.MethodPost, `{"plugin":"p","since":-1}`, "since", http.StatusBadRequest},
		{"a since beyond 2^63-1", http.MethodPost, `{"plugin":"p","since":18446744073709551616}`, "since", http.StatusBadRequest},
		{"a since that is not an integer", http.MethodPost, `{"plugin":"p","since":1.5}`, "since", http.StatusBadRequest},
		{"no plugin", http.MethodPost, `{"since":1}`, "plugin: required", http.StatusBadRequest},
		{"an unknown member", http.MethodPost, `{"plugin":"p","from":1}`, "from: unknown field", http.StatusBadRequest},
		{"not JSON", http.MethodPost, `plugin=p`, "body", http.StatusBadRequest},
		{"a body too large", http.MethodPost, `{"plugin":"` + strings.Repeat("p", 2000) + `"}`, "larger than", http.StatusRequestEntityTooLarge},
		{"a GET", http.MethodGet, ``, "method not allowed", http.StatusMethodNotAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := serve(r.h, tc.method, wire.ResetsPath, tc.body, wire.SecretHeader, resetsSecret)
			assert.Equal(t, tc.code, code, out)
			assert.Contains(t, out, `"error":`)
			assert.Contains(t, out, tc.want)
		})
	}
}

// failingLog is a memory store whose reset log cannot be written.
type failingLog struct{ *memstore.Store }

func (failingLog) AppendResets(context.Context, []string) (uint64, error) {
	return 0, errors.New("log unavailable")
}

func TestAResetThatCannotBeLoggedIsAnsweredUnavailable(t *testing.T) {
	a := newTestHandler(t, service.Config{Store: failingLog{newMemoryStore(t)}, AdminToken: adminToken})
	code, out := adminCall(t, a, "reset", adminToken, adminBody("alice", algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 1, Window: time.Second}))
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, out["error"], "the proxies will not hear of the reset")
}

func TestTheResetsPathAnswersUnavailableWhenRedisIsDown(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	r := newResetsRig(t, newRedisStore(t, srv.Addr()))
	r.reset(t, "ns.p", "alice")
	srv.Stop()
	code, out := serve(r.h, http.MethodPost, wire.ResetsPath, string(wire.AppendResetsRequest(nil, "ns.p", 1)), wire.SecretHeader, resetsSecret)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, out, "reset log")
	code, _ = adminCall(t, r.h, "reset", adminToken, adminBody("alice", algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 1, Window: time.Second}))
	assert.Equal(t, http.StatusServiceUnavailable, code)
}

func TestTheResetLogWorksInARedisCluster(t *testing.T) {
	nodes := redistest.StartCluster(t)
	r := newResetsRig(t, newRedisStore(t, nodes[0].Addr()))
	pos := r.poll(t, "ns.p", 0).Seq
	r.reset(t, "ns.p", "alice", "bob")
	assert.Equal(t, []string{"ns.p/login/7/alice", "ns.p/login/7/bob"}, resetKeys(r.poll(t, "ns.p", pos)))
	slot := func(k string) string {
		v, err := nodes[0].Do("CLUSTER", "KEYSLOT", k)
		require.NoError(t, err)
		return v
	}
	assert.Equal(t, slot("ml:{resets}:seq"), slot("ml:{resets}:log"), "the log's two keys share a slot")
}

// The largest answer: a full page of the longest keys.
func TestTheLargestResetsAnswerIsBounded(t *testing.T) {
	s := newMemoryStore(t)
	r := newResetsRig(t, s)
	keys := make([]string, service.ResetLogSize)
	for i := range keys {
		k := "ns.p/login/7/" + strconv.Itoa(i) + "/"
		keys[i] = k + strings.Repeat(`"`, wire.MaxKeyBytes-len(k)) // each byte escaped in JSON
	}
	_, err := s.AppendResets(context.Background(), keys)
	require.NoError(t, err)
	code, body := serve(r.h, http.MethodPost, wire.ResetsPath, string(wire.AppendResetsRequest(nil, "ns.p", 1)), wire.SecretHeader, resetsSecret)
	require.Equal(t, http.StatusOK, code)
	assert.LessOrEqual(t, len(body), wire.MaxResetsPerAnswer*(2*wire.MaxKeyBytes+40)+100)
	assert.Less(t, len(body), wire.MaxAnswerBytes)
}

// BenchmarkAnUpToDateProxyPollsTheLog measures the common poll: a proxy at the latest position,
// with the log full of other plugins' entries, through the handler.
func BenchmarkAnUpToDateProxyPollsTheLog(b *testing.B) {
	run := func(b *testing.B, s service.Store) {
		h, err := service.NewHandler(service.Config{Store: s, Secret: resetsSecret, Timeout: time.Second})
		require.NoError(b, err)
		keys := make([]string, service.ResetLogSize)
		for i := range keys {
			keys[i] = "ns.q/login/7/user-" + strconv.Itoa(i)
		}
		latest, err := s.AppendResets(context.Background(), keys)
		require.NoError(b, err)
		body := string(wire.AppendResetsRequest(nil, "ns.p", latest))
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if code, out := serve(h, http.MethodPost, wire.ResetsPath, body, wire.SecretHeader, resetsSecret); code != http.StatusOK {
				b.Fatal(out)
			}
		}
	}
	b.Run("memory", func(b *testing.B) { run(b, newMemoryStore(b)) })
	b.Run("redis", func(b *testing.B) {
		redistest.Require(b)
		run(b, newRedisStore(b, redistest.Start(b).Addr()))
	})
}
