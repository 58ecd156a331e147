package service

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTraceExportFailuresAreShownFromTheFirstOne(t *testing.T) {
	var failures uint64
	m := NewMetrics()
	m.CountTraceExportFailures(func() uint64 { return failures })
	var b bytes.Buffer
	require.NoError(t, m.writeTo(&b, Stats{Keys: -1, Evicted: -1}))
	assert.NotContains(t, b.String(), "meshlimit_trace_export_failures_total")
	failures = 3
	b.Reset()
	require.NoError(t, m.writeTo(&b, Stats{Keys: -1, Evicted: -1}))
	assert.Contains(t, b.String(), "# TYPE meshlimit_trace_export_failures_total counter\nmeshlimit_trace_export_failures_total 3\n")
}
