package service

import (
	"crypto/subtle"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshlimit/meshlimit/service/tracing"
	"github.com/meshlimit/meshlimit/wire"
)

// DefaultTimeout is the store deadline of one check when Config.Timeout is zero: half the
// filter's default global.timeout (20ms), so that on a loaded machine a slow store is answered
// with a 503 well before the proxy gives up on the call (see API.md, "Deadlines").
const DefaultTimeout = 10 * time.Millisecond

// jsonPath is the path of envoyproxy/ratelimit's JSON endpoint (Config.JSON).
const jsonPath = "/json"

// Config configures a Handler.
type Config struct {
	// Store keeps the state; required.
	Store Store
	// Secret, when non-empty, must be sent in wire.SecretHeader on /v1/check and /v1/resets (401
	// otherwise).
	Secret string
	// AdminToken authenticates the operator of the admin API (AdminPrefix) as a bearer token.
	// Empty disables the admin API (403). It must differ from Secret, which every proxy
	// carries: NewHandler refuses the same value.
	AdminToken string
	// MetricsToken, when non-empty, must be sent as "Authorization: Bearer <token>" on
	// /metrics (401 otherwise): the metrics may name the values clients send.
	MetricsToken string
	// Timeout bounds the store work of one check (default DefaultTimeout, half the filter's
	// default global.timeout of 20ms, so that a slow store is answered with a 503 before the
	// proxy gives up on the call). When it passes, the check is answered 503 at once. Behind a
	// Gate it bounds the wait for the store, not a call the Gate has sent (see Gate).
	Timeout time.Duration
	// MaxBodyBytes bounds a check body (default and upper bound wire.MaxBodyBytes, 64 KiB;
	// larger bodies get 413).
	MaxBodyBytes int64
	// Parse bounds descriptors and keys, and allows client time.
	Parse wire.DecodeOptions
	// JSON, when set, serves POST /json: envoyproxy/ratelimit's JSON endpoint (package rls),
	// on the same port as the rest. It charges counters as /v1/check does, so it needs the
	// Secret as /v1/check does (401 otherwise).
	JSON http.Handler
	// Logger receives operational messages (default slog.Default()).
	Logger *slog.Logger
	// Metrics, when non-nil, is where the handler counts; otherwise it makes its own.
	Metrics *Metrics
	// Tracer, when non-nil, starts a span per /v1/check, a child of the trace context the
	// request carries (package tracing); nil is tracing off.
	Tracer *tracing.Tracer
}

// Handler serves the service's HTTP API, every route of it on one port:
//
//	POST /v1/check    decide a batch of descriptors (API.md)
//	POST /v1/resets   the reset log: admin resets for the proxies to apply (resets.go)
//	POST /v1/admin/*  the admin API: inspect and reset keys (admin.go)
//	POST /json        envoyproxy/ratelimit's JSON endpoint, when Config.JSON is set
//	GET  /healthz     the process is up
//	GET  /readyz      the store can decide (Store.Ping), and the handler is not draining
//	GET  /metrics     Prometheus text format
//
// Every answer but 200 has a JSON body {"error": "..."}: 400, 401, 403, 404, 405, 413 and
// 503. The answers of /v1/check and /v1/resets are counted by status code
// (meshlimit_requests_total, fronts "http" and "resets").
type Handler struct {
	store     Store
	limiter   limiter
	admin     admin
	json      http.Handler
	metrics   *Metrics
	secret    []byte
	metricsTk []byte // nil: /metrics is open
	timeout   time.Duration
	maxBody   int64
	parse     wire.DecodeOptions
	log       *slog.Logger
	tracer    *tracing.Tracer
	scratch   sync.Pool    // *checkScratch
	lastLog   atomic.Int64 // unix ns of the last store error logged
	lastReady atomic.Int64 // unix ns of the last readiness failure logged
	draining  atomic.Bool  // Drain was called: /readyz fails
}

// Drain makes /readyz answer 503 from now on, while every other endpoint keeps serving: on
// shutdown, load balancers and Kubernetes take the replica out of rotation before its
// listeners close (cmd/meshlimit-service's -shutdown-drain).
func (h *Handler) Drain() { h.draining.Store(true) }

// NewHandler returns a Handler for cfg.
func NewHandler(cfg Config) (*Handler, error) {
	if cfg.Store == nil {
		return nil, errors.New("service: Config.Store is required")
	}
	if cfg.AdminToken != "" && cfg.AdminToken == cfg.Secret {
		return nil, errors.New("service: Config.AdminToken must differ from Config.Secret, which every proxy carries")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxBodyBytes <= 0 || cfg.MaxBodyBytes > wire.MaxBodyBytes {
		cfg.MaxBodyBytes = wire.MaxBodyBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = new(Metrics)
	}
	h := &Handler{
		store:   cfg.Store,
		limiter: limiter{store: cfg.Store, metrics: cfg.Metrics},
		admin:   admin{store: cfg.Store, metrics: cfg.Metrics, token: []byte(cfg.AdminToken)},
		json:    cfg.JSON,
		metrics: cfg.Metrics,
		timeout: cfg.Timeout,
		maxBody: cfg.MaxBodyBytes,
		parse:   cfg.Parse,
		log:     cfg.Logger,
		tracer:  cfg.Tracer,
	}
	if cfg.Secret != "" {
		h.secret = []byte(cfg.Secret)
	}
	if cfg.MetricsToken != "" {
		h.metricsTk = []byte(cfg.MetricsToken)
	}
	h.scratch.New = func() any { return new(checkScratch) }
	return h, nil
}

// ServeHTTP implements http.Handler. It routes by exact path (and AdminPrefix) and answers a
// wrong method with 405 and an Allow header, an unknown path with 404, both in JSON.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch path := r.URL.Path; path {
	case wire.Path:
		start := time.Now()
		_, sp := h.tracer.StartHTTP(r.Context(), tracing.FrontCheck, r.Header)
		td := tracing.Decision{Outcome: tracing.OutcomeInvalid}
		td.HTTPStatus = h.check(w, r, sp.Recording(), &td)
		h.metrics.request(frontHTTP, td.HTTPStatus, start)
		sp.End(td)
	case wire.ResetsPath:
		start := time.Now()
		h.metrics.request(frontResets, h.resets(w, r), start)
	case "/healthz":
		if h.allowed(w, r, http.MethodGet) {
			writeText(w, "ok\n")
		}
	case "/readyz":
		if h.allowed(w, r, http.MethodGet) {
			h.ready(w, r)
		}
	case "/metrics":
		if h.allowed(w, r, http.MethodGet) && h.metricsAuthorized(w, r) {
			h.serveMetrics(w)
		}
	default:
		switch {
		case strings.HasPrefix(path, AdminPrefix):
			h.admin.ServeHTTP(w, r)
		case path == jsonPath && h.json != nil:
			if h.allowed(w, r, http.MethodPost) && h.authorized(w, r) {
				h.json.ServeHTTP(w, r)
			}
		default:
			h.writeError(w, http.StatusNotFound, "no such path: the API serves "+wire.Path+", "+wire.ResetsPath+", "+AdminPrefix+", /healthz, /readyz and /metrics")
		}
	}
}

// allowed reports whether r's method is want (GET admits HEAD too); otherwise it answers 405.
func (h *Handler) allowed(w http.ResponseWriter, r *http.Request, want string) bool {
	if r.Method == want || want == http.MethodGet && r.Method == http.MethodHead {
		return true
	}
	allow := want
	if want == http.MethodGet {
		allow = "GET, HEAD"
	}
	w.Header().Set("Allow", allow)
	h.writeError(w, http.StatusMethodNotAllowed, r.Method+" "+r.URL.Path+": method not allowed (want "+allow+")")
	return false
}

// authorized reports whether r carries the secret (or none is configured); otherwise it answers
// 401.
func (h *Handler) authorized(w http.ResponseWriter, r *http.Request) bool {
	if h.secret == nil || subtle.ConstantTimeCompare([]byte(r.Header.Get(wire.SecretHeader)), h.secret) == 1 {
		return true
	}
	h.metrics.error(errUnauthorized)
	h.writeError(w, http.StatusUnauthorized, wire.SecretHeader+": missing or wrong")
	return false
}

// metricsAuthorized reports whether r carries the metrics token as a bearer token (or none is
// configured); otherwise it answers 401.
func (h *Handler) metricsAuthorized(w http.ResponseWriter, r *http.Request) bool {
	got := bearerToken(r.Header.Get("Authorization"))
	if h.metricsTk == nil || subtle.ConstantTimeCompare([]byte(got), h.metricsTk) == 1 {
		return true
	}
	h.metrics.error(errUnauthorized)
	h.writeError(w, http.StatusUnauthorized, "Authorization: missing or wrong bearer token for /metrics")
	return false
}

// bodyFailed answers a request body that could not be read, and returns the status: 413 beyond
// limit bytes, 400 otherwise (the client went away or sent a broken body).
func (h *Handler) bodyFailed(w http.ResponseWriter, err error, limit int64) int {
	var me *http.MaxBytesError
	if errors.As(err, &me) {
		h.metrics.error(errTooLarge)
		return h.writeError(w, http.StatusRequestEntityTooLarge, "body: larger than "+strconv.FormatInt(limit, 10)+" bytes")
	}
	h.metrics.error(errBadRequest)
	return h.writeError(w, http.StatusBadRequest, "body: "+err.Error())
}

// jsonContentType is the Content-Type header value of every JSON answer, shared (net/http
// only reads it).
var jsonContentType = []string{wire.ContentType}

// logStoreError logs a store failure, at most once a second so that an outage does not
// flood the log (the metrics count every one).
func (h *Handler) logStoreError(err error, kind int) {
	if onceASecond(&h.lastLog) {
		h.log.Warn("store unavailable", "kind", errKindNames[kind], "err", err)
	}
}

func (h *Handler) ready(w http.ResponseWriter, r *http.Request) {
	if h.draining.Load() {
		h.writeError(w, http.StatusServiceUnavailable, "draining: the service is shutting down")
		return
	}
	if ready, full, err := StoreReady(r.Context(), h.store, h.timeout); err != nil {
		if ready && full {
			// Every replica shares a full store: leaving the Service would turn every replica's
			// exact decisions of existing keys into the proxies' failure_mode.
			if onceASecond(&h.lastReady) {
				h.log.Warn("store full: existing keys are decided, new keys refused (503 store full)", "err", err)
			}
			writeText(w, "ok (store full: new keys refused)\n")
			return
		}
		if onceASecond(&h.lastReady) {
			h.log.Warn("store not ready", "err", err)
		}
		h.writeError(w, http.StatusServiceUnavailable, "store not ready: "+err.Error())
		return
	}
	writeText(w, "ok\n")
}

// onlyFull reports whether every failure err joins is ErrStoreFull.
func onlyFull(err error) bool {
	if l, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range l.Unwrap() {
			if !onlyFull(e) {
				return false
			}
		}
		return len(l.Unwrap()) > 0
	}
	return errors.Is(err, ErrStoreFull)
}

// onceASecond reports whether a second has passed since the last time it reported true for
// last (unix ns), and if so makes now the last time.
func onceASecond(last *atomic.Int64) bool {
	now := time.Now().UnixNano()
	prev := last.Load()
	return now-prev >= int64(time.Second) && last.CompareAndSwap(prev, now)
}

func (h *Handler) serveMetrics(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_ = h.metrics.writeTo(w, h.store.Stats())
}

// writeError answers status with the JSON error msg, and returns status.
func (h *Handler) writeError(w http.ResponseWriter, status int, msg string) int {
	w.Header()["Content-Type"] = jsonContentType
	w.WriteHeader(status)
	_, _ = w.Write(wire.AppendError(nil, msg))
	return status
}

func writeText(w http.ResponseWriter, s string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte(s))
}
