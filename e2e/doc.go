// Package e2e holds the end-to-end tests of the compiled filter, build/meshlimit.wasm, driven through
// the Envoy-like host in package envoyhost. `make test` builds the module first; a missing module is a
// test failure, not a skip.
package e2e
