// Command meshlimit-service runs meshlimit's global decision service (package service): an
// HTTP/JSON API over Redis, or over an in-memory store when no Redis address is given.
//
// Every flag can also be set by an environment variable (the flag wins); secrets are read from
// the environment only, so that they do not show in the process list:
//
//	-listen             MESHLIMIT_LISTEN             address to serve on (default :8080)
//	-redis              MESHLIMIT_REDIS              comma-separated Redis or Redis Cluster
//	                                                 addresses; empty: in-memory store
//	                    MESHLIMIT_REDIS_USERNAME     Redis ACL user
//	                    MESHLIMIT_REDIS_PASSWORD     Redis password
//	                    MESHLIMIT_SECRET             shared secret required in x-meshlimit-secret
//	                    MESHLIMIT_ADMIN_TOKEN        bearer token of the admin API (/v1/admin/);
//	                                                 default: the secret; neither: admin disabled
//	-redis-flush-delay  MESHLIMIT_REDIS_FLUSH_DELAY  how long the Redis client may wait to batch
//	                                                 concurrent scripts into one write (default
//	                                                 100µs; 0: write at once)
//	-timeout            MESHLIMIT_TIMEOUT            store deadline per check (default 10ms: at most
//	                                                 half the filter's global.timeout, 20ms by default)
//	-max-conns          MESHLIMIT_MAX_CONNS          connections held at once (default 1024); at the cap
//	                                                 the quietest idle one is closed for the new one
//	-idle-timeout       MESHLIMIT_IDLE_TIMEOUT       how long a keep-alive connection may idle (default 30s)
//	-max-keys           MESHLIMIT_MAX_KEYS           in-memory store key bound (default 1048576)
//	-allow-client-time  MESHLIMIT_ALLOW_CLIENT_TIME  accept now_us in checks (tests only)
//	-log-level          MESHLIMIT_LOG_LEVEL          debug, info, warn or error (default info)
//	-shutdown-grace     MESHLIMIT_SHUTDOWN_GRACE     time to finish requests on SIGTERM (default 10s)
//
// The envoyproxy/ratelimit-compatible front (package service/rls; service/API.md, "Migrating
// from envoyproxy/ratelimit"):
//
//	-ratelimit-config            MESHLIMIT_RATELIMIT_CONFIG            directory of envoyproxy/ratelimit
//	                                                                   YAML files, watched; enables POST /json
//	-grpc-listen                 MESHLIMIT_GRPC_LISTEN                 address of the gRPC RateLimitService
//	                                                                   (needs -ratelimit-config)
//	-ratelimit-response-headers  MESHLIMIT_RATELIMIT_RESPONSE_HEADERS  off (default), draft03 or ietf
//	-ratelimit-poll              MESHLIMIT_RATELIMIT_POLL              how often the directory is checked (default 2s)
//	-grpc-reflection             MESHLIMIT_GRPC_REFLECTION             register gRPC reflection (default false)
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/memstore"
	"github.com/meshlimit/meshlimit/service/redisstore"
	"github.com/meshlimit/meshlimit/wire"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := realMain(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the parsed flags and environment.
type options struct {
	listen, redis, redisUser, redisPass, secret, logLevel string
	adminToken                                            string
	timeout, grace, flushDelay, idleTimeout               time.Duration
	maxKeys, maxConns                                     int
	allowClientTime                                       bool
	rls                                                   rlsOptions
}

func parseOptions(args []string, getenv func(string) string) (options, error) {
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	var o options
	fs := flag.NewFlagSet("meshlimit-service", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // realMain reports errors in one line, and prints the usage for -h
	fs.StringVar(&o.listen, "listen", env("MESHLIMIT_LISTEN", ":8080"), "address to serve on")
	fs.StringVar(&o.redis, "redis", env("MESHLIMIT_REDIS", ""), "comma-separated Redis addresses (empty: in-memory store)")
	fs.StringVar(&o.logLevel, "log-level", env("MESHLIMIT_LOG_LEVEL", "info"), "debug, info, warn or error")
	var timeout, grace, maxKeys, allow, flushDelay string
	fs.StringVar(&timeout, "timeout", env("MESHLIMIT_TIMEOUT", service.DefaultTimeout.String()), "store deadline per check")
	fs.StringVar(&flushDelay, "redis-flush-delay", env("MESHLIMIT_REDIS_FLUSH_DELAY", redisstore.DefaultFlushDelay.String()), "how long the Redis client may wait to batch concurrent scripts into one write")
	fs.StringVar(&grace, "shutdown-grace", env("MESHLIMIT_SHUTDOWN_GRACE", "10s"), "time to finish requests on shutdown")
	fs.StringVar(&maxKeys, "max-keys", env("MESHLIMIT_MAX_KEYS", "1048576"), "in-memory store key bound")
	fs.StringVar(&allow, "allow-client-time", env("MESHLIMIT_ALLOW_CLIENT_TIME", "false"), "accept now_us in checks (tests only)")
	maxConns := fs.String("max-conns", env("MESHLIMIT_MAX_CONNS", "1024"), "connections held at once; at the cap the quietest idle one is closed for the new one")
	idleTimeout := fs.String("idle-timeout", env("MESHLIMIT_IDLE_TIMEOUT", "30s"), "how long a keep-alive connection may idle")
	var rlsPoll, rlsReflection string
	fs.StringVar(&o.rls.config, "ratelimit-config", env("MESHLIMIT_RATELIMIT_CONFIG", ""), "directory of envoyproxy/ratelimit YAML files (enables POST /json)")
	fs.StringVar(&o.rls.grpcListen, "grpc-listen", env("MESHLIMIT_GRPC_LISTEN", ""), "address of the gRPC RateLimitService (needs -ratelimit-config)")
	fs.StringVar(&o.rls.headers, "ratelimit-response-headers", env("MESHLIMIT_RATELIMIT_RESPONSE_HEADERS", "off"), "off, draft03 or ietf")
	fs.StringVar(&rlsPoll, "ratelimit-poll", env("MESHLIMIT_RATELIMIT_POLL", "2s"), "how often the ratelimit config directory is checked")
	fs.StringVar(&rlsReflection, "grpc-reflection", env("MESHLIMIT_GRPC_REFLECTION", "false"), "register gRPC reflection")
	if err := fs.Parse(args); err != nil {
		return o, withFlags(err, fs)
	}
	if d, err := time.ParseDuration(rlsPoll); err != nil || d <= 0 {
		return o, fmt.Errorf("-ratelimit-poll: want a positive duration, got %q", rlsPoll)
	} else {
		o.rls.poll = d
	}
	if b, err := strconv.ParseBool(rlsReflection); err != nil {
		return o, fmt.Errorf("-grpc-reflection: want true or false, got %q", rlsReflection)
	} else {
		o.rls.reflection = b
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if o.timeout, err = time.ParseDuration(timeout); err != nil || o.timeout <= 0 {
		return o, fmt.Errorf("-timeout: want a positive duration, got %q", timeout)
	}
	if o.flushDelay, err = time.ParseDuration(flushDelay); err != nil || o.flushDelay < 0 || o.flushDelay > time.Second {
		return o, fmt.Errorf("-redis-flush-delay: want a duration between 0 and 1s, got %q", flushDelay)
	}
	if o.grace, err = time.ParseDuration(grace); err != nil || o.grace < 0 {
		return o, fmt.Errorf("-shutdown-grace: want a duration, got %q", grace)
	}
	if o.maxKeys, err = strconv.Atoi(maxKeys); err != nil || o.maxKeys <= 0 {
		return o, fmt.Errorf("-max-keys: want a positive integer, got %q", maxKeys)
	}
	if o.allowClientTime, err = strconv.ParseBool(allow); err != nil {
		return o, fmt.Errorf("-allow-client-time: want true or false, got %q", allow)
	}
	if o.maxConns, err = strconv.Atoi(*maxConns); err != nil || o.maxConns <= 0 {
		return o, fmt.Errorf("-max-conns: want a positive integer, got %q", *maxConns)
	}
	if o.idleTimeout, err = time.ParseDuration(*idleTimeout); err != nil || o.idleTimeout <= 0 {
		return o, fmt.Errorf("-idle-timeout: want a positive duration, got %q", *idleTimeout)
	}
	o.redisUser, o.redisPass = getenv("MESHLIMIT_REDIS_USERNAME"), getenv("MESHLIMIT_REDIS_PASSWORD")
	o.secret = getenv("MESHLIMIT_SECRET")
	o.adminToken = cmp.Or(getenv("MESHLIMIT_ADMIN_TOKEN"), o.secret)
	return o, nil
}

// run serves until ctx ends, then shuts down gracefully: it stops accepting, lets requests in
// flight finish within the grace period, and closes the store.
func run(ctx context.Context, args []string, getenv func(string) string) error {
	o, err := parseOptions(args, getenv)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return usageError{fmt.Errorf("-log-level: want debug, info, warn or error, got %q", o.logLevel)}
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	var store service.Store
	if o.redis == "" {
		store = memstore.New(memstore.Config{MaxKeys: o.maxKeys})
		log.Info("store", "kind", "memory", "max_keys", o.maxKeys)
	} else {
		addrs := strings.Split(o.redis, ",")
		if store, err = redisstore.New(redisstore.Config{Addrs: addrs, Username: o.redisUser, Password: o.redisPass, FlushDelay: o.flushDelay}); err != nil {
			return fmt.Errorf("-redis %s: %w", o.redis, err)
		}
		log.Info("store", "kind", "redis", "addrs", addrs, "flush_delay", o.flushDelay)
	}
	defer store.Close()

	metrics := service.NewMetrics()
	front, err := startRLS(ctx, o.rls, store, o.timeout, metrics, log)
	if err != nil {
		return err
	}
	h, err := service.NewHandler(service.Config{
		Store:      store,
		Secret:     o.secret,
		AdminToken: o.adminToken,
		Timeout:    o.timeout,
		Parse:      wire.DecodeOptions{AllowClientTime: o.allowClientTime},
		JSON:       front.json,
		Logger:     log,
		Metrics:    metrics,
	})
	if err != nil {
		front.stop(ctx)
		return err
	}
	tcp, err := net.Listen("tcp", o.listen)
	if err != nil {
		front.stop(ctx)
		return fmt.Errorf("-listen %s: %w", o.listen, err)
	}
	if n := fitToDescriptors(o.maxConns); n < o.maxConns {
		log.Warn("-max-conns lowered to fit the descriptor limit (ulimit -n)", "max_conns", n, "asked", o.maxConns)
		o.maxConns = n
	}
	ln := service.NewConnLimiter(tcp, o.maxConns)
	srv := newServer(h, ln, o.idleTimeout, log)
	log.Info("listening", "addr", ln.Addr().String(), "secret", o.secret != "", "timeout", o.timeout, "max_conns", o.maxConns)

	served := make(chan error, 2)
	go func() { served <- srv.Serve(ln) }()
	if front.serve != nil {
		go func() { served <- front.serve() }()
	}
	select {
	case err := <-served:
		front.stop(context.Background())
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down", "grace", o.grace)
	sctx, cancel := context.WithTimeout(context.Background(), o.grace)
	defer cancel()
	front.stop(sctx)
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
