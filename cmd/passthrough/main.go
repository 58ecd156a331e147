// Command passthrough is the floor against which meshlimit's cost is measured: a proxy-wasm module built
// exactly like cmd/filter (same SDK, same host binding, same flags) whose HTTP contexts continue every
// request without reading anything. The e2e benchmarks run it next to the real filter in one process.
package main

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	_ "github.com/meshlimit/meshlimit/abi"
)

func init() { proxywasm.SetVMContext(&vm{}) }

func main() {}

// vm implements types.VMContext.
type vm struct{ types.DefaultVMContext }

// NewPluginContext implements types.VMContext.
func (*vm) NewPluginContext(uint32) types.PluginContext { return &plugin{} }

// plugin implements types.PluginContext.
type plugin struct{ types.DefaultPluginContext }

// OnPluginStart implements types.PluginContext. It logs the size of its configuration, so a test can
// see that the plugin started.
func (*plugin) OnPluginStart(size int) types.OnPluginStartStatus {
	proxywasm.LogInfof("passthrough: started with %d bytes of configuration", size)
	return types.OnPluginStartStatusOK
}

// NewHttpContext implements types.PluginContext.
func (*plugin) NewHttpContext(uint32) types.HttpContext { return &stream{} }

// stream implements types.HttpContext by continuing every callback (the defaults).
type stream struct{ types.DefaultHttpContext }
