package rules

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
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

func TestAdmitsWithinBoundsWhatEachAlgorithmAdmitsInAHold(t *testing.T) {
	tb := func(q int64, w time.Duration, burst int64) LimitSpec {
		return LimitSpec{Limit: algorithms.Limit{Kind: algorithms.TokenBucket, Quota: q, Window: w, Burst: burst}}
	}
	win := func(k algorithms.Kind, q int64, w time.Duration) LimitSpec {
		return LimitSpec{Limit: algorithms.Limit{Kind: k, Quota: q, Window: w}}
	}
	for _, tc := range []struct {
		name   string
		limits []LimitSpec
		hold   time.Duration
		want   int64
	}{
		{"a bucket of 10/s admits its burst and 300 more in 30s", []LimitSpec{tb(10, time.Second, 0)}, 30 * time.Second, 310},
		{"a bucket's burst counts once", []LimitSpec{tb(10, time.Second, 50)}, time.Second, 60},
		{"a fixed window admits its quota in every window the hold touches", []LimitSpec{win(algorithms.FixedWindow, 100, time.Minute)}, 30 * time.Second, 200},
		{"a sliding log likewise", []LimitSpec{win(algorithms.SlidingLog, 5, time.Second)}, 2 * time.Second, 15},
		{"the tightest limit bounds a set", []LimitSpec{tb(1000, time.Second, 0), win(algorithms.SlidingWindow, 20, time.Minute)}, time.Second, 40},
		{"a calendar window claims no bound", []LimitSpec{{Limit: algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 5, Calendar: algorithms.Calendar{Unit: algorithms.CalendarDay}}}}, time.Second, math.MaxInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, AdmitsWithin(tc.limits, tc.hold))
			for _, l := range tc.limits {
				if l.Limit.Calendar.Unit == 0 {
					assert.LessOrEqual(t, greedy(t, l.Limit, tc.hold), admitsWithin(l.Limit, tc.hold), "%v", l.Limit)
				}
			}
		})
	}
}

// greedy is what l admits in d to a sender that takes every unit it can at each of 1000 steps.
func greedy(t *testing.T, l algorithms.Limit, d time.Duration) int64 {
	t0 := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC).UnixNano()
	var st []byte
	n := int64(0)
	for i := int64(0); i <= 1000; i++ {
		now := t0 + int64(d)*i/1000
		for {
			next, dec, err := l.Decide(st, now, 1, nil)
			require.NoError(t, err)
			if !dec.Allowed {
				break
			}
			st, n = next, n+1
		}
	}
	return n
}
