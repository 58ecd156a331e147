package service_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/service"
)

// A /v1/check of 16 descriptors costs Redis one script call (one round trip), and a denial
// among them leaves those after it uncharged and skipped, as when each was its own call.
func TestACheckOfManyDescriptorsIsOneScriptOnRedis(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	h := newTestHandler(t, service.Config{Store: newRedisStore(t, rs.Addr()), Timeout: time.Second})
	body := checkBodies(1, 16)[0]
	code, _ := serve(h, "POST", "/v1/check", body) // a first check: the connection is up
	require.Equal(t, http.StatusOK, code)
	_, err := rs.Do("CONFIG", "RESETSTAT")
	require.NoError(t, err)

	code, answer := serve(h, "POST", "/v1/check", body)
	require.Equal(t, http.StatusOK, code)
	assert.True(t, decodeAnswer(t, answer).Allowed)
	calls := regexp.MustCompile(`cmdstat_evalsha:calls=(\d+)`).FindStringSubmatch(infoOf(t, rs, "commandstats"))
	require.NotNil(t, calls, "an EVALSHA was counted")
	assert.Equal(t, "1", calls[1], "script calls for one check of 16 descriptors")

	denying := `{"descriptors":[{"key":"m/a","algorithm":"token_bucket","quota":5,"window_ms":60000},` +
		`{"key":"m/b","algorithm":"fixed_window","quota":1,"window_ms":60000,"cost":2},` +
		`{"key":"m/c","algorithm":"sliding_window","quota":1,"window_ms":60000}]}`
	code, answer = serve(h, "POST", "/v1/check", denying)
	require.Equal(t, http.StatusOK, code)
	assert.False(t, decodeAnswer(t, answer).Allowed)
	assert.True(t, strings.Contains(answer, `"skipped":true`), answer)
	code, answer = serve(h, "POST", "/v1/check", `{"descriptors":[{"key":"m/c","algorithm":"sliding_window","quota":1,"window_ms":60000}]}`)
	require.Equal(t, http.StatusOK, code)
	assert.True(t, decodeAnswer(t, answer).Allowed, "the descriptor after the denial was not charged")
}
