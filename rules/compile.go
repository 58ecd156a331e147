package rules

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
)

type validator struct {
	errs []error
}

func (v *validator) failf(path, format string, args ...any) {
	if len(v.errs) < maxErrors {
		v.errs = append(v.errs, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
}

func (v *validator) err() error { return joinErrors(v.errs) }

func (v *validator) config(doc *configJSON) *Config {
	c := &Config{Enforce: true, LogLevel: LogInfo}
	if doc.Enforce != nil {
		c.Enforce = *doc.Enforce
	}
	c.LogLevel = v.logLevel(doc.LogLevel)
	maxKeys := int64(DefaultMaxKeys)
	if doc.MaxKeys.Set {
		maxKeys = doc.MaxKeys.Value
		if maxKeys < 1 || maxKeys > MaxMaxKeys {
			v.failf("max_keys", "%d out of range: want 1 to %d", maxKeys, MaxMaxKeys)
			maxKeys = DefaultMaxKeys
		}
	}
	if doc.Global != nil {
		c.Global = v.global(doc.Global)
	}
	c.Response = v.response(&doc.Response)
	c.Shedders = v.shedders(doc)

	switch n := len(doc.Rules); {
	case n == 0:
		v.failf("rules", "at least one rule is required")
	case n > maxRules:
		v.failf("rules", "%d rules: at most %d are allowed", n, maxRules)
		doc.Rules = doc.Rules[:maxRules]
	}
	v.rules(doc.Rules, maxKeys, c)
	v.checkGlobalBounds(c)
	c.renderPolicies()
	c.summary = summarize(c)
	return c
}

// logLevel compiles log_level ("" is info).
func (v *validator) logLevel(name string) LogLevel {
	if name == "" {
		return LogInfo
	}
	for i, n := range logLevelNames {
		if n == name {
			return LogLevel(i)
		}
	}
	v.failf("log_level", "unknown level %q (want trace, debug, info, warn, error or critical)", name)
	return LogInfo
}

// rules compiles rules[] into c, refusing duplicate rule names and policy names.
func (v *validator) rules(rjs []ruleJSON, maxKeys int64, c *Config) {
	names := map[string]int{}
	policies := map[string]string{}
	for i := range rjs {
		path := "rules[" + strconv.Itoa(i) + "]"
		r := v.rule(path, &rjs[i], maxKeys, c)
		r.Index = i
		if r.Name != "" {
			if j, dup := names[r.Name]; dup {
				v.failf(path+".name", "%q is already the name of rules[%d]", r.Name, j)
			}
			names[r.Name] = i
		}
		for j, l := range r.limits() {
			lp := path + ".limits[" + strconv.Itoa(j) + "]"
			if prev, dup := policies[l.Name]; dup {
				v.failf(lp+".name", "policy name %q is already used by %s", l.Name, prev)
			}
			policies[l.Name] = lp
		}
		c.rules = append(c.rules, r)
	}
}

// validRuleName reports whether s is a rule name: 1 to 64 of [a-z0-9_-], starting with a letter or
// digit. (A byte loop rather than a package-level regexp: compiling one at start-up costs every VM
// its share of _initialize.)
func validRuleName(s string) bool {
	if len(s) == 0 || len(s) > maxRuleName || s[0] == '_' || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// validPolicyName reports whether s is a policy name: 1 to 64 of [A-Za-z0-9_.-], starting with a
// letter or digit.
func validPolicyName(s string) bool {
	if len(s) == 0 || len(s) > 64 || s[0] == '_' || s[0] == '.' || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

func (v *validator) rule(path string, rj *ruleJSON, maxKeys int64, c *Config) *Rule {
	r := &Rule{Name: rj.Name, Shadow: rj.Shadow || !c.Enforce, MaxKeys: int(maxKeys)}
	switch {
	case rj.Name == "":
		v.failf(path+".name", "required")
	case !validRuleName(rj.Name):
		v.failf(path+".name", "%q is not a valid rule name: want 1 to 64 of [a-z0-9_-], starting with a letter or digit", rj.Name)
	}
	r.match = v.match(path+".match", &rj.Match)
	v.ruleKey(path, rj, r)
	if rj.MaxKeys.Set {
		if n := rj.MaxKeys.Value; n < 1 || n > MaxMaxKeys {
			v.failf(path+".max_keys", "%d out of range: want 1 to %d", n, MaxMaxKeys)
		} else {
			r.MaxKeys = int(n)
		}
	}
	switch n := len(rj.Limits); {
	case n == 0:
		v.failf(path+".limits", "at least one limit is required")
	case n > maxLimits:
		v.failf(path+".limits", "%d limits: at most %d are allowed", n, maxLimits)
	}
	r.sets = []LimitSet{newLimitSet(0, v.limits(path+".limits", rj.Limits, rj.Name), r.MaxKeys, "")}
	r.cost = v.cost(path+".cost", rj.Cost)
	if len(rj.Overrides) > 0 {
		r.overrides = v.overrides(path+".overrides", rj.Overrides, r)
	}
	if rj.ShadowHeader != "" {
		if !isToken(rj.ShadowHeader) {
			v.failf(path+".shadow_header", "%q is not a valid header name", rj.ShadowHeader)
		}
		r.ShadowHeader = strings.ToLower(rj.ShadowHeader)
	}
	r.FailureMode = v.failureMode(path+".failure_mode", rj.FailureMode)
	v.ruleScope(path, rj, r, c)
	v.countOn(path+".count_on", rj.CountOn, r)
	v.cacheDenials(path+".cache_denials", rj.CacheDenials, r)
	v.checkSettle(path, r)
	if len(rj.Overflow) > maxLimits {
		v.failf(path+".overflow", "%d limits: at most %d are allowed", len(rj.Overflow), maxLimits)
	} else if len(rj.Overflow) > 0 {
		o := newLimitSet(0, v.limits(path+".overflow", rj.Overflow, rj.Name+"-overflow"), 1, "")
		r.overflow = &o
	}
	v.checkConcurrencyRule(path, rj, r)
	r.fingerprint = ruleFingerprint(r)
	return r
}

// ruleKey compiles a rule's key parts and missing_key.
func (v *validator) ruleKey(path string, rj *ruleJSON, r *Rule) {
	if len(rj.Key) > maxKeyParts {
		v.failf(path+".key", "%d parts: at most %d are allowed", len(rj.Key), maxKeyParts)
	}
	for i := range rj.Key {
		if p, ok := v.keyPart(path+".key["+strconv.Itoa(i)+"]", &rj.Key[i]); ok {
			r.key = append(r.key, p)
		}
	}
	switch rj.MissingKey {
	case "", "skip":
	case "default":
		r.MissingKey = MissingKeyDefault
	default:
		v.failf(path+".missing_key", "unknown value %q (want skip or default)", rj.MissingKey)
	}
}

func (v *validator) failureMode(path, s string) FailureMode {
	switch s {
	case "", "allow":
	case "deny":
		return FailDeny
	default:
		v.failf(path, "unknown value %q (want allow or deny)", s)
	}
	return FailAllow
}

// ruleScope compiles a rule's scope and what only global rules have: lease and fallback.
func (v *validator) ruleScope(path string, rj *ruleJSON, r *Rule, c *Config) {
	switch rj.Scope {
	case "", "local":
	case "global":
		r.Scope = ScopeGlobal
	case "both":
		r.Scope = ScopeBoth
	default:
		v.failf(path+".scope", "unknown value %q (want local, global or both)", rj.Scope)
	}
	if r.Scope != ScopeLocal && c.Global == nil {
		v.failf(path+".scope", "%q needs the top-level global object", rj.Scope)
	}
	if rj.Lease != nil {
		r.lease = v.lease(path+".lease", rj.Lease, r)
	}
	if len(rj.Fallback) > 0 {
		if r.Scope == ScopeLocal {
			v.failf(path+".fallback", "only rules with scope global or both have a fallback")
		} else if len(rj.Fallback) > maxLimits {
			v.failf(path+".fallback", "%d limits: at most %d are allowed", len(rj.Fallback), maxLimits)
		} else {
			fb := newLimitSet(0, v.limits(path+".fallback", rj.Fallback, rj.Name+"-fallback"), r.MaxKeys, "")
			r.fallback = &fb
		}
	}
}

func (v *validator) lease(path string, lj *leaseJSON, r *Rule) *Lease {
	l := &Lease{TTL: time.Second}
	switch {
	case r.Scope != ScopeGlobal:
		v.failf(path, "only rules with scope global lease quota")
	case !lj.Batch.Set:
		v.failf(path+".batch", "required")
	case lj.Batch.Value < 1 || lj.Batch.Value > 10000:
		v.failf(path+".batch", "%d out of range: want 1 to 10000", lj.Batch.Value)
	default:
		l.Batch = lj.Batch.Value
	}
	if lj.TTL != "" {
		d, err := parseDuration(lj.TTL)
		switch {
		case err != nil:
			v.failf(path+".ttl", "%v", err)
		case d < 10*time.Millisecond || d > time.Hour:
			v.failf(path+".ttl", "%s out of range: want 10ms to 1h", lj.TTL)
		default:
			l.TTL = d
		}
	}
	for i, spec := range r.limits() {
		if c := spec.Limit.Capacity(); l.Batch > c {
			v.failf(path+".batch", "%d exceeds the capacity %d of limits[%d]: such a batch could never be granted", l.Batch, c, i)
		}
	}
	return l
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

func (v *validator) keyPart(path string, kj *keyPartJSON) (keyPart, bool) {
	var p keyPart
	n := 0
	flag := func(b *bool, k keyKind) {
		if b == nil {
			return
		}
		n++
		p.kind = k
		if !*b {
			v.failf(path+"."+k.String(), "must be true (omit the part instead)")
		}
	}
	flag(kj.Path, keyPath)
	flag(kj.Method, keyMethod)
	flag(kj.Host, keyHost)
	flag(kj.RouteName, keyRouteName)
	if kj.ClientIP != nil {
		n++
		p.kind = keyClientIP
		cj := kj.ClientIP
		p.trustedHops = int(v.intIn(path+".client_ip.trusted_hops", cj.TrustedHops, 0, maxTrustedHops))
		p.v4Bits = v.maskBits(path+".client_ip.ipv4_mask", cj.IPv4Mask, DefaultIPv4Mask, 32)
		p.v6Bits = v.maskBits(path+".client_ip.ipv6_mask", cj.IPv6Mask, DefaultIPv6Mask, 128)
	}
	if kj.Header != nil {
		n++
		p.kind, p.name = keyHeader, strings.ToLower(*kj.Header)
		if !isToken(*kj.Header) {
			v.failf(path+".header", "%q is not a valid header name", *kj.Header)
		}
	}
	if kj.Query != nil {
		n++
		p.kind, p.name = keyQuery, *kj.Query
		if *kj.Query == "" {
			v.failf(path+".query", "empty parameter name")
		}
	}
	if kj.Constant != nil {
		n++
		p.kind, p.name = keyConstant, *kj.Constant
		if *kj.Constant == "" || len(*kj.Constant) > maxPartLen {
			v.failf(path+".constant", "want 1 to %d bytes", maxPartLen)
		}
	}
	if kj.Property != nil {
		n++
		p.kind, p.property = keyProperty, kj.Property.segments
		if len(p.property) == 0 {
			v.failf(path+".property", "empty property path")
		}
		for _, s := range p.property {
			if s == "" {
				v.failf(path+".property", "empty segment in %q", strings.Join(p.property, "."))
				break
			}
		}
	}
	if n != 1 {
		v.failf(path, "set exactly one of client_ip, header, path, method, host, route_name, query, constant or property")
		return p, false
	}
	return p, true
}

// intIn returns o's value, or lo when unset, reporting a value outside [lo, hi].
func (v *validator) intIn(path string, o optInt, lo, hi int64) int64 {
	if !o.Set {
		return lo
	}
	if o.Value < lo || o.Value > hi {
		v.failf(path, "%d out of range: want %d to %d", o.Value, lo, hi)
		return lo
	}
	return o.Value
}

func (v *validator) limits(path string, ljs []limitJSON, rule string) []LimitSpec {
	out := make([]LimitSpec, 0, len(ljs))
	seen := map[string]int{}
	for i := range ljs {
		lj := &ljs[i]
		lp := path + "[" + strconv.Itoa(i) + "]"
		s := LimitSpec{Name: lj.Name, Index: i}
		if s.Name == "" {
			s.Name = rule
			if len(ljs) > 1 {
				s.Name = rule + "-" + strconv.Itoa(i)
			}
		} else if !validPolicyName(s.Name) {
			v.failf(lp+".name", "%q is not a valid policy name: want 1 to 64 of [A-Za-z0-9_.-], starting with a letter or digit", s.Name)
		}
		if j, dup := seen[s.Name]; dup {
			v.failf(lp+".name", "policy name %q is already used by %s[%d]", s.Name, path, j)
		}
		seen[s.Name] = i
		if lj.Concurrency.Set {
			v.concurrencyLimit(lp, lj, &s)
			out = append(out, s)
			continue
		}

		ok := true
		if lj.Rate == "" {
			v.failf(lp+".rate", "required")
			ok = false
		} else if q, w, err := parseRate(lj.Rate); err != nil {
			v.failf(lp+".rate", "%v", err)
			ok = false
		} else {
			s.Limit.Quota, s.Limit.Window = q, w
		}
		algo := lj.Algorithm
		if algo == "" {
			algo = "token_bucket"
		}
		if k, err := algorithms.ParseKind(algo); err != nil {
			v.failf(lp+".algorithm", "unknown algorithm %q (want token_bucket, leaky_bucket, fixed_window, sliding_log or sliding_window)", algo)
			ok = false
		} else {
			s.Limit.Kind = k
		}
		if lj.Burst.Set {
			if k := s.Limit.Kind; !k.TakesBurst() && k != 0 {
				v.failf(lp+".burst", "only token_bucket and leaky_bucket take a burst, not %s", k)
				ok = false
			} else if lj.Burst.Value < 1 {
				v.failf(lp+".burst", "%d: want a positive integer", lj.Burst.Value)
				ok = false
			}
			s.Limit.Burst = lj.Burst.Value
		}
		if ok {
			if err := s.Limit.Validate(); err != nil {
				v.failf(lp, "%v", err)
			}
		}
		s.Fingerprint = limitFingerprint(s.Limit)
		out = append(out, s)
	}
	return out
}

func (v *validator) cost(path string, cj *costJSON) costSpec {
	c := costSpec{constant: 1}
	switch {
	case cj == nil:
	case cj.object == nil:
		c.constant = v.intIn(path, cj.constant, 1, maxCostValue)
	default:
		o := cj.object
		c.constant = 0
		if o.Header != "" && !isToken(o.Header) {
			v.failf(path+".header", "%q is not a valid header name", o.Header)
		}
		c.header = strings.ToLower(o.Header)
		c.def = v.intIn(path+".default", o.Default, 1, maxCostValue)
		c.max = DefaultMaxCost
		if o.Max.Set {
			c.max = v.intIn(path+".max", o.Max, 1, maxCostValue)
		}
		if c.def > c.max {
			v.failf(path+".default", "%d is above max %d", c.def, c.max)
		}
		v.costSource(path, o, &c) // settle.go: the body and settle forms
	}
	return c
}

func (v *validator) overrides(path string, ojs []overrideJSON, r *Rule) map[string]int {
	if len(ojs) > maxOverrides {
		v.failf(path, "%d overrides: at most %d are allowed", len(ojs), maxOverrides)
		return nil
	}
	if len(r.key) == 0 {
		v.failf(path, "overrides need key parts: without them every request has the same key")
		return nil
	}
	m := make(map[string]int, len(ojs))
	for i := range ojs {
		oj := &ojs[i]
		op := path + "[" + strconv.Itoa(i) + "]"
		if oj.Value == nil {
			v.failf(op+".value", "required")
			continue
		}
		val := *oj.Value
		if val == "" && r.MissingKey != MissingKeyDefault {
			v.failf(op+".value", `"" names the shared bucket of missing_key "default", which this rule does not use`)
		} else if val != "" {
			if err := checkKeyValue(val, r.key); err != nil {
				v.failf(op+".value", "%v", err)
			}
		}
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
			m[val] = len(r.sets)
			r.sets = append(r.sets, newLimitSet(len(r.sets), v.limits(op+".limits", oj.Limits, r.Name), 1, val))
		}
	}
	return m
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
		if len(part) == 0 {
			return fmt.Errorf("part %d (%s) is empty, and an empty part is never a key value", idx+1, parts[idx].kind)
		}
		if len(part) > maxPartLen {
			return fmt.Errorf("part %d (%s) is longer than %d bytes: such values are hashed and cannot be overridden", idx+1, parts[idx].kind, maxPartLen)
		}
		if parts[idx].kind == keyClientIP {
			var buf [64]byte
			p := parts[idx]
			want, ok := p.canonicalIP(buf[:0], string(part))
			if !ok {
				return fmt.Errorf("part %d (client_ip) %q is not an IP address", idx+1, part)
			}
			if string(want) != string(part) {
				return fmt.Errorf("part %d (client_ip) %q never matches: the key holds %q", idx+1, part, want)
			}
		}
		return checkNormalizedPart(idx, &parts[idx], string(part))
	}
	for i := 0; i < len(val); i++ {
		c := val[i]
		switch c {
		case '\\':
			if i+1 >= len(val) || (val[i+1] != '\\' && val[i+1] != '|') {
				return fmt.Errorf(`invalid escape at byte %d: only \\ and \| are escapes`, i)
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
		return fmt.Errorf("%d parts, but the key has %d (%s); separate parts with \"|\"", idx+1, len(parts), describeKey(parts))
	}
	return nil
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

func (v *validator) global(gj *globalJSON) *Global {
	g := &Global{Cluster: gj.Cluster, Authority: gj.Authority, Path: gj.Path, Timeout: DefaultGlobalTimeout,
		Secret: gj.Secret, BreakerFailures: DefaultBreakerFailures, BreakerCooldown: DefaultBreakerCooldown,
		ResetPoll: v.resetPoll(gj.ResetPoll)}
	if gj.SecretEnv != "" {
		if s := os.Getenv(gj.SecretEnv); s != "" {
			g.Secret = s
		}
	}
	if b := gj.Breaker; b != nil {
		if b.Failures.Set {
			if n := b.Failures.Value; n < 1 || n > 1000 {
				v.failf("global.breaker.failures", "%d out of range: want 1 to 1000", n)
			} else {
				g.BreakerFailures = int(n)
			}
		}
		if b.Cooldown != "" {
			d, err := parseDuration(b.Cooldown)
			switch {
			case err != nil:
				v.failf("global.breaker.cooldown", "%v", err)
			case d < 100*time.Millisecond || d > time.Hour:
				v.failf("global.breaker.cooldown", "%s out of range: want 100ms to 1h", b.Cooldown)
			default:
				g.BreakerCooldown = d
			}
		}
	}
	if g.Cluster == "" {
		v.failf("global.cluster", "required")
	}
	if g.Authority == "" {
		// Istio cluster names are direction|port|subset|host.
		if f := strings.Split(g.Cluster, "|"); len(f) == 4 && f[3] != "" {
			g.Authority = f[3]
		} else if g.Cluster != "" {
			v.failf("global.authority", "required unless global.cluster is an Istio cluster name (outbound|port||host)")
		}
	}
	if g.Path == "" {
		g.Path = DefaultGlobalPath
	} else if !strings.HasPrefix(g.Path, "/") {
		v.failf("global.path", "%q must start with \"/\"", g.Path)
	}
	if gj.Timeout != "" {
		d, err := parseDuration(gj.Timeout)
		switch {
		case err != nil:
			v.failf("global.timeout", "%v", err)
		case d < time.Millisecond || d > maxGlobalTime:
			v.failf("global.timeout", "%s out of range: want 1ms to 1m", gj.Timeout)
		default:
			g.Timeout = d
		}
	}
	return g
}

// isToken reports whether s is a non-empty RFC 9110 token (header names, methods).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// limitFingerprint hashes one limit's canonical form: algorithm, quota, window and the
// effective burst (an unset burst and a burst equal to the quota hash alike).
