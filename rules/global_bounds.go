package rules

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/meshlimit/meshlimit/wire"
)

// The decision service refuses, with a 400, a check that exceeds the bounds of its contract (package
// wire). A refused check is not an outage that a fallback should paper over: every request of such a
// configuration would be refused, so the limit would never be enforced. The configuration is
// refused instead, as far as it can be known, with wire's own bounds and encoder: at parse time for
// what the document alone decides (the descriptors per check), at plugin start for what depends on
// the plugin_name property (the descriptor keys it prefixes).

// maxDescriptors is the most descriptors one request asks the service about for this rule: one per
// limit of its largest limit set (0 for a local rule).
func (r *Rule) maxDescriptors() int {
	if r.Scope == ScopeLocal {
		return 0
	}
	n := 0
	for _, set := range r.sets {
		n = max(n, len(set.Limits))
	}
	return n
}

// checkGlobalBounds refuses a configuration whose requests could carry more descriptors than the
// service accepts in one check (every global rule may match the same request).
func (v *validator) checkGlobalBounds(c *Config) {
	total := 0
	for _, r := range c.rules {
		total += r.maxDescriptors()
	}
	if total > wire.MaxDescriptors {
		v.failf("rules", "a request matching every global rule asks the decision service about %d limits at once; "+
			"it accepts at most %d per check (fewer limits, or fewer global rules)", total, wire.MaxDescriptors)
	}
}

// longestKey returns the longest descriptor key the rule sends with the plugin name plugin, as the
// filter's encoder writes it (wire.AppendKey): the rule's longest fingerprint and the longest key
// value sent as is (wire.MaxValueBytes; a longer value, or one with bytes a key may not hold, is sent
// hashed, in fewer bytes).
func (r *Rule) longestKey(plugin string) []byte {
	var fp uint64 // the largest fingerprint is the longest in base 36
	for _, set := range r.sets {
		for _, l := range set.Limits {
			fp = max(fp, l.Fingerprint)
		}
	}
	return wire.AppendKey(nil, wire.Key{Plugin: plugin, Rule: r.Name, Fingerprint: fp, Value: strings.Repeat("v", wire.MaxValueBytes)})
}

// CheckPluginName reports whether the descriptor keys of the global rules, which the plugin name
// prefixes (the plugin_name property; Istio: "<namespace>.<name>"), are keys the decision service
// accepts: it writes each global rule's longest key with the filter's encoder and checks it as the
// service does (wire.CheckKey, at most wire.MaxKeyBytes). The encoder sends a plugin name that is
// too long for a key part or holds bytes a key may not hold hashed (see wire.Key), so with wire's
// bounds every name passes; the check is made with them, not with a copy, so that the two cannot
// drift apart. The filter calls it at plugin start; the error names the offending rule.
func (c *Config) CheckPluginName(name string) error {
	if c.Global == nil {
		return nil
	}
	for i, r := range c.rules {
		if r.Scope == ScopeLocal {
			continue
		}
		key := r.longestKey(name)
		if err := wire.CheckKey(string(key), wire.MaxKeyBytes); err != nil {
			return &FieldError{Path: "rules[" + strconv.Itoa(i) + "].name", Msg: fmt.Sprintf(
				"with the plugin name %q (the plugin_name property) the decision service refuses the rule's descriptor keys, such as %.80q: %v",
				name, key, err)}
		}
	}
	return nil
}
