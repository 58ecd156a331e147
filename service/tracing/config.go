package tracing

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// Protocols of Config.Protocol.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http" // OTLP over HTTP with protobuf bodies ("http/protobuf" is accepted too)
)

// Samplers of Config.Sampler, named as OTEL_TRACES_SAMPLER names them.
const (
	SamplerAlwaysOn                = "always_on"
	SamplerAlwaysOff               = "always_off"
	SamplerTraceIDRatio            = "traceidratio"
	SamplerParentBasedAlwaysOn     = "parentbased_always_on"
	SamplerParentBasedAlwaysOff    = "parentbased_always_off"
	SamplerParentBasedTraceIDRatio = "parentbased_traceidratio"
)

// DefaultServiceName is the service.name resource attribute when Config.ServiceName is empty.
const DefaultServiceName = "meshlimit-service"

// Config configures a Tracer. The zero Config is tracing off.
type Config struct {
	// Endpoint is the OTLP receiver's URL: http://host:port (plaintext) or https://host:port
	// (TLS, the system's CAs). With ProtocolHTTP, a URL without a path is sent to /v1/traces.
	// Empty: tracing is off.
	Endpoint string
	// Protocol is ProtocolGRPC (default) or ProtocolHTTP.
	Protocol string
	// Sampler is one of the Sampler constants (default SamplerParentBasedAlwaysOn: the caller's
	// sampling decision, as Envoy made it, is followed; a request without a trace is sampled).
	Sampler string
	// SamplerArg is the ratio of the traceidratio samplers, in [0, 1] (default 1).
	SamplerArg string
	// ServiceName is the service.name resource attribute (default DefaultServiceName).
	ServiceName string
	// ResourceAttributes are more resource attributes, as OTEL_RESOURCE_ATTRIBUTES writes them:
	// key=value pairs separated by commas, values percent-encoded.
	ResourceAttributes string
}

// Enabled reports whether c asks for tracing.
func (c Config) Enabled() bool { return c.Endpoint != "" }

// FromEnv fills the fields of c left empty from the OpenTelemetry environment variables:
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (used as is) or OTEL_EXPORTER_OTLP_ENDPOINT (a base URL:
// /v1/traces is appended for HTTP), OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
// OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG, OTEL_SERVICE_NAME
// and OTEL_RESOURCE_ATTRIBUTES. OTEL_SDK_DISABLED=true turns tracing off whatever is set.
func (c Config) FromEnv(getenv func(string) string) Config {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return Config{}
	}
	fill := func(v *string, names ...string) {
		for _, n := range names {
			if *v == "" {
				*v = strings.TrimSpace(getenv(n))
			}
		}
	}
	if c.Endpoint == "" {
		c.Endpoint = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
	}
	if base := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")); c.Endpoint == "" && base != "" {
		c.Endpoint = base
		fill(&c.Protocol, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
		if c.Protocol != ProtocolGRPC && c.Protocol != "" {
			c.Endpoint = strings.TrimSuffix(base, "/") + "/v1/traces"
		}
	}
	fill(&c.Protocol, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
	fill(&c.Sampler, "OTEL_TRACES_SAMPLER")
	fill(&c.SamplerArg, "OTEL_TRACES_SAMPLER_ARG")
	fill(&c.ServiceName, "OTEL_SERVICE_NAME")
	fill(&c.ResourceAttributes, "OTEL_RESOURCE_ATTRIBUTES")
	return c
}

// Validate reports what is wrong with c, naming the flag of the field; a Config that is not
// Enabled is valid.
func (c Config) Validate() error {
	if !c.Enabled() {
		return nil
	}
	_, err := c.check()
	return err
}

// settings are a checked Config.
type settings struct {
	endpoint *url.URL
	http     bool
	sampler  string
	ratio    float64
	name     string
	attrs    [][2]string
}

// check validates c; every error names the flag of the field.
func (c Config) check() (settings, error) {
	var s settings
	u, err := url.Parse(c.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return s, fmt.Errorf("-otlp-endpoint %q: want http://host:port or https://host:port", c.Endpoint)
	}
	s.endpoint = u
	switch c.Protocol {
	case "", ProtocolGRPC:
	case ProtocolHTTP, "http/protobuf":
		s.http = true
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces"
		}
	default:
		return s, fmt.Errorf("-otlp-protocol %q: want grpc or http", c.Protocol)
	}
	if s.sampler, s.ratio, err = parseSampler(c.Sampler, c.SamplerArg); err != nil {
		return s, err
	}
	s.name = c.ServiceName
	if s.name == "" {
		s.name = DefaultServiceName
	}
	s.attrs, err = parseAttributes(c.ResourceAttributes)
	return s, err
}

func parseSampler(name, arg string) (string, float64, error) {
	if name == "" {
		name = SamplerParentBasedAlwaysOn
	}
	switch name {
	case SamplerAlwaysOn, SamplerAlwaysOff, SamplerParentBasedAlwaysOn, SamplerParentBasedAlwaysOff:
		return name, 0, nil
	case SamplerTraceIDRatio, SamplerParentBasedTraceIDRatio:
	default:
		return "", 0, fmt.Errorf("-trace-sampler %q: want always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio", name)
	}
	if arg == "" {
		return name, 1, nil
	}
	r, err := strconv.ParseFloat(arg, 64)
	if err != nil || !(r >= 0 && r <= 1) {
		return "", 0, fmt.Errorf("-trace-sampler-arg %q: want a ratio between 0 and 1", arg)
	}
	return name, r, nil
}

// maxAttributes bounds the resource attributes.
const maxAttributes = 64

// parseAttributes parses OTEL_RESOURCE_ATTRIBUTES' format: key=value,key=value, with
// percent-encoded values.
func parseAttributes(s string) ([][2]string, error) {
	var attrs [][2]string
	for pair := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("-trace-resource-attributes: %q is not key=value", pair)
		}
		v, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("-trace-resource-attributes: the value of %q: %w", k, err)
		}
		attrs = append(attrs, [2]string{k, v})
	}
	if len(attrs) > maxAttributes {
		return nil, errors.New("-trace-resource-attributes: more than 64 attributes")
	}
	return attrs, nil
}
