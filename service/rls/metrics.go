package rls

import (
	"cmp"
	"context"
	"strings"
	"sync"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/rlsconfig"
)

// Fronts of the rate limit service, the "front" label.
const (
	frontGRPC = "grpc"
	frontJSON = "json"
)

// Metrics counts what the rate limit service front does, on the service's registry: its
// requests and their durations by front as meshlimit_requests_total and
// meshlimit_request_duration_seconds (service.Metrics), the hits per domain and descriptor,
// and the configuration's reloads. A nil *Metrics counts nothing.
type Metrics struct {
	service  *service.Metrics
	hits     *prometheus.CounterVec // domain, descriptor, result
	labels   labelBudget            // bounds the descriptor values of hits
	reloads  *prometheus.CounterVec // result
	configOK prometheus.Gauge
}

// NewMetrics returns Metrics registered on sm's registry.
func NewMetrics(sm *service.Metrics) *Metrics {
	m := &Metrics{
		service: sm,
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshlimit_rls_hits_total",
			Help: "Hits of descriptors that matched a limit, by domain, descriptor (the rule's path, or the values sent with detailed_metric or value_to_metric) and result (within_limit, over_limit, shadow_mode).",
		}, []string{"domain", "descriptor", "result"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshlimit_rls_config_reloads_total",
			Help: "Reloads of the ratelimit configuration directory, by result (ok, error: the last good configuration stays in force).",
		}, []string{"result"}),
		labels: labelBudget{max: MaxLabelValues, seen: map[string]map[string]struct{}{}},
		configOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshlimit_rls_config_ok",
			Help: "1 when the files of the ratelimit configuration directory are the configuration in force, 0 while a bad file keeps the previous one.",
		}),
	}
	m.configOK.Set(1)
	sm.Registry().MustRegister(m.hits, m.reloads, m.configOK)
	return m
}

// Reloaded records a reload attempt of the configuration (err nil: in force).
func (m *Metrics) Reloaded(err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.reloads.WithLabelValues("error").Inc()
		m.configOK.Set(0)
		return
	}
	m.reloads.WithLabelValues("ok").Inc()
	m.configOK.Set(1)
}

// request records one answered request of a front with its code (the gRPC status name, or
// the HTTP status of /json).
func (m *Metrics) request(front, code string, d time.Duration) {
	if m == nil {
		return
	}
	m.service.ObserveRequest(front, code, d)
}

// decisions counts the hits of every descriptor that was counted against a limit. Descriptors
// one after the other with the same labels (a request's descriptors of one rule) are added in
// one call: a label lookup per run of them, not per descriptor.
func (m *Metrics) decisions(c *rlsconfig.Config, req *pb.RateLimitRequest, plans []plan) {
	if m == nil {
		return
	}
	var run struct {
		label, result string
		hits          int64
	}
	flush := func() {
		if run.hits > 0 {
			m.hits.WithLabelValues(req.GetDomain(), run.label, run.result).Add(float64(run.hits))
		}
	}
	for i := range plans {
		p := &plans[i]
		if p.kind != planLimit || p.hits == 0 {
			continue
		}
		result := "within_limit"
		switch {
		case p.over && p.rule.ShadowMode:
			result = "shadow_mode"
		case p.over:
			result = "over_limit"
		}
		label := descriptorLabel(c, req, i, p)
		if label != p.rule.Path { // values the client sent: bounded
			label = m.labels.admit(cmp.Or(p.rule.Path, req.GetDomain()), label)
		}
		if run.hits > 0 && label == run.label && result == run.result {
			run.hits += p.hits
			continue
		}
		flush()
		run.label, run.result, run.hits = label, result, p.hits
	}
	flush()
}

// descriptorLabel names descriptor i for the hits metric: the values sent with
// detailed_metric and for overrides (which have no rule), the value_to_metric name when a
// level asks for it, else the rule's path.
func descriptorLabel(c *rlsconfig.Config, req *pb.RateLimitRequest, i int, p *plan) string {
	entries := req.GetDescriptors()[i].GetEntries()
	if p.rule.Path != "" && !p.rule.DetailedMetric {
		if !p.rule.ValueToMetric {
			return p.rule.Path
		}
		return c.MetricName(req.GetDomain(), len(entries), func(j int) rlsconfig.Entry {
			return rlsconfig.Entry{Key: entries[j].GetKey(), Value: entries[j].GetValue()}
		})
	}
	var b strings.Builder
	b.WriteString(req.GetDomain())
	for j, e := range entries {
		v := e.GetValue()
		if j < len(p.rule.Shared) && p.rule.Shared[j] != "" {
			v = p.rule.Shared[j]
		}
		b.WriteString("." + e.GetKey() + "_" + v)
	}
	return b.String()
}

// store records one store call's duration, on meshlimit_store_duration_seconds as the
// /v1/check front's are: the store latency panel and alerts see the RLS fronts too.
func (m *Metrics) store(d time.Duration) {
	if m == nil {
		return
	}
	m.service.ObserveStore(d)
}

// storeFailed counts a store failure under ctx on meshlimit_errors_total (kind timeout,
// store_full or store), as the /v1/check front's are, for MeshlimitStoreUnavailable, and
// returns whether it was the deadline (nil m: whether ctx has ended).
func (m *Metrics) storeFailed(ctx context.Context, err error) (timeout bool) {
	if m == nil {
		return ctx.Err() != nil
	}
	return m.service.StoreFailed(ctx, err)
}

// The bounds of the hits metric's descriptor values that come from clients (detailed_metric,
// value_to_metric, overrides): at most MaxLabelValues per rule (per domain for overrides), each
// at most MaxLabelBytes long. Past them a value is counted as "<rule path>.other" (or
// "<domain>.other"), so that a client minting values cannot grow /metrics without bound.
const (
	MaxLabelValues = 100
	MaxLabelBytes  = 256
)

// labelBudget admits at most max distinct label values per base.
type labelBudget struct {
	mu   sync.Mutex
	max  int
	seen map[string]map[string]struct{} // base → admitted values
}

// admit returns label if it is admitted under base (seen before, or a new one within the
// budget), else base + ".other".
func (b *labelBudget) admit(base, label string) string {
	if len(label) > MaxLabelBytes {
		return base + ".other"
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	vs := b.seen[base]
	if _, ok := vs[label]; ok {
		return label
	}
	if len(vs) >= b.max {
		return base + ".other"
	}
	if vs == nil {
		vs = map[string]struct{}{}
		b.seen[base] = vs
	}
	vs[label] = struct{}{}
	return label
}
