// Package envoyhost runs a compiled proxy-wasm HTTP filter the way Envoy (≥ 1.33)
// runs it, on wazero, so that end-to-end tests of the filter mean something.
//
// The specification is ../shared/reference/envoy-host.md (cited below as §N). Where
// wazero's defaults differ from Envoy (its WASI, its start function), the host follows
// Envoy: it brings its own wasi_snapshot_preview1 and wasi_unstable modules with
// Envoy's 18 functions and errno values (§1.1), its own env.proxy_* functions for ABI
// 0.2.0 and 0.2.1 (§1.2), the restricted-callback windows (§1.3, §7), the canary and
// per-thread VMs (§1.4, §5), Envoy's shared-data CAS rules (§2), deferred local replies
// and stream resumption (§4), HTTP callouts delivered to the root context (§3), Envoy's
// property paths (§6) and a 16384-page memory cap (§7).
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
// callouts are real HTTP requests to 127.0.0.1 and their timeouts use real time.
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
// # Deliberate simplifications
//
// There are no gRPC services (proxy_grpc_call and proxy_grpc_stream return
// BadArgument, the other gRPC calls NotFound) and no foreign functions (NotFound);
// shared queues deliver proxy_on_queue_ready asynchronously on a goroutine; a body
// chunk that arrived while its direction was paused is delivered on resume as one
// callback whose size is the whole buffered body; HTTP callout timeouts use real
// time; the xds.node property is encoded from [Node] (id, cluster,
// string metadata); in the #533 generation poll_oneoff advances the calling VM's
// private monotonic clock by the requested timeout so that a guest sleep terminates on
// the virtual clock. Everything else follows the specification.
package envoyhost
