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
	// HeaderValue returns the i-th value (from 0, in the order the host holds them) of the
	// request header name, which is always lower-case; the bool is false when the header has
	// fewer than i+1 values. A header repeated in the request has one value per occurrence,
	// as Envoy keeps them (Envoy itself joins repeated values of a few headers it indexes,
	// x-forwarded-for among them, into one value with ",").
	HeaderValue(name string, i int) (string, bool)
	// Method returns the :method pseudo-header.
	Method() string
	// Path returns the :path pseudo-header, including the query string.
	Path() string
	// NormalizedPath returns AppendNormalizedPath of Path(). Implementations compute it at
	// most once per request, into a buffer they keep, so that it does not allocate.
	NormalizedPath() string
	// Host returns the :authority pseudo-header (the Host header in HTTP/1).
	Host() string
	// RouteName returns the Envoy route name (the xds.route_name property), or "".
	RouteName() string
	// SourceAddress returns the source.address property: "ip:port", or "[ipv6]:port".
	SourceAddress() string
	// SourceAddr returns ParseClientAddr(SourceAddress()), parsed at most once per request.
	SourceAddr() ClientAddr
	// Property returns an Envoy attribute by its path segments, e.g.
	// ["metadata", "filter_metadata", "envoy.filters.http.jwt_authn", "payload", "sub"];
	// the slice is the plugin's to pass to proxywasm.GetProperty as is and must not be
	// modified. Non-string values are returned as their raw host encoding.
	Property(path []string) (string, bool)
}

// match is a compiled rule match: every condition that is set must hold.
type match struct {
	all        bool // no condition: every request matches (see finish)
	routeNames []string
	hosts      []hostPattern
	methods    []string
	path       stringMatch // against the normalized path; kind 0 = any path
	headers    []headerMatch
}

// hostPattern matches a host name, compared lower-case without port or trailing dot. A suffix
// pattern ("*.example.com", stored as ".example.com") matches any host that ends with it; "*"
// matches every host.
type hostPattern struct {
	value  string // lower-case, without a trailing dot
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
	kind       stringKind
	value      string
	ignoreCase bool           // exact and prefix compare ASCII case-insensitively (path only)
	path       bool           // a path match: one trailing slash does not tell two paths apart
	re         *regexp.Regexp // anchored at both ends: the whole value must match
}

// matches reports whether s satisfies m. tooLong is true, and matched false, when m is a regex
// and s is longer than maxRegexInput, so the regex was not run.
func (m *stringMatch) matches(s string) (matched, tooLong bool) {
	switch m.kind {
	case matchExact:
		if m.path { // "/login" and "/login/" are one resource to most upstreams
			return m.equal(trimSlash(s), trimSlash(m.value)), false
		}
		return m.equal(s, m.value), false
	case matchPrefix:
		if m.path && len(m.value) > 1 && m.value[len(m.value)-1] == '/' && m.equal(s, m.value[:len(m.value)-1]) {
			return true, false // prefix "/api/" holds for "/api" too
		}
		return len(s) >= len(m.value) && m.equal(s[:len(m.value)], m.value), false
	case matchRegex:
		if len(s) > maxRegexInput {
			return false, true
		}
		return m.re.MatchString(s), false
	}
	return true, false
}

// equal compares two strings as m does: exactly, or ASCII case-insensitively with ignoreCase.
func (m *stringMatch) equal(a, b string) bool {
	if m.ignoreCase {
		return strings.EqualFold(a, b)
	}
	return a == b
}

// trimSlash drops one trailing slash of a path other than the root.
func trimSlash(p string) string {
	if len(p) > 1 && p[len(p)-1] == '/' {
		return p[:len(p)-1]
	}
	return p
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

// matches evaluates the condition on every value of the header and holds when it holds for at
// least one of them (after invert). A client that repeats a header therefore cannot hide a value
// that makes a rule apply behind one that does not: "exact: premium" holds when any value is
// premium, and "exact: premium, invert: true" holds unless every value is premium. A value too
// long for a regex makes the condition hold.
func (h *headerMatch) matches(req HeaderSource) bool {
	if h.cond.kind == matchPresent {
		_, ok := req.HeaderValue(h.name, 0)
		return (ok != h.absent) != h.invert
	}
	for i := 0; ; i++ {
		v, ok := req.HeaderValue(h.name, i)
		if !ok {
			return i == 0 && h.invert // a missing header never matches a value
		}
		m, tooLong := h.cond.matches(v)
		if tooLong || m != h.invert {
			return true
		}
	}
}

// Matches reports whether req satisfies every condition of the rule's match. A rule with
// an empty match applies to every request. Matches reads only the request values its
// conditions need, cheapest first, and does not allocate.
//
// Paths are compared in their normalized form (AppendNormalizedPath), hosts lower-case without
// their port and trailing dot, and repeated headers value by value (headerMatch.matches).
func (r *Rule) Matches(req Request) bool { return r.match.all || r.match.matches(req) }

// finish marks a compiled match that has no condition, so that Matches answers it without a call.
func (m *match) finish() {
	m.all = len(m.routeNames) == 0 && len(m.hosts) == 0 && len(m.methods) == 0 && m.path.kind == matchNone && len(m.headers) == 0
}

// matches reports whether every condition of m holds for req (see Rule.Matches).
func (m *match) matches(req Request) bool {
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
	if m.path.kind != matchNone {
		if ok, tooLong := m.path.matches(req.NormalizedPath()); !ok && !tooLong {
			return false
		}
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

// matchHost reports whether the authority host matches one of the patterns. The authority is
// compared case-insensitively, without its port and without a trailing dot, so
// "API.example.com.:8443" matches the pattern "api.example.com".
func matchHost(patterns []hostPattern, host string) bool {
	bare := hostName(host)
	for i := range patterns {
		p := &patterns[i]
		switch {
		case p.any:
			return true
		case p.suffix:
			if hasSuffixFold(bare, p.value) && len(bare) > len(p.value) {
				return true
			}
		case strings.EqualFold(bare, p.value):
			return true
		}
	}
	return false
}

// hostName returns the authority without its ":port" and without one trailing dot: the form
// host patterns and the host key part compare. Bracketed IPv6 literals keep their brackets.
func hostName(host string) string {
	host = stripPort(host)
	if len(host) > 1 && host[len(host)-1] == '.' {
		host = host[:len(host)-1]
	}
	return host
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
