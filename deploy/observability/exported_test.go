package observability

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rlext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
	"github.com/meshlimit/meshlimit/internal/redistest"
	meshservice "github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/wire"
)

// exported is a series the code exports: who exports it, its family and type, and its labels.
type exported struct {
	source, family, typ string
	labels              map[string]bool
}

// seriesSet maps series names to what exports them.
type seriesSet map[string]*exported

// add records series of family (of type typ) with labels, from source.
func (s seriesSet) add(source, family, typ string, series []string, labels ...string) {
	for _, name := range series {
		e := s[name]
		if e == nil {
			e = &exported{source: source, family: family, typ: typ, labels: map[string]bool{}}
			s[name] = e
		}
		for _, l := range labels {
			e.labels[l] = true
		}
	}
}

// prometheusOwn are the series Prometheus writes itself for every scrape target ("Jobs and
// instances" in Prometheus's documentation: up is 1 when the scrape succeeded), and the labels
// it gives every series of a target. The service's alerts use them.
var (
	prometheusOwn = []string{"up"}
	targetLabels  = map[string]bool{"job": true, "instance": true}
)

// Every series a panel, a variable or a rule queries is one the code exports: the decision
// service (the binary, on Redis, after requests on each of its fronts) or the compiled filter
// (on internal/envoyhost, named as Envoy's /stats/prometheus names it under the shipped tag
// specifiers), a series Prometheus writes itself, or one the rules file records; and every
// label a query matches, groups or joins on is a label of a series it selects. The input series
// of the rules' unit tests are held to the same.
func TestEveryQueriedSeriesIsOneTheCodeExports(t *testing.T) {
	all := sharedSeries(t)
	dq := dashboardQueries(t, readDashboard(t))
	rq, recorded := ruleQueries(readRules(t))
	require.NotEmpty(t, dq)
	require.NotEmpty(t, rq)
	for _, q := range slices.Concat(dq, rq, alertTestSeries(t)) {
		sel, err := Scan(q.expr)
		require.NoError(t, err, q.where)
		assert.NotEmpty(t, sel.Metrics, "%s selects no series by name: %s", q.where, q.expr)
		labels := map[string]bool{}
		for _, n := range sel.Metrics {
			e, ok := all[n]
			if !ok && recorded[n] == nil {
				t.Errorf("%s queries %s, which neither the service, the filter nor Prometheus exports", q.where, n)
				continue
			}
			for _, l := range recorded[n] {
				labels[l] = true
			}
			if e != nil {
				for l := range e.labels {
					labels[l] = true
				}
			}
		}
		for _, l := range sel.Labels {
			if !labels[l] && !targetLabels[l] {
				t.Errorf("%s uses the label %s, which none of %v has", q.where, l, sel.Metrics)
			}
		}
	}
	// The rules record what only they query; the dashboard works without them.
	for _, q := range dq {
		sel, _ := Scan(q.expr)
		for _, n := range sel.Metrics {
			assert.Nil(t, recorded[n], "%s needs the recording rule %s", q.where, n)
		}
	}
}

// shared holds the series exportedSeries found, for every test that needs them (collecting them
// runs the service and the filter).
var shared struct {
	once sync.Once
	set  seriesSet
}

// sharedSeries returns the series exportedSeries finds, running it once.
func sharedSeries(t *testing.T) seriesSet {
	t.Helper()
	shared.once.Do(func() { shared.set = exportedSeries(t) })
	require.NotNil(t, shared.set, "collecting the exported series failed in an earlier test")
	return shared.set
}

// exportedSeries runs the decision service on Redis and on its in-memory store, and the filter
// (whose checks and reset polls reach the first), and returns every series they export, with
// Prometheus's own.
func exportedSeries(t *testing.T) seriesSet {
	t.Helper()
	all := seriesSet{}
	bin := buildService(t)
	onRedis := startService(t, bin, redistest.Start(t).Addr())
	filterSeries(t, onRedis.httpAddr, all)
	onRedis.series(t, all, "meshlimit_store_evicted_keys_total")
	startService(t, bin, "").series(t, all, "meshlimit_memory_keys")
	all.add("Prometheus", "up", "gauge", prometheusOwn)
	return all
}

// buildService builds cmd/meshlimit-service from this tree and returns the binary's path.
func buildService(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "meshlimit-service")
	build := exec.Command("go", "build", "-o", bin, "./cmd/meshlimit-service")
	build.Dir = moduleRoot(t)
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build ./cmd/meshlimit-service:\n%s", out)
	return bin
}

// service is a running cmd/meshlimit-service with its envoyproxy/ratelimit front and its admin
// API.
type service struct {
	httpAddr, grpcAddr, confDir string
	stderr                      string // the file its standard error goes to
}

const adminToken = "observability-test-token"

// startService runs the binary bin on the Redis at redis, or on its in-memory store when redis
// is "", and waits until it is ready.
func startService(t *testing.T, bin, redis string) *service {
	t.Helper()
	confDir := t.TempDir()
	src := filepath.Join(moduleRoot(t), "service", "rlsconfig", "testdata", "good")
	files, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(src, f.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(confDir, f.Name()), b, 0o644))
	}
	s := &service{httpAddr: freeAddr(t), grpcAddr: freeAddr(t), confDir: confDir, stderr: filepath.Join(t.TempDir(), "stderr")}
	stderr, err := os.Create(s.stderr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = stderr.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "-listen", s.httpAddr, "-grpc-listen", s.grpcAddr, "-redis", redis,
		"-ratelimit-config", confDir, "-ratelimit-poll", "20ms", "-log-level", "error")
	cmd.Env = append(os.Environ(), "MESHLIMIT_ADMIN_TOKEN="+adminToken)
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	base := "http://" + s.httpAddr
	redistest.WaitFor(t, 2*time.Minute, "the service to answer /readyz", func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return s
}

// series answers requests on every front of s, has it refuse a bad ratelimit file, and adds to
// all the series its /metrics then lists, which must include the family of its store.
func (s *service) series(t *testing.T, all seriesSet, store string) {
	t.Helper()
	base := "http://" + s.httpAddr
	// The http front: an allowed check, a denied one, a bad one. A bucket of one that refills in an
	// hour denies the second check however slowly the machine runs (a fixed window could turn between
	// the two).
	check := `{"descriptors":[{"key":"observability","algorithm":"token_bucket","quota":1,"window_ms":3600000}]}`
	for _, body := range []string{check, check, `{"descriptors":`} {
		post(t, base+wire.Path, body, nil)
	}
	// The resets front, and an admin reset that appends to the log.
	post(t, base+wire.ResetsPath, string(wire.AppendResetsRequest(nil, "observability", 0)), nil)
	post(t, base+meshservice.AdminPrefix+"reset", check, map[string]string{"Authorization": "Bearer " + adminToken})
	// The json and grpc fronts of the ratelimit configuration.
	post(t, base+"/json", `{"domain":"mongo_cps","descriptors":[{"entries":[{"key":"database","value":"users"}]}]}`, nil)
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err = pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "edge_proxy_per_ip",
		Descriptors: []*rlext.RateLimitDescriptor{{Entries: []*rlext.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "50.0.0.5"}}}}},
		grpc.WaitForReady(true))
	require.NoError(t, err)
	// A file that does not parse: the reload fails and the previous configuration stays.
	require.NoError(t, os.WriteFile(filepath.Join(s.confDir, "broken.yaml"), []byte("domain: x\nnope: 1\n"), 0o644))

	var families map[string]*dto.MetricFamily
	redistest.WaitFor(t, 2*time.Minute, "the refused reload to show in /metrics", func() bool {
		families = scrape(t, base+"/metrics")
		ok := families["meshlimit_rls_config_ok"]
		return ok != nil && len(ok.GetMetric()) == 1 && ok.GetMetric()[0].GetGauge().GetValue() == 0
	})
	if families[store] == nil {
		log, _ := os.ReadFile(s.stderr)
		t.Fatalf("the service does not report %s; its log:\n%s", store, log)
	}
	for name, f := range families {
		var labels []string
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName())
			}
		}
		typ := strings.ToLower(f.GetType().String())
		all.add("the decision service", name, typ, familySeries(name, f.GetType()), labels...)
		if f.GetType() == dto.MetricType_HISTOGRAM {
			all.add("the decision service", name, typ, []string{name + "_bucket"}, "le")
		}
	}
}

// familySeries returns the series names of a family in the text format.
func familySeries(name string, typ dto.MetricType) []string {
	switch typ {
	case dto.MetricType_HISTOGRAM:
		return []string{name + "_bucket", name + "_sum", name + "_count"}
	case dto.MetricType_SUMMARY:
		return []string{name, name + "_sum", name + "_count"}
	}
	return []string{name}
}

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return families
}

func post(t *testing.T, url, body string, headers map[string]string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// filterConfig exercises every kind of metric the filter defines: a local rule, a global rule
// (with its reset log), a rule that settles its cost from the response, and a shedder of the
// shedders list.
const filterConfig = `{
  "global": {"cluster": "outbound|8081||meshlimit.meshlimit.svc.cluster.local", "timeout": "10s"},
  "rules": [
    {"name": "api", "key": [{"header": "x-user"}], "limits": [{"name": "burst", "rate": "2/m"}]},
    {"name": "per-user", "scope": "global", "key": [{"header": "x-user"}], "limits": [{"name": "user", "rate": "100/m"}]},
    {"name": "tokens", "key": [{"header": "x-user"}], "limits": [{"rate": "1000/d"}],
     "cost": {"default": 600, "settle": {"response_header": "x-tokens-used"}}}
  ],
  "shedders": [{"name": "edge", "class_header": "x-priority", "capacity": 10}]
}`

// filterSeries runs build/meshlimit.wasm on internal/envoyhost with filterConfig, its global
// rule calling the service at svc, sends requests until the local rule denies, and adds to all
// the Prometheus series of the stats it defined, named by the tag specifiers of
// envoy/stats-tags.yaml.
func filterSeries(t *testing.T, svc string, all seriesSet) {
	t.Helper()
	wasm, err := os.ReadFile(filepath.Join(moduleRoot(t), "build", "meshlimit.wasm"))
	require.NoError(t, err, "build/meshlimit.wasm is missing: run make wasm (make test builds it first)")
	var logs strings.Builder
	p, err := envoyhost.NewPlugin(context.Background(), wasm, envoyhost.Config{
		VMID: "meshlimit", PluginName: "default.meshlimit", RootID: "meshlimit",
		PluginConfig: []byte(filterConfig), Workers: 1,
		Clock:    envoyhost.NewClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)),
		Clusters: map[string]string{"outbound|8081||meshlimit.meshlimit.svc.cluster.local": svc},
		LogLevel: envoyhost.LogWarn,
		OnLog:    func(e envoyhost.LogEntry) { fmt.Fprintln(&logs, e.Message) },
	})
	require.NoError(t, err, "the filter's log:\n%s", &logs)
	t.Cleanup(func() { _ = p.Close() })
	req := &envoyhost.Request{
		Headers: envoyhost.Headers{{":method", "GET"}, {":path", "/"}, {":authority", "a"}, {":scheme", "http"}, {"x-user", "u1"}, {"x-priority", "critical"}},
		Info:    envoyhost.StreamInfo{SourceAddress: "10.0.0.1:5000"},
	}
	ok := &envoyhost.Response{Headers: envoyhost.Headers{{":status", "200"}}}
	var statuses []int
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		res, err := p.VM(0).RoundTrip(ctx, req, ok)
		cancel()
		require.NoError(t, err)
		status := 200
		if res.LocalReply != nil {
			status = res.LocalReply.Status
		}
		statuses = append(statuses, status)
	}
	assert.Equal(t, 429, statuses[2], "the local rule denies the third request (statuses %v)", statuses)

	tg, err := NewTagger(shippedTags(t))
	require.NoError(t, err)
	metrics := p.Process().Metrics()
	require.NotEmpty(t, metrics)
	for name, m := range metrics {
		series, tags := tg.WasmSeries(name, StatType(m.Type))
		var labels []string
		for l := range tags {
			labels = append(labels, l)
		}
		if len(series) > 0 {
			family := series[0]
			if m.Type == envoyhost.Histogram {
				family = strings.TrimSuffix(family, "_bucket")
			}
			all.add("the filter", family, [...]string{"counter", "gauge", "histogram"}[m.Type], series, labels...)
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t, false))
}

// moduleRoot is the directory of the module's go.mod.
func moduleRoot(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	_, err := os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	return root
}
