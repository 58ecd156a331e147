package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
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
	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/redisstore"
	"github.com/meshlimit/meshlimit/wire"
)

const (
	cluster = "outbound|8081||meshlimit.meshlimit.svc.cluster.local"
	plugin  = "istio-system.meshlimit"
	token   = "admin-token-for-tests"
)

const pluginConfig = `{"global": {"cluster": "` + cluster + `", "timeout": "500ms"},
	"rules": [{"name": "login", "scope": "global", "key": [{"header": "x-user"}], "limits": [{"rate": "2/h"}],
		"overrides": [{"value": "vip", "unlimited": true}]},
		{"name": "signup", "scope": "local", "key": [{"header": "x-user"}], "limits": [{"rate": "1000/h"}]}]}`

// startService runs the decision service on a real redis-server, with its admin API, as
// meshlimit-service mounts it.
func startService(t *testing.T) string {
	t.Helper()
	redistest.Require(t)
	store, err := redisstore.New(redisstore.Config{Addrs: []string{redistest.Start(t).Addr()}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	h, err := service.NewHandler(service.Config{Store: store, AdminToken: token, Timeout: 10 * time.Second}) // no loaded machine reaches it
	require.NoError(t, err)
	srv := httptest.NewServer(h)
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
		// The clock never moves: a slow answer on a loaded machine is never a timeout.
		CallTimeoutsOnClock: true,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func login(t *testing.T, p *envoyhost.Plugin, user string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a safety net
	defer cancel()
	req := &envoyhost.Request{Headers: envoyhost.Headers{{":method", "POST"}, {":path", "/login"}, {":authority", "a.test"}, {"x-user", user}}}
	res, err := p.VM(0).RoundTrip(ctx, req, &envoyhost.Response{Headers: envoyhost.Headers{{":status", "200"}}})
	require.NoError(t, err)
	if res.LocalReply != nil {
		return res.LocalReply.Status
	}
	return 200
}

// resetsSince is a proxy of the plugin reading the service's reset log after position since.
func resetsSince(t *testing.T, url string, since uint64) wire.ResetsAnswer {
	t.Helper()
	resp, err := http.Post(url+wire.ResetsPath, wire.ContentType, bytes.NewReader(wire.AppendResetsRequest(nil, plugin, since)))
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	a, err := wire.DecodeResetsAnswer(body, nil)
	require.NoError(t, err)
	return a
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
// passes at once on another proxy. The proxy that denied her answers from its over-limit cache
// until it reads the reset log (every global.reset_poll: no tick has run here), which holds her key.
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
	assert.Contains(t, stderr, "within their global.reset_poll")
	assert.Equal(t, 200, login(t, b, "alice"), "the reset key passes at once")
	assert.Equal(t, 429, login(t, a, "alice"), "the proxy that cached the denial keeps it until it reads the reset log")
	logged := resetsSince(t, url, 1)
	require.Len(t, logged.Resets, 1)
	assert.Equal(t, k["key"], logged.Resets[0].Key, "the reset log holds the key the proxies cached")
	assert.Equal(t, out["seq"], float64(logged.Seq))
}

// A local rule's state lives only in the proxies: the CLI resets it through the reset log, with
// the key the filter composes for it (its fingerprints), and refuses to inspect it.
func TestTheCLIResetsALocalRuleThroughTheResetLog(t *testing.T) {
	url := startService(t)
	code, out, stderr := admin(t, url, "-rule", "signup", "-value", "alice", "reset")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, false, out["keys"].([]any)[0].(map[string]any)["deleted"], "the service held nothing for it")
	assert.Contains(t, stderr, "local rule's state")
	assert.Contains(t, stderr, "within their global.reset_poll")

	logged := resetsSince(t, url, 1)
	require.Len(t, logged.Resets, 1)
	rule, fp, value, ok := wire.ParseKey(logged.Resets[0].Key, plugin)
	require.True(t, ok, logged.Resets[0].Key)
	assert.Equal(t, "signup", rule)
	assert.Equal(t, "alice", value)
	cfg, err := rules.ParseConfig([]byte(pluginConfig))
	require.NoError(t, err)
	var want uint64
	for _, r := range cfg.Rules() {
		if r.Name == "signup" {
			set, _ := r.Limits([]byte("alice"))
			want = set.Limits[0].Fingerprint
		}
	}
	assert.Equal(t, want, fp, "the fingerprint of the local limit, as the filter computes it")

	code, _, stderr = admin(t, url, "-rule", "signup", "-value", "alice", "inspect")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "local")
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

func TestTheCLINamesTheSameKeysFromAWasmPluginManifestInYAML(t *testing.T) {
	dir := t.TempDir()
	jsonFile := filepath.Join(dir, "plugin.json")
	require.NoError(t, os.WriteFile(jsonFile, []byte(pluginConfig), 0o644))
	yamlFile := filepath.Join(dir, "wasmplugin.yaml")
	require.NoError(t, os.WriteFile(yamlFile, []byte(`apiVersion: v1
kind: Namespace
metadata: {name: other}
---
apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata: {name: meshlimit, namespace: istio-system}
spec:
  pluginConfig:
    global: {cluster: "`+cluster+`", timeout: 500ms}
    rules:
    - name: login
      scope: global
      key: [{header: x-user}]
      limits: [{rate: 2/h}]
      overrides: [{value: vip, unlimited: true}]
    - {name: signup, scope: local, key: [{header: x-user}], limits: [{rate: 1000/h}]}
`), 0o644))
	want, wantLocal, err := descriptors(jsonFile, plugin, "login", "alice")
	require.NoError(t, err)
	got, local, err := descriptors(yamlFile, plugin, "login", "alice")
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got))
	assert.Equal(t, wantLocal, local)

	require.NoError(t, os.WriteFile(yamlFile, []byte("kind: WasmPlugin\nspec: {pluginConfig: {rules: []}}\n---\nkind: WasmPlugin\nspec: {pluginConfig: {rules: []}}\n"), 0o644))
	_, _, err = descriptors(yamlFile, plugin, "login", "alice")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "holds 2 plugin configurations")
}
