// Package filter is the proxy-wasm adapter of meshlimit: the VM, plugin and HTTP contexts that
// cmd/filter registers with the SDK.
//
// It is thin on purpose. What a configuration means (matching, keys, limits, costs, responses) is
// package rules; how state is kept in the proxy's shared data is package sharedstate; the
// algorithms are package algorithms; the wire format of the decision service is package wire. This
// package reads the request from the host, asks those packages, and acts: it sends local replies,
// pauses and resumes streams, dispatches callouts to the decision service, runs the timer (shaping
// and quota leases) and defines the metrics.
//
// It may touch the host only through the proxy-wasm SDK and package abi; it runs on one VM per
// Envoy worker thread, with no goroutines, timers or sleeps (Envoy's poll_oneoff aborts the Go
// runtime): asynchronous work is ticks and callouts. docs/architecture.md shows the path of one
// request; docs/envoy-host.md says what the host guarantees.
package filter
