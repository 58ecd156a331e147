package tracing

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// ErrorLogEvery is how often at most the service logs an OpenTelemetry error (an export that
// failed, a span dropped): the errors in between are counted into the next line.
const ErrorLogEvery = 10 * time.Second

// errorLog is the OpenTelemetry error handler of a Tracer: it counts every error
// (ExportFailures) and logs them on the service's slog logger, one line per ErrorLogEvery at
// most, with the number of errors the line stands for.
type errorLog struct {
	total atomic.Uint64

	mu    sync.Mutex
	log   *slog.Logger
	now   func() time.Time
	next  time.Time // before it, errors are held
	held  int       // errors since the last line
	every time.Duration
}

func newErrorLog(log *slog.Logger, every time.Duration, now func() time.Time) *errorLog {
	return &errorLog{log: log, now: now, every: every}
}

// Handle counts err and logs it unless a line was logged less than every ago.
func (e *errorLog) Handle(err error) {
	e.total.Add(1)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.held++
	now := e.now()
	if now.Before(e.next) {
		return
	}
	e.log.Warn("tracing: OpenTelemetry error (spans may be lost)", "err", err, "errors", e.held)
	e.held, e.next = 0, now.Add(e.every)
}

func (e *errorLog) setLogger(log *slog.Logger) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.log = log
}
