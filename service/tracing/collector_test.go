package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/otlptest"
	"github.com/meshlimit/meshlimit/service/tracing"
)

// hugeAnswer is what the collector answers one export with; answerBound is what one export of
// one span may allocate (an ExportTraceServiceResponse is a few bytes; the exporter stops
// reading an answer at its MaxResponseSize).
const (
	hugeAnswer  = 64 << 20
	answerBound = 4 << 20
)

// GHSA-w8rr-5gcm-pp58: otlptracehttp before v1.47.0 read a collector's whole answer into memory.
func TestACollectorThatAnswersAHugeBodyCannotMakeTheServiceAllocateIt(t *testing.T) {
	recv := otlptest.StartHTTPAnswering(t, hugeAnswer)
	tr := newTracer(t, tracing.Config{Endpoint: recv.Endpoint, Protocol: tracing.ProtocolHTTP})
	_, sp := tr.StartHTTP(context.Background(), tracing.FrontCheck, header())
	sp.End(tracing.Decision{Outcome: tracing.OutcomeAllowed, HTTPStatus: 200})

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err := tr.Flush(context.Background())
	runtime.ReadMemStats(&after)

	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("one export answered with %d MiB: %d KiB allocated, flush error %v", hugeAnswer>>20, allocated>>10, err)
	assert.Len(t, recv.Spans(), 1, "the span reached the collector")
	assert.Less(t, allocated, uint64(answerBound), "the exporter buffered the collector's answer")
}

// An export that fails is counted (meshlimit_trace_export_failures_total) and logged on the
// service's logger, as JSON, instead of the SDK's unstructured log line.
func TestAFailedExportIsCountedAndLoggedAsJSON(t *testing.T) {
	recv := otlptest.StartHTTPAnswering(t, tracing.MaxAnswerBytes+1)
	tr := newTracer(t, tracing.Config{Endpoint: recv.Endpoint, Protocol: tracing.ProtocolHTTP})
	var buf bytes.Buffer
	tr.LogErrors(slog.New(slog.NewJSONHandler(&buf, nil)))
	_, sp := tr.StartHTTP(context.Background(), tracing.FrontCheck, header())
	sp.End(tracing.Decision{Outcome: tracing.OutcomeAllowed, HTTPStatus: 200})
	require.Error(t, tr.Flush(context.Background()))

	assert.Equal(t, uint64(1), tr.ExportFailures())
	var rec map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &rec), buf.String())
	assert.Contains(t, rec["err"], "response body too large")
	assert.Equal(t, float64(1), rec["errors"])
}
