//go:build meshlimit_panictest

package filter

// The test build panics where the request asks it to: the header x-meshlimit-test-panic names the
// callback (the response header, for the response). "tick" makes the next tick of the worker panic.
// Never in a production module: this file needs the meshlimit_panictest build tag.

const panicHeader = "x-meshlimit-test-panic"

var panicNextTick bool

// testPanics is whether this build panics on demand (see testpanic.go).
const testPanics = true

func testPanic(h host, where string) {
	switch where {
	case panicTick:
		if panicNextTick {
			panicNextTick = false
			panic("meshlimit test: a panic in " + where)
		}
		return
	case panicResponseHeaders:
		if v, ok := h.header(responsePart, panicHeader, nil); ok && string(v) == where {
			panic("meshlimit test: a panic in " + where)
		}
		return
	}
	v, ok := h.header(requestPart, panicHeader, nil)
	if !ok {
		return
	}
	if string(v) == panicTick {
		panicNextTick = true
	}
	if string(v) == where {
		panic("meshlimit test: a panic in " + where)
	}
}
