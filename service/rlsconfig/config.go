package rlsconfig

import (
	"sort"
	"strings"

	"github.com/meshlimit/meshlimit/algorithms"
)

// RateLimit is the rate_limit of a descriptor.
type RateLimit struct {
	// Unit and RequestsPerUnit are the limit; Unit is 0 when Unlimited.
	Unit            Unit
	RequestsPerUnit uint32
	// Unlimited exempts the descriptor: it is answered OK and nothing is counted.
	Unlimited bool
	// Name names the limit for the Replaces of other limits.
	Name string
	// Replaces lists the names of limits that this one, when matched, drops from the request.
	Replaces []string
	// Algorithm, when non-zero (the meshlimit extension), decides the descriptor with one of
	// meshlimit's algorithms; 0 counts as envoyproxy/ratelimit does.
	Algorithm algorithms.Kind
}

// Rule is what a request's descriptor matched: the rule of its last entry.
type Rule struct {
	// Limit is the rate limit, nil when the rule has none.
	Limit *RateLimit
	// ShadowMode answers OK even over the limit (the counts still go on).
	ShadowMode bool
	// QuotaMode makes the descriptor's OVER_LIMIT count for the request only when every
	// quota-mode descriptor of the request is over its limit.
	QuotaMode bool
	// DetailedMetric asks for metrics labelled by the values sent.
	DetailedMetric bool
	// ValueToMetric reports that a level of the rule's path sets value_to_metric: its metric
	// name is Config.MetricName's, with the values sent at those levels.
	ValueToMetric bool
	// Path is the rule's place in the configuration, for metrics: the domain and each level's
	// key, with "_value" when the rule has a value (the pattern for a wildcard), joined by ".".
	Path string
	// Metadata is the rule's metadata, nil when it has none. envoyproxy/ratelimit returns it
	// only for a rule with a rate limit (see package rls).
	Metadata Metadata
	// Shared is nil unless a level of the match shares its threshold (share_threshold): then
	// Shared[i] is the wildcard pattern that stands for entry i's value in the counter's key,
	// so that every value the pattern matches counts together ("" for the other entries).
	Shared []string
}

// Entry is one key and value of a request's descriptor.
type Entry struct{ Key, Value string }

// Config is a loaded configuration: immutable, safe for concurrent use.
type Config struct {
	domains map[string]*node
	files   []string
}

// node is one level of the descriptor tree: the rules below a domain or a descriptor.
type node struct {
	rule      Rule
	v2m       bool            // this level's own value_to_metric
	share     bool            // share_threshold: the values this wildcard matches count together
	exact     map[Entry]*node // key and value (value "" for the key-only rule)
	wildcards []wildcard      // in file order
}

// wildcard is a rule whose value holds a '*'.
type wildcard struct {
	key   string
	value string   // the pattern
	parts []string // the value split at '*'
	node  *node
}

// Domains returns the domains of c, sorted.
func (c *Config) Domains() []string {
	ds := make([]string, 0, len(c.domains))
	for d := range c.domains {
		ds = append(ds, d)
	}
	sort.Strings(ds)
	return ds
}

// Files returns the names of the files c was loaded from, sorted.
func (c *Config) Files() []string { return append([]string(nil), c.files...) }

// HasDomain reports whether c configures domain.
func (c *Config) HasDomain(domain string) bool {
	_, ok := c.domains[domain]
	return ok
}

// Match returns the rule that the descriptor made of n entries (entry(i) returns the i-th)
// matches in domain, and whether it matched one; see the package documentation. A rule
// without a rate limit is returned with ok true and a nil Limit. It allocates nothing.
func (c *Config) Match(domain string, n int, entry func(i int) Entry) (r Rule, ok bool) {
	level := c.domains[domain]
	if level == nil {
		return Rule{}, false
	}
	var shared []string
	for i := range n {
		e := entry(i)
		next, pattern, wild := level.findHow(e)
		if next == nil {
			return Rule{}, false
		}
		if wild && next.share {
			if shared == nil {
				shared = make([]string, n)
			}
			shared[i] = pattern
		}
		if i == n-1 {
			r = next.rule
			r.Shared = shared
			return r, true
		}
		if len(next.exact) == 0 && len(next.wildcards) == 0 {
			return Rule{}, false
		}
		level = next
	}
	return Rule{}, false
}

// globMatch reports whether v matches the pattern split at its '*'s into parts: v starts with
// the first part, ends with the last, and holds the others in order in between.
func globMatch(parts []string, v string) bool {
	if len(parts) == 1 {
		return parts[0] == v
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(v) < len(first)+len(last) || !strings.HasPrefix(v, first) || !strings.HasSuffix(v, last) {
		return false
	}
	mid := v[len(first) : len(v)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(mid, p)
		if i < 0 {
			return false
		}
		mid = mid[i+len(p):]
	}
	return true
}

// MetricName returns the metric name of the descriptor (as Match takes it) in
// envoyproxy/ratelimit's form: the domain, then per level the key, with "_" and the value
// when the level matched by value (the pattern for a wildcard), or the value sent when the
// level sets value_to_metric. It is meant for rules with ValueToMetric; it returns "" when the
// descriptor matches no rule.
func (c *Config) MetricName(domain string, n int, entry func(i int) Entry) string {
	level := c.domains[domain]
	if level == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString(domain)
	for i := range n {
		e := entry(i)
		next, how, wild := level.findHow(e)
		if next == nil {
			return ""
		}
		b.WriteString("." + e.Key)
		switch {
		case wild && next.share:
			b.WriteString("_" + how)
		case next.v2m && e.Value != "":
			b.WriteString("_" + e.Value)
		case how != "":
			b.WriteString("_" + how)
		}
		level = next
	}
	return b.String()
}

// findHow returns the rule of this level that e matches (nil: none), the configured value that
// matched ("" for the key-only rule) and whether it is a wildcard that matched.
func (l *node) findHow(e Entry) (n *node, value string, wildcard bool) {
	if e.Value != "" {
		if n := l.exact[e]; n != nil {
			return n, e.Value, false
		}
		for _, w := range l.wildcards {
			if w.key == e.Key && globMatch(w.parts, e.Value) {
				return w.node, w.value, true
			}
		}
	}
	return l.exact[Entry{Key: e.Key}], "", false
}

// splitStar splits a wildcard value at its '*'s.
func splitStar(v string) []string { return strings.Split(v, "*") }
