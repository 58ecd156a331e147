package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/meshlimit/meshlimit/service/tracing"
)

// addTraceFlags adds the flags of OpenTelemetry tracing (package service/tracing;
// docs/observability.md, "Tracing") to f. What they leave empty the OTEL_* environment variables
// fill (tracing.Config.FromEnv), after the MESHLIMIT_ ones.
func addTraceFlags(f *envFlags, c *tracing.Config) {
	f.string(&c.Endpoint, "otlp-endpoint", "", "`URL` of the OTLP receiver spans are exported to, http://host:port or https://host:port (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT); empty: tracing off")
	f.string(&c.Protocol, "otlp-protocol", "", "OTLP `protocol`: grpc (default) or http (protobuf over HTTP; or OTEL_EXPORTER_OTLP_PROTOCOL)")
	f.string(&c.Sampler, "trace-sampler", "", "`sampler`: parentbased_always_on (default: follow the proxy's decision), parentbased_traceidratio, parentbased_always_off, traceidratio, always_on or always_off (or OTEL_TRACES_SAMPLER)")
	f.string(&c.SamplerArg, "trace-sampler-arg", "", "`ratio` of the traceidratio samplers, between 0 and 1 (default 1; or OTEL_TRACES_SAMPLER_ARG)")
	f.string(&c.ServiceName, "trace-service-name", "", "service.name of the spans' resource (default "+tracing.DefaultServiceName+"; or OTEL_SERVICE_NAME)")
	f.string(&c.ResourceAttributes, "trace-resource-attributes", "", "more resource `attributes`, key=value,key=value with values percent-encoded (or OTEL_RESOURCE_ATTRIBUTES)")
}

// startTracing returns the Tracer of c (nil when tracing is off) and the function that flushes
// and stops it on shutdown.
func startTracing(ctx context.Context, c tracing.Config, log *slog.Logger) (*tracing.Tracer, func(), error) {
	t, err := tracing.New(ctx, c)
	if err != nil || t == nil {
		return nil, func() {}, err
	}
	t.LogErrors(log)
	log.Info("tracing", "otlp_endpoint", c.Endpoint, "protocol", c.Protocol, "sampler", c.Sampler, "sampler_arg", c.SamplerArg)
	return t, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := t.Shutdown(sctx); err != nil {
			log.Warn("tracing: flushing the last spans", "err", err)
		}
	}, nil
}
