// Package observability holds what users watch meshlimit with: a Grafana dashboard
// (grafana/meshlimit.json), Prometheus alerting rules (prometheus/meshlimit.rules.yaml), and
// the tag specifiers that give the filter's Envoy stats their labels (envoy/stats-tags.yaml for
// plain Envoy, istio/stats-tags.yaml for Istio). docs/observability.md lists every series.
//
// The Go code states the rules the tests check those files with: how Envoy names a Wasm
// module's metric in its Prometheus output (Tagger, PrometheusName, Series), and which metrics
// and labels a PromQL expression names (Scan); Dashboard is the part of Grafana's JSON model
// they read, which cmd/mlplot draws too. The tests start the decision service and
// the compiled filter, collect the series they export, and fail when the dashboard or a rule
// queries a series that neither exports.
package observability
