//go:build meshlimit_panictest

package filter

import "github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"

// The test build panics where the request asks it to: the header x-meshlimit-test-panic names the
// callback (the response header, for the response). "tick" makes the next tick of the worker panic.
// Never in a production module: this file needs the meshlimit_panictest build tag.

const panicHeader = "x-meshlimit-test-panic"

var panicNextTick bool

func testPanic(where string) {
	switch where {
	case panicTick:
		if panicNextTick {
			panicNextTick = false
			panic("meshlimit test: a panic in " + where)
		}
		return
	case panicResponseHeaders:
		if v, err := proxywasm.GetHttpResponseHeader(panicHeader); err == nil && v == where {
			panic("meshlimit test: a panic in " + where)
		}
		return
	}
	v, err := proxywasm.GetHttpRequestHeader(panicHeader)
	if err != nil {
		return
	}
	if v == panicTick {
		panicNextTick = true
	}
	if v == where {
		panic("meshlimit test: a panic in " + where)
	}
}
