package rules

import (
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"
)

// empty reports whether mj sets no condition (the rule matches every request).
func (mj *matchJSON) empty() bool {
	return len(mj.RouteNames) == 0 && len(mj.Hosts) == 0 && mj.Path == nil && len(mj.Methods) == 0 && len(mj.Headers) == 0
}

func (v *validator) match(path string, mj *matchJSON) match {
	var m match
	for _, list := range [...]struct {
		name  string
		items []string
	}{{"route_names", mj.RouteNames}, {"hosts", mj.Hosts}, {"methods", mj.Methods}} {
		if len(list.items) > maxListItems {
			v.failf(path+"."+list.name, "%d items: at most %d are allowed", len(list.items), maxListItems)
		}
	}
	for i, rn := range mj.RouteNames {
		if rn == "" {
			v.failf(path+".route_names["+strconv.Itoa(i)+"]", "empty route name")
		}
		m.routeNames = append(m.routeNames, rn)
	}
	for i, h := range mj.Hosts {
		if hp, ok := v.hostPattern(path+".hosts["+strconv.Itoa(i)+"]", h); ok {
			m.hosts = append(m.hosts, hp)
		}
	}
	for i, meth := range mj.Methods {
		if !isToken(meth) {
			v.failf(path+".methods["+strconv.Itoa(i)+"]", "%q is not a valid method", meth)
		}
		m.methods = append(m.methods, strings.ToUpper(meth))
	}
	if pj := mj.Path; pj != nil {
		pp := path + ".path"
		m.path = v.stringMatch(pp, pj.Exact, pj.Prefix, pj.Regex, "exact, prefix or regex")
		v.pathValue(pp, &m.path, pj.IgnoreCase)
	}
	if len(mj.Headers) > maxListItems {
		v.failf(path+".headers", "%d items: at most %d are allowed", len(mj.Headers), maxListItems)
	}
	for i := range mj.Headers {
		m.headers = append(m.headers, v.headerMatch(path+".headers["+strconv.Itoa(i)+"]", &mj.Headers[i]))
	}
	m.finish()
	return m
}

// hostPattern compiles one match.hosts entry: lower-case, without a trailing dot, and refused with
// a port (hosts are compared without theirs).
func (v *validator) hostPattern(path, h string) (hostPattern, bool) {
	h = strings.ToLower(h)
	if len(h) > 1 && h[len(h)-1] == '.' {
		h = h[:len(h)-1] // hosts are compared without their trailing dot
	}
	switch {
	case stripPort(h) != h:
		v.failf(path, "%q: hosts are compared without their port; write %q", h, stripPort(h))
	case h == "":
		v.failf(path, "empty host")
	case h == "*":
		return hostPattern{any: true}, true
	case strings.HasPrefix(h, "*."):
		if strings.IndexByte(h[1:], '*') >= 0 || len(h) == 2 {
			v.failf(path, "%q: a wildcard is only allowed as a leading \"*.\" followed by a domain", h)
		}
		return hostPattern{value: h[1:], suffix: true}, true
	case strings.IndexByte(h, '*') >= 0:
		v.failf(path, "%q: a wildcard is only allowed as a leading \"*.\" or alone", h)
	default:
		return hostPattern{value: h}, true
	}
	return hostPattern{}, false
}

// headerMatch compiles one match.headers entry.
func (v *validator) headerMatch(path string, hj *headerMatchJSON) headerMatch {
	h := headerMatch{name: strings.ToLower(hj.Name), invert: hj.Invert}
	if hj.Name == "" {
		v.failf(path+".name", "required")
	} else if !isToken(hj.Name) {
		v.failf(path+".name", "%q is not a valid header name", hj.Name)
	}
	if hj.Present != nil {
		if hj.Exact != nil || hj.Prefix != nil || hj.Regex != nil {
			v.failf(path, "set exactly one of present, exact, prefix or regex")
		}
		h.cond.kind, h.absent = matchPresent, !*hj.Present
	} else {
		h.cond = v.stringMatch(path, hj.Exact, hj.Prefix, hj.Regex, "present, exact, prefix or regex")
	}
	return h
}

// stringMatch compiles the one set field of exact, prefix and regex.
func (v *validator) stringMatch(path string, exact, prefix, re *string, want string) stringMatch {
	n := 0
	var m stringMatch
	if exact != nil {
		n++
		m = stringMatch{kind: matchExact, value: *exact}
	}
	if prefix != nil {
		n++
		m = stringMatch{kind: matchPrefix, value: *prefix}
	}
	if re != nil {
		n++
		m = stringMatch{kind: matchRegex, value: *re}
		if len(*re) > maxRegexLen {
			v.failf(path+".regex", "longer than %d bytes", maxRegexLen)
		} else if c, err := compileRegex(*re); err != nil {
			v.failf(path+".regex", "%v", err)
			m.kind = matchNone
		} else {
			m.re = c
		}
	}
	if n != 1 {
		v.failf(path, "set exactly one of %s", want)
	}
	return m
}

// compileRegex compiles re anchored at both ends, refusing a program larger than
// maxRegexProgram.
func compileRegex(re string) (*regexp.Regexp, error) {
	anchored := `^(?:` + re + `)$`
	n, err := regexProgramSize(anchored)
	if err != nil {
		return nil, err
	}
	if n > maxRegexProgram {
		return nil, errorf("%q compiles to %d instructions: at most %d are allowed (like Envoy's re2.max_program_size); simplify counted repetitions such as {n,m}", re, n, maxRegexProgram)
	}
	return regexp.Compile(anchored)
}

// regexProgramSize returns the number of instructions of the compiled program of re, as
// package regexp builds it (parsed with Perl flags, simplified, compiled).
func regexProgramSize(re string) (int, error) {
	parsed, err := syntax.Parse(re, syntax.Perl)
	if err != nil {
		return 0, err
	}
	prog, err := syntax.Compile(parsed.Simplify())
	if err != nil {
		return 0, err
	}
	return len(prog.Inst), nil
}

// pathValue checks a compiled path match: exact and prefix values start with "/" and are
// already normalized (a value that normalization would change could never match), and
// ignore_case applies to exact and prefix only.
func (v *validator) pathValue(path string, m *stringMatch, ignoreCase bool) {
	switch m.kind {
	case matchExact, matchPrefix:
		m.ignoreCase, m.path = ignoreCase, true
		if !strings.HasPrefix(m.value, "/") {
			v.failf(path, "%q must start with \"/\"", m.value)
			return
		}
		// A prefix may end inside a segment ("/v1." matches "/v1.0/x"): it is checked as the start
		// of a longer segment, so that only what normalization changes in any path it begins is refused.
		probe := m.value
		if m.kind == matchPrefix {
			probe += "x"
		}
		if norm := string(AppendNormalizedPath(nil, probe)); norm != probe {
			norm = string(AppendNormalizedPath(nil, m.value))
			v.failf(path, "%q never matches: paths are matched in normalized form; write %q", m.value, norm)
		}
	case matchRegex:
		if ignoreCase {
			v.failf(path+".ignore_case", "only exact and prefix take ignore_case; start the regex with (?i) instead")
		}
	}
}
