package service_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/meshlimit/meshlimit/service"
)

// Review r21 F6: "Authorization: bearer <token>" (the scheme is case-insensitive, RFC 9110)
// was refused with 401 on /metrics and the admin API. Any case of the scheme is the bearer
// scheme now; a token without the scheme, or under another one, is still refused.
func TestABearerTokenIsAcceptedWhateverTheCaseOfItsScheme(t *testing.T) {
	h := newTestHandler(t, service.Config{Store: newMemoryStore(t), MetricsToken: "mtok", AdminToken: adminToken})
	for _, tc := range []struct {
		name, auth string
		want       int
	}{
		{"Bearer", "Bearer mtok", http.StatusOK},
		{"bearer", "bearer mtok", http.StatusOK},
		{"BEARER", "BEARER mtok", http.StatusOK},
		{"no scheme", "mtok", http.StatusUnauthorized},
		{"another scheme", "Basic mtok", http.StatusUnauthorized},
	} {
		t.Run("metrics with "+tc.name, func(t *testing.T) {
			code, _ := serve(h, "GET", "/metrics", "", "Authorization", tc.auth)
			assert.Equal(t, tc.want, code)
		})
	}
	code, body := serve(h, "POST", service.AdminPrefix+"inspect", `{"descriptors":[{"key":"alice","algorithm":"token_bucket","quota":3,"window_ms":3600000}]}`,
		"Authorization", "bearer "+adminToken)
	assert.Equal(t, http.StatusOK, code, body)
}
