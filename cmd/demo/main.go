// Command demo shows meshlimit at work with nothing installed but Go: it loads the compiled filter
// (build/meshlimit.wasm) into the Envoy-like host of package envoyhost with several worker VMs, sends a
// burst of requests from one client at a rate-limited route, spread over the workers, and prints what
// the client sees: 200s, then 429s with their headers. `make demo` builds the module and runs it.
package main

import (
	"context"
	_ "embed"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/meshlimit/meshlimit/e2e/envoyhost"
)

//go:embed demo.json
var defaultConfig []byte

func main() {
	wasm := flag.String("wasm", "build/meshlimit.wasm", "the compiled filter")
	config := flag.String("config", "", "a plugin configuration file (default: the embedded demo.json)")
	workers := flag.Int("workers", 4, "Envoy worker threads (one VM each, plus the main thread's)")
	burst := flag.Int("burst", 12, "requests in the burst")
	flag.Parse()
	if err := run(os.Stdout, *wasm, *config, *workers, *burst); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(out io.Writer, wasmPath, configPath string, workers, burst int) error {
	module, err := os.ReadFile(wasmPath)
	if err != nil {
		return fmt.Errorf("%w (run `make demo`, which builds it)", err)
	}
	cfg := defaultConfig
	if configPath != "" {
		if cfg, err = os.ReadFile(configPath); err != nil {
			return err
		}
	}
	ctx := context.Background()
	clock := envoyhost.NewClock(time.Now().Truncate(time.Second))
	p, err := envoyhost.NewPlugin(ctx, module, envoyhost.Config{
		VMID: "meshlimit", PluginName: "demo.meshlimit", RootID: "meshlimit",
		PluginConfig: cfg, Workers: workers, Clock: clock, LogLevel: envoyhost.LogInfo,
	})
	if err != nil {
		return fmt.Errorf("loading %s: %w", wasmPath, err)
	}
	defer p.Close()
	for _, e := range p.Logs() {
		if strings.HasPrefix(e.Message, "meshlimit:") && e.VM == 0 {
			fmt.Fprintf(out, "plugin started on %d VMs: %s\n\n", len(p.VMs()), e.Message)
		}
	}

	fmt.Fprintf(out, "A burst of %d requests from 203.0.113.7 to route \"api\" (5/s, burst 8), round-robin over the workers:\n", burst)
	var lastDenied *envoyhost.LocalReply
	for i := range burst {
		vm := p.VM(i % workers)
		res, err := vm.RoundTrip(ctx, request("GET", "/api/orders", "203.0.113.7", "api"), upstreamOK)
		if err != nil {
			return err
		}
		if res.LocalReply != nil {
			lastDenied = res.LocalReply
			rl, _ := res.LocalReply.Headers.Get("ratelimit")
			ra, _ := res.LocalReply.Headers.Get("retry-after")
			fmt.Fprintf(out, "  #%-2d worker %d  %d  RateLimit: %s  Retry-After: %s\n", i+1, vm.Index(), res.LocalReply.Status, rl, ra)
			continue
		}
		rl, _ := res.Downstream.Get("ratelimit")
		fmt.Fprintf(out, "  #%-2d worker %d  200  RateLimit: %s\n", i+1, vm.Index(), rl)
	}
	if lastDenied != nil {
		fmt.Fprintf(out, "\nThe last 429 in full:\n  HTTP %d\n", lastDenied.Status)
		for _, h := range lastDenied.Headers {
			fmt.Fprintf(out, "  %s: %s\n", h[0], h[1])
		}
		fmt.Fprintf(out, "  \n  %s\n", lastDenied.Body)
	}

	clock.Advance(time.Second)
	res, err := p.VM(0).RoundTrip(ctx, request("GET", "/api/orders", "203.0.113.7", "api"), upstreamOK)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nOne second later (5 tokens back): %d\n", status(res))

	fmt.Fprintf(out, "\nShadow rule \"login\" (3/m, never blocks, tags the upstream request):\n")
	for i := range 5 {
		res, err := p.VM(i%workers).RoundTrip(ctx, request("POST", "/login", "198.51.100.23", "login"), upstreamOK)
		if err != nil {
			return err
		}
		tag, _ := res.Upstream.Get("x-meshlimit-shadow")
		fmt.Fprintf(out, "  #%d  %d  x-meshlimit-shadow: %q\n", i+1, status(res), tag)
	}

	fmt.Fprintf(out, "\nMetrics (Envoy stats, summed over every worker):\n")
	m := p.Process().Metrics()
	names := make([]string, 0, len(m))
	for name, v := range m {
		if v.Value != 0 {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(out, "  %-45s %d\n", name, m[name].Value)
	}
	keys, bytes := p.Process().SharedDataSize("meshlimit")
	fmt.Fprintf(out, "\nShared data: %d keys, %d bytes. Next: README.md (configuration, deployment), docs/configuration.md.\n", keys, bytes)
	return nil
}

var upstreamOK = &envoyhost.Response{Headers: envoyhost.Headers{{":status", "200"}, {"content-type", "application/json"}}, Body: []byte(`{"ok":true}`)}

func request(method, path, client, route string) *envoyhost.Request {
	return &envoyhost.Request{
		Headers: envoyhost.Headers{
			{":method", method}, {":path", path}, {":authority", "shop.example"}, {":scheme", "https"},
			{"x-forwarded-for", client},
		},
		Info: envoyhost.StreamInfo{SourceAddress: "10.1.0.5:51000", RouteName: route},
	}
}

func status(res envoyhost.Result) int {
	if res.LocalReply != nil {
		return res.LocalReply.Status
	}
	return 200
}
