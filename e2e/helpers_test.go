package e2e

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
	"github.com/meshlimit/meshlimit/internal/redistest"
)

// module reads build/<name>.wasm, which `make wasm` writes. A missing module fails the test: CI must
// never pass by skipping the tests of the thing it ships.
func module(t testing.TB, name string) []byte {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(file), "..", "build", name+".wasm")
	b, err := os.ReadFile(path)
	require.NoError(t, err, "%s is missing: run `make wasm` (or `make test`, which builds it first)", path)
	return b
}

// epoch is the frozen start of the virtual clock in every test.
var epoch = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// load starts the module with a plugin configuration on workers worker VMs (plus the main-thread VM).
// Its callouts time out on the virtual clock (envoyhost.Config.CallTimeoutsOnClock), like every other
// timer of the filter: a slow machine never turns an answer into a timeout, and a test about a
// timeout moves the clock past it.
func load(t testing.TB, wasm []byte, config string, workers int, opts ...func(*envoyhost.Config)) *envoyhost.Plugin {
	t.Helper()
	cfg := envoyhost.Config{
		VMID:                "meshlimit",
		PluginName:          "istio-system.meshlimit",
		RootID:              "meshlimit",
		PluginConfig:        []byte(config),
		Workers:             workers,
		Clock:               envoyhost.NewClock(epoch),
		LogLevel:            envoyhost.LogInfo,
		CallTimeoutsOnClock: true,
	}
	for _, o := range opts {
		o(&cfg)
	}
	p, err := envoyhost.NewPlugin(context.Background(), wasm, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// get builds a GET request for path on host from the client at ip.
func get(host, path, ip string, extra ...[2]string) *envoyhost.Request {
	h := envoyhost.Headers{{":method", "GET"}, {":path", path}, {":authority", host}, {":scheme", "http"}}
	return &envoyhost.Request{Headers: append(h, extra...), Info: envoyhost.StreamInfo{SourceAddress: ip + ":40000"}}
}

var ok200 = &envoyhost.Response{Headers: envoyhost.Headers{{":status", "200"}, {"content-type", "text/plain"}}, Body: []byte("ok")}

// patience bounds every wait of these tests on a real event (a callout's answer, Redis noticing a
// restart, a lease expiring in Redis's clock). It is a safety net against a hang, far beyond what a
// loaded machine needs: no test passes or fails by it.
const patience = 2 * time.Minute

// eventually waits until cond holds, polling, for at most patience.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	redistest.WaitFor(t, patience, what, cond)
}

// settle waits until no callout of the plugins is in flight: every answer (or timeout) has reached
// the filter.
func settle(t testing.TB, plugins ...*envoyhost.Plugin) {
	t.Helper()
	eventually(t, "every callout is answered", func() bool {
		for _, p := range plugins {
			if p.CallsInFlight() > 0 {
				return false
			}
		}
		return true
	})
}

// tick is the filter's timer period with a global service (filter/plugin.go's leaseTickMillis).
const tick = 20 * time.Millisecond

// advanceSettled moves clock on by d, a tick at a time, and lets every callout a tick sent be
// answered before the next: the service is then always faster than the callout timeout, as the
// tests not about timeouts assume, however slow this machine.
func advanceSettled(t testing.TB, clock *envoyhost.Clock, d time.Duration, plugins ...*envoyhost.Plugin) {
	t.Helper()
	for ; d > 0; d -= tick {
		clock.Advance(min(d, tick))
		settle(t, plugins...)
	}
}

// roundTrip runs one request through vm and returns its result.
func roundTrip(t testing.TB, vm *envoyhost.VM, req *envoyhost.Request) envoyhost.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	res, err := vm.RoundTrip(ctx, req, ok200)
	require.NoError(t, err)
	return res
}

// status is the status the client sees.
func status(res envoyhost.Result) int {
	if res.LocalReply != nil {
		return res.LocalReply.Status
	}
	return 200
}

// counter reads the metric name once every VM of p had a tick, which hands the host the counts the
// guest keeps (the clock does not move).
func counter(p *envoyhost.Plugin, name string) int64 {
	flushCounters(p)
	return p.Process().Metrics()[name].Value
}

// hostCounter reads the metric name as the host has it now: what the VMs' own ticks flushed.
func hostCounter(p *envoyhost.Plugin, name string) int64 { return p.Process().Metrics()[name].Value }

// flushCounters delivers a tick to every VM of p now: the guest flushes its counters on its tick.
func flushCounters(p *envoyhost.Plugin) {
	for _, vm := range p.VMs() {
		vm.TickNow()
	}
}

func logsContain(p *envoyhost.Plugin, level envoyhost.LogLevel, substr string) bool {
	for _, e := range p.Logs() {
		if e.Level == level && strings.Contains(e.Message, substr) {
			return true
		}
	}
	return false
}

func dumpLogs(t testing.TB, p *envoyhost.Plugin) {
	t.Helper()
	for _, e := range p.Logs() {
		t.Logf("vm %d %s: %s", e.VM, e.Level, e.Message)
	}
}
