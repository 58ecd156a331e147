package tracing

import (
	"crypto/x509"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// CheckEnv reports the first OpenTelemetry variable of getenv with a value the service would
// not use as documented, naming the variable (and, for one that stands for a flag, the flag):
// the SDK parses most of them leniently, ignoring a bad value. c is the Config after FromEnv;
// with tracing off only OTEL_SDK_DISABLED is checked.
func CheckEnv(c Config, getenv func(string) string) error {
	if err := checkVar(getenv, "OTEL_SDK_DISABLED", isBool); err != nil || !c.Enabled() {
		return err
	}
	for _, v := range envChecks {
		if err := checkVar(getenv, v.name, v.check); err != nil {
			return err
		}
	}
	return nil
}

// envChecks are the variables CheckEnv checks when tracing is on, with what a value must be.
var envChecks = []struct {
	name  string
	check func(string) error
}{
	{"OTEL_EXPORTER_OTLP_ENDPOINT", flagCheck(func(v string) error { return Config{Endpoint: v}.Validate() })},
	{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", flagCheck(func(v string) error { return Config{Endpoint: v}.Validate() })},
	{"OTEL_EXPORTER_OTLP_PROTOCOL", flagCheck(checkProtocol)},
	{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", flagCheck(checkProtocol)},
	{"OTEL_TRACES_SAMPLER", flagCheck(func(v string) error { _, _, err := parseSampler(v, ""); return err })},
	{"OTEL_TRACES_SAMPLER_ARG", flagCheck(func(v string) error { _, _, err := parseSampler(SamplerTraceIDRatio, v); return err })},
	{"OTEL_RESOURCE_ATTRIBUTES", flagCheck(func(v string) error { _, err := parseAttributes(v); return err })},
	{"OTEL_EXPORTER_OTLP_TIMEOUT", isNonNegative},
	{"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", isNonNegative},
	{"OTEL_EXPORTER_OTLP_HEADERS", isHeaders},
	{"OTEL_EXPORTER_OTLP_TRACES_HEADERS", isHeaders},
	{"OTEL_EXPORTER_OTLP_CERTIFICATE", isCertificate},
	{"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", isCertificate},
	{"OTEL_EXPORTER_OTLP_COMPRESSION", isCompression},
	{"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", isCompression},
	{"OTEL_EXPORTER_OTLP_INSECURE", isBool},
	{"OTEL_EXPORTER_OTLP_TRACES_INSECURE", isBool},
	{"OTEL_BSP_SCHEDULE_DELAY", isNonNegative},
	{"OTEL_BSP_EXPORT_TIMEOUT", isNonNegative},
	{"OTEL_BSP_MAX_QUEUE_SIZE", isPositive},
	{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", isPositive},
}

// checkVar checks the variable name, when it is set, with check.
func checkVar(getenv func(string) string, name string, check func(string) error) error {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return nil
	}
	if err := check(v); err != nil {
		return fmt.Errorf("%s %q: %w", name, v, err)
	}
	return nil
}

// flagCheck wraps the check of a variable that stands for a flag: its error names the flag.
func flagCheck(check func(string) error) func(string) error {
	return func(v string) error {
		if err := check(v); err != nil {
			return fmt.Errorf("as %w", err)
		}
		return nil
	}
}

func checkProtocol(v string) error {
	return Config{Endpoint: "http://c", Protocol: v}.Validate()
}

func isBool(v string) error {
	if !strings.EqualFold(v, "true") && !strings.EqualFold(v, "false") {
		return fmt.Errorf("want true or false")
	}
	return nil
}

func isNonNegative(v string) error {
	if n, err := strconv.Atoi(v); err != nil || n < 0 {
		return fmt.Errorf("want a whole number of milliseconds, 0 or more")
	}
	return nil
}

func isPositive(v string) error {
	if n, err := strconv.Atoi(v); err != nil || n <= 0 {
		return fmt.Errorf("want a whole number above 0")
	}
	return nil
}

func isCompression(v string) error {
	if v != "gzip" && v != "none" {
		return fmt.Errorf("want gzip or none")
	}
	return nil
}

// isHeaders checks the W3C baggage-like format of the _HEADERS variables: key=value pairs,
// comma-separated, values percent-encoded (as OTEL_RESOURCE_ATTRIBUTES').
func isHeaders(v string) error {
	if _, err := parseAttributes(v); err != nil {
		return fmt.Errorf("want key=value,key=value with values percent-encoded")
	}
	return nil
}

// isCertificate checks that the file v names holds at least one PEM certificate.
func isCertificate(v string) error {
	b, err := os.ReadFile(v)
	if err != nil {
		return err
	}
	if !x509.NewCertPool().AppendCertsFromPEM(b) {
		return fmt.Errorf("want a file of PEM certificates")
	}
	return nil
}
