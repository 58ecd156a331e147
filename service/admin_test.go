package service_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/wire"
)

const adminToken = "s3cret-admin-token"

// adminBody is a check body with one descriptor, key p/login/7/<key>, under limit.
func adminBody(key string, l algorithms.Limit) string {
	b := wire.AppendRequestStart(nil)
	b = wire.AppendDescriptor(b, 0, wire.Key{Plugin: "p", Rule: "login", Fingerprint: 7, Value: key}, l, 1)
	return string(wire.AppendRequestEnd(b))
}

func adminCall(t *testing.T, h http.Handler, op, token, body string) (int, map[string]any) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, service.AdminPrefix+op, strings.NewReader(body))
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
			eachStore(t, func(t *testing.T, s service.Store) {
				// Every call on alice at one time (now_us): a fixed window of an hour cannot turn
				// between her checks, the inspection and the reset.
				a := newTestHandler(t, service.Config{Store: s, AdminToken: adminToken, Parse: wire.DecodeOptions{AllowClientTime: true}})
				at := `{"now_us":` + strconv.FormatInt(time.Now().UnixMicro(), 10) + `,`
				alice := at + strings.TrimPrefix(adminBody("alice", l), "{")
				key := "p/login/7/alice"
				check := func() bool {
					t.Helper()
					code, body := serve(a, http.MethodPost, wire.Path, alice)
					require.Equal(t, http.StatusOK, code, body)
					return decodeAnswer(t, body).Allowed
				}
				for range 3 {
					require.True(t, check())
				}
				require.False(t, check(), "alice is blocked")

				code, out := adminCall(t, a, "inspect", adminToken, alice)
				require.Equal(t, http.StatusOK, code, "%v", out)
				k := firstKey(t, out)
				assert.Equal(t, key, k["key"])
				assert.Equal(t, true, k["found"])
				assert.Equal(t, float64(0), k["remaining"])
				assert.Equal(t, float64(3), k["limit"])
				assert.Positive(t, k["reset_ms"])

				code, out = adminCall(t, a, "reset", adminToken, alice)
				require.Equal(t, http.StatusOK, code)
				assert.Equal(t, true, firstKey(t, out)["deleted"])
				assert.True(t, check(), "the reset key passes at once")

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
	s := newMemoryStore(t)
	l := algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 3, Window: time.Hour}
	a := newTestHandler(t, service.Config{Store: s, AdminToken: adminToken})
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
	off := newTestHandler(t, service.Config{Store: s})
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
