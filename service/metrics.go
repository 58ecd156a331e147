package service

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/wire"
)

// Error kinds counted by meshlimit_errors_total.
const (
	errBadRequest   = iota // 400: the body is not a valid check request
	errTooLarge            // 413: the body exceeds the size limit
	errUnauthorized        // 401: the shared secret is missing or wrong
	errStore               // 503: the store failed
	errTimeout             // 503: the per-request deadline passed
	errStoreFull           // 503: the store refused a write for lack of memory (ErrStoreFull)
	numErrKinds
)

var errKindNames = [numErrKinds]string{"bad_request", "too_large", "unauthorized", "store", "timeout", "store_full"}

// Decision outcomes counted by meshlimit_decisions_total.
const (
	outAllowed = iota
	outDenied
	outSkipped
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"allowed", "denied", "skipped"}

// The fronts a Handler counts in meshlimit_requests_total (package rls counts "grpc" and "json").
const (
	frontHTTP   = iota // /v1/check
	frontResets        // /v1/resets
	numFronts
)

var frontNames = [numFronts]string{"http", "resets"}

// latencyBuckets are the upper bounds, in seconds, of the latency histograms.
var latencyBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}

// Metrics counts what the service does on a Prometheus registry (github.com/prometheus/
// client_golang), which also holds the standard process and Go runtime collectors. The zero
// value is ready to use (NewMetrics is the same, spelled out); all methods are safe for
// concurrent use. The counters of the request path are resolved once, so counting takes no
// lock and looks nothing up.
type Metrics struct {
	once      sync.Once
	reg       *prometheus.Registry
	checks    [2]prometheus.Counter // requests answered 200: denied, allowed
	decisions [len(algorithms.Kinds) + 1][numOutcomes]prometheus.Counter
	errors    [numErrKinds]prometheus.Counter
	latency   prometheus.Histogram
	permits   [2]prometheus.Counter    // reclaimed at the end of their lease, lost (a renewal found none held)
	settles   [3]prometheus.Counter    // units refunded, units charged as over-runs, units given back (undo)
	resets    prometheus.Counter       // entries appended to the reset log
	requests  *prometheus.CounterVec   // front, code
	durations *prometheus.HistogramVec // front
	fronts    [numFronts]frontMetrics
}

// frontMetrics are the series of one of a Handler's fronts that its every answer updates,
// resolved at its first answer (a series appears when there is something to count).
type frontMetrics struct {
	okOnce, durOnce sync.Once
	ok              prometheus.Counter  // requests{front, "200"}
	dur             prometheus.Observer // durations{front}
}

// NewMetrics returns Metrics on a registry of their own.
func NewMetrics() *Metrics {
	m := new(Metrics)
	m.init()
	return m
}

func (m *Metrics) init() { m.once.Do(m.build) }

func (m *Metrics) build() {
	m.reg = prometheus.NewRegistry()
	m.reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	checks := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshlimit_checks_total", Help: "Check requests answered, by overall result.",
	}, []string{"result"})
	m.checks[0], m.checks[1] = checks.WithLabelValues("denied"), checks.WithLabelValues("allowed")
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshlimit_decisions_total",
		Help: "Descriptor decisions, by algorithm and outcome (skipped: not evaluated after an earlier denial).",
	}, []string{"algorithm", "result"})
	for _, k := range algorithms.Kinds {
		for o := range numOutcomes {
			m.decisions[k][o] = decisions.WithLabelValues(k.String(), outcomeNames[o])
		}
	}
	for o := range numOutcomes { // Kind 0: a concurrency permit (wire.Concurrency)
		m.decisions[0][o] = decisions.WithLabelValues(wire.Concurrency, outcomeNames[o])
	}
	permits := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshlimit_permits_total",
		Help: "Concurrency permits that ended without a release: reclaimed (an acquire found their lease over), lost (a renewal found no permit held: its lease had ended, or it was released, lost by a Redis restart or never acquired).",
	}, []string{"result"})
	m.permits[0], m.permits[1] = permits.WithLabelValues("reclaimed"), permits.WithLabelValues("lost")
	settles := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshlimit_settled_units_total",
		Help: "Cost units applied by settles: refunded (of unused reservations, as the store gave them back: 0 into a full bucket or a window the reservation was not in), overrun (charged beyond reservations, as the store charged them: less than asked once a debt reaches its ceiling), given_back (units of admissions undone, as the store gave them back: the request was then denied or not counted; 0 for an admission whose window rolled over or whose entries had expired).",
	}, []string{"kind"})
	m.settles[0], m.settles[1] = settles.WithLabelValues("refunded"), settles.WithLabelValues("overrun")
	m.settles[2] = settles.WithLabelValues("given_back")
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshlimit_errors_total", Help: "Requests answered with an error, by kind.",
	}, []string{"kind"})
	for k := range numErrKinds {
		m.errors[k] = errs.WithLabelValues(errKindNames[k])
	}
	m.latency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "meshlimit_store_duration_seconds",
		Help:    "Duration of one store decision (a Redis round trip for the Redis store).",
		Buckets: latencyBuckets,
	})
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshlimit_requests_total",
		Help: "Requests answered, by front (http: /v1/check; resets: /v1/resets; grpc: Envoy's RateLimitService; json: /json) and code (the HTTP status, or the gRPC status name).",
	}, []string{"front", "code"})
	m.durations = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "meshlimit_request_duration_seconds",
		Help:    "Time to answer one decision request, by front.",
		Buckets: latencyBuckets,
	}, []string{"front"})
	m.resets = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "meshlimit_resets_logged_total",
		Help: "Descriptor keys appended to the reset log by admin resets, for the proxies to forget.",
	})
	m.reg.MustRegister(checks, decisions, errs, permits, settles, m.resets, m.latency, m.requests, m.durations)
}

// Registry returns the registry the metrics are on, for other parts of the service (the
// rate limit service front) to register theirs.
func (m *Metrics) Registry() *prometheus.Registry {
	m.init()
	return m.reg
}

func (m *Metrics) check(allowed bool) {
	m.init()
	if allowed {
		m.checks[1].Inc()
	} else {
		m.checks[0].Inc()
	}
}

func (m *Metrics) decision(k algorithms.Kind, outcome int) {
	m.init()
	m.decisions[k][outcome].Inc()
}

// reclaimed counts permits reclaimed at the end of their lease.
func (m *Metrics) reclaimed(n int64) {
	if n > 0 {
		m.init()
		m.permits[0].Add(float64(n))
	}
}

// settled counts the units one settle entry of delta applied, as its store answered (not the
// units it asked for): given back by an undo, refunded, or charged as an over-run.
func (m *Metrics) settled(undo bool, delta, applied int64) {
	m.init()
	switch {
	case undo:
		m.settles[2].Add(float64(applied))
	case delta < 0:
		m.settles[0].Add(float64(applied))
	default:
		m.settles[1].Add(float64(applied))
	}
}

// resetsLogged counts n entries appended to the reset log.
func (m *Metrics) resetsLogged(n int) {
	m.init()
	m.resets.Add(float64(n))
}

// lost counts a renewal of a permit that was no longer held.
func (m *Metrics) lost() {
	m.init()
	m.permits[1].Inc()
}

func (m *Metrics) error(kind int) {
	m.init()
	m.errors[kind].Inc()
}

// observe records one store call's duration.
func (m *Metrics) observe(d time.Duration) {
	m.init()
	m.latency.Observe(d.Seconds())
}

// ObserveStore records one store call of a front of package rls on
// meshlimit_store_duration_seconds, as /v1/check's are.
func (m *Metrics) ObserveStore(d time.Duration) { m.observe(d) }

// StoreFailed counts a store failure of a front of package rls, whose store work ran under ctx,
// on meshlimit_errors_total as /v1/check's are (kind timeout, store_full or store), and
// returns whether it was the deadline.
func (m *Metrics) StoreFailed(ctx context.Context, err error) (timeout bool) {
	kind := errStore
	switch {
	case errors.Is(err, ErrStoreFull):
		kind = errStoreFull
	case errors.Is(err, ErrOverloaded) || timedOut(ctx, err):
		kind = errTimeout
	}
	m.error(kind)
	return kind == errTimeout
}

// ObserveRequest records one answered request of a front of package rls ("grpc", "json") with
// its code and duration.
func (m *Metrics) ObserveRequest(front, code string, d time.Duration) {
	m.init()
	m.requests.WithLabelValues(front, code).Inc()
	m.durations.WithLabelValues(front).Observe(d.Seconds())
}

// request records one answered request of a Handler's front, with its status code, that
// started at start. After the front's first answers, a 200 takes no lookup.
func (m *Metrics) request(front, code int, start time.Time) {
	m.init()
	f := &m.fronts[front]
	if code == http.StatusOK {
		f.okOnce.Do(func() { f.ok = m.requests.WithLabelValues(frontNames[front], "200") })
		f.ok.Inc()
	} else {
		m.requests.WithLabelValues(frontNames[front], strconv.Itoa(code)).Inc()
	}
	f.durOnce.Do(func() { f.dur = m.durations.WithLabelValues(frontNames[front]) })
	f.dur.Observe(time.Since(start).Seconds())
}

// writeTo writes every metric in the Prometheus text exposition format (version 0.0.4), with
// the store's figures: st.Keys, when >= 0, as the meshlimit_memory_keys gauge; st.Evicted, when
// >= 0, as the meshlimit_store_evicted_keys_total counter; st.FullFallbacks, when > 0, as the
// meshlimit_store_full_fallbacks_total counter; st.Overloaded and st.Late, when a Gate is in
// front of the store (st.Gated) or > 0, as the meshlimit_store_overloaded_total and
// meshlimit_store_late_answers_total counters.
func (m *Metrics) writeTo(w io.Writer, st Stats) error {
	m.init()
	keys, evicted, fallbacks, overloaded, late := st.Keys, st.Evicted, st.FullFallbacks, st.Overloaded, st.Late
	gs := prometheus.Gatherers{m.reg}
	gated := st.Gated || overloaded > 0 || late > 0
	if keys >= 0 || evicted >= 0 || fallbacks > 0 || gated {
		store := prometheus.NewRegistry()
		if gated {
			store.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "meshlimit_store_overloaded_total",
				Help: "Store calls refused before the store: the work ahead of them (the bound in force of descriptors in flight, -store-min-inflight to -store-max-inflight, and the queue) would not have been done within their deadline. Each is also a timeout error.",
			}, func() float64 { return float64(overloaded) }))
			store.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "meshlimit_store_late_answers_total",
				Help: "Store calls admitted whose answer came after their caller's deadline: answered all the same, never thrown away.",
			}, func() float64 { return float64(late) }))
		}
		if fallbacks > 0 {
			store.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "meshlimit_store_full_fallbacks_total",
				Help: "Decisions of new keys made in this replica's memory while Redis was full (refusing new keys).",
			}, func() float64 { return float64(fallbacks) }))
		}
		if evicted >= 0 {
			store.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "meshlimit_store_evicted_keys_total",
				Help: "Keys Redis evicted (each one a counter that starts over), as seen by /readyz probes.",
			}, func() float64 { return float64(evicted) }))
		}
		if keys >= 0 {
			store.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "meshlimit_memory_keys", Help: "Keys held by the in-memory store.",
			}, func() float64 { return float64(keys) }))
		}
		gs = append(gs, store)
	}
	families, err := gs.Gather()
	if err != nil {
		return err
	}
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			return err
		}
	}
	return nil
}
