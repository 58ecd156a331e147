// Package e2e holds the end-to-end tests of the compiled filter, build/meshlimit.wasm, driven through
// the Envoy-like host in package envoyhost, with the real decision service and real redis-server
// processes. The shared scenarios (scenarios/*.json) also run on V8 under node (v8host/, the same
// host in JavaScript, with Envoy's V8 flags), and the two engines must observe the same. `make test`
// builds the module first; a missing module is a test failure, not a skip. docs/testing.md says
// which make targets run which tests.
package e2e
