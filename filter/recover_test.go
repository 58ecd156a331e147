package filter

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/meshlimit/meshlimit/rules"
)

// Panics (recover.go) on the fake host, which panics in the host call the test names.

func TestAPanicWhileARuleIsDecidedAppliesThatRulesFailureMode(t *testing.T) {
	for _, tc := range []struct {
		name, mode string
		headers    [][2]string
		want       types.Action
		status     uint32
		grpc       int32
	}{
		{"deny answers with the configured status and Retry-After 1", "deny", user("u"), types.ActionPause, 429, rules.NoGRPCStatus},
		{"deny answers a gRPC request with RESOURCE_EXHAUSTED", "deny", fakeReq("/", [2]string{"x-user", "u"}, [2]string{"content-type", "application/grpc"}), types.ActionPause, 200, rules.GRPCResourceExhausted},
		{"allow lets the request through", "allow", user("u"), types.ActionContinue, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			p := f.start(`{"rules":[{"name":"r","failure_mode":"` + tc.mode + `","key":[{"header":"x-user"}],"limits":[{"rate":"10/h"}]}]}`)
			f.boom = "pairs"
			h, act := f.open(p, tc.headers, true)
			assert.Equal(t, tc.want, act)
			if tc.status != 0 {
				r := f.of(h).reply
				require.NotNil(t, r)
				assert.Equal(t, tc.status, r.status)
				assert.Equal(t, tc.grpc, r.grpc)
				assert.Equal(t, [][2]string{{rules.HeaderRetryAfter, "1"}}, r.headers)
			}
			f.end(h)
			assert.Equal(t, int64(1), f.counter("meshlimit.panics"))
		})
	}
}

func TestAPanicIsCountedEveryTimeAndLoggedOncePerVM(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(`{"rules":[{"name":"r","key":[{"header":"x-user"}],"limits":[{"rate":"10/h"}]}]}`)
	f.boom = "pairs"
	for range 3 {
		h, _ := f.open(p, user("u"), true)
		f.end(h)
	}
	assert.Equal(t, int64(3), f.counter("meshlimit.panics"))
	assert.Len(t, f.logged(logCritical, "recovered from a panic in the request headers"), 1)
	f.boom = ""
	h, act := f.open(p, user("u"), true)
	assert.Equal(t, types.ActionContinue, act, "the next request is limited as before")
	f.end(h)
}

func TestAPanicWhileTheServicesAnswerIsReadEndsThePausedRequestByFailureMode(t *testing.T) {
	for _, tc := range []struct {
		name, mode string
		reply      bool
	}{
		{"deny answers it", "deny", true},
		{"allow resumes it", "allow", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			p := f.start(globalRule(`"scope":"global","failure_mode":"` + tc.mode + `"`))
			h, _ := f.open(p, user("u"), true)
			f.boom = "answer"
			f.answerCall(f.callOf(h), "200", checkAnswer(true, 9, 0))
			s := f.of(h)
			assert.Equal(t, tc.reply, s.reply != nil)
			assert.Equal(t, !tc.reply, s.resumed[requestPart] == 1)
			assert.Len(t, f.logged(logCritical, "the service's answer"), 1)
			f.end(h)
		})
	}
}

func TestAPanicInACallbackWithoutARequestToDecideIsRecovered(t *testing.T) {
	for _, tc := range []struct {
		name, boom, where string
		run               func(f *fakeHost, p *pluginContext)
	}{
		{"a tick", "now", "a tick", func(f *fakeHost, p *pluginContext) { f.tickNow(p) }},
		{"a request body", "body", "the request body", func(f *fakeHost, p *pluginContext) {
			h, _ := f.open(p, user("u"), false)
			f.boom = "body"
			assert.Equal(t, types.ActionContinue, f.requestBody(h, `{"max_tokens": 3}`, true), "the body goes on")
		}},
		{"a response body", "body", "the response body", func(f *fakeHost, p *pluginContext) {
			h, _ := f.open(p, user("u"), true)
			f.respond(h, [][2]string{{":status", "200"}, {"content-type", "application/json"}}, false)
			f.boom = "body"
			assert.Equal(t, types.ActionContinue, f.responseBody(h, `{}`, true))
		}},
		{"the response headers", "header::status", "the response headers", func(f *fakeHost, p *pluginContext) {
			h, _ := f.open(p, user("u"), true)
			f.boom = "header::status"
			assert.Equal(t, types.ActionContinue, f.respond(h, [][2]string{{":status", "200"}}, true))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			p := f.start(settleRule(`{"request_json":"max_tokens","default":10,"max":500,"settle":{"response_json":"usage.total_tokens"}}`))
			if tc.boom == "now" {
				f.boom = "now"
			}
			tc.run(f, p)
			assert.Equal(t, int64(1), f.counter("meshlimit.panics"))
			assert.Len(t, f.logged(logCritical, "recovered from a panic in "+tc.where), 1)
		})
	}
}
