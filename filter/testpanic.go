//go:build !meshlimit_panictest

package filter

// testPanic does nothing: only the test build (tag meshlimit_panictest, testpanic_on.go) panics on
// demand, so that tests can prove that every callback recovers. Production modules have no trigger.
func testPanic(host, string) {}

// testPanics is whether this build panics on demand: callbacks that skip their work (and their
// recover) when a stream needs none of it do not skip it in the test build.
const testPanics = false
