// Command hostfloor is the host-call floor of meshlimit's allowed request: the pass-through module
// (cmd/passthrough) plus exactly the host calls the filter makes for an allowed request on one
// per-IP rule, with the same arguments' sizes, and no decision. Its cost over the pass-through is
// what those host calls cost the host and the guest's binding (package abi), so the filter's cost
// over it is the guest's own work. The calls, in order:
//
//   - request headers: the clock (WASI clock_time_get), the source.address property, the key's
//     shared-data record read and written back with its compare-and-swap value;
//   - response headers: the two quota headers (RateLimit-Policy and RateLimit), unless the plugin
//     configuration is {"quota_headers": false}.
//
// e2e's TestTheHostCallFloorMakesTheHostCallsOfTheFilterItStandsFor compares its host-call trace
// with the filter's, so that the floor cannot drift from what it stands for.
package main

import (
	"encoding/json"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/meshlimit/meshlimit/abi"
)

// The filter's values for the bench request (GET bench.example/api/items from 203.0.113.77:40000,
// rule "per-ip", 1000000000/s), byte for byte in length: the key its record lives under (ending in
// its slot's number, in base 36: 3 digits for most slots, as here), the record's size and the quota
// headers.
const (
	key        = "hostfloor/istio-system.meshlimit/per-ip/2lwqw4or5yzr3/v2/79o"
	recordSize = 28
	policyName = "ratelimit-policy"
	policy     = `"per-ip";q=1000000000;w=1;qu="requests"`
	quotaName  = "ratelimit"
	quota      = `"per-ip";r=999999999;t=1`
)

// The quota headers' values, converted once.
var policyValue, quotaValue = []byte(policy), []byte(quota)

func init() { proxywasm.SetVMContext(&vm{}) }

func main() {}

// vm implements types.VMContext.
type vm struct{ types.DefaultVMContext }

// NewPluginContext implements types.VMContext.
func (*vm) NewPluginContext(uint32) types.PluginContext { return &plugin{} }

// plugin implements types.PluginContext.
type plugin struct {
	types.DefaultPluginContext
	quotaHeaders bool
	path         []byte // source.address, encoded once
	addr, record []byte // reused for the values the host returns
}

// config is the plugin configuration: quota_headers (default true) adds the two quota headers.
type config struct {
	QuotaHeaders *bool `json:"quota_headers"`
}

// OnPluginStart implements types.PluginContext. It refuses a configuration it cannot read.
func (p *plugin) OnPluginStart(int) types.OnPluginStartStatus {
	data, err := proxywasm.GetPluginConfiguration()
	var c config
	if err == nil && len(data) > 0 {
		err = json.Unmarshal(data, &c)
	}
	if err != nil {
		proxywasm.LogCriticalf("hostfloor: configuration: quota_headers: %v", err)
		return types.OnPluginStartStatusFailed
	}
	p.quotaHeaders = c.QuotaHeaders == nil || *c.QuotaHeaders
	p.path = abi.PropertyPath("source", "address")
	p.addr = make([]byte, 0, 64)
	p.record = make([]byte, recordSize, 64)
	proxywasm.LogInfof("hostfloor: started, quota headers %t", p.quotaHeaders)
	return types.OnPluginStartStatusOK
}

// NewHttpContext implements types.PluginContext.
func (p *plugin) NewHttpContext(uint32) types.HttpContext { return &stream{p: p} }

// stream implements types.HttpContext.
type stream struct {
	types.DefaultHttpContext
	p *plugin
}

// OnHttpRequestHeaders implements types.HttpContext: the request side's host calls. The record read
// is written back as it was read (a fresh one, zeroed, when there is none yet).
func (s *stream) OnHttpRequestHeaders(int, bool) types.Action {
	p := s.p
	_ = abi.UnixNano()
	p.addr, _ = abi.GetProperty(p.path, p.addr)
	rec, cas, st := abi.GetSharedData(key, p.record)
	if st != abi.StatusOK || len(rec) != recordSize {
		rec, cas = p.record[:recordSize], 0
		clear(rec)
	} else if cap(rec) > cap(p.record) {
		p.record = rec
	}
	_ = abi.SetSharedData(key, rec, cas)
	return types.ActionContinue
}

// OnHttpResponseHeaders implements types.HttpContext: the quota headers of an allowed request.
func (s *stream) OnHttpResponseHeaders(int, bool) types.Action {
	if s.p.quotaHeaders {
		_ = abi.AddHeader(abi.ResponseHeaders, policyName, policyValue)
		_ = abi.AddHeader(abi.ResponseHeaders, quotaName, quotaValue)
	}
	return types.ActionContinue
}
