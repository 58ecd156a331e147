package filter

import (
	"runtime/debug"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/meshlimit/meshlimit/rules"
)

// Panics never remove limiting. An unrecovered panic traps the VM, and Envoy then fails every later
// request of that worker thread by the filter's fail strategy: closed (503) or open (no limiting at
// all), until the VM is recreated. So every callback recovers: the panic is counted
// (meshlimit.panics), logged once per VM (with its stack), and the request at hand is decided by the
// failure_mode of the rule that was being decided (deny: the configured status with Retry-After: 1;
// allow: it goes on). The plugin keeps running, and the next request is limited as before.

// panicGuard counts and logs the panics a plugin's callbacks recover.
type panicGuard struct {
	host   host
	count  counter // meshlimit.panics, once defined
	logged bool    // a recovered panic was logged (once per VM)
}

// recovered counts a recovered panic and logs the first of this VM.
func (g *panicGuard) recovered(where string, r any) {
	if g.count.s != nil {
		g.count.inc(1)
	}
	if g.logged {
		return
	}
	g.logged = true
	logf(g.host, logCritical, "meshlimit: recovered from a panic in %s: %v (logged once per worker; meshlimit.panics counts every one, and the rule's failure_mode decided each request)\n%s",
		where, r, debug.Stack())
}

// recoverPanic, deferred by a callback that has no request to decide, recovers a panic.
func (g *panicGuard) recoverPanic(where string) {
	if r := recover(); r != nil {
		g.recovered(where, r)
	}
}

// recoverContinue, deferred by a request body or trailers callback, recovers a panic and lets the
// request go on (*act = ActionContinue).
func (g *panicGuard) recoverContinue(where string, act *types.Action) {
	if r := recover(); r != nil {
		g.recovered(where, r)
		*act = types.ActionContinue
	}
}

// panicked decides a request whose OnHttpRequestHeaders panicked: by the failure_mode of the rule
// being decided, or of the global rules already collected. It returns the callback's action.
func (h *httpContext) panicked(where string, r any) types.Action {
	p := h.plugin
	p.endHeaders(h)
	p.panics.recovered(where, r)
	if h.call.deadline != 0 { // a call went out: its answer must not decide the request again
		p.global.unwait(h)
	}
	d := &p.d
	deny := d.deciding >= 0 && d.deciding < len(p.rules) && failsClosed(p.cfg, &p.rules[d.deciding])
	for i := range d.globals {
		deny = deny || failsClosed(p.cfg, d.globals[i].rs)
	}
	if deny {
		p.replies.denyMinimal()
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
	p.panics.recovered(where, r)
	for i := range h.call.items {
		if failsClosed(p.cfg, h.call.items[i].rs) {
			p.replies.denyMinimal()
			return
		}
	}
	p.host.resume(requestPart)
}

// failsClosed reports whether a rule denies the requests it cannot decide.
func failsClosed(cfg *rules.Config, rs *ruleState) bool {
	return rs.rule.FailureMode == rules.FailDeny && !rs.rule.Shadow && cfg.Enforce
}

// The places a test build can panic at (see testpanic_on.go).
const (
	panicRequestHeaders  = "request-headers"
	panicServiceAnswer   = "service-answer"
	panicResponseHeaders = "response-headers"
	panicTick            = "tick"
)
