package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startServiceEnv is startService with the environment env.
func startServiceEnv(t *testing.T, env map[string]string, args ...string) string {
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"-listen", addr, "-log-level", "error"}, args...), func(k string) string { return env[k] })
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Error("run did not return")
		}
	})
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}, 5*time.Second, 10*time.Millisecond)
	return addr
}

// call sends method path with body and the header pairs kv, and returns the status.
func call(t *testing.T, addr, method, path, body string, kv ...string) int {
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	require.NoError(t, err)
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Set(kv[i], kv[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// With a secret but no admin token, the admin token used to be the proxies' secret, which
// every proxy carries (its WasmPlugin, Envoy's config dump): any of them could reset or
// inspect any key. /json charged counters without a credential, and /metrics, which names
// the values clients send, had none. Now the admin API needs its own token, /json the secret,
// and /metrics its token when one is set.
func TestAWorkloadWithTheProxiesSecretCannotAdministerAndOthersCannotChargeOrReadMetrics(t *testing.T) {
	addr := startServiceEnv(t, map[string]string{"MESHLIMIT_SECRET": "proxies", "MESHLIMIT_METRICS_TOKEN": "scraper"},
		"-ratelimit-config", "../../service/rlsconfig/testdata/good")
	const reset = `{"descriptors":[{"key":"p/r/f/alice","algorithm":"token_bucket","quota":10,"window_ms":1000}]}`
	const rls = `{"domain":"mongo_cps","descriptors":[{"entries":[{"key":"database","value":"users"}]}]}`
	for _, tc := range []struct {
		name         string
		method, path string
		body         string
		kv           []string
		want         int
	}{
		{"the proxies' secret is not an admin token", http.MethodPost, "/v1/admin/reset", reset, []string{"Authorization", "Bearer proxies"}, http.StatusForbidden},
		{"/json without the secret is refused", http.MethodPost, "/json", rls, nil, http.StatusUnauthorized},
		{"/json with the secret is decided", http.MethodPost, "/json", rls, []string{"x-meshlimit-secret", "proxies"}, http.StatusOK},
		{"/metrics without its token is refused", http.MethodGet, "/metrics", "", nil, http.StatusUnauthorized},
		{"/metrics with the proxies' secret is refused", http.MethodGet, "/metrics", "", []string{"Authorization", "Bearer proxies"}, http.StatusUnauthorized},
		{"/metrics with its token is served", http.MethodGet, "/metrics", "", []string{"Authorization", "Bearer scraper"}, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, call(t, addr, tc.method, tc.path, tc.body, tc.kv...))
		})
	}
}

func TestCredentialsThatWouldLeaveTheServiceOpenAreRefusedAtStart(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"an admin token that is the secret", map[string]string{"MESHLIMIT_SECRET": "s", "MESHLIMIT_ADMIN_TOKEN": "s"}, nil,
			"MESHLIMIT_ADMIN_TOKEN: must differ from MESHLIMIT_SECRET"},
		{"-require-secret without a secret", nil, []string{"-require-secret"}, "MESHLIMIT_SECRET: empty, and -require-secret is set"},
		{"MESHLIMIT_REQUIRE_SECRET without a secret", map[string]string{"MESHLIMIT_REQUIRE_SECRET": "true"}, nil, "MESHLIMIT_SECRET: empty, and -require-secret is set"},
		// Review r21 F6: these four started.
		{"a metrics token that is the secret", map[string]string{"MESHLIMIT_SECRET": "s", "MESHLIMIT_METRICS_TOKEN": "s"}, nil,
			"MESHLIMIT_METRICS_TOKEN: must differ from MESHLIMIT_SECRET"},
		{"a blank secret with -require-secret", map[string]string{"MESHLIMIT_SECRET": " "}, []string{"-require-secret"}, "MESHLIMIT_SECRET: only whitespace"},
		{"an admin token that is the secret and a space", map[string]string{"MESHLIMIT_SECRET": "abc", "MESHLIMIT_ADMIN_TOKEN": "abc "}, nil,
			"MESHLIMIT_ADMIN_TOKEN: must differ from MESHLIMIT_SECRET"},
		{"an admin token that is the secret and a newline", map[string]string{"MESHLIMIT_SECRET": "abc", "MESHLIMIT_ADMIN_TOKEN": "abc\n"}, nil,
			"MESHLIMIT_ADMIN_TOKEN: must differ from MESHLIMIT_SECRET"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr strings.Builder
			// A service that starts is stopped after a while, so that the test fails instead of hanging.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			code := realMain(ctx, append([]string{"-listen", "127.0.0.1:0"}, tc.args...), func(k string) string { return tc.env[k] }, io.Discard, &stderr)
			assert.Equal(t, 2, code)
			assert.Contains(t, stderr.String(), tc.want)
		})
	}
}
