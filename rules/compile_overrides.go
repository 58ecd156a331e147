package rules

import (
	"slices"
	"strconv"
	"strings"
)

// overrides compiles a rule's overrides into r.sets and returns the map from each override's
// value to its set's index (-1: unlimited). Overrides whose limits compile alike share one
// []LimitSpec (sharedLimits), so a configuration of many overrides and a few tiers holds each
// tier's limits once. The configuration's overrides are bounded (maxOverrides), and so are the
// limits they write (maxOverrideLimitsWritten) and those of their distinct lists
// (maxOverrideLimits): what a VM holds for them is bounded.
func (v *validator) overrides(path string, ojs []overrideJSON, r *Rule) map[string]int {
	if v.overrideCount += len(ojs); v.overrideCount > maxOverrides {
		v.failf(path, "%d overrides, %d in the configuration so far: at most %d are allowed in the whole configuration", len(ojs), v.overrideCount, maxOverrides)
		return nil
	}
	if len(r.key) == 0 {
		v.failf(path, "overrides need key parts: without them every request has the same key")
		return nil
	}
	m := make(map[string]int, len(ojs))
	r.sets = slices.Grow(r.sets, len(ojs))
	shared := map[uint64][]LimitSpec{}
	for i := range ojs {
		oj := &ojs[i]
		op := path + "[" + strconv.Itoa(i) + "]"
		if oj.Value == nil {
			v.failf(op+".value", "required")
			continue
		}
		val := *oj.Value
		v.overrideValue(op+".value", val, r)
		if _, dup := m[val]; dup {
			v.failf(op+".value", "%q is overridden twice", val)
		}
		m[val] = -1
		switch {
		case oj.Unlimited && len(oj.Limits) > 0:
			v.failf(op, "set limits or unlimited, not both")
		case !oj.Unlimited && len(oj.Limits) == 0:
			v.failf(op, "set limits or unlimited: true")
		case len(oj.Limits) > maxLimits:
			v.failf(op+".limits", "%d limits: at most %d are allowed", len(oj.Limits), maxLimits)
		case !oj.Unlimited:
			v.countWritten(op+".limits", len(oj.Limits))
			m[val] = len(r.sets)
			r.sets = append(r.sets, newLimitSet(len(r.sets), v.sharedLimits(op+".limits", oj.Limits, r.Name, shared), 1, val))
		}
	}
	return m
}

// overrideValue checks an override's value against the rule's key.
func (v *validator) overrideValue(path, val string, r *Rule) {
	if val == "" && r.MissingKey != MissingKeyDefault {
		v.failf(path, `"" names the shared bucket of missing_key "default", which this rule does not use`)
	} else if val != "" {
		if err := checkKeyValue(val, r.key); err != nil {
			v.failf(path, "%v", err)
		}
	}
}

// sharedLimits compiles an override's limits and returns, when an earlier override of the rule
// compiled to equal limits, that override's list instead (seen maps a list's set fingerprint to
// the first list with it). The limits of each new list count against maxOverrideLimits.
func (v *validator) sharedLimits(path string, ljs []limitJSON, rule string, seen map[uint64][]LimitSpec) []LimitSpec {
	specs := v.limits(path, ljs, rule)
	fp := newLimitSet(0, specs, 1, "").Fingerprint
	prev, ok := seen[fp]
	if ok && equalLimits(prev, specs) {
		return prev
	}
	if !ok {
		seen[fp] = specs
	}
	before := v.overrideLimits
	if v.overrideLimits += len(specs); v.overrideLimits > maxOverrideLimits && before <= maxOverrideLimits {
		v.failf(path, "the overrides' distinct limit lists hold %d limits so far: at most %d are allowed in the whole configuration (overrides with equal limits share one list and count once)", v.overrideLimits, maxOverrideLimits)
	}
	return specs
}

// countWritten counts n limits an override writes against maxOverrideLimitsWritten, reporting
// the override where the bound is passed.
func (v *validator) countWritten(path string, n int) {
	before := v.overrideLimitsWritten
	if v.overrideLimitsWritten += n; v.overrideLimitsWritten > maxOverrideLimitsWritten && before <= maxOverrideLimitsWritten {
		v.failf(path, "the overrides write %d limits so far: at most %d are allowed in the whole configuration", v.overrideLimitsWritten, maxOverrideLimitsWritten)
	}
}

// equalLimits reports whether two compiled limit lists are the same limits in the same order.
func equalLimits(a, b []LimitSpec) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := &a[i], &b[i]
		if x.Name != y.Name || x.Limit != y.Limit || x.Concurrency != y.Concurrency || x.ContentBytes != y.ContentBytes || x.Index != y.Index || x.Fingerprint != y.Fingerprint {
			return false
		}
	}
	return true
}

// checkKeyValue checks that an override value is a well-formed key value for the parts:
// the right number of '|'-separated parts, valid escapes, no part longer than maxPartLen,
// and client_ip parts written as AppendKey writes them.
func checkKeyValue(val string, parts []keyPart) error {
	var part []byte
	idx := 0
	flush := func() error {
		if idx >= len(parts) {
			return nil // counted below
		}
		return checkOverridePart(idx, &parts[idx], string(part))
	}
	for i := 0; i < len(val); i++ {
		c := val[i]
		switch c {
		case '\\':
			if i+1 >= len(val) || (val[i+1] != '\\' && val[i+1] != '|') {
				return errorf(`invalid escape at byte %d: only \\ and \| are escapes`, i)
			}
			i++
			part = append(part, val[i])
		case '|':
			if err := flush(); err != nil {
				return err
			}
			part = part[:0]
			idx++
		default:
			part = append(part, c)
		}
	}
	if err := flush(); err != nil {
		return err
	}
	if idx+1 != len(parts) {
		return errorf("%d parts, but the key has %d (%s); separate parts with \"|\"", idx+1, len(parts), describeKey(parts))
	}
	return nil
}

// checkOverridePart checks part idx of an override value, unescaped, against its key part p: it is
// not empty, not hashed, and written as the key holds it.
func checkOverridePart(idx int, p *keyPart, part string) error {
	if len(part) == 0 {
		return errorf("part %d (%s) is empty, and an empty part is never a key value", idx+1, p.kind)
	}
	if len(part) > maxPartLen {
		return errorf("part %d (%s) is longer than %d bytes: such values are hashed and cannot be overridden", idx+1, p.kind, maxPartLen)
	}
	if p.kind == keyClientIP {
		var buf [64]byte
		want, ok := p.canonicalIP(buf[:0], part)
		if !ok {
			return errorf("part %d (client_ip) %q is not an IP address", idx+1, part)
		}
		if string(want) != part {
			return errorf("part %d (client_ip) %q never matches: the key holds %q", idx+1, part, want)
		}
	}
	return checkNormalizedPart(idx, p, part)
}

// canonicalIP appends the key form of an address or prefix written in an override value.
func (p *keyPart) canonicalIP(dst []byte, s string) ([]byte, bool) {
	addrPart, _, _ := strings.Cut(s, "/")
	addr, ok := parseClientAddr(addrPart)
	if !ok || strings.ContainsAny(addrPart, "[]%") || strings.Count(addrPart, ":") == 1 {
		return dst, false
	}
	dst, st := p.appendMasked(dst, addr)
	return dst, st == KeyFound
}

func describeKey(parts []keyPart) string {
	names := make([]string, len(parts))
	for i, p := range parts {
		names[i] = p.kind.String()
	}
	return strings.Join(names, ", ")
}

// checkNormalizedPart reports an override part of a path or host key part that is not written
// the way the key holds it (normalized path; lower-case host without port and trailing dot):
// such an override could never match.
func checkNormalizedPart(idx int, p *keyPart, part string) error {
	var want string
	switch p.kind {
	case keyPath:
		want = string(AppendNormalizedPath(nil, part))
	case keyHost:
		want = strings.ToLower(hostName(part))
	default:
		return nil
	}
	if want != part {
		return errorf("part %d (%s) %q never matches: the key holds %q", idx+1, p.kind, part, want)
	}
	return nil
}
