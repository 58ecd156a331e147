package service

import "github.com/prometheus/client_golang/prometheus"

// traceFailuresDesc is meshlimit_trace_export_failures_total.
var traceFailuresDesc = prometheus.NewDesc("meshlimit_trace_export_failures_total",
	"OpenTelemetry errors of the span exporter (exports that failed, spans lost); shown from the first one.", nil, nil)

// CountTraceExportFailures exports failures() (tracing.Tracer.ExportFailures) as the
// meshlimit_trace_export_failures_total counter, shown from the first failure, as
// meshlimit_store_full_fallbacks_total is. Call it once.
func (m *Metrics) CountTraceExportFailures(failures func() uint64) {
	m.init()
	m.reg.MustRegister(traceFailures(failures))
}

// traceFailures is an unchecked collector (it describes nothing): it yields its counter only
// once it is above 0.
type traceFailures func() uint64

func (traceFailures) Describe(chan<- *prometheus.Desc) {}

func (f traceFailures) Collect(ch chan<- prometheus.Metric) {
	if n := f(); n > 0 {
		ch <- prometheus.MustNewConstMetric(traceFailuresDesc, prometheus.CounterValue, float64(n))
	}
}
