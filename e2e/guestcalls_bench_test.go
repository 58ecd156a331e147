package e2e

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// callCounter counts the calls of every function through wazero's function listeners, the guest's
// and the host modules' apart: wazero asks for a listener for every function of every module
// instantiated with the factory, host modules (env, wasi_snapshot_preview1) included, and numbers
// each module's functions from 0, so a function is named by its module and its index.
type callCounter struct {
	fns   []countedFunc
	index map[fnKey]int // where a function's counter is in fns
}

type fnKey struct {
	module string
	index  uint32
}

// countedFunc is one function's counter. Each has its own allocation, so that a listener's pointer
// stays valid however many functions are added after it.
type countedFunc struct {
	module, name string
	host         bool // a function of a host module (a host call), not the guest's own
	n            *atomic.Int64
}

type countingListener struct {
	n *atomic.Int64
}

func (l countingListener) Before(context.Context, api.Module, api.FunctionDefinition, []uint64, experimental.StackIterator) {
	l.n.Add(1)
}
func (countingListener) After(context.Context, api.Module, api.FunctionDefinition, []uint64) {}
func (countingListener) Abort(context.Context, api.Module, api.FunctionDefinition, error)    {}

// NewFunctionListener implements experimental.FunctionListenerFactory. A function asked for again
// (the module compiled again) gets the same counter: wazero names a compiled module by its listeners
// too, so the same listeners find the module in its cache.
func (c *callCounter) NewFunctionListener(def api.FunctionDefinition) experimental.FunctionListener {
	k := fnKey{def.ModuleName(), def.Index()}
	i, ok := c.index[k]
	if !ok {
		if c.index == nil {
			c.index = map[fnKey]int{}
		}
		i = len(c.fns)
		c.index[k] = i
		c.fns = append(c.fns, countedFunc{module: k.module, name: def.DebugName(), host: def.GoFunction() != nil, n: new(atomic.Int64)})
	}
	return countingListener{c.fns[i].n}
}

func (c *callCounter) snapshot() []int64 {
	out := make([]int64, len(c.fns))
	for i := range out {
		out[i] = c.fns[i].n.Load()
	}
	return out
}

// guestCallsTop is how many of the functions called most BenchmarkGuestFunctionCalls logs per case.
var guestCallsTop = flag.Int("guestcalls.top", 15, "functions listed per case by BenchmarkGuestFunctionCalls")

// callCounters holds one counter per module for the whole test binary: wazero caches a module
// compiled with listeners under those listeners, so one counter serves every plugin of a module and
// the module is compiled with listeners once.
var callCounters = struct {
	sync.Mutex
	m map[string]*callCounter
}{m: map[string]*callCounter{}}

// callsPerRequest are the calls one warm request (the whole lifecycle) makes, per function.
type callsPerRequest struct {
	counter *callCounter
	delta   []int64 // per function of counter.fns, over n requests
	n       int
}

// countCalls runs c's request 100 times to warm up, then n more times (or b.Loop's count when b is
// not nil) counting every function's calls.
func countCalls(tb testing.TB, c lifecycleCase, n int, b *testing.B) callsPerRequest {
	tb.Helper()
	callCounters.Lock()
	counter := callCounters.m[c.module]
	if counter == nil {
		counter = &callCounter{}
		callCounters.m[c.module] = counter
	}
	callCounters.Unlock()
	ctx := experimental.WithFunctionListenerFactory(context.Background(), counter)
	p, err := envoyhost.NewPlugin(ctx, module(tb, c.module), envoyhost.Config{
		VMID: c.module, RootID: c.module, PluginConfig: []byte(c.config), Workers: 1, Clock: envoyhost.NewClock(epoch),
	})
	if err != nil {
		tb.Fatal(err)
	}
	defer p.Close()
	vm := p.VM(0)
	req := get("bench.example", "/api/items?page=2", "203.0.113.77", [2]string{"user-agent", "bench"})
	resp := ok200
	if c.resp != nil {
		resp = c.resp
	}
	round := func() {
		if _, err := vm.RoundTrip(context.Background(), req, resp); err != nil {
			tb.Fatal(err)
		}
	}
	for range 100 {
		round()
	}
	before := counter.snapshot()
	if b != nil {
		n = 0
		for b.Loop() {
			round()
			n++
		}
	} else {
		for range n {
			round()
		}
	}
	after := counter.snapshot()
	delta := make([]int64, len(after))
	for i := range after {
		delta[i] = after[i] - before[i]
	}
	return callsPerRequest{counter, delta, n}
}

// guest is the guest's own function calls per request; host is the host calls per request.
func (r callsPerRequest) guest() float64 { return r.sum(false) }
func (r callsPerRequest) host() float64  { return r.sum(true) }

func (r callsPerRequest) sum(host bool) float64 {
	var s int64
	for i, f := range r.counter.fns[:len(r.delta)] {
		if f.host == host {
			s += r.delta[i]
		}
	}
	return float64(s) / float64(r.n)
}

// of is how often per request the guest function named name (as wazero names it, without the leading
// dot) was called.
func (r callsPerRequest) of(name string) float64 {
	var s int64
	for i, f := range r.counter.fns[:len(r.delta)] {
		if !f.host && strings.TrimPrefix(f.name, ".") == name {
			s += r.delta[i]
		}
	}
	return float64(s) / float64(r.n)
}

// BenchmarkGuestFunctionCalls counts the guest's own function calls per request (the whole
// lifecycle, warm) with wazero's function listeners, for the floor and for meshlimit, and logs the
// functions called most, the host calls apart (marked "host"). It also reports the host calls and
// the guest's heap allocations per request (calls of the Go runtime's allocator, runtime.mallocgc),
// whatever asked for them. The counts are deterministic; the time per operation is not meaningful
// (every call goes through a listener). Run it with -v to see the table:
//
//	go test -run='^$' -bench='^BenchmarkGuestFunctionCalls$' -benchtime=2000x -v ./e2e/
func BenchmarkGuestFunctionCalls(b *testing.B) {
	for _, c := range lifecycleCases {
		b.Run(c.short, func(b *testing.B) {
			r := countCalls(b, c, 0, b)
			b.ReportMetric(r.guest(), "guestfuncs/req")
			b.ReportMetric(r.host(), "hostcalls/req")
			b.ReportMetric(r.of("runtime.mallocgc"), "mallocs/req")
			b.Log(r.top(*guestCallsTop))
		})
	}
}

// top lists the functions called most per request, host calls marked.
func (r callsPerRequest) top(n int) string {
	type row struct {
		name  string
		calls float64
	}
	var rows []row
	for i, f := range r.counter.fns[:len(r.delta)] {
		if d := r.delta[i]; d > 0 {
			name := f.name
			if f.host {
				name = "host " + f.module + "." + strings.TrimPrefix(name, f.module+".")
			}
			rows = append(rows, row{name, float64(d) / float64(r.n)})
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].calls > rows[j].calls })
	var sb strings.Builder
	for i, row := range rows {
		if i == n {
			break
		}
		fmt.Fprintf(&sb, "\n%8.1f  %s", row.calls, row.name)
	}
	return sb.String()
}

// limitCases are the limits table's configurations of scripts/bench-instructions.js: one per-IP
// rule with 1, 4 or 8 limits, all allowing.
func limitCases() []lifecycleCase {
	windows := []string{"s", "m", "h", "d"}
	var cases []lifecycleCase
	for _, n := range []int{1, 4, 8} {
		limits := make([]string, n)
		for i := range limits {
			limits[i] = fmt.Sprintf(`{"rate":"%d/%s"}`, 1_000_000_000+i, windows[i%4])
		}
		config := `{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[` + strings.Join(limits, ",") + `]}]}`
		cases = append(cases, lifecycleCase{short: fmt.Sprintf("limits%d", n), module: "meshlimit", config: config})
	}
	return cases
}

// BenchmarkGuestFunctionCallsPerLimit is BenchmarkGuestFunctionCalls for a rule with 1, 4 or 8
// limits: what each added limit calls (docs/performance.md, "Issue 22: per-limit cost").
//
//	go test -run='^$' -bench='^BenchmarkGuestFunctionCallsPerLimit$' -benchtime=2000x -v ./e2e/
func BenchmarkGuestFunctionCallsPerLimit(b *testing.B) {
	for _, c := range limitCases() {
		b.Run(c.short, func(b *testing.B) {
			r := countCalls(b, c, 0, b)
			b.ReportMetric(r.guest(), "guestfuncs/req")
			b.ReportMetric(r.of("runtime.memmove"), "memmoves/req")
			b.ReportMetric(r.of("runtime.mallocgc"), "mallocs/req")
			b.Log(r.top(*guestCallsTop))
		})
	}
}
