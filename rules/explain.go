package rules

import (
	"fmt"
	"strconv"
	"strings"
)

// Explain parses a configuration as ParseConfig does and, when it is valid, describes what its
// rules do, a few lines per rule (the first names it, the others are indented) and one per shedder, for a person checking a configuration before
// deploying it (cmd/meshlimit-check): which requests each rule matches, its key, its limits,
// where it counts, and what changes how it counts (shadow, count_on, a cost that settles,
// concurrency). The text is for reading, not parsing; it may change.
func Explain(data []byte) ([]string, error) {
	c, err := ParseConfig(data)
	if err != nil {
		return nil, err
	}
	var doc configJSON
	if err := decodeStrict(data, &doc); err != nil {
		return nil, err // unreachable: ParseConfig accepted data
	}
	lines := []string{explainTop(c)}
	for i, r := range c.rules {
		parts := explainRule(r, &doc.Rules[i])
		lines = append(lines, parts[0]+": "+parts[1])
		for _, p := range parts[2:] {
			lines = append(lines, "  "+p)
		}
	}
	sheds := doc.Shedders
	if doc.Shed != nil {
		sheds = []shedJSON{*doc.Shed}
	}
	for i, s := range c.Shedders {
		lines = append(lines, explainShed(s, &sheds[i]))
	}
	return lines, nil
}

func explainTop(c *Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d rule", len(c.rules))
	if len(c.rules) != 1 {
		b.WriteByte('s')
	}
	if !c.Enforce {
		b.WriteString(", none enforced (enforce: false)")
	}
	fmt.Fprintf(&b, "; denials answer %d; quota headers %s", c.Response.Status, c.Response.headerSetNames())
	if g := c.Global; g != nil {
		fmt.Fprintf(&b, "; decision service: cluster %s, path %s, timeout %s", g.Cluster, g.Path, formatDuration(g.Timeout))
		if g.Secret != "" {
			b.WriteString(", with a secret")
		}
	}
	return b.String()
}

// explainRule returns what a rule does: its name and scope, what it matches, then its key, limits
// and the rest.
func explainRule(r *Rule, rj *ruleJSON) []string {
	head := r.Scope.String()
	if r.Shadow {
		head += ", shadow: counts, never denies"
	} else if r.EnforcePercent < 100 {
		head += fmt.Sprintf(", enforced for %d%% of keys", r.EnforcePercent)
	}
	parts := []string{"rule " + r.Name + " (" + head + ")"}
	parts = append(parts, explainMatch(&rj.Match))
	parts = append(parts, explainKey(rj.Key, rj.MissingKey))
	parts = append(parts, "limits "+explainLimits(r.sets[0].Limits))
	if n := len(r.overrides); n > 0 {
		parts = append(parts, fmt.Sprintf("%d overrides", n))
	}
	if f := r.fallback; f != nil {
		parts = append(parts, "fallback "+explainLimits(f.Limits))
	}
	if o := r.overflow; o != nil {
		parts = append(parts, "overflow "+explainLimits(o.Limits))
	}
	if l := r.lease; l != nil {
		parts = append(parts, fmt.Sprintf("lease %d per call for %s", l.Batch, formatDuration(l.TTL)))
	}
	if s := explainCost(rj.Cost); s != "" {
		parts = append(parts, s)
	}
	if co := r.CountOn; co != nil {
		parts = append(parts, explainCountOn(co, rj.CountOn))
	}
	if r.Scope != ScopeLocal && !r.CacheDenials {
		parts = append(parts, "no denial cache")
	}
	parts = append(parts, fmt.Sprintf("max_keys %d, failure_mode %s", r.MaxKeys, r.FailureMode))
	return parts
}

func explainMatch(m *matchJSON) string {
	var conds []string
	list := func(name string, items []string) {
		if len(items) > 0 {
			conds = append(conds, name+" "+strings.Join(items, ","))
		}
	}
	list("routes", m.RouteNames)
	list("hosts", m.Hosts)
	if p := m.Path; p != nil {
		for _, k := range []struct {
			name string
			v    *string
		}{{"exact", p.Exact}, {"prefix", p.Prefix}, {"regex", p.Regex}} {
			if k.v != nil {
				conds = append(conds, "path "+k.name+" "+*k.v)
			}
		}
	}
	list("methods", m.Methods)
	for _, h := range m.Headers {
		conds = append(conds, "header "+strings.ToLower(h.Name))
	}
	if len(conds) == 0 {
		return "every request"
	}
	return "requests with " + strings.Join(conds, " and ")
}

func explainKey(parts []keyPartJSON, missing string) string {
	if len(parts) == 0 {
		return "one bucket for all"
	}
	var names []string
	for _, p := range parts {
		switch {
		case p.ClientIP != nil:
			names = append(names, "client_ip"+explainClientIP(p.ClientIP))
		case p.Header != nil:
			names = append(names, "header "+strings.ToLower(*p.Header))
		case p.Query != nil:
			names = append(names, "query "+*p.Query)
		case p.Constant != nil:
			names = append(names, strconv.Quote(*p.Constant))
		case p.Property != nil:
			names = append(names, "property "+strings.Join(p.Property.segments, "."))
		case p.Path != nil:
			names = append(names, "path")
		case p.Method != nil:
			names = append(names, "method")
		case p.Host != nil:
			names = append(names, "host")
		case p.RouteName != nil:
			names = append(names, "route_name")
		}
	}
	s := "key " + strings.Join(names, " + ")
	if missing == "default" {
		s += " (a request without it shares one bucket)"
	}
	return s
}

func explainClientIP(c *clientIPJSON) string {
	var opts []string
	for _, o := range []struct {
		name string
		v    optInt
	}{{"trusted_hops", c.TrustedHops}, {"ipv4_mask", c.IPv4Mask}, {"ipv6_mask", c.IPv6Mask}} {
		if o.v.Set {
			opts = append(opts, o.name+" "+strconv.FormatInt(o.v.Value, 10))
		}
	}
	if len(opts) == 0 {
		return ""
	}
	return "(" + strings.Join(opts, ", ") + ")"
}

func explainLimits(ls []LimitSpec) string {
	var out []string
	for _, l := range ls {
		if l.Concurrency > 0 {
			out = append(out, fmt.Sprintf("%s: %d in flight (concurrency)", l.Name, l.Concurrency))
			continue
		}
		s := fmt.Sprintf("%s: %s %s", l.Name, formatLimitRate(l.Limit), l.Limit.Kind)
		if l.Limit.Burst > 0 && l.Limit.Burst != l.Limit.Quota {
			s += fmt.Sprintf(" burst %d", l.Limit.Burst)
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

func explainCost(c *costJSON) string {
	switch {
	case c == nil:
		return ""
	case c.object == nil:
		return "cost " + strconv.FormatInt(c.constant.Value, 10)
	}
	o := c.object
	var s string
	switch {
	case o.Header != "":
		s = "cost from header " + strings.ToLower(o.Header)
	case o.RequestJSON != "":
		s = "cost reserved from request body field " + o.RequestJSON
	case o.RequestBytes:
		s = "cost reserved as request body bytes"
	default:
		s = "cost reserved"
	}
	if st := o.Settle; st != nil {
		switch {
		case st.ResponseHeader != "":
			s += ", settled from response header " + strings.ToLower(st.ResponseHeader)
		case st.ResponseJSON != "":
			s += ", settled from response body field " + st.ResponseJSON
		case st.BodyBytes != "":
			s += ", settled as " + st.BodyBytes + " body bytes"
		}
	}
	return s
}

func explainCountOn(co *CountOn, cj *countOnJSON) string {
	s := "counts only responses with"
	if len(cj.Status) > 0 {
		s += " status " + strings.Join(cj.Status, ",")
	}
	if n := len(cj.Headers); n > 0 {
		s += fmt.Sprintf(" %d header conditions", n)
	}
	if co.Penalty > 0 {
		s += ", then blocks the key for " + formatDuration(co.Penalty)
	}
	return s
}

func explainShed(s *Shed, sj *shedJSON) string {
	name := s.Name
	if name == "" {
		name = "shed"
	} else {
		name = "shedder " + name
	}
	parts := []string{name + ": " + explainMatch(orEmpty(sj.Match))}
	if s.Adaptive != nil {
		parts = append(parts, "adaptive capacity")
	} else {
		parts = append(parts, fmt.Sprintf("capacity %d in flight", s.Capacity))
	}
	parts = append(parts, "classes "+strings.Join(s.Classes, " > "))
	if s.KeyShared() {
		parts = append(parts, fmt.Sprintf("one key holds at most %d/1000 of the capacity (key_share)", s.Policy.KeyShare()))
	}
	if s.Shadow {
		parts = append(parts, "shadow (counts, never sheds)")
	}
	return strings.Join(parts, "; ")
}

func orEmpty(m *matchJSON) *matchJSON {
	if m == nil {
		return &matchJSON{}
	}
	return m
}
