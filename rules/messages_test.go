package rules

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func messagesConfig(messages string, extra ...string) string {
	rule := `{"name":"chat","key":["client_ip"],"limits":[{"rate":"10/s"}],"messages":` + messages
	for _, e := range extra {
		rule += "," + e
	}
	return `{"global":{"cluster":"outbound|8081||svc.ns.svc.cluster.local"},"rules":[` + rule + `}]}`
}

func TestAMessagesBlockCompilesWithItsDefaults(t *testing.T) {
	r := mustParse(t, messagesConfig(`{}`)).Rules()[0]
	require.NotNil(t, r.Messages())
	assert.Equal(t, Messages{Request: true, Response: true, GRPC: true, WebSocket: true, OnLimit: MessagesShape, MaxHold: 30 * time.Second}, *r.Messages())

	r = mustParse(t, messagesConfig(`{"direction":"response","protocols":["websocket"],"on_limit":"end","max_hold":"2s","per_stream":true}`)).Rules()[0]
	assert.Equal(t, Messages{Response: true, WebSocket: true, OnLimit: MessagesEnd, MaxHold: 2 * time.Second, PerStream: true}, *r.Messages())
}

func TestTheSummaryNamesAMessageLimit(t *testing.T) {
	assert.Contains(t, mustParse(t, messagesConfig(`{"direction":"request","on_limit":"end"}`)).Summary(), "chat(local, 1 limit, messages request/end)")
}

func TestARuleWithoutMessagesCountsRequests(t *testing.T) {
	assert.Nil(t, mustParse(t, `{"rules":[{"name":"r","limits":[{"rate":"1/s"}]}]}`).Rules()[0].Messages())
}

func TestCountingMessagesGivesTheRuleStateOfItsOwn(t *testing.T) {
	plain := mustParse(t, `{"rules":[{"name":"chat","key":["client_ip"],"limits":[{"rate":"10/s"}]}]}`).Rules()[0]
	shaped := mustParse(t, messagesConfig(`{}`)).Rules()[0]
	ended := mustParse(t, messagesConfig(`{"on_limit":"end"}`)).Rules()[0]
	assert.NotEqual(t, plain.Fingerprint(), shaped.Fingerprint())
	assert.NotEqual(t, shaped.Fingerprint(), ended.Fingerprint())
}

func TestAMessagesBlockRejectsEachBadValueNamingItsField(t *testing.T) {
	for _, tc := range []struct {
		name, config, path, msg string
	}{
		{"an unknown direction", messagesConfig(`{"direction":"up"}`), "rules[0].messages.direction", "want request, response or both"},
		{"an unknown protocol", messagesConfig(`{"protocols":["grpc","sse"]}`), "rules[0].messages.protocols[1]", "want grpc or websocket"},
		{"an unknown action", messagesConfig(`{"on_limit":"drop"}`), "rules[0].messages.on_limit", "want shape or end"},
		{"a hold too long for Envoy's idle timeout", messagesConfig(`{"max_hold":"5m"}`), "rules[0].messages.max_hold", "out of range"},
		{"a hold that is not a duration", messagesConfig(`{"max_hold":"soon"}`), "rules[0].messages.max_hold", ""},
		{"an unknown field", messagesConfig(`{"rate":"1/s"}`), "rules[0].messages.rate", "unknown field"},
		{"a global scope", messagesConfig(`{}`, `"scope":"global"`), "rules[0].messages", "scope local"},
		{"a count_on", messagesConfig(`{}`, `"count_on":{"status":["401"]}`), "rules[0].messages", "count_on"},
		{"a cost read from a header", messagesConfig(`{}`, `"cost":{"header":"x-cost"}`), "rules[0].messages", "constant cost"},
		{"a leaky bucket", `{"rules":[{"name":"l","limits":[{"rate":"5/s","algorithm":"leaky_bucket"}],"messages":{}}]}`, "rules[0].messages", "leaky_bucket"},
	} {
		t.Run("rejects "+tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tc.config))
			require.Error(t, err)
			assert.Nil(t, c)
			errs := fieldErrors(t, err)
			require.NotEmpty(t, errs)
			assert.Equal(t, tc.path, errs[0].Path, "%v", err)
			assert.Contains(t, errs[0].Msg, tc.msg)
		})
	}
}
