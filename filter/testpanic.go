//go:build !meshlimit_panictest

package filter

// testPanic does nothing: only the test build (tag meshlimit_panictest, testpanic_on.go) panics on
// demand, so that tests can prove that every callback recovers. Production modules have no trigger.
func testPanic(host, string) {}
