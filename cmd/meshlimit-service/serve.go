package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/meshlimit/meshlimit/service"
)

// realMain runs the service and returns the exit code: 0 after a clean shutdown or for -h
// (the usage on stdout), 2 for a bad flag or environment value, 1 for any other error. Every
// error is one line on stderr.
func realMain(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	err := run(ctx, args, getenv)
	switch {
	case err == nil:
		return 0
	}
	var help helpError
	if errors.As(err, &help) {
		usage(stdout, help.flags)
		return 0
	}
	fmt.Fprintln(stderr, "meshlimit-service: "+strings.Join(strings.Fields(err.Error()), " "))
	var ue usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

// helpError is the answer to -h: the flags to print.
type helpError struct{ flags *flag.FlagSet }

func (helpError) Error() string { return "help requested" }

func (helpError) Unwrap() error { return flag.ErrHelp }

// withFlags returns the error of parsing fs: a helpError for -h, err otherwise.
func withFlags(err error, fs *flag.FlagSet) error {
	if errors.Is(err, flag.ErrHelp) {
		return helpError{fs}
	}
	return err
}

// usageError is an error in the flags or the environment.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// usage prints what the binary does and its flags, with their environment variables.
func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, `Usage: meshlimit-service [flags]

meshlimit's global decision service: POST /v1/check decides rate-limit descriptors against
Redis (-redis) or, without it, an in-memory store for a single replica. Also serves /healthz,
/readyz and /metrics. Every flag can be set by its environment variable, MESHLIMIT_ and the
flag's name in capitals with _ for - (the flag wins); secrets come from files (-redis-...-file)
or the environment, never from the command line.

Flags:
`)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprint(w, `
Environment only:
  MESHLIMIT_SECRET                   shared secret required in the x-meshlimit-secret header (/v1/check, /v1/resets, /json)
  MESHLIMIT_ADMIN_TOKEN              bearer token of the admin API under /v1/admin/, never the secret (empty: admin disabled)
  MESHLIMIT_METRICS_TOKEN            bearer token required on /metrics (empty: none)
  MESHLIMIT_REDIS_PASSWORD           Redis password (or -redis-password-file)
  MESHLIMIT_REDIS_SENTINEL_PASSWORD  the sentinels' password (or -redis-sentinel-password-file)
  MESHLIMIT_REDIS_TAG_KEY            the secret that keys the Redis hash tag (or -redis-tag-key-file)
`)
}

// durationsAsText is the logger's ReplaceAttr: a duration is logged as text ("1.5s"), where
// slog's JSON handler writes its nanoseconds.
func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// spareDescriptors is what fitToDescriptors leaves for everything but the HTTP connections:
// Redis connections, listeners, the gRPC front, files.
const spareDescriptors = 128

// fitToDescriptors returns want, or less when the process's descriptor limit (RLIMIT_NOFILE)
// cannot hold want connections and spareDescriptors more: past the limit, accept fails and
// every new connection, checks included, waits in the kernel's queue.
func fitToDescriptors(want int) int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur > 1<<30 {
		return want
	}
	return min(want, max(int(r.Cur)-spareDescriptors, 1))
}

// maxHeaderBytes bounds a request's line and headers, as service/API.md says: 16 KiB.
const maxHeaderBytes = 16 << 10

// newServer returns the HTTP server of h on ln. A check is a small request answered in
// milliseconds, so every timeout is short: a client that sends its headers slowly or keeps a
// connection idle holds it for seconds, not minutes, and ln closes the quietest idle
// connection when it is full.
func newServer(h http.Handler, ln *service.ConnLimiter, idle time.Duration, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 2 * time.Second,
		ReadTimeout:       5 * time.Second,
		WriteTimeout:      5 * time.Second,
		IdleTimeout:       idle,
		MaxHeaderBytes:    maxHeaderBytes - 4096, // net/http reads 4096 bytes past it
		ConnState:         ln.ConnState,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}
