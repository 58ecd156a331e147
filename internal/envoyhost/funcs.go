package envoyhost

import (
	"context"
	"fmt"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

const (
	modEnv  = "env"
	modWASI = "wasi_snapshot_preview1"
	// modWASIUnstable carries the same functions as modWASI in Envoy (§0).
	modWASIUnstable = "wasi_unstable"
)

const (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

// genSet is a set of generations.
type genSet uint8

const (
	inPre genSet = 1 << iota
	in427
	in533

	allGens  = inPre | in427 | in533
	since133 = in427 | in533
)

func (g Generation) bit() genSet {
	switch g {
	case Gen533:
		return in533
	case GenPre133:
		return inPre
	}
	return in427
}

// abiVersion is the proxy-wasm ABI the module declares (§1.2).
type abiVersion int

const (
	abi020 abiVersion = iota + 1
	abi021
)

func (a abiVersion) String() string {
	if a == abi021 {
		return "0.2.1"
	}
	return "0.2.0"
}

// hostFunc is one host function: where Envoy registers it, its wasm signature and
// its implementation. impl reads its i32 arguments masked to 32 bits and writes its
// result to s[0].
type hostFunc struct {
	module  string // modEnv or modWASI (also registered as modWASIUnstable)
	name    string
	params  []api.ValueType
	results []api.ValueType
	impl    func(v *VM, s []uint64)
	gens    genSet // generations that register it
	only021 bool   // registered only for ABI 0.2.1 (proxy_get_log_level)
}

func sig(n int) []api.ValueType {
	ps := make([]api.ValueType, n)
	for i := range ps {
		ps[i] = i32
	}
	return ps
}

var (
	r32   = []api.ValueType{i32}
	rNone = []api.ValueType{}
)

// hostFuncs is every function the host can register; funcIndex maps
// "module.name" to its index, which is also its bit in the allow-lists.
var (
	hostFuncs []hostFunc
	funcIndex map[string]int
)

func init() {
	hostFuncs = append(hostFuncs, wasiFuncs()...)
	hostFuncs = append(hostFuncs, proxyFuncs()...)
	funcIndex = make(map[string]int, len(hostFuncs))
	for i, f := range hostFuncs {
		funcIndex[f.module+"."+f.name] = i
	}
}

// startAllowList returns the host calls allowed while _initialize/main run (§1.3).
func startAllowList(g Generation) []bool {
	names := []string{
		"env.proxy_log", "wasi.fd_write", "wasi.args_sizes_get", "wasi.args_get",
		"wasi.environ_sizes_get", "wasi.environ_get", "wasi.fd_prestat_get",
		"wasi.fd_prestat_dir_name", "wasi.clock_time_get", "wasi.random_get",
		"wasi.fd_fdstat_get", "wasi.fd_fdstat_set_flags",
	}
	if g != GenPre133 {
		names = append(names, "env.emscripten_notify_memory_growth")
	}
	if g == Gen533 {
		names = append(names, "wasi.clock_res_get", "wasi.poll_oneoff", "wasi.fd_renumber",
			"wasi.path_create_directory", "wasi.path_filestat_get", "wasi.path_filestat_set_times",
			"wasi.path_link", "wasi.path_readlink", "wasi.path_remove_directory", "wasi.path_rename",
			"wasi.path_symlink", "wasi.path_unlink_file", "wasi.sock_accept", "wasi.sock_recv",
			"wasi.sock_send", "wasi.sock_shutdown")
	}
	return allowList(names)
}

// mallocAllowList returns the host calls allowed while the host re-enters the guest's
// allocator (§7).
func mallocAllowList(g Generation) []bool {
	names := []string{"env.proxy_log", "wasi.fd_write", "wasi.clock_time_get"}
	if g == Gen533 {
		names = append(names, "wasi.poll_oneoff")
	}
	return allowList(names)
}

func allowList(names []string) []bool {
	allowed := make([]bool, len(hostFuncs))
	for _, n := range names {
		n = strings.Replace(n, "wasi.", modWASI+".", 1)
		i, ok := funcIndex[n]
		if !ok {
			panic("envoyhost: allow-list names unknown function " + n)
		}
		allowed[i] = true
	}
	return allowed
}

// provided reports whether the host registers f for generation g and ABI abi.
func (f *hostFunc) provided(g Generation, abi abiVersion) bool {
	if f.gens&g.bit() == 0 {
		return false
	}
	return !f.only021 || abi == abi021
}

// checkImports fails like Envoy (§0 item 2) when the module imports a function the
// host does not provide or with another signature. Only function imports are
// checked: wazero's compiled module does not list imported globals.
func checkImports(cm wazero.CompiledModule, g Generation, abi abiVersion) error {
	for _, def := range cm.ImportedFunctions() {
		mod, name, _ := def.Import()
		key := mod + "." + name
		if mod == modWASIUnstable {
			key = modWASI + "." + name
		}
		i, ok := funcIndex[key]
		if !ok || !hostFuncs[i].provided(g, abi) {
			return fmt.Errorf("Failed to load Wasm module due to a missing import: %s.%s", mod, name)
		}
		f := &hostFuncs[i]
		if !sameTypes(def.ParamTypes(), f.params) || !sameTypes(def.ResultTypes(), f.results) {
			return fmt.Errorf("Failed to load Wasm module due to an import type mismatch for %s.%s, want: %s -> %s, but host exports: %s -> %s",
				mod, name, typeList(def.ParamTypes()), typeList(def.ResultTypes()), typeList(f.params), typeList(f.results))
		}
	}
	return nil
}

func sameTypes(a, b []api.ValueType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func typeList(ts []api.ValueType) string {
	if len(ts) == 0 {
		return "void"
	}
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = api.ValueTypeName(t)
	}
	return strings.Join(names, " ")
}

// instantiateHostModules registers env, wasi_snapshot_preview1 and wasi_unstable in
// rt with the functions Envoy registers for generation g and ABI abi.
func instantiateHostModules(ctx context.Context, rt wazero.Runtime, g Generation, abi abiVersion) error {
	builders := map[string]wazero.HostModuleBuilder{
		modEnv:          rt.NewHostModuleBuilder(modEnv),
		modWASI:         rt.NewHostModuleBuilder(modWASI),
		modWASIUnstable: rt.NewHostModuleBuilder(modWASIUnstable),
	}
	for i := range hostFuncs {
		f := &hostFuncs[i]
		if !f.provided(g, abi) {
			continue
		}
		fn := wrap(i, f)
		mods := []string{f.module}
		if f.module == modWASI {
			mods = append(mods, modWASIUnstable)
		}
		for _, m := range mods {
			builders[m].NewFunctionBuilder().WithGoModuleFunction(fn, f.params, f.results).Export(f.name)
		}
	}
	for _, m := range []string{modEnv, modWASI, modWASIUnstable} {
		if _, err := builders[m].Instantiate(ctx); err != nil {
			return fmt.Errorf("envoyhost: instantiate host module %s: %w", m, err)
		}
	}
	return nil
}

// wrap turns f into a wazero host function that finds its VM in the call's context,
// enforces the restricted window in force, and counts the allocations of this call.
func wrap(id int, f *hostFunc) api.GoModuleFunction {
	name := f.module + "." + f.name
	return api.GoModuleFunc(func(ctx context.Context, _ api.Module, s []uint64) {
		v := ctx.Value(vmKey{}).(*VM)
		v.hostCalls.Add(1)
		if v.allowed != nil && !v.allowed[id] {
			panic(&restrictedError{fn: name})
		}
		var args []uint64
		if v.trace != nil {
			args = traceArgs(f, s)
		}
		prev := v.allocs
		v.allocs = 0
		f.impl(v, s)
		v.allocs = prev
		if v.trace != nil {
			v.traceCall(f, args, s)
		}
	})
}

// u32 masks a wasm i32 argument; wazero leaves garbage in the upper bits (§8).
func u32(x uint64) uint32 { return uint32(x) }
