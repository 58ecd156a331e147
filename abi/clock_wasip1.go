//go:build wasip1 && !tinygo.wasm

package abi

import "unsafe"

//go:noescape
//go:wasmimport wasi_snapshot_preview1 clock_time_get
func clockTimeGet(clockID uint32, precision uint64, time unsafe.Pointer) uint32

// UnixNano returns the host's realtime clock in nanoseconds since the Unix epoch. It makes one host
// call; time.Now makes two (the wall clock and the monotonic clock). It returns 0 if the host refuses.
func UnixNano() int64 {
	var t uint64
	if clockTimeGet(0, 1, unsafe.Pointer(&t)) != 0 {
		return 0
	}
	return int64(t)
}
