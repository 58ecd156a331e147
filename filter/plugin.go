package filter

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// NewVMContext returns the VM context that cmd/filter registers. One exists per Envoy worker thread.
func NewVMContext() types.VMContext { return &vmContext{} }

// vmContext implements types.VMContext.
type vmContext struct{ types.DefaultVMContext }

// NewPluginContext implements types.VMContext.
func (*vmContext) NewPluginContext(uint32) types.PluginContext { return &pluginContext{} }

// pluginContext implements types.PluginContext.
type pluginContext struct{ types.DefaultPluginContext }

// OnPluginStart implements types.PluginContext.
func (*pluginContext) OnPluginStart(size int) types.OnPluginStartStatus {
	data, err := proxywasm.GetPluginConfiguration()
	if err != nil && size > 0 {
		proxywasm.LogCriticalf("meshlimit: reading the plugin configuration: %v", err)
		return types.OnPluginStartStatusFailed
	}
	proxywasm.LogInfof("meshlimit: started with configuration %q", data)
	return types.OnPluginStartStatusOK
}

// NewHttpContext implements types.PluginContext.
func (*pluginContext) NewHttpContext(uint32) types.HttpContext { return &httpContext{} }

// httpContext implements types.HttpContext.
type httpContext struct{ types.DefaultHttpContext }
