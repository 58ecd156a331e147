package service

import (
	"context"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshlimit/meshlimit/wire"
)

// SecretHeader carries the optional shared secret between proxy and service.
const SecretHeader = wire.SecretHeader

// DefaultTimeout is the store deadline of one check when Config.Timeout is zero: half the
// filter's default global.timeout (20ms), so that on a loaded machine a slow store is answered
// with a 503 well before the proxy gives up on the call (see API.md, "Deadlines").
const DefaultTimeout = 10 * time.Millisecond

// Config configures a Handler.
type Config struct {
	// Store decides descriptors; required.
	Store Store
	// Secret, when non-empty, must be sent in SecretHeader on /v1/check and /v1/resets (401
	// otherwise).
	Secret string
	// Timeout bounds the store work of one check (default DefaultTimeout, half the filter's
	// default global.timeout of 20ms, so that a slow store is answered with a 503 before the
	// proxy gives up on the call). When it passes, the check is answered 503 at once.
	Timeout time.Duration
	// MaxBodyBytes bounds a check body (default and upper bound wire.MaxBodyBytes, 64 KiB;
	// larger bodies get 413).
	MaxBodyBytes int64
	// Parse bounds descriptors and keys, and allows client time (ParseOptions).
	Parse ParseOptions
	// Logger receives operational messages (default slog.Default()).
	Logger *slog.Logger
	// Metrics, when non-nil, is where the handler counts; otherwise it makes its own.
	Metrics *Metrics
}

// Handler serves the service's HTTP API:
//
//	POST /v1/check  decide a batch of descriptors (API.md)
//	POST /v1/resets the reset log: admin resets for the proxies to apply (resets.go)
//	GET  /healthz   the process is up
//	GET  /readyz    the store can decide (Store.Ping)
//	GET  /metrics   Prometheus text format
//
// Every answer but 200 has a JSON body {"error": "..."}: 400, 401, 404, 405, 413 and 503.
type Handler struct {
	store     Store
	resetLog  ResetLog // nil when the store keeps none
	limiter   *Limiter
	metrics   *Metrics
	secret    []byte
	timeout   time.Duration
	maxBody   int64
	parse     ParseOptions
	log       *slog.Logger
	scratch   sync.Pool    // *checkScratch
	lastLog   atomic.Int64 // unix ns of the last store error logged
	lastReady atomic.Int64 // unix ns of the last readiness failure logged
}

// NewHandler returns a Handler for cfg.
func NewHandler(cfg Config) (*Handler, error) {
	if cfg.Store == nil {
		return nil, errors.New("service: Config.Store is required")
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
		limiter: NewLimiter(cfg.Store, cfg.Metrics),
		metrics: cfg.Metrics,
		timeout: cfg.Timeout,
		maxBody: cfg.MaxBodyBytes,
		parse:   cfg.Parse,
		log:     cfg.Logger,
	}
	if cfg.Secret != "" {
		h.secret = []byte(cfg.Secret)
	}
	h.resetLog, _ = cfg.Store.(ResetLog)
	h.scratch.New = func() any { return new(checkScratch) }
	return h, nil
}

// ServeHTTP implements http.Handler. It routes by exact path and answers a wrong method with
// 405 and an Allow header, an unknown path with 404, both in JSON.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case wire.Path:
		if h.method(w, r, http.MethodPost) {
			h.check(w, r)
		}
	case wire.ResetsPath:
		if h.method(w, r, http.MethodPost) {
			h.resets(w, r)
		}
	case "/healthz":
		if h.method(w, r, http.MethodGet) {
			writeText(w, "ok\n")
		}
	case "/readyz":
		if h.method(w, r, http.MethodGet) {
			h.ready(w, r)
		}
	case "/metrics":
		if h.method(w, r, http.MethodGet) {
			h.serveMetrics(w, r)
		}
	default:
		h.writeError(w, http.StatusNotFound, "no such path: the API serves "+wire.Path+", "+wire.ResetsPath+", /healthz, /readyz and /metrics")
	}
}

// method reports whether r's method is want (GET admits HEAD too); otherwise it answers 405.
func (h *Handler) method(w http.ResponseWriter, r *http.Request, want string) bool {
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
	if h.secret == nil || subtle.ConstantTimeCompare([]byte(r.Header.Get(SecretHeader)), h.secret) == 1 {
		return true
	}
	h.metrics.error(errUnauthorized)
	h.writeError(w, http.StatusUnauthorized, SecretHeader+": missing or wrong")
	return false
}

// bodyFailed answers a request body that could not be read: 413 beyond limit bytes, 400 otherwise
// (the client went away or sent a broken body).
func (h *Handler) bodyFailed(w http.ResponseWriter, err error, limit int64) {
	var me *http.MaxBytesError
	if errors.As(err, &me) {
		h.metrics.error(errTooLarge)
		h.writeError(w, http.StatusRequestEntityTooLarge, "body: larger than "+strconv.FormatInt(limit, 10)+" bytes")
		return
	}
	h.metrics.error(errBadRequest)
	h.writeError(w, http.StatusBadRequest, "body: "+err.Error())
}

func (h *Handler) check(w http.ResponseWriter, r *http.Request) {
	if !h.authorized(w, r) {
		return
	}
	s := h.scratch.Get().(*checkScratch)
	defer func() {
		s.reset()
		h.scratch.Put(s)
	}()
	if err := s.readBody(http.MaxBytesReader(w, r.Body, h.maxBody), r.ContentLength); err != nil {
		h.bodyFailed(w, err, h.maxBody)
		return
	}
	if err := wire.DecodeRequest(s.body, h.parse, &s.req); err != nil {
		h.metrics.error(errBadRequest)
		h.writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	c := checkOf(&s.req)

	ctx, cancel := context.WithTimeout(r.Context(), h.timeout)
	defer cancel()
	var pc permitCounts
	var err error
	lists := len(s.req.Renew)+len(s.req.Release) > 0
	if lists { // releases first: they free what the descriptors may acquire
		pc, err = h.limiter.permits(ctx, s.req.Renew, s.req.Release, c.Now)
	}
	// Settles before decisions: a refund frees what the descriptors may take.
	settled := -1 // no settle list
	if err == nil && len(s.req.Settle) > 0 {
		settled, err = h.limiter.settle(ctx, s.req.Settle, c.Now)
	}
	o := Outcome{Allowed: true}
	if err == nil && len(c.Descriptors) > 0 {
		o, err = h.limiter.check(ctx, c.Descriptors, c.Now, s.decs)
	}
	if err != nil {
		kind := errStore
		switch {
		case errors.Is(err, ErrStoreFull):
			kind = errStoreFull
		case timedOut(ctx, err):
			kind = errTimeout
		}
		h.metrics.error(kind)
		h.logStoreError(err, kind)
		msg := "store unavailable"
		if kind == errStoreFull {
			msg = "store full: Redis refuses writes for lack of memory"
		}
		h.writeError(w, http.StatusServiceUnavailable, msg)
		return
	}
	s.decs = o.Decisions
	s.out = appendCheckResponse(s.out[:0], o, lists, pc)
	if settled >= 0 {
		s.out = wire.AppendSettled(s.out, settled)
	}
	w.Header()["Content-Type"] = jsonContentType
	_, _ = w.Write(s.out)
}

// jsonContentType is the Content-Type header value of every JSON answer, shared (net/http
// only reads it).
var jsonContentType = []string{wire.ContentType}

// logStoreError logs a store failure, at most once a second so that an outage does not
// flood the log (the metrics count every one).
func (h *Handler) logStoreError(err error, kind int) {
	now := time.Now().UnixNano()
	last := h.lastLog.Load()
	if now-last < int64(time.Second) || !h.lastLog.CompareAndSwap(last, now) {
		return
	}
	h.log.Warn("store unavailable", "kind", errKindNames[kind], "err", err)
}

func (h *Handler) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), max(h.timeout, time.Second))
	defer cancel()
	if err := h.store.Ping(ctx); err != nil {
		h.logReadyError(err)
		h.writeError(w, http.StatusServiceUnavailable, "store not ready: "+err.Error())
		return
	}
	writeText(w, "ok\n")
}

func (h *Handler) serveMetrics(w http.ResponseWriter, _ *http.Request) {
	keys, evicted := -1, int64(-1)
	if l, ok := h.store.(interface{ Len() int }); ok {
		keys = l.Len()
	}
	if e, ok := h.store.(interface{ Evicted() int64 }); ok {
		evicted = e.Evicted()
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_ = h.metrics.writeTo(w, keys, evicted)
}

// logReadyError logs why the store is not ready, at most once a second.
func (h *Handler) logReadyError(err error) {
	now := time.Now().UnixNano()
	last := h.lastReady.Load()
	if now-last < int64(time.Second) || !h.lastReady.CompareAndSwap(last, now) {
		return
	}
	h.log.Warn("store not ready", "err", err)
}

func (h *Handler) writeError(w http.ResponseWriter, status int, msg string) {
	w.Header()["Content-Type"] = jsonContentType
	w.WriteHeader(status)
	_, _ = w.Write(wire.AppendError(nil, msg))
}

func writeText(w http.ResponseWriter, s string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte(s))
}

// timedOut reports whether a store error is the request's deadline: the context says so, the error
// wraps its DeadlineExceeded, or the deadline has passed (a client may give up a hair before the
// context's timer fires).
func timedOut(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}
