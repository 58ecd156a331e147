package e2e

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// callCounter counts the calls of every guest function through wazero's function listeners.
type callCounter struct {
	names  []string
	counts []atomic.Int64
}

type countingListener struct {
	n *atomic.Int64
}

func (l countingListener) Before(context.Context, api.Module, api.FunctionDefinition, []uint64, experimental.StackIterator) {
	l.n.Add(1)
}
func (countingListener) After(context.Context, api.Module, api.FunctionDefinition, []uint64) {}
func (countingListener) Abort(context.Context, api.Module, api.FunctionDefinition, error)    {}

// NewFunctionListener implements experimental.FunctionListenerFactory. wazero asks for every
// defined function in index order before any runs.
func (c *callCounter) NewFunctionListener(def api.FunctionDefinition) experimental.FunctionListener {
	for int(def.Index()) >= len(c.names) {
		c.names = append(c.names, "")
	}
	c.names[def.Index()] = def.DebugName()
	if len(c.counts) < len(c.names) {
		c.counts = make([]atomic.Int64, 2*len(c.names)+4096)
	}
	return countingListener{&c.counts[def.Index()]}
}

func (c *callCounter) snapshot() []int64 {
	out := make([]int64, len(c.names))
	for i := range out {
		out[i] = c.counts[i].Load()
	}
	return out
}

// guestCallsTop is how many of the functions called most BenchmarkGuestFunctionCalls logs per case.
var guestCallsTop = flag.Int("guestcalls.top", 15, "functions listed per case by BenchmarkGuestFunctionCalls")

// BenchmarkGuestFunctionCalls counts the guest's own function calls per request (the whole
// lifecycle, warm) with wazero's function listeners, for the floor and for meshlimit, and logs the
// functions called most. It also reports the guest's heap allocations per request (calls of the Go
// runtime's allocator, runtime.mallocgc), whatever asked for them. The counts are deterministic; the time per operation is not meaningful
// (every call goes through a listener). Run it with -v to see the table:
//
//	go test -run='^$' -bench='^BenchmarkGuestFunctionCalls$' -benchtime=2000x -v ./e2e/
func BenchmarkGuestFunctionCalls(b *testing.B) {
	// wazero caches compiled modules with their listeners, so one counter serves every plugin of a
	// module; the counts are taken as differences around each case's loop.
	counters := map[string]*callCounter{}
	for _, c := range lifecycleCases {
		b.Run(c.short, func(b *testing.B) {
			counter := counters[c.module]
			if counter == nil {
				counter = &callCounter{}
				counters[c.module] = counter
			}
			ctx := experimental.WithFunctionListenerFactory(context.Background(), counter)
			p, err := envoyhost.NewPlugin(ctx, module(b, c.module), envoyhost.Config{
				VMID: c.module, RootID: c.module, PluginConfig: []byte(c.config), Workers: 1, Clock: envoyhost.NewClock(epoch),
			})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			vm := p.VM(0)
			req := get("bench.example", "/api/items?page=2", "203.0.113.77", [2]string{"user-agent", "bench"})
			for range 100 {
				if _, err := vm.RoundTrip(context.Background(), req, ok200); err != nil {
					b.Fatal(err)
				}
			}
			before := counter.snapshot()
			n := 0
			for b.Loop() {
				if _, err := vm.RoundTrip(context.Background(), req, ok200); err != nil {
					b.Fatal(err)
				}
				n++
			}
			after := counter.snapshot()
			b.ReportMetric(float64(sumCounts(after)-sumCounts(before))/float64(n), "guestfuncs/req")
			b.ReportMetric(float64(countOf(counter.names, "runtime.mallocgc", before, after))/float64(n), "mallocs/req")
			b.Log(topCalls(counter.names, before, after, n, *guestCallsTop))
		})
	}
}

func sumCounts(xs []int64) (s int64) {
	for _, x := range xs {
		s += x
	}
	return s
}

// countOf is how often the function named name (as wazero names it, without the leading dot) was
// called between the two snapshots.
func countOf(names []string, name string, before, after []int64) (n int64) {
	for i := range names {
		if strings.TrimPrefix(names[i], ".") == name {
			n += after[i] - before[i]
		}
	}
	return n
}

func topCalls(names []string, before, after []int64, n, top int) string {
	type row struct {
		name  string
		calls float64
	}
	var rows []row
	for i := range names {
		if d := after[i] - before[i]; d > 0 {
			rows = append(rows, row{names[i], float64(d) / float64(n)})
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].calls > rows[j].calls })
	var sb strings.Builder
	for i, r := range rows {
		if i == top {
			break
		}
		fmt.Fprintf(&sb, "\n%8.1f  %s", r.calls, r.name)
	}
	return sb.String()
}
