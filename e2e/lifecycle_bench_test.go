package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// lifecycleCase is one case of the lifecycle benchmark: a module, its configuration, and the upstream's
// answer (ok200 when resp is nil).
type lifecycleCase struct {
	short, module, config string
	resp                  *envoyhost.Response
}

// lifecycleCases are the cases of the lifecycle benchmark, the same on both engines (the V8 side is
// in v8host/bench.js): the pass-through floor, then meshlimit allowed with and without quota headers,
// and denied.
var lifecycleCases = []lifecycleCase{
	{"floor", "passthrough", `{}`, nil},
	{"allowed", "meshlimit", `{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"1000000000/s"}]}]}`, nil},
	{"noquota", "meshlimit", `{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"1000000000/s"}]}],"response":{"quota_headers_on_allowed":false}}`, nil},
	{"denied", "meshlimit", `{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"1/h"}]}]}`, nil},
}

// lifecycleResponseCases run after lifecycleCases in the same alternated run, on both engines (the
// V8 side in v8host/bench.js, in the same order): the per-request cost of reading the response, against
// "allowed", the same rule charged on arrival. count_on with an answer it does not count (a check on
// the request, nothing on the response), with one it counts (a check, then the charge on the
// response), and a reservation of 1 settled from a response header saying 3 (a charge, then an
// adjustment on the response).
var lifecycleResponseCases = []lifecycleCase{
	{"countonpass", "meshlimit", `{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"1000000000/s"}],"count_on":{"status":["401"],"penalty":"1m"}}]}`, nil},
	{"counted401", "meshlimit", `{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"1000000000/s"}],"count_on":{"status":["401"],"penalty":"1m"}}]}`,
		&envoyhost.Response{Headers: envoyhost.Headers{{":status", "401"}, {"content-type", "text/plain"}}, Body: []byte("ok")}},
	{"settleheader", "meshlimit", `{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"1000000000/s"}],"cost":{"default":1,"max":100,"settle":{"response_header":"x-cost"}}}]}`,
		&envoyhost.Response{Headers: envoyhost.Headers{{":status", "200"}, {"content-type", "text/plain"}, {"x-cost", "3"}}, Body: []byte("ok")}},
}

// lifecycleAgainst is another build of meshlimit.wasm to measure in the same alternated run.
var lifecycleAgainst = flag.String("lifecycle.against", "", "another meshlimit.wasm (e.g. the previous commit's build) whose cases (all but the floor: allowed, noquota, denied and the response cases) join the wazero side of BenchmarkLifecycleAlternated as base-allowed, base-noquota, base-denied, base-countonpass, ...")

// allLifecycleCases is every case of the wazero side, in the order of its figures: with
// -lifecycle.against, the other module's cases come last.
func allLifecycleCases() []lifecycleCase {
	all := append(append([]lifecycleCase(nil), lifecycleCases...), lifecycleResponseCases...)
	if *lifecycleAgainst != "" {
		for _, c := range append(lifecycleCases[1:len(lifecycleCases):len(lifecycleCases)], lifecycleResponseCases...) {
			all = append(all, lifecycleCase{"base-" + c.short, *lifecycleAgainst, c.config, c.resp})
		}
	}
	return all
}

// wasm is the case's module: build/<module>.wasm, or the file module names when it ends in .wasm.
func (c lifecycleCase) wasm(tb testing.TB) []byte {
	if !strings.HasSuffix(c.module, ".wasm") {
		return module(tb, c.module)
	}
	b, err := os.ReadFile(c.module)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// lifecycleBatch is how many requests of one case run before the next case takes its turn.
const lifecycleBatch = 2000

// lifecycleFigures are one case's figures per request. guestAllocs counts the host's calls of the
// guest's allocator (proxy_on_memory_allocate) to hand back what a host call returns: the filter has
// them land in buffers it reuses, so they are not heap allocations (the guest's heap allocations are
// counted by BenchmarkGuestFunctionCalls and held at zero by
// TestAWarmRequestAllocatesNothingOnTheGuestHeap).
type lifecycleFigures struct {
	cpuNs, hostCalls, guestCalls, guestAllocs float64
}

// BenchmarkLifecycleAlternated measures one whole request (context create, request headers, response
// headers and body, log, done, delete) per case on both engines: on wazero here, on V8 through the V8
// host under node. The cases take turns in batches in one warm process and are timed in process CPU
// time, so that their ratios to the floor mean something on a shared machine. One iteration is one
// round of every case. `make bench-lifecycle` prints the two engines side by side.
func BenchmarkLifecycleAlternated(b *testing.B) {
	b.Run("wazero", func(b *testing.B) { reportLifecycle(b, lifecycleOnWazero(b)) })
	b.Run("v8", func(b *testing.B) { reportLifecycle(b, lifecycleOnV8(b)) })
}

func lifecycleOnWazero(b *testing.B) []lifecycleFigures {
	cases := allLifecycleCases()
	vms := make([]*envoyhost.VM, len(cases))
	resps := make([]*envoyhost.Response, len(cases))
	for i, c := range cases {
		vms[i] = load(b, c.wasm(b), c.config, 1).VM(0)
		resps[i] = ok200
		if c.resp != nil {
			resps[i] = c.resp
		}
	}
	req := get("bench.example", "/api/items?page=2", "203.0.113.77", [2]string{"user-agent", "bench"})
	ctx := context.Background()
	run := func(i, n int) {
		for range n {
			if _, err := vms[i].RoundTrip(ctx, req, resps[i]); err != nil {
				b.Fatal(err)
			}
		}
	}
	for i := range vms {
		run(i, lifecycleBatch) // warm up, and spend the 1/h quota
	}
	figs := make([]lifecycleFigures, len(vms))
	calls0 := make([][2]int64, len(vms))
	for i, vm := range vms {
		calls0[i][0], calls0[i][1] = vm.HostCalls()
	}
	rounds := 0
	for b.Loop() {
		for i := range vms {
			c0 := cpuTime()
			run(i, lifecycleBatch)
			figs[i].cpuNs += float64(cpuTime() - c0)
		}
		rounds++
	}
	n := float64(rounds * lifecycleBatch)
	for i, vm := range vms {
		if err := vm.Failed(); err != nil {
			b.Fatal(err)
		}
		calls, allocs := vm.HostCalls()
		figs[i].cpuNs /= n
		figs[i].hostCalls = float64(calls-calls0[i][0]) / n
		figs[i].guestAllocs = float64(allocs-calls0[i][1]) / n
		figs[i].guestCalls = -1 // the wazero host does not count its calls into the guest
	}
	return figs
}

// lifecycleOnV8 runs v8host/bench.js with 20 rounds per iteration and reads its figures.
func lifecycleOnV8(b *testing.B) []lifecycleFigures {
	node, err := exec.LookPath("node")
	if err != nil {
		b.Fatal("node is not installed (apt-get install nodejs): the lifecycle figures on V8 need it")
	}
	rounds := 20 * b.N
	build := filepath.Join("..", "build")
	args := append(append([]string(nil), v8Flags...), filepath.Join("v8host", "main.js"), "bench",
		filepath.Join(build, "passthrough.wasm"), filepath.Join(build, "meshlimit.wasm"), strconv.Itoa(rounds), strconv.Itoa(lifecycleBatch))
	var stderr bytes.Buffer
	cmd := exec.Command(node, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("v8host bench: %v: %s", err, stderr.String())
	}
	var res struct {
		Cases []struct {
			CPUNs       float64 `json:"cpu_ns"`
			HostCalls   float64 `json:"hostcalls"`
			GuestCalls  float64 `json:"guestcalls"`
			GuestAllocs float64 `json:"guestallocs"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.Cases) != len(lifecycleCases)+len(lifecycleResponseCases) {
		b.Fatalf("v8host bench: %v: %s", err, out)
	}
	figs := make([]lifecycleFigures, len(res.Cases))
	for i, c := range res.Cases {
		figs[i] = lifecycleFigures{c.CPUNs, c.HostCalls, c.GuestCalls, c.GuestAllocs}
	}
	return figs
}

// reportLifecycle reports, per case, CPU ns per request, its ratio to the floor and its overhead
// over the floor as a multiple of the floor, then the calls across the boundary per request. figs
// are the figures of the first cases of allLifecycleCases (V8 runs all but -lifecycle.against's).
func reportLifecycle(b *testing.B, figs []lifecycleFigures) {
	b.StopTimer()
	floor := figs[0].cpuNs
	for i, c := range allLifecycleCases()[:len(figs)] {
		f := figs[i]
		b.ReportMetric(f.cpuNs, c.short+"-cpu-ns/req")
		if i > 0 {
			b.ReportMetric((f.cpuNs-floor)/floor, c.short+"-overhead-x")
		}
		b.ReportMetric(f.hostCalls, c.short+"-hostcalls/req")
		b.ReportMetric(f.guestAllocs, c.short+"-guestallocs/req")
		if f.guestCalls >= 0 {
			b.ReportMetric(f.guestCalls, c.short+"-guestcalls/req")
		}
	}
}

// cpuTime is the process's user and system CPU time in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
