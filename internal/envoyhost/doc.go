// Package envoyhost runs a compiled proxy-wasm HTTP filter the way Envoy (≥ 1.33) runs
// it, on wazero. It is a product, not a test helper: `make demo` (cmd/demo) serves real HTTP
// through it, and the end-to-end tests in e2e/ drive build/meshlimit.wasm on it.
//
// What Envoy's host does is written down, with the upstream sources it was read from, in
// docs/envoy-host.md; comments in this package cite its sections as §N. Where wazero's
// defaults differ from Envoy (its WASI, its start function), the host follows Envoy: it
// brings its own wasi_snapshot_preview1 and wasi_unstable modules with Envoy's functions and
// errno values for each host generation (§1.1), its own env.proxy_* functions for ABI 0.2.0
// and 0.2.1 (§1.2), the restricted-callback windows (§1.3, §7), the canary and per-thread VMs
// (§1.4, §5), Envoy's shared-data CAS rules (§2), deferred local replies and stream
// resumption (§4), HTTP callouts delivered to the root context (§3), Envoy's property paths
// (§6), first-value header reads (§10), a 16384-page memory cap (§7), and the body paths of
// long streams (§13): body stops that keep calling the filter, the filter manager's buffer and
// its watermarks, releases that skip the filter, Envoy's buffer writes, and local replies that
// become direct replies or resets once the response started. The places where it knowingly
// differs are listed below under "Where it differs from Envoy".
//
// # Model
//
// A [Process] is what one Envoy process shares among all its Wasm VMs: the shared-data
// store and shared queues (one namespace per vm_id), the global CAS counter and the
// stats (metrics) store. Several plugins may share one Process.
//
// A [Plugin] is one HTTP filter configuration loaded into the process. [NewPlugin]
// compiles the module, checks its imports and exports like Envoy, starts the base VM
// (_initialize only), runs the canary (context create, on_vm_start, on_configure, then
// dropped without on_done/on_delete), and starts Workers+1 thread VMs: one per worker
// thread plus the main-thread VM. Each [VM] serializes its guest calls with a mutex, as
// one Envoy thread would; different VMs run concurrently.
//
// A [Stream] is one HTTP request on one VM. Tests push headers, body and trailers in,
// read the [Action], the [LocalReply] or the modified headers out, and [Stream.Wait]
// when the filter paused (for example on an HTTP callout). [VM.RoundTrip] runs a whole
// request lifecycle against a canned upstream [Response].
//
// A [Clock] is the virtual time source behind WASI clock_time_get,
// proxy_get_current_time_nanoseconds, the request.time property and the tick timers:
// [Clock.Advance] fires due ticks on every VM of every plugin that uses it. HTTP
// callouts are real HTTP requests to 127.0.0.1; their timeouts use real time, or the
// Clock with [Config.CallTimeoutsOnClock] (a timeout then fires within Advance, never
// while the clock stands still: what tests on a loaded machine need).
//
// # Example
//
//	proc := envoyhost.NewProcess()
//	clock := envoyhost.NewClock(time.Unix(1_700_000_000, 0))
//	p, err := envoyhost.NewPlugin(ctx, wasmBytes, envoyhost.Config{
//		VMID:         "meshlimit",
//		PluginName:   "default.meshlimit",
//		RootID:       "meshlimit",
//		PluginConfig: []byte(`{"limit":10}`),
//		Workers:      4,
//		Process:      proc,
//		Clock:        clock,
//		Clusters:     map[string]string{"outbound|8081||rls.svc": srv.Listener.Addr().String()},
//	})
//	if err != nil { ... }
//	defer p.Close()
//
//	res, err := p.VM(0).RoundTrip(ctx, &envoyhost.Request{
//		Headers: envoyhost.Headers{{":method", "GET"}, {":path", "/"}, {":authority", "a"}, {":scheme", "http"}},
//		Info:    envoyhost.StreamInfo{SourceAddress: "10.0.0.1:5000"},
//	}, &envoyhost.Response{Headers: envoyhost.Headers{{":status", "200"}}})
//	// res.LocalReply != nil when the filter answered (e.g. 429); otherwise
//	// res.Upstream holds the request headers as forwarded upstream and
//	// res.Downstream the response headers after the filter's on_response_headers.
//
//	// Step by step, with a pause:
//	s := p.VM(1).NewStream(envoyhost.StreamInfo{})
//	act, err := s.SendRequestHeaders(headers, true) // ActionPause while a callout runs
//	act, err = s.Wait(ctx)                           // ActionContinue or ActionStop (local reply)
//	up := s.UpstreamHeaders()                        // request headers as forwarded
//	act, err = s.SendResponseHeaders(envoyhost.Headers{{":status", "200"}}, true)
//	hs := s.DownstreamHeaders()                      // e.g. with RateLimit headers added
//	err = s.Close() // proxy_on_log, proxy_on_done, proxy_on_delete
//
//	clock.Advance(time.Second)                // fires due proxy_on_tick on every VM
//	m := proc.Metrics()["requests_total"]     // process-wide by name, like Envoy stats
//	data := proc.SharedData("meshlimit")      // snapshot of the vm_id namespace
//	n := p.PollOneoffCalls()                  // must stay 0 for an Envoy #427-era host
//
// # Where it differs from Envoy
//
// Time and threads:
//
//   - Time is virtual. WASI clock_time_get, proxy_get_current_time_nanoseconds, request.time
//     and the tick timers read a [Clock] that moves only when [Clock.Advance] is called; in
//     Envoy they follow the dispatcher's real clock. HTTP callout timeouts, however, run in
//     real time unless [Config.CallTimeoutsOnClock] puts them on the Clock too.
//   - In the #533 generation poll_oneoff advances the calling VM's private monotonic clock by
//     the requested timeout, so that a guest sleep ends on the virtual clock (Envoy returns at
//     once and the guest busy-waits).
//   - A VM is a mutex around a wazero module, not a thread with a dispatcher: HTTP callout
//     responses and proxy_on_queue_ready are delivered from goroutines, each waiting for the
//     VM's current guest call to return (Envoy posts them to the owning thread's dispatcher).
//   - VMs are never shared between plugins: each [Plugin] has its own base VM, canary and
//     thread VMs, so every VM has exactly one root context (id 1) and one tick timer. Envoy
//     shares a VM per thread among plugins with the same vm_id, VM configuration and code.
//
// Callouts:
//
//   - A cluster is one loopback address from [Config.Clusters], reached with net/http over
//     HTTP/1.1: no load balancing, hash policy, TLS, retries or circuit breakers.
//   - Upstream timeouts and connection failures become the 504 and 503 responses Envoy's router
//     is reported to send (their bodies copied from those reports, not from Envoy's code); a
//     reset after the headers, or a body over 16 MiB (the host's own limit), fails the call
//     with (0, 0, 0).
//   - At most 1024 callouts of one plugin may be in flight; past that proxy_http_call returns
//     InternalFailure. Envoy's Wasm layer has no such bound.
//   - Callout tokens count 1, 2, 3, ... per VM; Envoy's count 4, 8, 12, ... (the low bits
//     carry the callout type).
//   - There are no gRPC services: proxy_grpc_call and proxy_grpc_stream return BadArgument, the
//     other gRPC calls NotFound.
//
// Streams and header maps:
//
//   - Streams are driven by the caller ([Stream], [VM.RoundTrip], [HTTPProxy]), not by an HTTP
//     connection manager or a codec: there are no other filters, no local_reply_config, no
//     upgrade_configs (Envoy refuses an upgrade without one with a 403), no HTTP/2 extended
//     CONNECT to rewrite, and no stream_idle_timeout (Envoy's 5-minute default ends a stream
//     that moves no data).
//   - Flow control is recorded, not applied: when the held body passes the buffer limit under
//     StopIterationAndWatermark or a headers stop, [Stream.Flow] reports the sender read-disabled,
//     but the caller may still send chunks, which are held like any other; in Envoy they would
//     wait in the socket or the HTTP/2 stream window (up to initial_stream_window_size, 16 MiB by
//     default) and not reach the filter.
//   - After a body callback that returned 2 or 3, the body buffer is NotFound until the next body
//     callback; Envoy keeps a pointer to the chunk it moved (2) or the codec drained (3), so reading
//     or writing it from a tick is undefined there.
//   - Response trailers cannot be added from the last response body callback (Envoy creates them
//     there with addEncodedTrailers); a local reply to a HEAD request carries its body.
//   - A second proxy_send_local_response on the same stream returns BadArgument; Envoy returns
//     Ok and queues it as well.
//   - proxy_get_header_map_pairs on a map that is not available returns BadArgument; Envoy
//     returns Ok with no pairs.
//   - During proxy_on_log no header map is readable (Envoy exposes the access-log copies of the
//     request and response headers), and proxy_on_log runs only for streams whose context was
//     created (Envoy creates it for the log if the filter never saw the request).
//
// Loading and failure:
//
//   - The engine is wazero's compiler, not V8: trap messages and speed differ; the memory cap is
//     the same.
//   - A reactor without main has its __main_void called in every generation; Envoy's host does
//     that only from cpp-host PR #500 (2026-03) on. Go modules export neither.
//   - env.envoy_resolve_dns is not provided, and capability_restriction_config is not modelled:
//     a module importing envoy_resolve_dns loads in Envoy and fails to load here.
//   - Failure handling is fail-closed or [Config.FailOpen]; there is no FAIL_RELOAD and no
//     reload policy: a failed VM stays failed until the plugin is closed.
//
// Other host functions and data:
//
//   - Foreign functions are absent (proxy_call_foreign_function returns NotFound).
//   - Properties are a subset of Envoy's attributes: plugin_name, plugin_root_id,
//     plugin_vm_id, xds.route_name, xds.cluster_name, xds.node (encoded from [Node]: id,
//     cluster, string metadata), request.* (path, url_path, query, host, method, scheme, id,
//     protocol, time, headers), response.code and response.headers, source.* and
//     destination.* (address, port), and filter state set with proxy_set_property. Anything
//     else (connection.*, upstream.*, metadata.*, ...) exists only when injected through
//     [Config.Properties] or [StreamInfo].
//   - Metrics are keyed by the name the guest defined, without Envoy's "wasmcustom." prefix;
//     a histogram keeps its last value, count and sum, not buckets.
//
// Everything else follows docs/envoy-host.md.
package envoyhost
