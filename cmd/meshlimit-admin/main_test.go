package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/service"
)

const (
	cluster = "outbound|8081||meshlimit.meshlimit.svc.cluster.local"
	plugin  = "istio-system.meshlimit"
	token   = "admin-token-for-tests"
)

const pluginConfig = `{"global": {"cluster": "` + cluster + `", "timeout": "500ms"},
	"rules": [{"name": "login", "scope": "global", "key": [{"header": "x-user"}], "limits": [{"rate": "2/h"}],
		"overrides": [{"value": "vip", "unlimited": true}]}]}`

// startService runs the decision service on a real redis-server, with its admin API, as
// meshlimit-service mounts it.
func startService(t *testing.T) string {
	t.Helper()
	redistest.Require(t)
	store, err := service.NewRedisStore(service.RedisConfig{Addrs: []string{redistest.Start(t).Addr()}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	h, err := service.NewHandler(service.Config{Store: store, Timeout: 200 * time.Millisecond})
	require.NoError(t, err)
	admin, err := service.NewAdmin(service.AdminConfig{Store: store, Token: token})
	require.NoError(t, err)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, service.AdminPrefix) {
			admin.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// proxy loads the compiled filter (build/meshlimit.wasm, `make wasm`) as one Envoy.
func proxy(t *testing.T, url string) *envoyhost.Plugin {
	t.Helper()
	wasm, err := os.ReadFile(filepath.Join("..", "..", "build", "meshlimit.wasm"))
	require.NoError(t, err, "run `make wasm` first")
	p, err := envoyhost.NewPlugin(context.Background(), wasm, envoyhost.Config{
		VMID: "meshlimit", PluginName: plugin, RootID: "meshlimit", PluginConfig: []byte(pluginConfig),
		Clusters: map[string]string{cluster: strings.TrimPrefix(url, "http://")},
		Process:  envoyhost.NewProcess(),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func login(t *testing.T, p *envoyhost.Plugin, user string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := &envoyhost.Request{Headers: envoyhost.Headers{{":method", "POST"}, {":path", "/login"}, {":authority", "a.test"}, {"x-user", user}}}
	res, err := p.VM(0).RoundTrip(ctx, req, &envoyhost.Response{Headers: envoyhost.Headers{{":status", "200"}}})
	require.NoError(t, err)
	if res.LocalReply != nil {
		return res.LocalReply.Status
	}
	return 200
}

func admin(t *testing.T, url string, args ...string) (int, map[string]any, string) {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "plugin.json")
	require.NoError(t, os.WriteFile(cfg, []byte(pluginConfig), 0o600))
	var stdout, stderr bytes.Buffer
	getenv := func(k string) string {
		if k == "MESHLIMIT_ADMIN_TOKEN" {
			return token
		}
		return ""
	}
	all := append([]string{"-url", url, "-config", cfg, "-plugin", plugin}, args...)
	code := run(all, getenv, &stdout, &stderr, http.DefaultClient)
	var out map[string]any
	if code == 0 {
		require.NoError(t, json.Unmarshal(stdout.Bytes(), &out))
	}
	return code, out, stderr.String()
}

// TestAnAdminResetMakesABlockedKeyPassAtOnceOnAProxyThatDidNotCacheTheDenial: alice is blocked by
// the global limit (Redis); the CLI shows her key with nothing left, resets it, and her next login
// passes at once on another proxy. The proxy that denied her answers from its over-limit cache until
// that denial's Retry-After: a reset cannot reach the proxies' shared data.
func TestAnAdminResetMakesABlockedKeyPassAtOnceOnAProxyThatDidNotCacheTheDenial(t *testing.T) {
	url := startService(t)
	a, b := proxy(t, url), proxy(t, url)
	require.Equal(t, 200, login(t, a, "alice"))
	require.Equal(t, 200, login(t, a, "alice"))
	require.Equal(t, 429, login(t, a, "alice"))

	code, out, stderr := admin(t, url, "-rule", "login", "-value", "alice", "inspect")
	require.Equal(t, 0, code, stderr)
	k := out["keys"].([]any)[0].(map[string]any)
	assert.Equal(t, true, k["found"])
	assert.Equal(t, float64(0), k["remaining"])
	assert.Contains(t, k["key"], plugin+"/login/")

	code, out, stderr = admin(t, url, "-rule", "login", "-value", "alice", "reset")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, true, out["keys"].([]any)[0].(map[string]any)["deleted"])
	assert.Equal(t, 200, login(t, b, "alice"), "the reset key passes at once")
	assert.Equal(t, 429, login(t, a, "alice"), "the proxy that cached the denial keeps it until its Retry-After")
}

func TestTheCLIRefusesWhatItCannotName(t *testing.T) {
	url := startService(t)
	tests := []struct {
		name string
		args []string
		want int
		msg  string
	}{
		{"an unknown rule", []string{"-rule", "nope", "-value", "a", "inspect"}, 2, `no rule "nope"`},
		{"an unlimited override", []string{"-rule", "login", "-value", "vip", "reset"}, 2, "unlimited"},
		{"an unknown operation", []string{"-rule", "login", "-value", "a", "drop"}, 2, "usage"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := admin(t, url, tt.args...)
			assert.Equal(t, tt.want, code)
			assert.Contains(t, stderr, tt.msg)
		})
	}
	var stdout, stderr bytes.Buffer
	cfg := filepath.Join(t.TempDir(), "p.json")
	require.NoError(t, os.WriteFile(cfg, []byte(pluginConfig), 0o600))
	code := run([]string{"-url", url, "-config", cfg, "-rule", "login", "-value", "a", "reset"},
		func(string) string { return "wrong" }, &stdout, &stderr, http.DefaultClient)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), "401")
}
