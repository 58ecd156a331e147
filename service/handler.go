package service

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// SecretHeader carries the optional shared secret between proxy and service.
const SecretHeader = "x-meshlimit-secret"

// DefaultTimeout is the store deadline of one check when Config.Timeout is zero.
const DefaultTimeout = 15 * time.Millisecond

// Config configures a Handler.
type Config struct {
	// Store decides descriptors; required.
	Store Store
	// Secret, when non-empty, must be sent in SecretHeader on /v1/check (401 otherwise).
	Secret string
	// Timeout bounds the store work of one check (default 15ms, below the filter's default
	// global.timeout of 20ms, so that a slow store is answered with a 503 before the proxy gives
	// up on the call). When it passes, the check is
	// answered 503 at once.
	Timeout time.Duration
	// MaxBodyBytes bounds a check body (default 64 KiB; larger bodies get 413).
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
//	GET  /healthz   the process is up
//	GET  /readyz    the store answers (Redis PING)
//	GET  /metrics   Prometheus text format
type Handler struct {
	mux     *http.ServeMux
	store   Store
	limiter *Limiter
	metrics *Metrics
	secret  []byte
	timeout time.Duration
	maxBody int64
	parse   ParseOptions
	log     *slog.Logger
	scratch sync.Pool    // *checkScratch
	lastLog atomic.Int64 // unix ns of the last store error logged
}

// NewHandler returns a Handler for cfg.
func NewHandler(cfg Config) (*Handler, error) {
	if cfg.Store == nil {
		return nil, errors.New("service: Config.Store is required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = defaultMaxBodyBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = new(Metrics)
	}
	h := &Handler{
		mux:     http.NewServeMux(),
		store:   cfg.Store,
		limiter: NewLimiter(cfg.Store, cfg.Metrics),
		metrics: cfg.Metrics,
		timeout: cfg.Timeout,
		maxBody: cfg.MaxBodyBytes,
		parse:   cfg.Parse.withDefaults(),
		log:     cfg.Logger,
	}
	if cfg.Secret != "" {
		h.secret = []byte(cfg.Secret)
	}
	h.scratch.New = func() any { return new(checkScratch) }
	h.mux.HandleFunc("POST /v1/check", h.check)
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { writeText(w, "ok\n") })
	h.mux.HandleFunc("GET /readyz", h.ready)
	h.mux.HandleFunc("GET /metrics", h.serveMetrics)
	return h, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

func (h *Handler) check(w http.ResponseWriter, r *http.Request) {
	if h.secret != nil && subtle.ConstantTimeCompare([]byte(r.Header.Get(SecretHeader)), h.secret) != 1 {
		h.metrics.error(errUnauthorized)
		h.writeError(w, http.StatusUnauthorized, SecretHeader+": missing or wrong")
		return
	}
	s := h.scratch.Get().(*checkScratch)
	defer func() {
		s.reset()
		h.scratch.Put(s)
	}()
	var c Check
	var err error
	if rerr := s.readBody(http.MaxBytesReader(w, r.Body, h.maxBody), r.ContentLength); rerr != nil {
		// Too large or broken: the strict decoder sees what was read, then the error, as it
		// would have reading the body itself, and decides what to answer.
		c, err = ParseCheckRequest(io.MultiReader(bytes.NewReader(s.body), errReader{rerr}), h.parse)
	} else {
		c, err = s.parseCheck(h.parse)
	}
	if err != nil {
		var re *RequestError
		var me *http.MaxBytesError
		switch {
		case errors.As(err, &re):
			h.metrics.error(errBadRequest)
			h.writeError(w, http.StatusBadRequest, re.Error())
		case errors.As(err, &me):
			h.metrics.error(errTooLarge)
			h.writeError(w, http.StatusRequestEntityTooLarge, "body: larger than the limit")
		default: // the client went away or sent a broken body
			h.metrics.error(errBadRequest)
			h.writeError(w, http.StatusBadRequest, "body: "+err.Error())
		}
		return
	}

	ctx, cancel := context.WithTimeout(r.Context(), h.timeout)
	defer cancel()
	o, err := h.limiter.check(ctx, c.Descriptors, c.Now, s.decs)
	if err != nil {
		kind := errStore
		if ctx.Err() != nil {
			kind = errTimeout
		}
		h.metrics.error(kind)
		h.logStoreError(err, kind)
		h.writeError(w, http.StatusServiceUnavailable, "store unavailable")
		return
	}
	s.decs = o.Decisions
	s.out = appendCheckResponse(s.out[:0], o)
	w.Header()["Content-Type"] = jsonContentType
	_, _ = w.Write(s.out)
}

// jsonContentType is the Content-Type header value of every JSON answer, shared (net/http
// only reads it).
var jsonContentType = []string{"application/json"}

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
		h.writeError(w, http.StatusServiceUnavailable, "store unavailable")
		return
	}
	writeText(w, "ok\n")
}

func (h *Handler) serveMetrics(w http.ResponseWriter, _ *http.Request) {
	keys := -1
	if l, ok := h.store.(interface{ Len() int }); ok {
		keys = l.Len()
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_ = h.metrics.writeTo(w, keys)
}

func (h *Handler) writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(appendError(nil, msg))
}

func writeText(w http.ResponseWriter, s string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte(s))
}
