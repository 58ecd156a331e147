package service

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/wire"
)

const adminToken = "s3cret-admin-token"

// adminStores runs f against the memory store and a real redis-server.
func adminStores(t *testing.T, f func(t *testing.T, s Store)) {
	t.Run("memory", func(t *testing.T) {
		s := NewMemoryStore(MemoryConfig{SweepInterval: -1})
		t.Cleanup(func() { s.Close() })
		f(t, s)
	})
	t.Run("redis", func(t *testing.T) {
		requireRedisServer(t)
		f(t, newRedisStore(t, startRedis(t).Addr()))
	})
}

// adminBody is a check body with one descriptor for key under limit.
func adminBody(key string, l algorithms.Limit) string {
	b := wire.AppendRequestStart(nil)
	b = wire.AppendDescriptor(b, 0, wire.Key{Plugin: "p", Rule: "login", Fingerprint: 7, Value: key}, l, 1)
	return string(wire.AppendRequestEnd(b))
}

func adminCall(t *testing.T, h http.Handler, op, token, body string) (int, map[string]any) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, AdminPrefix+op, strings.NewReader(body))
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	var out map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &out), w.Body.String())
	return w.Code, out
}

func firstKey(t *testing.T, out map[string]any) map[string]any {
	t.Helper()
	keys, ok := out["keys"].([]any)
	require.True(t, ok, "%v", out)
	require.Len(t, keys, 1)
	return keys[0].(map[string]any)
}

func TestTheAdminInspectsAKeyAndAResetMakesABlockedKeyPassAtOnce(t *testing.T) {
	for _, l := range []algorithms.Limit{
		{Kind: algorithms.TokenBucket, Quota: 3, Window: time.Hour},
		{Kind: algorithms.FixedWindow, Quota: 3, Window: time.Hour},
		{Kind: algorithms.SlidingWindow, Quota: 3, Window: time.Hour},
		{Kind: algorithms.SlidingLog, Quota: 3, Window: time.Hour},
	} {
		t.Run(l.Kind.String(), func(t *testing.T) {
			adminStores(t, func(t *testing.T, s Store) {
				a, err := NewAdmin(AdminConfig{Store: s, Token: adminToken})
				require.NoError(t, err)
				lim := NewLimiter(s, nil)
				key := "p/login/7/alice"
				descs := []Descriptor{{Key: key, Limit: l, Cost: 1}}
				ctx := context.Background()
				for range 3 {
					o, err := lim.Check(ctx, descs, time.Time{})
					require.NoError(t, err)
					require.True(t, o.Allowed)
				}
				o, err := lim.Check(ctx, descs, time.Time{})
				require.NoError(t, err)
				require.False(t, o.Allowed, "alice is blocked")

				code, out := adminCall(t, a, "inspect", adminToken, adminBody("alice", l))
				require.Equal(t, http.StatusOK, code, "%v", out)
				k := firstKey(t, out)
				assert.Equal(t, key, k["key"])
				assert.Equal(t, true, k["found"])
				assert.Equal(t, float64(0), k["remaining"])
				assert.Equal(t, float64(3), k["limit"])
				assert.Positive(t, k["reset_ms"])

				code, out = adminCall(t, a, "reset", adminToken, adminBody("alice", l))
				require.Equal(t, http.StatusOK, code)
				assert.Equal(t, true, firstKey(t, out)["deleted"])
				o, err = lim.Check(ctx, descs, time.Time{})
				require.NoError(t, err)
				assert.True(t, o.Allowed, "the reset key passes at once")

				_, out = adminCall(t, a, "inspect", adminToken, adminBody("bob", l))
				k = firstKey(t, out)
				assert.Equal(t, false, k["found"], "a key never seen")
				assert.Equal(t, float64(3), k["remaining"])
				_, out = adminCall(t, a, "reset", adminToken, adminBody("bob", l))
				assert.Equal(t, false, firstKey(t, out)["deleted"])
			})
		})
	}
}

func TestTheAdminAPIRefusesCallersWithoutTheToken(t *testing.T) {
	s := NewMemoryStore(MemoryConfig{SweepInterval: -1})
	defer s.Close()
	l := algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 3, Window: time.Hour}
	a, err := NewAdmin(AdminConfig{Store: s, Token: adminToken})
	require.NoError(t, err)
	tests := []struct {
		name, op, token string
		want            int
	}{
		{"no token", "reset", "", http.StatusUnauthorized},
		{"a wrong token", "reset", "s3cret-admin-tokeN", http.StatusUnauthorized},
		{"a prefix of the token", "inspect", "s3cret", http.StatusUnauthorized},
		{"an unknown operation", "drop", adminToken, http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out := adminCall(t, a, tt.op, tt.token, adminBody("alice", l))
			assert.Equal(t, tt.want, code)
			assert.NotEmpty(t, out["error"])
		})
	}
	off, err := NewAdmin(AdminConfig{Store: s})
	require.NoError(t, err)
	code, _ := adminCall(t, off, "inspect", "", adminBody("alice", l))
	assert.Equal(t, http.StatusForbidden, code, "without a token the admin API is disabled")
	code, _ = adminCall(t, off, "inspect", " ", adminBody("alice", l))
	assert.Equal(t, http.StatusForbidden, code)
	code, out := adminCall(t, a, "inspect", adminToken, `{"descriptors": [{"key": ""}]}`)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.NotEmpty(t, out["error"])
	permit := wire.AppendPermitDescriptor(wire.AppendRequestStart(nil), 0, wire.Key{Plugin: "p", Rule: "gpu", Value: "a"}, 2, "s1", time.Minute)
	code, out = adminCall(t, a, "reset", adminToken, string(wire.AppendRequestEnd(permit)))
	assert.Equal(t, http.StatusBadRequest, code, "permits are not the admin API's")
	assert.Contains(t, out["error"], "concurrency permits")
}
