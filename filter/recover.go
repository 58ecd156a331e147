package filter

import (
	"runtime/debug"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/meshlimit/meshlimit/rules"
)

// Panics never remove limiting. An unrecovered panic traps the VM, and Envoy then fails every later
// request of that worker thread by the filter's fail strategy: closed (503) or open (no limiting at
// all), until the VM is recreated. So every callback recovers: the panic is counted
// (meshlimit.panics), logged once per VM (with its stack), and the request at hand is decided by the
// failure_mode of the rule that was being decided (deny: the configured status with Retry-After: 1;
// allow: it goes on). The plugin keeps running, and the next request is limited as before.

// recovered counts a recovered panic and logs the first of this VM.
func (p *pluginContext) recovered(where string, r any) {
	p.metrics.panics.Increment(1)
	if p.panicLogged {
		return
	}
	p.panicLogged = true
	proxywasm.LogCriticalf("meshlimit: recovered from a panic in %s: %v (logged once per worker; meshlimit.panics counts every one, and the rule's failure_mode decided each request)\n%s",
		where, r, debug.Stack())
}

// recoverPanic, deferred by a callback that has no request to decide, recovers a panic.
func (p *pluginContext) recoverPanic(where string) {
	if r := recover(); r != nil {
		p.recovered(where, r)
	}
}

// recoverContinue, deferred by a request body or trailers callback, recovers a panic and lets the
// request go on (*act = ActionContinue).
func (p *pluginContext) recoverContinue(where string, act *types.Action) {
	if r := recover(); r != nil {
		p.recovered(where, r)
		*act = types.ActionContinue
	}
}

// panicked decides a request whose OnHttpRequestHeaders panicked: by the failure_mode of the rule
// being decided, or of the global rules already collected. It returns the callback's action.
func (h *httpContext) panicked(where string, r any) types.Action {
	p := h.plugin
	p.recovered(where, r)
	if h.deadline != 0 { // a call went out: its answer must not decide the request again
		p.global.unwait(h)
	}
	s := &p.scratch
	deny := s.deciding >= 0 && s.deciding < len(p.rules) && failsClosed(p, &p.rules[s.deciding])
	for i := range s.globals {
		deny = deny || failsClosed(p, s.globals[i].rs)
	}
	if deny {
		h.denyMinimal()
		return types.ActionPause
	}
	return types.ActionContinue
}

// recoverPaused, deferred by a callback that decides a paused request (the service's answer, the
// call's deadline), recovers a panic and ends the request by the global rules' failure_mode.
func (h *httpContext) recoverPaused(where string) {
	r := recover()
	if r == nil {
		return
	}
	p := h.plugin
	p.recovered(where, r)
	for i := range h.globals {
		if failsClosed(p, h.globals[i].rs) {
			h.denyMinimal()
			return
		}
	}
	_ = proxywasm.ResumeHttpRequest()
}

// failsClosed reports whether a rule denies the requests it cannot decide.
func failsClosed(p *pluginContext, rs *ruleState) bool {
	return rs.rule.FailureMode == rules.FailDeny && !rs.rule.Shadow && p.cfg.Enforce
}

// denyMinimal sends the configured status with Retry-After: 1 and nothing else: after a panic the
// renderer itself may be what failed. A gRPC request gets RESOURCE_EXHAUSTED, as from Deny.
func (h *httpContext) denyMinimal() {
	status, grpc := uint32(429), rules.NoGRPCStatus
	if c := h.plugin.cfg; c != nil {
		status = c.Response.Status
	}
	if ct, err := proxywasm.GetHttpRequestHeader("content-type"); err == nil && rules.IsGRPC(ct) {
		status, grpc = 200, rules.GRPCResourceExhausted
	}
	if err := proxywasm.SendHttpResponse(status, [][2]string{{rules.HeaderRetryAfter, "1"}}, nil, grpc); err != nil {
		proxywasm.LogErrorf("meshlimit: sending the local response: %v", err)
	}
}

// The places a test build can panic at (see testpanic_on.go).
const (
	panicRequestHeaders  = "request-headers"
	panicServiceAnswer   = "service-answer"
	panicResponseHeaders = "response-headers"
	panicTick            = "tick"
)
