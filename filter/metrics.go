package filter

// Metrics follow Envoy's dotted stat names (Envoy shows them with the prefix "wasmcustom."; Istio
// exports them to Prometheus with dots turned into underscores). Every VM defines the same names; the
// host keeps one stat per name, so the counts add up across worker threads.
//
//	meshlimit.config_errors                      plugin starts refused for a bad configuration
//	meshlimit.panics                             panics recovered in a callback (the rule's failure_mode applied)
//	meshlimit.settle_copy_refused                streams settled without a copy of their answer: settle_memory was full
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
//	meshlimit.rule.<rule>.given_back             admissions given back because a later decision denied the request
//	meshlimit.messages.counted                   messages of gRPC streams and WebSocket sessions a message rule counted (its allowed/limited count messages and holds)
//	meshlimit.messages.holds                     directions held at a message limit (shape)
//	meshlimit.messages.held                      gauge: directions held now, on this worker
//	meshlimit.messages.ended                     streams a message limit ended (end, max_hold, a framing violation)
//	meshlimit.messages.malformed                 streams whose framing was invalid (reset)
//	meshlimit.global.resets_applied              reset log entries applied: keys an admin reset, forgotten in shared data
//	meshlimit.global.resets_poll_failed          reads of the reset log that failed (applied later, from the same position)
//	meshlimit.global.resets_truncated            reads that found the proxy's position gone from the log (resets may be missed)
type ruleMetrics struct {
	allowed, limited, shadowLimited, casRetries, casExhausted, failureDenied, overflow, evictions, fallback, cachedDenials, leased, leaseSpent, leaseExpired, permitsReclaimed counter
	nearLimit, counted, unanswered, penalties, penaltyDenied, givenBack                                                                                                        counter
}

func defineRuleMetrics(h host, rule string) ruleMetrics {
	p := "meshlimit.rule." + rule + "."
	return ruleMetrics{
		allowed:          newCounter(h, p+"allowed"),
		limited:          newCounter(h, p+"limited"),
		shadowLimited:    newCounter(h, p+"shadow_limited"),
		casRetries:       newCounter(h, p+"cas_retries"),
		casExhausted:     newCounter(h, p+"cas_exhausted"),
		failureDenied:    newCounter(h, p+"failure_denied"),
		overflow:         newCounter(h, p+"overflow"),
		evictions:        newCounter(h, p+"evictions"),
		fallback:         newCounter(h, p+"fallback"),
		cachedDenials:    newCounter(h, p+"cached_denials"),
		leased:           newCounter(h, p+"leased"),
		leaseSpent:       newCounter(h, p+"lease_spent"),
		leaseExpired:     newCounter(h, p+"lease_expired"),
		nearLimit:        newCounter(h, p+"near_limit"),
		counted:          newCounter(h, p+"counted"),
		unanswered:       newCounter(h, p+"unanswered"),
		penalties:        newCounter(h, p+"penalties"),
		penaltyDenied:    newCounter(h, p+"penalty_denied"),
		permitsReclaimed: newCounter(h, p+"permits_reclaimed"),
		givenBack:        newCounter(h, p+"given_back"),
	}
}
