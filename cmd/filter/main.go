// Command filter is meshlimit's proxy-wasm module. It only wires: the SDK host binding is linked by
// importing package abi, and the plugin is registered in init, because a c-shared wasm module's main
// never runs (Envoy calls _initialize, then the proxy_on_* exports).
//
// Build it with `make wasm`, which writes build/meshlimit.wasm.
package main

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"

	_ "github.com/meshlimit/meshlimit/abi"
	"github.com/meshlimit/meshlimit/filter"
)

func init() { proxywasm.SetVMContext(filter.NewVMContext()) }

func main() {}
