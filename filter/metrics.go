package filter

import "github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"

// Metrics follow Envoy's dotted stat names (Envoy shows them with the prefix "wasmcustom."; Istio
// exports them to Prometheus with dots turned into underscores). Every VM defines the same names; the
// host keeps one stat per name, so the counts add up across worker threads.
//
//	meshlimit.config_errors                      plugin starts refused for a bad configuration
//	meshlimit.rule.<rule>.allowed                requests the rule admitted
//	meshlimit.rule.<rule>.limited                requests the rule denied (enforced)
//	meshlimit.rule.<rule>.shadow_limited         requests the rule would have denied (shadow or enforce=false)
//	meshlimit.rule.<rule>.cas_retries            CAS races lost and retried (contention between worker threads)
//	meshlimit.rule.<rule>.cas_exhausted          decisions abandoned after too many lost CAS races
//	meshlimit.rule.<rule>.failure_denied         requests denied by failure_mode "deny"
//	meshlimit.rule.<rule>.collisions             requests decided in another active key's slot (max_keys too small)
//	meshlimit.rule.<rule>.fallback               global decisions made without the service (fallback or failure_mode)
//	meshlimit.rule.<rule>.cached_denials         requests denied from the over-limit cache, without calling the service
//	meshlimit.rule.<rule>.leased                 quota units leased from the service
//	meshlimit.rule.<rule>.lease_spent            requests admitted from leased units, without a call
type pluginMetrics struct {
	configErrors proxywasm.MetricCounter
}

type ruleMetrics struct {
	allowed, limited, shadowLimited, casRetries, casExhausted, failureDenied, collisions, fallback, cachedDenials, leased, leaseSpent proxywasm.MetricCounter
}

func definePluginMetrics() pluginMetrics {
	return pluginMetrics{configErrors: proxywasm.DefineCounterMetric("meshlimit.config_errors")}
}

func defineRuleMetrics(rule string) ruleMetrics {
	p := "meshlimit.rule." + rule + "."
	return ruleMetrics{
		allowed:       proxywasm.DefineCounterMetric(p + "allowed"),
		limited:       proxywasm.DefineCounterMetric(p + "limited"),
		shadowLimited: proxywasm.DefineCounterMetric(p + "shadow_limited"),
		casRetries:    proxywasm.DefineCounterMetric(p + "cas_retries"),
		casExhausted:  proxywasm.DefineCounterMetric(p + "cas_exhausted"),
		failureDenied: proxywasm.DefineCounterMetric(p + "failure_denied"),
		collisions:    proxywasm.DefineCounterMetric(p + "collisions"),
		fallback:      proxywasm.DefineCounterMetric(p + "fallback"),
		cachedDenials: proxywasm.DefineCounterMetric(p + "cached_denials"),
		leased:        proxywasm.DefineCounterMetric(p + "leased"),
		leaseSpent:    proxywasm.DefineCounterMetric(p + "lease_spent"),
	}
}
