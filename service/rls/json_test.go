package rls

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestJSONEndpoint(t *testing.T) {
	f := newFixture(t, memoryStore(t), HeadersOff)
	mux := http.NewServeMux()
	mux.Handle("POST /json", f.srv.JSONHandler())
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	post := func(body string) (int, string) {
		resp, err := http.Post(ts.URL+"/json", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		name, body string
		code       int
		want       string // a substring of the body
	}{
		{"an OK answer is 200 in canonical JSON",
			`{"domain":"mongo_cps","descriptors":[{"entries":[{"key":"database","value":"users"}]}]}`, 200,
			`"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":500,"unit":"SECOND"},"limitRemaining":499,"durationUntilReset":"1s"}]`},
		{"snake_case names and a 64-bit hits_addend as a string are accepted",
			`{"domain":"internal","hits_addend":2,"descriptors":[{"entries":[{"key":"azure","value":"j"}],"hits_addend":"40"}]}`, 200,
			`"limitRemaining":60`},
		{"an OVER_LIMIT answer is 429",
			`{"domain":"edge_proxy_per_ip","descriptors":[{"entries":[{"key":"remote_address","value":"50.0.0.5"}]}]}`, 429,
			`"overallCode":"OVER_LIMIT"`},
		{"an override's unit is accepted by name",
			`{"domain":"mongo_cps","descriptors":[{"entries":[{"key":"a","value":"b"}],"limit":{"requestsPerUnit":3,"unit":"HOUR"}}]}`, 200,
			`"currentLimit":{"requestsPerUnit":3,"unit":"HOUR"}`},
		{"an unknown field is 400", `{"domain":"mongo_cps","descriptors":[],"extra":1}`, 400, `unknown field "extra"`},
		{"a body that is not JSON is 400", `domain=mongo_cps`, 400, "body:"},
		{"an empty domain is 400", `{"domain":"","descriptors":[{"entries":[{"key":"a","value":"b"}]}]}`, 400, "domain: must not be empty"},
		{"no descriptors is 400", `{"domain":"mongo_cps"}`, 400, "descriptors: must not be empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := post(tc.body)
			assert.Equal(t, tc.code, code, body)
			assert.Contains(t, strings.ReplaceAll(body, " ", ""), strings.ReplaceAll(tc.want, " ", ""))
			if code != 400 {
				assert.True(t, json.Valid([]byte(body)))
			}
		})
	}
	resp, err := http.Get(ts.URL + "/json")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
}
