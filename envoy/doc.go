// Package envoy holds meshlimit's deployment artifacts and the tests that keep them right.
//
// The artifacts are files, not Go code: envoy.yaml (an Envoy bootstrap with the filter),
// compose.yaml and Dockerfile (the same setup under Docker Compose), and istio/ (the
// WasmPlugin, its TrafficExtension form, the decision service and Redis). Envoy, Istio and
// Docker cannot run where the tests run, so the tests decode every file into the real
// schemas instead: go-control-plane's Bootstrap with its generated validation, istio.io/api
// and k8s.io/api types, and the filter's own configuration decoder (rules.ParseConfig) for
// every embedded plugin configuration. They also check that the files agree with each
// other: cluster names, ports, route names, the module's path.
//
// The command cmd/wasmimage packs the compiled filter into the OCI image Istio pulls.
//
// This directory is a Go module of its own, so that go-control-plane, istio.io/api,
// k8s.io/api and go-containerregistry stay out of the filter's module.
package envoy
