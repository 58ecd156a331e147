package envoyhost

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// MaxMemoryPages is Envoy's cap on a VM's linear memory: 16384 pages of 64 KiB,
// 1 GiB (§7).
const MaxMemoryPages = 16384

// maxLogEntries bounds the captured log; the oldest half is dropped when it is full.
const maxLogEntries = 100_000

// compilationCache lets plugins created from the same module bytes share compiled
// code: in memory, and in the directory ENVOYHOST_CACHE_DIR names when it is set,
// where several processes share it (`make test` points the test binaries of every
// package at build/wazero-cache, so that a module is compiled once for the whole run).
var compilationCache = newCompilationCache(os.Getenv("ENVOYHOST_CACHE_DIR"))

// newCompilationCache returns a cache kept in dir, or in memory when dir is empty or
// cannot be used.
func newCompilationCache(dir string) wazero.CompilationCache {
	if dir != "" {
		if c, err := wazero.NewCompilationCacheWithDir(dir); err == nil {
			return c
		}
	}
	return wazero.NewCompilationCache()
}

// runtimeConfig returns wazero's compiler configuration with the shared cache. The
// compiler is slow under the race detector (about 10 s for a Go module on 2 cores)
// but runs guests far faster than the interpreter, which wins as soon as a test
// starts a few VMs.
func runtimeConfig() wazero.RuntimeConfig {
	return wazero.NewRuntimeConfigCompiler().WithCompilationCache(compilationCache)
}

// Config describes one plugin (an Envoy Wasm HTTP filter configuration) and the
// process it runs in. The zero value of every field is usable.
type Config struct {
	// VMID is vm_config.vm_id, the shared-data and shared-queue namespace (§2). Istio
	// leaves it empty.
	VMID string
	// VMConfig is vm_config.configuration, read with proxy_get_buffer_bytes(6); its
	// length is passed to proxy_on_vm_start.
	VMConfig []byte
	// PluginConfig is the plugin configuration, read with proxy_get_buffer_bytes(7)
	// during proxy_on_configure only; its length is passed to proxy_on_configure.
	PluginConfig []byte
	// PluginName and RootID are the plugin_name and plugin_root_id properties.
	PluginName string
	RootID     string
	// Workers is Envoy's concurrency: the host starts Workers+1 thread VMs, the last
	// being the main-thread VM (§5). 0 means 1.
	Workers int
	// Generation selects the cpp-host generation; the zero value is Gen427.
	Generation Generation
	// Clock is the virtual clock; nil means a new clock at 2023-11-14T22:13:20Z.
	Clock *Clock
	// Process holds the shared state; nil means a new Process for this plugin alone.
	Process *Process
	// Env is vm_config.environment_variables, visible through WASI environ_get.
	Env map[string]string
	// Clusters maps the cluster names proxy_http_call accepts to loopback "ip:port"
	// addresses; any other name is BadArgument (§3).
	Clusters map[string]string
	// FailOpen makes streams on a failed VM pass through instead of getting a 503.
	FailOpen bool
	// BufferLimit bounds the body a filter may have buffered (StopIterationAndBuffer) in each
	// direction of a stream; 0 means DefaultBufferLimit (see body.go).
	BufferLimit int
	// NoCallTimeouts makes proxy_http_call ignore its timeout argument, as hosts where the
	// callout timeout never fired did (Kuadrant wasm-shim #425): a call to an upstream that
	// never answers then never completes. For tests of a guest's own deadline.
	NoCallTimeouts bool
	// CallTimeoutsOnClock measures proxy_http_call timeouts on Clock rather than in real
	// time: a call that has no answer when Clock.Advance reaches its dispatch time plus its
	// timeout gets Envoy's 504 at that instant, and a call never times out while the clock
	// stands still, however slow its answer. Tests that move the clock themselves use it, so
	// that a slow machine never turns an answer into a timeout and a timeout is exactly where
	// the test puts it. NoCallTimeouts wins over it.
	CallTimeoutsOnClock bool
	// Node is the Envoy node, readable under xds.node.
	Node Node
	// Properties adds or overrides properties for every stream and the root context,
	// keyed by NUL-joined path (see Path).
	Properties map[string][]byte
	// LogLevel is what proxy_get_log_level reports; log entries below it are not
	// captured. The zero value (LogTrace) captures everything.
	LogLevel LogLevel
	// OnLog, if set, is called with every captured log entry as it is logged, from the
	// goroutine running the guest call; it also sees the entries of a plugin whose start
	// fails (Envoy's log is where a refused configuration is explained).
	OnLog func(LogEntry)
	// MaxMemoryPages caps each VM's memory; 0 means Envoy's MaxMemoryPages. Tests may
	// lower it to reach the cap cheaply; it cannot exceed MaxMemoryPages.
	MaxMemoryPages uint32
}

// Plugin is one loaded plugin: the compiled module, its base VM, and its thread VMs.
// All methods are safe for concurrent use. Close releases everything.
type Plugin struct {
	cfg     Config
	gen     Generation
	abi     abiVersion
	clock   *Clock
	proc    *Process
	environ []string

	rt          wazero.Runtime
	cm          wazero.CompiledModule
	startAllow  []bool
	mallocAllow []bool
	base        *VM
	vms         []*VM

	client   *http.Client
	ctx      context.Context // cancelled by Close; parent of HTTP calls
	cancel   context.CancelFunc
	asyncMu  sync.Mutex
	closing  bool
	wg       sync.WaitGroup
	inflight atomic.Int32
	closed   atomic.Bool

	pollCalls atomic.Int64

	logMu sync.Mutex
	logs  []LogEntry
}

// exports are the guest functions the host calls, nil when not exported.
type exports struct {
	malloc, initialize, start, main, mainVoid                         api.Function
	onContextCreate, onVMStart, onConfigure                           api.Function
	onRequestHeaders, onRequestBody, onRequestTrailers                api.Function
	onResponseHeaders, onResponseBody, onResponseTrailers             api.Function
	onHTTPCallResponse, onLog, onDone, onDelete, onTick, onQueueReady api.Function
}

// exportSigs are the signatures Envoy requires of the exports it calls; a mismatch
// fails the load ("Bad function signature for: <name>").
var exportSigs = map[string][2][]api.ValueType{
	"malloc":                      {sig(1), r32},
	"proxy_on_memory_allocate":    {sig(1), r32},
	"_initialize":                 {nil, nil},
	"_start":                      {nil, nil},
	"main":                        {sig(2), r32},
	"__main_void":                 {nil, r32},
	"proxy_on_context_create":     {sig(2), nil},
	"proxy_on_vm_start":           {sig(2), r32},
	"proxy_on_configure":          {sig(2), r32},
	"proxy_on_request_headers":    {sig(3), r32},
	"proxy_on_request_body":       {sig(3), r32},
	"proxy_on_request_trailers":   {sig(2), r32},
	"proxy_on_response_headers":   {sig(3), r32},
	"proxy_on_response_body":      {sig(3), r32},
	"proxy_on_response_trailers":  {sig(2), r32},
	"proxy_on_http_call_response": {sig(5), nil},
	"proxy_on_log":                {sig(1), nil},
	"proxy_on_done":               {sig(1), r32},
	"proxy_on_delete":             {sig(1), nil},
	"proxy_on_tick":               {sig(1), nil},
	"proxy_on_queue_ready":        {sig(2), nil},
}

// NewPlugin loads module the way Envoy does (§1): it checks the ABI version export,
// the allocator export, every import (failing with Envoy's "Failed to load Wasm module
// due to a missing import: <module>.<name>") and the callbacks' signatures; runs the
// base VM's _initialize inside the restricted window; runs the canary and fails with
// Envoy's message when its proxy_on_vm_start or proxy_on_configure returns 0; then
// starts Workers+1 thread VMs. A thread VM that fails to start is marked failed
// rather than failing the load, as in Envoy. The returned plugin must be closed.
func NewPlugin(ctx context.Context, module []byte, cfg Config) (*Plugin, error) {
	if err := validate(&cfg); err != nil {
		return nil, err
	}
	p := &Plugin{cfg: cfg, gen: cfg.Generation, clock: cfg.Clock, proc: cfg.Process, environ: sortedEnviron(cfg.Env)}
	if p.clock == nil {
		p.clock = NewClock(time.Unix(1_700_000_000, 0).UTC())
	}
	if p.proc == nil {
		p.proc = NewProcess()
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.client = &http.Client{
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			DisableCompression:  true,
			MaxIdleConnsPerHost: 64,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	p.startAllow, p.mallocAllow = startAllowList(p.gen), mallocAllowList(p.gen)
	p.rt = wazero.NewRuntimeWithConfig(ctx, runtimeConfig().WithMemoryLimitPages(cfg.MaxMemoryPages))
	if err := p.load(ctx, module); err != nil {
		p.cancel()
		_ = p.rt.Close(ctx)
		return nil, err
	}
	p.proc.acquire(cfg.VMID)
	if err := p.startVMs(ctx); err != nil {
		_ = p.Close()
		return nil, err
	}
	return p, nil
}

func validate(cfg *Config) error {
	if cfg.Workers < 0 {
		return fmt.Errorf("envoyhost: Workers is %d, want >= 0", cfg.Workers)
	}
	if cfg.Workers == 0 {
		cfg.Workers = 1
	}
	if cfg.MaxMemoryPages == 0 {
		cfg.MaxMemoryPages = MaxMemoryPages
	}
	if cfg.MaxMemoryPages > MaxMemoryPages {
		return fmt.Errorf("envoyhost: MaxMemoryPages is %d, want <= %d", cfg.MaxMemoryPages, MaxMemoryPages)
	}
	if cfg.Generation < Gen427 || cfg.Generation > GenPre133 {
		return fmt.Errorf("envoyhost: unknown generation %d", cfg.Generation)
	}
	for name, addr := range cfg.Clusters {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("envoyhost: cluster %q: %w", name, err)
		}
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			return fmt.Errorf("envoyhost: cluster %q: address %q is not a loopback ip:port", name, addr)
		}
	}
	return nil
}

// envoyNoMalloc is Envoy's own message (with its full stop) for a module without an allocator, which
// the load tests compare.
const envoyNoMalloc = "Wasm module is missing malloc function."

// load compiles the module, checks it like Envoy and registers the host modules.
func (p *Plugin) load(ctx context.Context, module []byte) error {
	cm, err := p.rt.CompileModule(ctx, module)
	if err != nil {
		return fmt.Errorf("envoyhost: Failed to load Wasm code: %w", err)
	}
	p.cm = cm
	ex := cm.ExportedFunctions()
	switch {
	case ex["proxy_abi_version_0_2_1"] != nil:
		p.abi = abi021
	case ex["proxy_abi_version_0_2_0"] != nil:
		p.abi = abi020
	case ex["proxy_abi_version_0_1_0"] != nil:
		return errors.New("envoyhost: ABI 0.1.0 is not supported by this host")
	default:
		return errors.New("envoyhost: Missing or unknown Proxy-Wasm ABI version")
	}
	if ex["malloc"] == nil && ex["proxy_on_memory_allocate"] == nil {
		return fmt.Errorf("envoyhost: %s", envoyNoMalloc)
	}
	if err := checkImports(cm, p.gen, p.abi); err != nil {
		return fmt.Errorf("envoyhost: %w", err)
	}
	for name, want := range exportSigs {
		if def := ex[name]; def != nil && (!sameTypes(def.ParamTypes(), want[0]) || !sameTypes(def.ResultTypes(), want[1])) {
			return fmt.Errorf("envoyhost: Bad function signature for: %s", name)
		}
	}
	return instantiateHostModules(ctx, p.rt, p.gen, p.abi)
}

// startVMs starts the base VM, the canary and the thread VMs (§1.4).
func (p *Plugin) startVMs(ctx context.Context) error {
	base, err := p.newVM(ctx, BaseVM)
	if err != nil {
		return err
	}
	p.base = base
	if err := base.boot(false); err != nil {
		return fmt.Errorf("envoyhost: Failed to start base Wasm VM: %w", err)
	}
	canary, err := p.newVM(ctx, CanaryVM)
	if err != nil {
		return err
	}
	err = canary.boot(true)
	canary.mu.Lock()
	canary.close() // killed without proxy_on_done/proxy_on_delete
	canary.mu.Unlock()
	if err != nil {
		return fmt.Errorf("envoyhost: Unable to create Wasm HTTP filter %s: %w", p.cfg.PluginName, err)
	}
	for i := 0; i <= p.cfg.Workers; i++ {
		vm, err := p.newVM(ctx, i)
		if err != nil {
			return err
		}
		p.vms = append(p.vms, vm)
		if err := vm.boot(true); err != nil {
			vm.mu.Lock()
			if vm.failed == nil {
				vm.failed = err
				p.log(vm.index, LogCritical, err.Error())
			}
			vm.mu.Unlock()
		}
	}
	return nil
}

// newVM instantiates the module without running any start function.
func (p *Plugin) newVM(ctx context.Context, index int) (*VM, error) {
	v := &VM{p: p, index: index}
	v.ctx = context.WithValue(context.Background(), vmKey{}, v)
	mod, err := p.rt.InstantiateModule(ctx, p.cm, wazero.NewModuleConfig().
		WithName("vm"+strconv.Itoa(index)).
		WithStartFunctions())
	if err != nil {
		return nil, fmt.Errorf("envoyhost: instantiate VM %d: %w", index, err)
	}
	v.mod, v.mem = mod, mod.Memory()
	if v.mem == nil {
		_ = mod.Close(ctx)
		return nil, errors.New("envoyhost: Wasm module has no memory")
	}
	f := mod.ExportedFunction
	v.ex = exports{
		malloc:     f("malloc"),
		initialize: f("_initialize"), start: f("_start"), main: f("main"), mainVoid: f("__main_void"),
		onContextCreate: f("proxy_on_context_create"), onVMStart: f("proxy_on_vm_start"),
		onConfigure:      f("proxy_on_configure"),
		onRequestHeaders: f("proxy_on_request_headers"), onRequestBody: f("proxy_on_request_body"),
		onRequestTrailers: f("proxy_on_request_trailers"), onResponseHeaders: f("proxy_on_response_headers"),
		onResponseBody: f("proxy_on_response_body"), onResponseTrailers: f("proxy_on_response_trailers"),
		onHTTPCallResponse: f("proxy_on_http_call_response"), onLog: f("proxy_on_log"),
		onDone: f("proxy_on_done"), onDelete: f("proxy_on_delete"), onTick: f("proxy_on_tick"),
		onQueueReady: f("proxy_on_queue_ready"),
	}
	if v.ex.malloc == nil {
		v.ex.malloc = f("proxy_on_memory_allocate")
	}
	return v, nil
}

// boot runs the start functions inside the restricted window (§1.3) and, for a plugin
// VM, creates the root context and calls proxy_on_vm_start and proxy_on_configure.
func (v *VM) boot(plugin bool) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.allowed = v.p.startAllow
	switch {
	case v.ex.initialize != nil:
		v.call(v.ex.initialize, "_initialize", 0)
		if v.ex.main != nil {
			v.call(v.ex.main, "main", 0, 0, 0)
		} else if v.ex.mainVoid != nil {
			v.call(v.ex.mainVoid, "__main_void", 0)
		}
	case v.ex.start != nil:
		v.call(v.ex.start, "_start", 0)
	}
	v.allowed = nil
	if v.failed != nil || !plugin {
		return v.failed
	}
	v.nextID++
	v.rootID = v.nextID
	root := uint64(v.rootID)
	if v.ex.onContextCreate != nil {
		v.call(v.ex.onContextCreate, "proxy_on_context_create", v.rootID, root, 0)
	}
	if v.ex.onVMStart != nil {
		if res, ok := v.call(v.ex.onVMStart, "proxy_on_vm_start", v.rootID, root, uint64(len(v.p.cfg.VMConfig))); ok && uint32(res) == 0 {
			return errors.New("Failed to configure base Wasm plugin: proxy_on_vm_start returned false")
		}
	}
	if v.ex.onConfigure != nil && v.failed == nil {
		v.configuring = true
		res, ok := v.call(v.ex.onConfigure, "proxy_on_configure", v.rootID, root, uint64(len(v.p.cfg.PluginConfig)))
		v.configuring = false
		if ok && uint32(res) == 0 {
			return errors.New("Failed to configure base Wasm plugin: proxy_on_configure returned false")
		}
	}
	v.deferred = v.deferred[:0]
	return v.failed
}

// Close stops the plugin: it cancels outstanding HTTP calls and waits for their
// goroutines, drops every VM and its timers, and releases the vm_id (the last plugin
// with a vm_id erases its shared data, §2). Streams are not finished. Close is
// idempotent.
func (p *Plugin) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	p.asyncMu.Lock()
	p.closing = true
	p.asyncMu.Unlock()
	p.cancel()
	p.wg.Wait()
	for _, v := range append([]*VM{p.base}, p.vms...) {
		if v == nil {
			continue
		}
		v.mu.Lock()
		v.close()
		v.mu.Unlock()
	}
	p.client.CloseIdleConnections()
	p.proc.release(p.cfg.VMID)
	return p.rt.Close(context.Background())
}

func (p *Plugin) isClosed() bool { return p.closed.Load() }

// goAsync runs f on a goroutine that Close waits for; it returns false once the plugin
// is closing.
func (p *Plugin) goAsync(f func()) bool {
	p.asyncMu.Lock()
	defer p.asyncMu.Unlock()
	if p.closing {
		return false
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		f()
	}()
	return true
}

// VMs returns the thread VMs: workers 0..Workers-1, then the main-thread VM.
func (p *Plugin) VMs() []*VM { return append([]*VM(nil), p.vms...) }

// VM returns thread VM i (Workers is the main-thread VM). It panics when i is out of
// range.
func (p *Plugin) VM(i int) *VM { return p.vms[i] }

// Process returns the process the plugin runs in.
func (p *Plugin) Process() *Process { return p.proc }

// Clock returns the plugin's virtual clock.
func (p *Plugin) Clock() *Clock { return p.clock }

// ABIVersion returns the proxy-wasm ABI version the module declares: "0.2.0" or
// "0.2.1".
func (p *Plugin) ABIVersion() string { return p.abi.String() }

// PollOneoffCalls returns how many times any VM of the plugin called WASI
// poll_oneoff. A Go module reaches it when its runtime wants to sleep; in the #427
// generation that kills the VM in Envoy (§7), so tests should assert it stays 0.
func (p *Plugin) PollOneoffCalls() int64 { return p.pollCalls.Load() }

// Logs returns a copy of the captured log, oldest first.
func (p *Plugin) Logs() []LogEntry {
	p.logMu.Lock()
	defer p.logMu.Unlock()
	return append([]LogEntry(nil), p.logs...)
}

// log captures one entry at or above Config.LogLevel.
func (p *Plugin) log(vm int, level LogLevel, msg string) {
	if level < p.cfg.LogLevel {
		return
	}
	p.logMu.Lock()
	defer p.logMu.Unlock()
	if len(p.logs) >= maxLogEntries {
		p.logs = append(p.logs[:0], p.logs[len(p.logs)/2:]...)
	}
	e := LogEntry{VM: vm, Level: level, Message: msg}
	p.logs = append(p.logs, e)
	if p.cfg.OnLog != nil {
		p.cfg.OnLog(e)
	}
}

// ModuleImports returns the module's function imports as "module.name", in import
// order, for reports and checks. The compiled module is cached, so calling it early
// (for example from TestMain, concurrently for several modules) also makes later
// NewPlugin calls for the same bytes faster.
func ModuleImports(ctx context.Context, module []byte) ([]string, error) {
	rt := wazero.NewRuntimeWithConfig(ctx, runtimeConfig())
	defer rt.Close(ctx)
	cm, err := rt.CompileModule(ctx, module)
	if err != nil {
		return nil, fmt.Errorf("envoyhost: compile: %w", err)
	}
	var out []string
	for _, def := range cm.ImportedFunctions() {
		mod, name, _ := def.Import()
		out = append(out, mod+"."+name)
	}
	return out, nil
}
