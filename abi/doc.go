// Package abi binds github.com/tetratelabs/proxy-wasm-go-sdk v0.24.0 to the host when the filter is built
// with the standard Go toolchain (GOOS=wasip1 GOARCH=wasm -buildmode=c-shared) instead of TinyGo.
//
// The SDK was written for TinyGo: with the build tag tinygo it declares its 29 host calls as functions
// without bodies, marked //export proxy_* (TinyGo's spelling of a wasm import), and exports its 22
// callbacks with //export as well. The standard compiler honours neither directive. This package supplies
// both halves:
//
//   - each host call gets a body, attached to the SDK's declaration with //go:linkname, that converts the
//     arguments to wasm types and calls the matching env.proxy_* function declared with //go:wasmimport;
//   - each callback is exported under its proxy-wasm name with //go:wasmexport and forwards to the SDK's
//     unexported proxyOn* function, pulled in with //go:linkname.
//
// A plugin links the binding by importing this package for its side effects:
//
//	import _ "github.com/meshlimit/meshlimit/abi"
//
// and is built with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -tags tinygo \
//	  -gcflags=github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal=-complete=false ./cmd/filter
//
// (-tags tinygo selects the SDK's bodyless declarations; -complete=false lets that package compile
// without bodies). The binding compiles only for wasip1 builds by the standard compiler: real TinyGo
// sets the build tag tinygo.wasm, and there the SDK's own //export directives do the job, so the files
// are excluded. Natively the package holds UnixNano, which reads the host's clock with one call in a
// wasm build and falls back to time.Now elsewhere, and the allocation-free reads (GetProperty,
// GetSharedData, SetSharedData, AddHeader), which call the host directly in a wasm build and go
// through the SDK's own functions elsewhere (so that native tests run them on the SDK's emulator).
//
// The allocation-free reads receive what the host returns into a buffer the caller reuses: the
// exported allocator (proxy_on_memory_allocate) hands the host that buffer when a read asked for it
// and the value fits, and fresh memory from the SDK's allocator otherwise.
//
// Contract with the host, relied upon for memory safety: the host re-enters the guest's allocator
// (proxy_on_memory_allocate) at most once per host call, and only to return that call's result, so the
// buffer it returns cannot be collected before the host call returns and the binding takes a reference.
// Envoy's host (proxy-wasm-cpp-host) and our test host in internal/envoyhost both keep that contract.
package abi
