// Command demo shows meshlimit at work with nothing installed but Go. It starts, all on 127.0.0.1:
//
//   - the decision service (cmd/meshlimit-service's handler) with its in-memory store;
//   - a small upstream;
//   - the compiled filter (build/meshlimit.wasm) in the Envoy-like host of package envoyhost, with
//     several worker VMs, behind a local HTTP proxy, configured with local and global rules, a
//     concurrency limit and a shedder;
//
// then sends bursts of real HTTP requests through the proxy (parallel ones against a slow upstream for
// the concurrency limit and the shedder, layers.go), prints each answer as it comes, shows message
// limits on a gRPC stream and a WebSocket echo (streams.go), and ends with a report. `make demo` builds the module and runs it; it exits by itself.
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/memstore"
)

//go:embed demo.json
var defaultConfig []byte

// serviceCluster is the cluster the demo configuration names; the host maps it to the service.
const serviceCluster = "outbound|8081||meshlimit.meshlimit.svc.cluster.local"

func main() {
	wasm := flag.String("wasm", "build/meshlimit.wasm", "the compiled filter")
	config := flag.String("config", "", "a plugin configuration file holding the rules of demo.json, which the script drives (default: the embedded demo.json)")
	workers := flag.Int("workers", 4, "Envoy worker threads (one VM each, plus the main thread's)")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout, *wasm, *config, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// route is Envoy's route table in miniature: the route name the filter matches on.
func route(r *http.Request) string {
	switch {
	case strings.HasPrefix(r.URL.Path, "/api/"):
		return "api"
	case strings.HasPrefix(r.URL.Path, "/search"):
		return "search"
	}
	return "default"
}

type tally struct{ allowed, limited int }

func run(ctx context.Context, out io.Writer, wasmPath, configPath string, workers int) error {
	module, err := os.ReadFile(wasmPath)
	if err != nil {
		return fmt.Errorf("%w (run `make demo`, which builds it)", err)
	}
	cfg := defaultConfig
	if configPath != "" {
		if cfg, err = os.ReadFile(configPath); err != nil {
			return err
		}
		if err := checkScript(cfg); err != nil {
			return fmt.Errorf("-config %s: %w", configPath, err)
		}
	}
	var stops []func()
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}()
	// One virtual clock for the filter and the service's store: it moves only when the demo moves it,
	// so what the decisions report does not depend on how fast the machine runs the demo.
	clock := envoyhost.NewClock(time.Now())
	svcAddr, upAddr, slow, err := startBackends(&stops, clock)
	if err != nil {
		return err
	}
	p, proxy, proxyAddr, startLog, err := startFilter(ctx, &stops, module, cfg, workers, clock, svcAddr, upAddr)
	if err != nil {
		return fmt.Errorf("loading %s: %w", wasmPath, err)
	}
	fmt.Fprintf(out, "meshlimit demo: proxy http://%s (filter on %d worker VMs + main thread), decision service http://%s, upstream http://%s\n",
		proxyAddr, workers, svcAddr, upAddr)
	fmt.Fprintf(out, "  %s\n\n", startLog)

	d := &demo{out: out, client: &http.Client{Timeout: 5 * time.Second}, proxyAddr: proxyAddr, tallies: map[string]*tally{},
		adminURL: "http://" + svcAddr + service.AdminPrefix}
	d.reset = func(rule, value string) error { return d.operatorReset(ctx, p, cfg, rule, value) }
	if err := d.basics(ctx); err != nil {
		return err
	}
	if err := layers(ctx, out, d.client, proxyAddr, slow, proxy); err != nil {
		return err
	}
	if err := budget(ctx, out, d.client, p); err != nil { // budget.go: reserve, then settle
		return err
	}
	if err := streamsSection(ctx, out, module); err != nil { // streams.go: message limits
		return err
	}
	d.report(p)
	if err := printServiceMetrics(ctx, out, d.client, "http://"+svcAddr+"/metrics"); err != nil {
		return err
	}
	fmt.Fprintln(out, "Next: docs/deploy.md (deploying to Istio and Envoy), docs/configuration.md (every field), envoy/ (configurations).")
	return nil
}

// startBackends starts the decision service (in memory, deciding on clock) and the upstream, slow on
// the paths of the gate (layers.go); their stops are appended to stops.
func startBackends(stops *[]func(), clock *envoyhost.Clock) (svcAddr, upAddr string, slow *gate, err error) {
	store := memstore.New(memstore.Config{Clock: clock.Now})
	*stops = append(*stops, func() { store.Close() })
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// A store deadline of a second, not the 10ms default: the in-memory store answers in
	// microseconds, and a machine busy with other work must not turn the demo's decisions into 503s.
	handler, err := service.NewHandler(service.Config{Store: store, AdminToken: adminToken, Logger: quiet, Timeout: time.Second})
	if err != nil {
		return "", "", nil, err
	}
	svcAddr, stopSvc, err := serve(handler)
	if err != nil {
		return "", "", nil, err
	}
	*stops = append(*stops, stopSvc)
	slow = newGate()
	upAddr, stopUp, err := serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		slow.hold(r)
		w.Header().Set("content-type", "application/json")
		if r.URL.Path == "/signin" && r.Header.Get("x-password") != "hunter2" {
			w.WriteHeader(http.StatusUnauthorized) // a failed sign-in: what count_on counts
		}
		fmt.Fprintf(w, `{"path":%q,"shadow":%q}`, r.URL.Path, r.Header.Get("x-meshlimit-shadow"))
	}))
	if err != nil {
		return "", "", nil, err
	}
	*stops = append(*stops, stopUp)
	return svcAddr, upAddr, slow, nil
}

// startFilter loads the filter in the Envoy-like host on clock, behind a local HTTP proxy; its stops are
// appended to stops. startLog is the plugin's first log line (its summary, or why it failed).
func startFilter(ctx context.Context, stops *[]func(), module, cfg []byte, workers int, clock *envoyhost.Clock, svcAddr, upAddr string) (
	p *envoyhost.Plugin, proxy *streams, proxyAddr, startLog string, err error) {
	p, err = envoyhost.NewPlugin(ctx, module, envoyhost.Config{
		VMID: "meshlimit", PluginName: pluginName, RootID: "meshlimit",
		PluginConfig: cfg, Workers: workers, LogLevel: envoyhost.LogInfo,
		Clock:    clock,
		Clusters: map[string]string{serviceCluster: svcAddr},
		OnLog: func(e envoyhost.LogEntry) {
			if e.Level >= envoyhost.LogWarn || startLog == "" && strings.HasPrefix(e.Message, "meshlimit:") {
				startLog = e.Message
			}
		},
	})
	if err != nil {
		return nil, nil, "", "", fmt.Errorf("%w (%s)", err, startLog)
	}
	*stops = append(*stops, func() { p.Close() })
	proxy = &streams{h: &envoyhost.HTTPProxy{Plugin: p, Upstream: "http://" + upAddr, RouteName: route}}
	proxyAddr, stopProxy, err := serve(proxy)
	if err != nil {
		return nil, nil, "", "", err
	}
	*stops = append(*stops, stopProxy)
	return p, proxy, proxyAddr, startLog, nil
}

// demo is the client side of the demo: it sends requests through the proxy and tallies them.
type demo struct {
	out        io.Writer
	client     *http.Client
	proxyAddr  string
	tallies    map[string]*tally
	denied     *http.Response // the last 429
	deniedBody []byte
	adminURL   string                         // the service's admin API
	reset      func(rule, value string) error // an operator's admin reset (reset.go)
}

// send sends one request, tallies it under label and prints one line about it.
func (d *demo) send(ctx context.Context, label, method, path string, header ...string) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+d.proxyAddr+path, nil)
	if err != nil {
		return err
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t := d.tallies[label]
	if t == nil {
		t = &tally{}
		d.tallies[label] = t
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		t.limited++
		d.denied, d.deniedBody = resp, body
	} else {
		t.allowed++
	}
	switch {
	case strings.HasPrefix(label, "POST /signin"):
		why := "" // the rule that denied, named by response.explain_header
		if v := resp.Header.Get("x-meshlimit-rule"); v != "" {
			why = "  x-meshlimit-rule: " + v
		}
		fmt.Fprintf(d.out, "  %-34s %d%s%s\n", label, resp.StatusCode, why, retryAfter(resp))
	case strings.HasPrefix(label, "POST /login"):
		fmt.Fprintf(d.out, "  %-34s %d  upstream got: %s\n", label, resp.StatusCode, body)
	default:
		fmt.Fprintf(d.out, "  %-34s %d  RateLimit: %s%s\n", label, resp.StatusCode, resp.Header.Get("RateLimit"), retryAfter(resp))
	}
	return nil
}

// basics shows a local rule, a penalty box, a global rule and a shadow rule.
func (d *demo) basics(ctx context.Context) error {
	out := d.out
	fmt.Fprintln(out, "Local rule api-per-ip (5/s, burst 8), 12 requests from 203.0.113.7 through a load balancer")
	fmt.Fprintln(out, "(x-forwarded-for: 203.0.113.7, then the proxy appends the balancer: trusted_hops 2), shared by all workers:")
	for range 12 {
		if err := d.send(ctx, "GET /api/orders (203.0.113.7)", "GET", "/api/orders", "x-forwarded-for", "203.0.113.7"); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "\nRule signin counts failed sign-ins only (count_on 401, 3/m), then a 10-minute penalty box:")
	for _, s := range []struct{ ip, password string }{
		{"198.51.100.50", "guess1"}, {"198.51.100.50", "guess2"}, {"198.51.100.50", "guess3"},
		{"198.51.100.50", "hunter2"}, {"198.51.100.51", "hunter2"},
	} {
		if err := d.send(ctx, "POST /signin ("+s.ip+")", "POST", "/signin", "x-forwarded-for", s.ip, "x-password", s.password); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "\nSupport unblocks 198.51.100.50: an admin reset reaches the proxy through the service's reset log:")
	if err := d.reset("signin", "198.51.100.50"); err != nil {
		return err
	}
	if err := d.send(ctx, "POST /signin (198.51.100.50, reset)", "POST", "/signin", "x-forwarded-for", "198.51.100.50", "x-password", "hunter2"); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nGlobal rule search-per-user (4/m in the decision service), 6 requests from user alice:")
	for range 6 {
		if err := d.send(ctx, "GET /search?q=wasm (alice)", "GET", "/search?q=wasm", "x-user", "alice"); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "\nShadow rule login (3/m, never blocks, tags the upstream request):")
	for range 4 {
		if err := d.send(ctx, "POST /login (198.51.100.23)", "POST", "/login", "x-forwarded-for", "198.51.100.23"); err != nil {
			return err
		}
	}
	return nil
}

// report prints the tallies, the last 429 as the client saw it, the filter's metrics and the size
// of the shared data.
func (d *demo) report(p *envoyhost.Plugin) {
	out := d.out
	fmt.Fprintln(out, "\nReport")
	for _, l := range sortedKeys(d.tallies) {
		fmt.Fprintf(out, "  %-34s allowed %2d  limited %2d\n", l, d.tallies[l].allowed, d.tallies[l].limited)
	}
	if d.denied != nil {
		fmt.Fprintf(out, "\nThe last 429, as the client saw it:\n  HTTP/1.1 %s\n", d.denied.Status)
		for _, n := range sortedKeys(d.denied.Header) {
			fmt.Fprintf(out, "  %s: %s\n", n, strings.Join(d.denied.Header[n], ", "))
		}
		fmt.Fprintf(out, "\n  %s\n", d.deniedBody)
	}
	fmt.Fprintln(out, "\nFilter metrics (Envoy stats, summed over the workers):")
	m := metricsOf(p)
	for _, name := range sortedKeys(m) {
		if v := m[name].Value; v != 0 {
			fmt.Fprintf(out, "  %-46s %d\n", name, v)
		}
	}
	keys, bytes := p.Process().SharedDataSize("meshlimit")
	fmt.Fprintf(out, "\nShared data: %d keys, %d bytes.\n", keys, bytes)
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// printServiceMetrics prints the decision service's non-zero decision counters.
func printServiceMetrics(ctx context.Context, out io.Writer, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "Decision service metrics (GET /metrics):")
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "meshlimit_decisions_total") && !strings.HasSuffix(line, " 0") {
			fmt.Fprintf(out, "  %s\n", line)
		}
	}
	return nil
}

func retryAfter(resp *http.Response) string {
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		return "  Retry-After: " + ra
	}
	return ""
}

// serve serves h on a free loopback port until the returned stop is called.
func serve(h http.Handler) (addr string, stop func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "demo: server:", err)
		}
	}()
	return l.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// metricsOf returns the plugin's counters as Envoy's stats would show them after a flush: the
// filter keeps its counters in the guest and hands them to the host on its tick, so every VM is
// ticked first.
func metricsOf(p *envoyhost.Plugin) map[string]envoyhost.Metric {
	for _, vm := range p.VMs() {
		vm.TickNow()
	}
	return p.Process().Metrics()
}
