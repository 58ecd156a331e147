package filter

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"

	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/sharedstate"
)

// Metrics follow Envoy's dotted stat names (Envoy shows them with the prefix "wasmcustom."; Istio
// exports them to Prometheus with dots turned into underscores). Every VM defines the same names; the
// host keeps one stat per name, so the counts add up across worker threads.
//
//	meshlimit.config_errors                      plugin starts refused for a bad configuration
//	meshlimit.panics                             panics recovered in a callback (the rule's failure_mode applied)
//	meshlimit.rule.<rule>.allowed                requests the rule admitted
//	meshlimit.rule.<rule>.limited                requests the rule denied (enforced)
//	meshlimit.rule.<rule>.shadow_limited         requests the rule would have denied (shadow or enforce=false)
//	meshlimit.rule.<rule>.cas_retries            CAS races lost and retried (contention between worker threads)
//	meshlimit.rule.<rule>.cas_exhausted          decisions abandoned after too many lost CAS races
//	meshlimit.rule.<rule>.failure_denied         requests denied by failure_mode "deny"
//	meshlimit.rule.<rule>.overflow               requests decided in the rule's overflow state: no room in max_keys slots
//	meshlimit.rule.<rule>.evictions              keys that took over the slot of an idle key (its state equal to a fresh one)
//	meshlimit.rule.<rule>.fallback               global decisions made without the service (fallback or failure_mode)
//	meshlimit.rule.<rule>.cached_denials         requests denied from the over-limit cache, without calling the service
//	meshlimit.rule.<rule>.leased                 quota units leased from the service
//	meshlimit.rule.<rule>.lease_spent            requests admitted from leased units, without a call
//	meshlimit.rule.<rule>.lease_expired          leased units dropped unspent at the end of their ttl
//	meshlimit.rule.<rule>.near_limit             admitted decisions that left a limit with less than a tenth of its quota
//	meshlimit.rule.<rule>.counted                responses a count_on rule charged (unanswered ones included)
//	meshlimit.rule.<rule>.unanswered             requests of a count_on rule charged because no response came
//	meshlimit.rule.<rule>.penalties              keys a count_on rule put in its penalty box
//	meshlimit.rule.<rule>.penalty_denied         requests denied from the penalty box
//	meshlimit.rule.<rule>.permits_reclaimed      concurrency permits reclaimed from owners whose lease ended
//	meshlimit.global.resets_applied              reset log entries applied: keys an admin reset, forgotten in shared data
//	meshlimit.global.resets_poll_failed          reads of the reset log that failed (applied later, from the same position)
//	meshlimit.global.resets_truncated            reads that found the proxy's position gone from the log (resets may be missed)
type pluginMetrics struct {
	configErrors, panics proxywasm.MetricCounter
}

type ruleMetrics struct {
	allowed, limited, shadowLimited, casRetries, casExhausted, failureDenied, overflow, evictions, fallback, cachedDenials, leased, leaseSpent, leaseExpired, permitsReclaimed proxywasm.MetricCounter
	nearLimit, counted, unanswered, penalties, penaltyDenied                                                                                                                   proxywasm.MetricCounter
}

func definePluginMetrics() pluginMetrics {
	return pluginMetrics{
		configErrors: proxywasm.DefineCounterMetric("meshlimit.config_errors"),
		panics:       proxywasm.DefineCounterMetric("meshlimit.panics"),
	}
}

func defineRuleMetrics(rule string) ruleMetrics {
	p := "meshlimit.rule." + rule + "."
	return ruleMetrics{
		allowed:          proxywasm.DefineCounterMetric(p + "allowed"),
		limited:          proxywasm.DefineCounterMetric(p + "limited"),
		shadowLimited:    proxywasm.DefineCounterMetric(p + "shadow_limited"),
		casRetries:       proxywasm.DefineCounterMetric(p + "cas_retries"),
		casExhausted:     proxywasm.DefineCounterMetric(p + "cas_exhausted"),
		failureDenied:    proxywasm.DefineCounterMetric(p + "failure_denied"),
		overflow:         proxywasm.DefineCounterMetric(p + "overflow"),
		evictions:        proxywasm.DefineCounterMetric(p + "evictions"),
		fallback:         proxywasm.DefineCounterMetric(p + "fallback"),
		cachedDenials:    proxywasm.DefineCounterMetric(p + "cached_denials"),
		leased:           proxywasm.DefineCounterMetric(p + "leased"),
		leaseSpent:       proxywasm.DefineCounterMetric(p + "lease_spent"),
		leaseExpired:     proxywasm.DefineCounterMetric(p + "lease_expired"),
		nearLimit:        proxywasm.DefineCounterMetric(p + "near_limit"),
		counted:          proxywasm.DefineCounterMetric(p + "counted"),
		unanswered:       proxywasm.DefineCounterMetric(p + "unanswered"),
		penalties:        proxywasm.DefineCounterMetric(p + "penalties"),
		penaltyDenied:    proxywasm.DefineCounterMetric(p + "penalty_denied"),
		permitsReclaimed: proxywasm.DefineCounterMetric(p + "permits_reclaimed"),
	}
}

// placed counts where a Take found the key's state and returns the limits its decisions are of: the
// rule's overflow limits when the key had no room, else the set's own.
func (rs *ruleState) placed(pl sharedstate.Placement, own []rules.LimitSpec) []rules.LimitSpec {
	if pl < sharedstate.Evicted { // Owned, Claimed: inlined at the caller, nothing to count
		return own
	}
	return rs.placedElsewhere(pl, own)
}

func (rs *ruleState) placedElsewhere(pl sharedstate.Placement, own []rules.LimitSpec) []rules.LimitSpec {
	switch pl {
	case sharedstate.Overflow:
		rs.metrics.overflow.Increment(1)
		return rs.overflow
	case sharedstate.Evicted:
		rs.metrics.evictions.Increment(1)
	}
	return own
}

// resetMetrics are the counters of the reset log (resets.go).
type resetMetrics struct {
	applied, pollFailed, truncated proxywasm.MetricCounter
}

func defineResetMetrics() resetMetrics {
	return resetMetrics{
		applied:    proxywasm.DefineCounterMetric("meshlimit.global.resets_applied"),
		pollFailed: proxywasm.DefineCounterMetric("meshlimit.global.resets_poll_failed"),
		truncated:  proxywasm.DefineCounterMetric("meshlimit.global.resets_truncated"),
	}
}
