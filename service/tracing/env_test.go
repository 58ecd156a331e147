package tracing_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/service/tracing"
)

// The SDK reads these variables leniently: a bad value is ignored, or turns into a default.
// The service refuses each at start, with an error naming the variable (and the flag it stands
// for, if any).
func TestABadOTELVariableStopsTheServiceWithAnErrorNamingIt(t *testing.T) {
	notPEM := filepath.Join(t.TempDir(), "ca.txt")
	require.NoError(t, os.WriteFile(notPEM, []byte("not a certificate"), 0o600))
	on := tracing.Config{Endpoint: "http://c:4317"}
	for _, tc := range []struct {
		name, variable, value string
		names                 []string // what the error must name
	}{
		{"a timeout that is not a number", "OTEL_EXPORTER_OTLP_TIMEOUT", "abc", nil},
		{"a negative timeout", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "-5", nil},
		{"headers that are not key=value", "OTEL_EXPORTER_OTLP_HEADERS", "garbage", nil},
		{"a certificate file that does not exist", "OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent", nil},
		{"a certificate file without a certificate", "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", notPEM, nil},
		{"an unknown compression", "OTEL_EXPORTER_OTLP_COMPRESSION", "zstd", nil},
		{"an insecure flag that is not a bool", "OTEL_EXPORTER_OTLP_INSECURE", "maybe", nil},
		{"a queue size that is not a number", "OTEL_BSP_MAX_QUEUE_SIZE", "abc", nil},
		{"a batch size of zero", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "0", nil},
		{"a schedule delay that is not a number", "OTEL_BSP_SCHEDULE_DELAY", "5s", nil},
		{"a disabled flag that is not a bool", "OTEL_SDK_DISABLED", "yes", nil},
		{"an unknown sampler", "OTEL_TRACES_SAMPLER", "sometimes", []string{"-trace-sampler"}},
		{"a ratio above one", "OTEL_TRACES_SAMPLER_ARG", "1.5", []string{"-trace-sampler-arg"}},
		{"an unknown protocol", "OTEL_EXPORTER_OTLP_PROTOCOL", "thrift", []string{"-otlp-protocol"}},
		{"an endpoint without a scheme", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "collector:4317", []string{"-otlp-endpoint"}},
		{"an attribute without a value", "OTEL_RESOURCE_ATTRIBUTES", "team", []string{"-trace-resource-attributes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{tc.variable: tc.value}
			err := tracing.CheckEnv(on.FromEnv(func(k string) string { return env[k] }), func(k string) string { return env[k] })
			require.Error(t, err)
			for _, name := range append(tc.names, tc.variable) {
				assert.Contains(t, err.Error(), name)
			}
		})
	}
}

func TestGoodOTELVariablesPassTheCheck(t *testing.T) {
	env := map[string]string{
		"OTEL_SDK_DISABLED": "false", "OTEL_EXPORTER_OTLP_TIMEOUT": "10000", "OTEL_EXPORTER_OTLP_HEADERS": "api-key=a%20b,x=y",
		"OTEL_EXPORTER_OTLP_COMPRESSION": "gzip", "OTEL_EXPORTER_OTLP_INSECURE": "TRUE", "OTEL_BSP_MAX_QUEUE_SIZE": "2048",
		"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
	}
	getenv := func(k string) string { return env[k] }
	assert.NoError(t, tracing.CheckEnv(tracing.Config{Endpoint: "http://c:4318"}.FromEnv(getenv), getenv))
}

// With tracing off, the exporter's variables are not read, so not checked.
func TestOTELVariablesAreNotCheckedWithTracingOff(t *testing.T) {
	env := map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "abc", "OTEL_SDK_DISABLED": "true"}
	getenv := func(k string) string { return env[k] }
	assert.NoError(t, tracing.CheckEnv(tracing.Config{Endpoint: "http://c:4317"}.FromEnv(getenv), getenv))
}
