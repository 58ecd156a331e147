package envoy

import (
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checkDeploy runs scripts/check-deploy against a server on 127.0.0.1 that answers the first
// `admit` requests 200 and the rest 429 with the given fields, and returns its exit code and
// output.
func checkDeploy(t *testing.T, admit int64, fields map[string]string) (int, string) {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("scripts/check-deploy needs curl")
	}
	var n atomic.Int64
	var host atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host.Store(r.Host)
		if n.Add(1) <= admit {
			return
		}
		for k, v := range fields {
			w.Header().Set(k, v)
		}
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	t.Cleanup(srv.Close)
	cmd := exec.Command("sh", filepath.Join("..", "scripts", "check-deploy"), srv.URL+"/search", "api.example.com")
	cmd.Env = append(cmd.Environ(), "CHECK_DEPLOY_REQUESTS=10", "CHECK_DEPLOY_INTERVAL=0")
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	assert.Equal(t, "api.example.com", host.Load(), "the Host header is sent")
	return code, string(out)
}

var rateLimitFields = map[string]string{"RateLimit-Policy": `"search-per-ip";q=20;w=1`, "RateLimit": `"search-per-ip";r=0;t=1`, "Retry-After": "1"}

func TestTheDeployCheckPassesOnA429WithItsRateLimitFieldsAfterAdmittedRequests(t *testing.T) {
	code, out := checkDeploy(t, 3, rateLimitFields)
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "ok: request 4 was denied")
	assert.Contains(t, strings.ToLower(out), `ratelimit: "search-per-ip";r=0;t=1`)
}

func TestTheDeployCheckFailsOnA429WithoutTheRateLimitFields(t *testing.T) {
	code, out := checkDeploy(t, 3, map[string]string{"Retry-After": "1"})
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "denied (429) without: RateLimit-Policy RateLimit")
}

func TestTheDeployCheckFailsWhenNothingIsDenied(t *testing.T) {
	code, out := checkDeploy(t, 100, rateLimitFields)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "no request was denied in 10")
}

func TestTheDeployCheckFailsWhenNothingIsAdmitted(t *testing.T) {
	code, out := checkDeploy(t, 0, rateLimitFields)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "no request was admitted")
}
