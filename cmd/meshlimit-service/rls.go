package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/rls"
	"github.com/meshlimit/meshlimit/service/rlsconfig"
	"github.com/meshlimit/meshlimit/service/tracing"
)

// rlsOptions are the flags of the envoyproxy/ratelimit-compatible front.
type rlsOptions struct {
	grpcListen, config, headers string
	poll                        time.Duration
	reflection, dynamicMetadata bool
	tracer                      *tracing.Tracer // the spans of the front's decisions (traceflags.go)
}

// rlsFront is the envoyproxy/ratelimit-compatible front: the gRPC server on -grpc-listen and
// the /json endpoint on -listen, answering from the files of -ratelimit-config.
type rlsFront struct {
	json     http.Handler          // POST /json; nil without -ratelimit-config
	serve    func() error          // serves gRPC until stop; nil without -grpc-listen
	stop     func(context.Context) // stops gRPC (gracefully until ctx ends) and the watcher
	drain    func()                // makes gRPC health NOT_SERVING
	grpcAddr string
}

// startRLS loads the configuration, starts its watcher and prepares the gRPC server and the
// /json handler; without -ratelimit-config it does nothing. The gRPC listener draws its
// connections from conns, the budget it shares with the HTTP listener.
func startRLS(ctx context.Context, o rlsOptions, store service.Store, timeout time.Duration, sm *service.Metrics, conns *service.ConnBudget, log *slog.Logger) (*rlsFront, error) {
	f := &rlsFront{stop: func(context.Context) {}, drain: func() {}}
	if o.config == "" {
		if o.grpcListen != "" {
			return nil, errors.New("-grpc-listen: needs -ratelimit-config (the rules to answer with)")
		}
		return f, nil
	}
	mode, err := rls.ParseHeaderMode(o.headers)
	if err != nil {
		return nil, fmt.Errorf("-ratelimit-response-headers: %w", err)
	}
	m := rls.NewMetrics(sm)
	w, err := rlsconfig.NewWatcher(o.config, o.poll)
	if err != nil {
		return nil, fmt.Errorf("-ratelimit-config: %w", err)
	}
	w.OnReload = func(c *rlsconfig.Config, err error) {
		m.Reloaded(err)
		if err != nil {
			log.Error("ratelimit config refused; the previous one stays in force", "dir", o.config, "err", err)
			return
		}
		log.Info("ratelimit config reloaded", "dir", o.config, "files", c.Files(), "domains", c.Domains())
	}
	log.Info("ratelimit config", "dir", o.config, "files", w.Config().Files(), "domains", w.Config().Domains(), "poll", o.poll, "dynamic_metadata", o.dynamicMetadata)
	s, err := rls.NewServer(rls.Config{Store: store, Rules: w.Config, Timeout: timeout, Headers: mode, DynamicMetadata: o.dynamicMetadata, Metrics: m, Logger: log, Tracer: o.tracer})
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	go w.Run(wctx)
	f.json, f.stop = s.JSONHandler(), func(context.Context) { cancel() }
	if o.grpcListen == "" {
		return f, nil
	}
	tcp, err := net.Listen("tcp", o.grpcListen)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("-grpc-listen: %w", err)
	}
	ln := conns.LimitQuiet(tcp)
	hl := rls.NewHealth(store, timeout)
	g := rls.NewGRPCServer(s, rls.GRPCOptions{Reflection: o.reflection, Health: hl, Conns: conns})
	f.drain = hl.Drain
	f.grpcAddr = ln.Addr().String()
	f.serve = func() error { return g.Serve(ln) }
	f.stop = func(ctx context.Context) {
		defer cancel()
		done := make(chan struct{})
		go func() { g.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			g.Stop()
		}
	}
	log.Info("grpc listening", "addr", f.grpcAddr, "reflection", o.reflection, "response_headers", o.headers)
	return f, nil
}
