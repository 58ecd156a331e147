//go:build !wasip1 || tinygo.wasm

package abi

import "time"

// UnixNano returns the current time in nanoseconds since the Unix epoch. In a wasip1 build by the
// standard compiler it reads the host's realtime clock with one host call; elsewhere (native tests,
// TinyGo) it is time.Now().UnixNano().
func UnixNano() int64 { return time.Now().UnixNano() }
