package rules

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// The decision service refuses, with a 400, a check whose request exceeds its bounds. A refused check
// is not an outage that a fallback should paper over: every request of such a configuration would be
// refused, so the limit would never be enforced. The configuration is refused instead, as far as it
// can be known: at parse time for what the document alone decides (the descriptors per check), at
// plugin start for what depends on the plugin_name property (the descriptor keys).
//
// The bounds are the service's defaults (service/api.go: defaultMaxDescriptors, defaultMaxKeyBytes).
// TODO(wire): take them from package wire once it exists, so that the two cannot drift.
const (
	// ServiceMaxDescriptors is the most descriptors the service accepts in one check.
	ServiceMaxDescriptors = 64
	// ServiceMaxKeyBytes is the longest descriptor key the service accepts, in bytes.
	ServiceMaxKeyBytes = 512
	// MaxServiceKeyValue is the longest key value the filter sends as is; a longer one (or one with
	// bytes the service refuses) is sent as '#' and two 64-bit hashes in hex (serviceKeyHashLen).
	MaxServiceKeyValue = 256
	// serviceKeyHashLen is the length of a hashed key value: '#', 16 hex digits, '-', 16 hex digits.
	serviceKeyHashLen = 1 + 16 + 1 + 16
)

// maxDescriptorKey is the longest descriptor key a rule sends for a plugin name of pluginLen bytes:
// plugin "/" rule "/" fingerprint (base 36) "/" key value.
func (r *Rule) maxDescriptorKey(pluginLen int) int {
	fp := 0
	for _, set := range r.sets {
		for _, l := range set.Limits {
			fp = max(fp, len(strconv.FormatUint(l.Fingerprint, 36)))
		}
	}
	return pluginLen + 1 + len(r.Name) + 1 + fp + 1 + max(MaxServiceKeyValue, serviceKeyHashLen)
}

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
// service accepts in one check (every global rule may match the same request), or whose descriptor
// keys could be too long even with the shortest plugin name.
func (v *validator) checkGlobalBounds(c *Config) {
	total := 0
	for _, r := range c.rules {
		total += r.maxDescriptors()
	}
	if total > ServiceMaxDescriptors {
		v.failf("rules", "a request matching every global rule asks the decision service about %d limits at once; "+
			"it accepts at most %d per check (fewer limits, or fewer global rules)", total, ServiceMaxDescriptors)
	}
	for i, r := range c.rules {
		if r.Scope != ScopeLocal && r.maxDescriptorKey(0) > ServiceMaxKeyBytes {
			v.failf("rules["+strconv.Itoa(i)+"].name", "descriptor keys of up to %d bytes: the decision service accepts %d",
				r.maxDescriptorKey(0), ServiceMaxKeyBytes)
		}
	}
}

// CheckPluginName reports whether the global rules' descriptor keys fit the decision service's bound
// with this plugin name, which prefixes every key (Istio: "<namespace>.<name>"), and whether the name
// is a key the service accepts (UTF-8 without control characters). The filter calls it at plugin start,
// when the plugin_name property is known; the error names the offending rule.
func (c *Config) CheckPluginName(name string) error {
	if c.Global == nil {
		return nil
	}
	for i, r := range c.rules {
		if r.Scope == ScopeLocal {
			continue
		}
		if !utf8.ValidString(name) || hasControl(name) {
			return &FieldError{Path: "rules[" + strconv.Itoa(i) + "]", Msg: fmt.Sprintf(
				"the plugin name %q (the plugin_name property) prefixes every descriptor key, and the decision service refuses keys that are not UTF-8 or hold control characters", name)}
		}
		if n := r.maxDescriptorKey(len(name)); n > ServiceMaxKeyBytes {
			return &FieldError{Path: "rules[" + strconv.Itoa(i) + "].name", Msg: fmt.Sprintf(
				"with the plugin name %q (%d bytes, the plugin_name property) descriptor keys reach %d bytes: the decision service accepts %d (a shorter plugin or rule name)",
				name, len(name), n, ServiceMaxKeyBytes)}
		}
	}
	return nil
}

func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return true
		}
	}
	return false
}
