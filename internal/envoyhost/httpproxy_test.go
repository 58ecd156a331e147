package envoyhost

import (
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTheHTTPProxyKeepsRepeatedRequestHeadersAsSeparateEntries(t *testing.T) {
	r := httptest.NewRequest("GET", "http://api.example.com/v1?x=1", nil)
	r.RemoteAddr = "192.0.2.9:5000"
	r.Header.Add("X-User", "r1")
	r.Header.Add("X-User", "alice")
	r.Header.Add("X-Forwarded-For", "203.0.113.1")
	r.Header.Add("X-Forwarded-For", "198.51.100.2")

	h := requestHeaders(r)

	assert.Equal(t, []string{"r1", "alice"}, h.Values("x-user"), "one entry per header line, in order")
	first, _ := h.Get("x-user")
	assert.Equal(t, "r1", first, "what proxy_get_header_map_value returns")
	assert.Equal(t, []string{"203.0.113.1,198.51.100.2,192.0.2.9"}, h.Values("x-forwarded-for"),
		"x-forwarded-for is joined, as Envoy joins the headers it indexes, and the peer appended")
	assert.Equal(t, [2]string{":path", "/v1?x=1"}, h[1])
}

func TestTheHTTPProxyHandsTheFilterEveryValueThroughThePairsCall(t *testing.T) {
	r := httptest.NewRequest("GET", "http://a/", nil)
	r.Header.Add("X-User", "r1")
	r.Header.Add("X-User", "alice")
	pairs := parsePairs(appendPairs(nil, requestHeaders(r)))
	assert.Equal(t, []string{"r1", "alice"}, pairs.Values("x-user"))
}
