//go:build wasip1

// Command badimport imports wasi_snapshot_preview1.fd_pread, which Envoy provides
// only from the #533 generation on.
package main

import "unsafe"

func main() {}

//go:wasmimport wasi_snapshot_preview1 fd_pread
func fdPread(fd uint32, iovs unsafe.Pointer, n uint32, offset uint64, nread unsafe.Pointer) uint32

var buf []byte

//go:wasmexport proxy_on_memory_allocate
func onMemoryAllocate(size uint32) uint32 {
	buf = make([]byte, size)
	return uint32(uintptr(unsafe.Pointer(&buf[0])))
}

//go:wasmexport proxy_abi_version_0_2_0
func abiVersion() {}

//go:wasmexport proxy_on_vm_start
func onVMStart(root, size uint32) uint32 {
	var n uint32
	fdPread(0, nil, 0, 0, unsafe.Pointer(&n))
	return 1
}
