package rules

import (
	"regexp"
	"strings"
)

// Request is the read-only view of one HTTP request that rules are evaluated against. The
// plugin implements it over the host lazily, reading each value at most once per request;
// tests implement it with maps. Implementations must not retain the returned strings'
// backing memory beyond the request, and may return "" for values the host does not know.
type Request interface {
	// Header returns the value of the request header name, which is always lower-case.
	// Repeated headers are joined with ",". The bool reports whether the header is present.
	Header(name string) (string, bool)
	// Method returns the :method pseudo-header.
	Method() string
	// Path returns the :path pseudo-header, including the query string.
	Path() string
	// Host returns the :authority pseudo-header (the Host header in HTTP/1).
	Host() string
	// RouteName returns the Envoy route name (the xds.route_name property), or "".
	RouteName() string
	// SourceAddress returns the source.address property: "ip:port", or "[ipv6]:port".
	SourceAddress() string
	// Property returns an Envoy attribute by its path segments, e.g.
	// ["metadata", "filter_metadata", "envoy.filters.http.jwt_authn", "payload", "sub"];
	// the slice is the plugin's to pass to proxywasm.GetProperty as is and must not be
	// modified. Non-string values are returned as their raw host encoding.
	Property(path []string) (string, bool)
}

// match is a compiled rule match: every condition that is set must hold.
type match struct {
	routeNames []string
	hosts      []hostPattern
	methods    []string
	path       stringMatch // against the path without the query; kind 0 = any path
	headers    []headerMatch
}

// hostPattern matches an authority, case-insensitively. A suffix pattern ("*.example.com",
// stored as ".example.com") matches any host that ends with it; "*" matches every host.
type hostPattern struct {
	value  string // lower-case
	suffix bool
	any    bool
}

// stringKind is how a stringMatch compares.
type stringKind uint8

const (
	matchNone stringKind = iota
	matchExact
	matchPrefix
	matchRegex
	matchPresent // header only: present (or, with absent, missing)
)

// stringMatch is one exact, prefix or regular-expression comparison.
type stringMatch struct {
	kind  stringKind
	value string
	re    *regexp.Regexp // anchored at both ends: the whole value must match
}

func (m *stringMatch) matches(s string) bool {
	switch m.kind {
	case matchExact:
		return s == m.value
	case matchPrefix:
		return strings.HasPrefix(s, m.value)
	case matchRegex:
		return m.re.MatchString(s)
	}
	return true
}

// headerMatch is one header condition. For matchPresent, absent inverts the meaning
// (the header must be missing); for the value kinds a missing header never matches. invert
// is applied last, as Envoy's invert_match does.
type headerMatch struct {
	name   string // lower-case
	cond   stringMatch
	absent bool
	invert bool
}

func (h *headerMatch) matches(req Request) bool {
	v, ok := req.Header(h.name)
	var r bool
	if h.cond.kind == matchPresent {
		r = ok != h.absent
	} else {
		r = ok && h.cond.matches(v)
	}
	return r != h.invert
}

// Matches reports whether req satisfies every condition of the rule's match. A rule with
// an empty match applies to every request. Matches reads only the request values its
// conditions need, cheapest first, and does not allocate.
func (r *Rule) Matches(req Request) bool {
	m := &r.match
	if len(m.routeNames) > 0 && !containsString(m.routeNames, req.RouteName()) {
		return false
	}
	if len(m.methods) > 0 {
		method := req.Method()
		found := false
		for _, x := range m.methods {
			if strings.EqualFold(x, method) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	if len(m.hosts) > 0 && !matchHost(m.hosts, req.Host()) {
		return false
	}
	if m.path.kind != matchNone && !m.path.matches(urlPath(req.Path())) {
		return false
	}
	for i := range m.headers {
		if !m.headers[i].matches(req) {
			return false
		}
	}
	return true
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// matchHost reports whether host matches one of the patterns. A pattern is compared with the
// whole authority first and then with the authority without its port, so "api.example.com"
// matches "api.example.com:8443" as Envoy's virtual-host domains do.
func matchHost(patterns []hostPattern, host string) bool {
	bare := stripPort(host)
	for i := range patterns {
		p := &patterns[i]
		switch {
		case p.any:
			return true
		case p.suffix:
			if hasSuffixFold(bare, p.value) && len(bare) > len(p.value) {
				return true
			}
		case strings.EqualFold(host, p.value), strings.EqualFold(bare, p.value):
			return true
		}
	}
	return false
}

// stripPort returns the authority without a trailing ":port". Bracketed IPv6 literals keep
// their brackets; a bare IPv6 literal (more than one colon) is returned unchanged.
func stripPort(host string) string {
	if strings.HasPrefix(host, "[") {
		if i := strings.IndexByte(host, ']'); i >= 0 {
			return host[:i+1]
		}
		return host
	}
	i := strings.LastIndexByte(host, ':')
	if i < 0 || strings.IndexByte(host, ':') != i {
		return host
	}
	return host[:i]
}

func hasSuffixFold(s, suffix string) bool {
	return len(s) >= len(suffix) && strings.EqualFold(s[len(s)-len(suffix):], suffix)
}

// urlPath returns the :path without its query string.
func urlPath(p string) string {
	if i := strings.IndexByte(p, '?'); i >= 0 {
		return p[:i]
	}
	return p
}
