package envoyhost_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// wasm builds a minimal module by hand: an optional import of env.proxy_log with the
// signature () -> (), a memory, and exported no-op functions. proxy_on_memory_allocate
// gets (i32) -> i32.
func wasm(importProxyLog bool, exports ...string) []byte {
	uleb := func(n int) []byte {
		var b []byte
		for {
			c := byte(n & 0x7f)
			n >>= 7
			if n == 0 {
				return append(b, c)
			}
			b = append(b, c|0x80)
		}
	}
	name := func(s string) []byte { return append(uleb(len(s)), s...) }
	section := func(id byte, items ...[]byte) []byte {
		payload := uleb(len(items))
		for _, it := range items {
			payload = append(payload, it...)
		}
		return append(append([]byte{id}, uleb(len(payload))...), payload...)
	}
	out := []byte("\x00asm\x01\x00\x00\x00")
	out = append(out, section(1, []byte{0x60, 0, 0}, []byte{0x60, 1, 0x7f, 1, 0x7f})...)
	nImports := 0
	if importProxyLog {
		nImports = 1
		imp := append(name("env"), name("proxy_log")...)
		out = append(out, section(2, append(imp, 0x00, 0x00))...)
	}
	var funcs, codes, exps [][]byte
	for i, e := range exports {
		if e == "proxy_on_memory_allocate" {
			funcs = append(funcs, []byte{1})
			codes = append(codes, []byte{4, 0, 0x41, 0, 0x0b})
		} else {
			funcs = append(funcs, []byte{0})
			codes = append(codes, []byte{2, 0, 0x0b})
		}
		exps = append(exps, append(name(e), 0x00, byte(nImports+i)))
	}
	exps = append(exps, append(name("memory"), 0x02, 0))
	out = append(out, section(3, funcs...)...)
	out = append(out, section(5, []byte{0x00, 1})...)
	out = append(out, section(7, exps...)...)
	out = append(out, section(10, codes...)...)
	return out
}

func TestLoadFailsLikeEnvoy(t *testing.T) {
	tests := []struct {
		name    string
		module  []byte
		cfg     envoyhost.Config
		wantErr string
	}{
		{
			name:    "rejects an import that the #427 host lacks",
			module:  guests["badimport"],
			wantErr: "Failed to load Wasm module due to a missing import: wasi_snapshot_preview1.fd_pread",
		},
		{
			name:    "rejects a Go module on a pre-1.33 host",
			module:  guests["guest"],
			cfg:     envoyhost.Config{Generation: envoyhost.GenPre133},
			wantErr: "Failed to load Wasm module due to a missing import: wasi_snapshot_preview1.",
		},
		{
			name:    "rejects an import with another signature",
			module:  wasm(true, "proxy_abi_version_0_2_0", "proxy_on_memory_allocate"),
			wantErr: "Failed to load Wasm module due to an import type mismatch for env.proxy_log, want: void -> void, but host exports: i32 i32 i32 -> i32",
		},
		{
			name:    "rejects a module without an ABI version export",
			module:  wasm(false, "proxy_on_memory_allocate"),
			wantErr: "Missing or unknown Proxy-Wasm ABI version",
		},
		{
			name:    "rejects a module without an allocator",
			module:  wasm(false, "proxy_abi_version_0_2_0"),
			wantErr: "Wasm module is missing malloc function.",
		},
		{
			name:    "rejects a callback with another signature",
			module:  wasm(false, "proxy_abi_version_0_2_0", "proxy_on_memory_allocate", "proxy_on_tick"),
			wantErr: "Bad function signature for: proxy_on_tick",
		},
		{
			name:    "rejects the plugin when the canary's on_configure returns false",
			module:  guests["guest"],
			cfg:     envoyhost.Config{PluginName: "ns.limiter", PluginConfig: []byte("fail")},
			wantErr: "Unable to create Wasm HTTP filter ns.limiter: Failed to configure base Wasm plugin",
		},
		{
			name:    "traps a shared-data call made inside _initialize",
			module:  guests["guest"],
			cfg:     envoyhost.Config{Env: map[string]string{"GUEST_INIT": "shared_get"}},
			wantErr: "Function: _initialize failed: Uncaught Error: restricted_callback (env.proxy_get_shared_data)",
		},
		{
			name:    "traps poll_oneoff inside _initialize on a #427 host",
			module:  guests["guest"],
			cfg:     envoyhost.Config{Env: map[string]string{"GUEST_INIT": "poll"}},
			wantErr: "restricted_callback (wasi_snapshot_preview1.poll_oneoff)",
		},
		{
			name:    "rejects more memory than Envoy allows",
			module:  guests["guest"],
			cfg:     envoyhost.Config{MaxMemoryPages: envoyhost.MaxMemoryPages + 1},
			wantErr: "MaxMemoryPages is 16385, want <= 16384",
		},
		{
			name:    "rejects a cluster that is not on the loopback interface",
			module:  guests["guest"],
			cfg:     envoyhost.Config{Clusters: map[string]string{"c": "10.0.0.1:80"}},
			wantErr: `cluster "c": address "10.0.0.1:80" is not a loopback ip:port`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := envoyhost.NewPlugin(context.Background(), tc.module, tc.cfg)
			if err == nil {
				p.Close()
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.wantErr)
		})
	}
}

func TestLoadSucceedsWhereEnvoyWould(t *testing.T) {
	t.Run("loads a module importing fd_pread on a #533 host", func(t *testing.T) {
		p := newPlugin(t, "badimport", envoyhost.Config{Generation: envoyhost.Gen533})
		assert.Equal(t, "0.2.0", p.ABIVersion())
	})
	t.Run("allows poll_oneoff inside _initialize on a #533 host", func(t *testing.T) {
		p := newPlugin(t, "guest", envoyhost.Config{Generation: envoyhost.Gen533, Env: map[string]string{"GUEST_INIT": "poll"}})
		// The base VM, the canary and two thread VMs each ran _initialize once.
		assert.Equal(t, int64(4), p.PollOneoffCalls())
		assert.NoError(t, p.VM(0).Failed())
	})
	t.Run("imports nothing outside Envoy's #427 set", func(t *testing.T) {
		imports, err := envoyhost.ModuleImports(context.Background(), guests["guest"])
		require.NoError(t, err)
		for _, imp := range imports {
			mod, _, _ := strings.Cut(imp, ".")
			assert.Contains(t, []string{"env", "wasi_snapshot_preview1"}, mod, imp)
		}
		// Loading on the default (#427) host proves every import is provided.
		newPlugin(t, "guest", envoyhost.Config{})
	})
}

func TestStartupOrderMatchesEnvoy(t *testing.T) {
	p := newPlugin(t, "guest", envoyhost.Config{
		VMConfig: []byte("vmcfg"), PluginConfig: []byte("count=configured"), Workers: 2,
	})
	var starts []string
	var vms []int
	for _, e := range p.Logs() {
		if strings.HasPrefix(e.Message, "vm_start") || strings.HasPrefix(e.Message, "configure") {
			starts = append(starts, e.Message)
			vms = append(vms, e.VM)
		}
	}
	// The canary, then two workers and the main-thread VM, each with root id 1.
	assert.Equal(t, []int{envoyhost.CanaryVM, envoyhost.CanaryVM, 0, 0, 1, 1, 2, 2}, vms)
	assert.Equal(t, "vm_start root=1 size=5", starts[0])
	assert.Equal(t, "configure root=1 status=0 config=count=configured request_path_status=1", starts[1],
		"the plugin configuration is readable in on_configure and request.* is NotFound outside a stream")
	assert.Len(t, p.VMs(), 3)
	for _, vm := range p.VMs() {
		assert.Equal(t, uint32(1), vm.RootContextID())
	}
	// The canary's shared-data write persists although the canary was dropped.
	val, _, st := p.Process().GetSharedData("", "configured")
	require.Equal(t, envoyhost.StatusOK, st)
	assert.Equal(t, []byte{4, 0, 0, 0, 0, 0, 0, 0}, val)
}
