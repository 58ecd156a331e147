// Command meshlimit-service runs meshlimit's global decision service (package service): an
// HTTP/JSON API over Redis, or over an in-memory store when no Redis address is given.
//
// Every flag can also be set by an environment variable (the flag wins); secrets are read from
// files or the environment, so that they do not show in the process list:
//
//	-listen             MESHLIMIT_LISTEN             address to serve on (default :8081)
//	                    MESHLIMIT_SECRET             shared secret required in x-meshlimit-secret
//	                    MESHLIMIT_ADMIN_TOKEN        bearer token of the admin API (/v1/admin/), never
//	                                                 the secret; empty: admin disabled
//	                    MESHLIMIT_METRICS_TOKEN      bearer token /metrics requires (empty: none)
//	-require-secret     MESHLIMIT_REQUIRE_SECRET     refuse to start without MESHLIMIT_SECRET
//	-timeout            MESHLIMIT_TIMEOUT            store deadline per check (default 10ms: at most
//	                                                 half the filter's global.timeout, 20ms by default)
//	-max-conns          MESHLIMIT_MAX_CONNS          connections held at once on -listen and -grpc-listen
//	                                                 together (default 1024); at the cap a quiet one
//	                                                 (no completed request or RPC first) is closed for the new one
//	-idle-timeout       MESHLIMIT_IDLE_TIMEOUT       how long a keep-alive connection may idle (default 30s)
//	-max-keys           MESHLIMIT_MAX_KEYS           in-memory store key bound, also of the keys decided in
//	                                                 memory while Redis is full (default 1048576)
//	-store-max-inflight MESHLIMIT_STORE_MAX_INFLIGHT descriptors in flight on Redis at once (a check's
//	                                                 batch counts its descriptors); the others wait
//	                                                 if they can be answered within their deadline,
//	                                                 else are refused at once (default 128)
//	-store-timeout      MESHLIMIT_STORE_TIMEOUT      bound of a call once sent to Redis, which the
//	                                                 caller's deadline does not cancel, 1ms to 1m
//	                                                 (default 250ms)
//	-allow-client-time  MESHLIMIT_ALLOW_CLIENT_TIME  accept now_us in checks (tests only)
//	-log-level          MESHLIMIT_LOG_LEVEL          debug, info, warn or error (default info)
//	-shutdown-grace     MESHLIMIT_SHUTDOWN_GRACE     time to finish requests on SIGTERM (default 10s)
//	-shutdown-drain     MESHLIMIT_SHUTDOWN_DRAIN     on SIGTERM, time /readyz and gRPC health report not
//	                                                 serving before the listeners close (default 5s)
//
// The envoyproxy/ratelimit-compatible front (package service/rls; service/API.md, "Migrating
// from envoyproxy/ratelimit"):
//
//	-ratelimit-config            MESHLIMIT_RATELIMIT_CONFIG            directory of envoyproxy/ratelimit
//	                                                                   YAML files, watched; enables POST /json
//	-grpc-listen                 MESHLIMIT_GRPC_LISTEN                 address of the gRPC RateLimitService
//	                                                                   (needs -ratelimit-config)
//	-ratelimit-response-headers  MESHLIMIT_RATELIMIT_RESPONSE_HEADERS  off (default), draft03 or ietf
//	-ratelimit-response-dynamic-metadata
//	  MESHLIMIT_RATELIMIT_RESPONSE_DYNAMIC_METADATA                    answer with dynamic metadata, the metadata
//	                                                                   of the rules that passed, as with the peer's
//	                                                                   RESPONSE_DYNAMIC_METADATA=true (default false)
//	-ratelimit-poll              MESHLIMIT_RATELIMIT_POLL              how often the directory is checked (default 2s)
//	-grpc-reflection             MESHLIMIT_GRPC_REFLECTION             register gRPC reflection (default false)
//
// The Redis store (redisflags.go; docs/deploy.md, "Redis: managed services, TLS, Sentinel"):
//
//	-redis                           comma-separated addresses: a standalone Redis, seeds of a Redis
//	                                 Cluster, or the sentinels; empty: in-memory store
//	-redis-username                  ACL user
//	-redis-password-file             file holding the password (or MESHLIMIT_REDIS_PASSWORD)
//	-redis-flush-delay               how long the client may wait to batch concurrent scripts into
//	                                 one write (default 100µs; 0: write at once)
//	-redis-tls                       TLS to Redis (system CAs, or -redis-tls-ca)
//	-redis-tls-ca                    PEM file of the CAs that sign the server certificates
//	-redis-tls-cert, -redis-tls-key  PEM files of a client certificate and its key
//	-redis-tls-server-name           name verified in the certificates and sent as SNI
//	-redis-tls-min-version           1.2 (default) or 1.3
//	-redis-tls-verify                full (default) or chain: a CA signed it, whatever its name
//	-redis-sentinel-master           master set name: -redis lists sentinels
//	-redis-sentinel-username         the sentinels' ACL user
//	-redis-sentinel-password-file    the sentinels' password (or MESHLIMIT_REDIS_SENTINEL_PASSWORD)
//	-redis-tag-key-file              the secret keying the hash tag (or MESHLIMIT_REDIS_TAG_KEY)
//	-redis-sentinel-tls              TLS to the sentinels too, with -redis-tls (default true)
//	-redis-sentinel-tls-server-name  the name of the sentinels' certificates
//
// each with its environment variable, MESHLIMIT_REDIS_TLS_CA for -redis-tls-ca and so on.
//
// OpenTelemetry tracing (traceflags.go; docs/observability.md, "Tracing"), off without an
// endpoint; what a flag and its MESHLIMIT_ variable leave empty, the OTEL_* variable fills:
//
//	-otlp-endpoint              OTEL_EXPORTER_OTLP_TRACES_ENDPOINT  URL of the OTLP receiver (http:// or
//	                            OTEL_EXPORTER_OTLP_ENDPOINT         https://); empty: tracing off
//	-otlp-protocol              OTEL_EXPORTER_OTLP_PROTOCOL         grpc (default) or http
//	-trace-sampler              OTEL_TRACES_SAMPLER                 default parentbased_always_on
//	-trace-sampler-arg          OTEL_TRACES_SAMPLER_ARG             ratio of the traceidratio samplers
//	-trace-service-name         OTEL_SERVICE_NAME                   default meshlimit-service
//	-trace-resource-attributes  OTEL_RESOURCE_ATTRIBUTES            key=value,... more resource attributes
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/memstore"
	"github.com/meshlimit/meshlimit/service/tracing"
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
	listen, secret, adminToken  string
	metricsToken                string
	requireSecret               bool
	logLevel                    slog.Level
	timeout, grace, idleTimeout time.Duration
	drain                       time.Duration
	maxKeys, maxConns           int
	storeMinInflight            int
	storeMaxInflight            int
	storeTimeout                time.Duration
	allowClientTime             bool
	redis                       redisOptions
	rls                         rlsOptions
	trace                       tracing.Config
}

// forever is the longest duration a flag takes.
const forever = time.Duration(math.MaxInt64)

// The range of -store-timeout: below a millisecond no Redis call returns (every admitted call's
// answer would be thrown away), and an admitted call holds its share of the gate for as long
// as its store timeout, so one that waits minutes for a stuck Redis only holds the room of the
// calls behind it.
const (
	minStoreTimeout = time.Millisecond
	maxStoreTimeout = time.Minute
)

func parseOptions(args []string, getenv func(string) string) (options, error) {
	var o options
	f := newEnvFlags("meshlimit-service", getenv)
	f.string(&o.listen, "listen", ":8081", "address to serve on")
	o.redis.add(f)
	f.level(&o.logLevel, "log-level", slog.LevelInfo, "`level` of the messages logged: debug, info, warn or error")
	f.duration(&o.timeout, "timeout", service.DefaultTimeout, 1, forever, "store deadline per check, a positive `duration`")
	f.duration(&o.grace, "shutdown-grace", 10*time.Second, 0, forever, "`duration` given to the requests in flight on shutdown")
	f.duration(&o.drain, "shutdown-drain", 5*time.Second, 0, forever, "on SIGTERM, how long /readyz and gRPC health report not serving while the service still answers, before its listeners close: a `duration` for load balancers to take it out of rotation")
	f.positiveInt(&o.maxKeys, "max-keys", 1<<20, "in-memory store key bound (also of the new keys decided in memory while Redis is full), a positive `int`")
	f.positiveInt(&o.storeMinInflight, "store-min-inflight", defaultStoreMinInflight, "descriptors in flight on Redis at once (a batch counts its descriptors) that the store is always given, a positive `int` at most -store-max-inflight; the bound in force starts there and grows towards -store-max-inflight while Redis answers as fast as when idle; the calls past it wait their turn when they can be answered within their deadline, and are refused at once otherwise (service.Gate)")
	f.positiveInt(&o.storeMaxInflight, "store-max-inflight", defaultStoreMaxInflight, "most descriptors in flight on Redis at once, a positive `int` (service.Gate)")
	f.duration(&o.storeTimeout, "store-timeout", service.DefaultStoreTimeout, minStoreTimeout, maxStoreTimeout, "bound of a store call once sent to Redis, a `duration` from 1ms to 1m: the caller's deadline bounds its wait to be sent, never the call, so that Redis never does work whose answer is thrown away")
	f.bool(&o.allowClientTime, "allow-client-time", false, "accept now_us in checks (tests only)")
	f.bool(&o.requireSecret, "require-secret", false, "refuse to start without MESHLIMIT_SECRET (the shipped manifests set it)")
	f.positiveInt(&o.maxConns, "max-conns", 1024, "connections held at once on -listen and -grpc-listen together, a positive `int`; at the cap a quiet one (no completed request or RPC first) is closed for the new one")
	f.duration(&o.idleTimeout, "idle-timeout", 30*time.Second, 1, forever, "how long a keep-alive connection may idle, a positive `duration`")
	f.string(&o.rls.config, "ratelimit-config", "", "directory of envoyproxy/ratelimit YAML files (enables POST /json)")
	f.string(&o.rls.grpcListen, "grpc-listen", "", "address of the gRPC RateLimitService (needs -ratelimit-config)")
	f.string(&o.rls.headers, "ratelimit-response-headers", "off", "off, draft03 or ietf")
	f.bool(&o.rls.dynamicMetadata, "ratelimit-response-dynamic-metadata", false, "return envoyproxy/ratelimit's dynamic metadata in every answer, with the metadata of the rules that passed (its RESPONSE_DYNAMIC_METADATA)")
	f.duration(&o.rls.poll, "ratelimit-poll", 2*time.Second, 1, forever, "how often the ratelimit config directory is checked, a positive `duration`")
	f.bool(&o.rls.reflection, "grpc-reflection", false, "register gRPC reflection")
	addTraceFlags(f, &o.trace)
	if err := f.parse(args); err != nil {
		return o, withFlags(err, f.fs)
	}
	if f.fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", f.fs.Args())
	}
	if o.storeMinInflight > o.storeMaxInflight {
		return o, usageError{fmt.Errorf("-store-min-inflight %d: more than -store-max-inflight %d", o.storeMinInflight, o.storeMaxInflight)}
	}
	o.redis.readEnv(getenv)
	if err := o.redis.check(); err != nil {
		return o, err
	}
	// The variables first: a bad one the flags left to them is named as the variable.
	o.trace = o.trace.FromEnv(getenv)
	if err := tracing.CheckEnv(o.trace, getenv); err != nil {
		return o, err
	}
	if err := o.trace.Validate(); err != nil {
		return o, err
	}
	o.secret = getenv("MESHLIMIT_SECRET")
	o.adminToken = getenv("MESHLIMIT_ADMIN_TOKEN")
	o.metricsToken = getenv("MESHLIMIT_METRICS_TOKEN")
	return o, checkCredentials(o)
}

// checkCredentials refuses credentials that would leave the service open: a credential of
// only whitespace, no secret with -require-secret, an admin or metrics token that is the
// proxies' secret, whitespace aside (every proxy carries it, in its
// plugin configuration and Envoy's config dump).
func checkCredentials(o options) error {
	for _, c := range []struct{ name, v string }{
		{"MESHLIMIT_SECRET", o.secret}, {"MESHLIMIT_ADMIN_TOKEN", o.adminToken}, {"MESHLIMIT_METRICS_TOKEN", o.metricsToken},
	} {
		if c.v != "" && strings.TrimSpace(c.v) == "" {
			return usageError{fmt.Errorf("%s: only whitespace: set a real credential, or leave it empty", c.name)}
		}
	}
	same := func(a, b string) bool { return a != "" && strings.TrimSpace(a) == strings.TrimSpace(b) }
	switch {
	case o.requireSecret && o.secret == "":
		return usageError{errors.New("MESHLIMIT_SECRET: empty, and -require-secret is set: set the secret the proxies send")}
	case same(o.adminToken, o.secret):
		return usageError{errors.New("MESHLIMIT_ADMIN_TOKEN: must differ from MESHLIMIT_SECRET (by more than whitespace), which every proxy carries")}
	case same(o.metricsToken, o.secret):
		return usageError{errors.New("MESHLIMIT_METRICS_TOKEN: must differ from MESHLIMIT_SECRET (by more than whitespace), which every proxy carries")}
	}
	return nil
}

// run serves until ctx ends, then shuts down gracefully: it reports not ready for the drain
// period while still serving, then stops accepting, lets requests in flight finish within the
// grace period, and closes the store.
func run(ctx context.Context, args []string, getenv func(string) string) error {
	return runWith(ctx, args, getenv, hooks{drainWait: time.Sleep})
}

// hooks are what a test replaces in run.
type hooks struct {
	// drainWait waits out the drain period, d > 0 (time.Sleep; a test waits on its events).
	drainWait func(d time.Duration)
}

// runWith is run with hooks.
func runWith(ctx context.Context, args []string, getenv func(string) string, hk hooks) error {
	o, err := parseOptions(args, getenv)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: o.logLevel, ReplaceAttr: durationsAsText}))

	store, err := openStore(o, log)
	if err != nil {
		return err
	}
	defer store.Close()

	tracer, stopTracing, err := startTracing(ctx, o.trace, log)
	if err != nil {
		return err
	}
	defer stopTracing()
	o.rls.tracer = tracer

	metrics := service.NewMetrics()
	if tracer != nil {
		metrics.CountTraceExportFailures(tracer.ExportFailures)
	}
	if n := fitToDescriptors(o.maxConns); n < o.maxConns {
		log.Warn("-max-conns lowered to fit the descriptor limit (ulimit -n)", "max_conns", n, "asked", o.maxConns)
		o.maxConns = n
	}
	conns := service.NewConnBudget(o.maxConns) // one budget for both listeners
	metrics.WatchConns(conns, log)
	front, err := startRLS(ctx, o.rls, store, o.timeout, metrics, conns, log)
	if err != nil {
		return err
	}
	h, err := service.NewHandler(service.Config{
		Store:        store,
		Secret:       o.secret,
		AdminToken:   o.adminToken,
		MetricsToken: o.metricsToken,
		Timeout:      o.timeout,
		Parse:        wire.DecodeOptions{AllowClientTime: o.allowClientTime},
		JSON:         front.json,
		Logger:       log,
		Metrics:      metrics,
		Tracer:       tracer,
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
	ln := conns.Limit(tcp)
	srv := newServer(h, ln, o.idleTimeout, log)
	log.Info("listening", "addr", ln.Addr().String(), "secret", o.secret != "", "timeout", o.timeout, "max_conns", o.maxConns)

	drain := func() {
		log.Info("draining: not ready, still serving", "drain", o.drain)
		h.Drain()
		front.drain()
		if o.drain > 0 {
			hk.drainWait(o.drain)
		}
	}
	return serve(ctx, srv, ln, front, drain, o.grace, log)
}

// openStore opens the store of o: Redis at -redis, or else the memory store.
func openStore(o options, log *slog.Logger) (service.Store, error) {
	if o.redis.addrs == "" {
		log.Info("store", "kind", "memory", "max_keys", o.maxKeys)
		return memstore.New(memstore.Config{MaxKeys: o.maxKeys}), nil
	}
	s, err := o.redis.open(log)
	if err != nil {
		return nil, err
	}
	// While Redis is full, it decides the keys it holds; new keys are decided in this replica's
	// memory, bounded by -max-keys, instead of falling to their rules' failure_mode. At most
	// -store-max-inflight descriptors are on Redis at once (service.Gate).
	log.Info("store", "kind", "redis", "min_inflight", o.storeMinInflight, "max_inflight", o.storeMaxInflight, "store_timeout", o.storeTimeout)
	return service.NewGate(&service.FullFallback{Store: s, MaxKeys: o.maxKeys,
		Local: memstore.New(memstore.Config{MaxKeys: service.LocalMaxKeys(o.maxKeys)})},
		service.GateConfig{MinWork: o.storeMinInflight, MaxWork: o.storeMaxInflight, StoreTimeout: o.storeTimeout}), nil
}

// defaultStoreMinInflight is -store-min-inflight's default, in descriptors: twice the 64
// single-descriptor requests in flight of the load figures (service/BENCHMARKS.md), so that it
// never holds back a load Redis answers in time, and bounds the queue at Redis (so its time per
// call) to what Redis does in a few milliseconds.
const defaultStoreMinInflight = 128

// defaultStoreMaxInflight is -store-max-inflight's default: 16 × -store-min-inflight, room for
// a store whose time is its round trip (a remote Redis) to be given what its callers ask.
const defaultStoreMaxInflight = 16 * defaultStoreMinInflight

// serve serves srv on ln, and the gRPC front, until ctx ends or one of them fails; when ctx
// ends it drains (reports not ready while serving), then shuts both down, letting requests in
// flight finish within grace.
func serve(ctx context.Context, srv *http.Server, ln net.Listener, front *rlsFront, drain func(), grace time.Duration, log *slog.Logger) error {
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
	drain()
	log.Info("shutting down", "grace", grace)
	sctx, cancel := context.WithTimeout(context.Background(), grace)
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
