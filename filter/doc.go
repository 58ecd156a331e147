// Package filter is the proxy-wasm adapter of meshlimit: the VM, plugin and HTTP contexts that
// cmd/filter registers with the SDK.
//
// It is thin on purpose. What a configuration means (matching, keys, limits, costs, responses) is
// package rules; how state is kept in the proxy's shared data, and the encoding of every record
// there, is package sharedstate; the algorithms are package algorithms and shed; the wire format of
// the decision service is package wire. This package reads the request from the host, asks those
// packages, and acts: it sends local replies, pauses and resumes streams, dispatches callouts to
// the decision service, runs the timer and defines the metrics.
//
// # The host
//
// Every feature reaches Envoy through one port, the host interface (host.go): calls, local
// replies, resumes, headers, bodies, properties, shared data, metrics, the log, the clock and the
// timer. sdkHost (host_sdk.go) implements it over the SDK and package abi, and is the only file
// that calls either; the native tests give the features a fake. A local reply the host refuses
// resumes the request instead (reply, host.go). The filter runs on one VM per Envoy worker thread,
// with no goroutines, timers or sleeps (Envoy's poll_oneoff aborts the Go runtime): asynchronous
// work is ticks and callouts. docs/architecture.md shows the path of one request;
// docs/envoy-host.md says what the host guarantees.
//
// # The features
//
// pluginContext (plugin.go) starts the features a configuration asks for and hands them the timer;
// httpContext (http.go) hands them each stream's callbacks and holds the request's path across
// them. Each feature is one type that owns its state; what it keeps for a stream is its part of
// stream (stream.go), cleared by one reset, and what it collects while a request is decided is its
// part of decision (decision.go). When a stream ends, the features' ends run in the order
// endHooks states.
//
//	rules walk, local limits   decision.go (decision, pluginContext.decide), rule.go (ruleState)
//	local reply, quota fields  reply.go, explain.go (replier)
//	global service             global.go, servicecall.go (globalClient), breaker.go (breaker),
//	                           answer_global.go (what an answer admitted, the settle-list entries)
//	over-limit cache           overlimit.go (overLimitCache; also the penalty box of count_on)
//	quota leases               lease.go (leaser)
//	reset log                  resets.go (resetPoller)
//	concurrency permits        concurrency.go (permits), global_concurrency.go (globalPermits)
//	reserve, then settle       settle.go, settle_global.go (settler), body.go (bodyStage)
//	give-backs of denials      giveback.go, giveback_global.go (settler)
//	response-conditioned count charge.go, charge_global.go (charger)
//	load shedding              shed.go (shedder)
//	shaping (leaky bucket)     shaper.go (shaper)
//	stream messages            messages.go, messages_limit.go (messageLimiter)
//	panics                     recover.go (panicGuard), testpanic*.go
//	the request as rules see it hostrequest.go (hostRequest, hostResponse)
//	metrics                    metrics.go and each feature's file
package filter
