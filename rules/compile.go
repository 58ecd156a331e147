package rules

import (
	"fmt"
	"strconv"
	"strings"
)

// validator collects field errors while compiling.
type validator struct {
	errs []error
	// overrideCount counts the overrides of the rules compiled so far, overrideLimits the limits of
	// their distinct limit lists, overrideLimitsWritten all they write (compile_overrides.go): each
	// is bounded per configuration.
	overrideCount, overrideLimits, overrideLimitsWritten int
}

func (v *validator) failf(path, format string, args ...any) {
	if len(v.errs) < maxErrors {
		v.errs = append(v.errs, &FieldError{Path: path, Msg: fmt.Sprintf(format, bounded(args)...)})
	}
}

func (v *validator) err() error { return joinErrors(v.errs) }

func (v *validator) config(doc *configJSON) *Config {
	c := &Config{Enforce: true, LogLevel: LogInfo}
	if doc.Enforce != nil {
		c.Enforce = *doc.Enforce
	}
	c.LogLevel = v.logLevel(doc.LogLevel)
	maxKeys := int64(defaultMaxKeys)
	if doc.MaxKeys.Set {
		maxKeys = doc.MaxKeys.Value
		if maxKeys < 1 || maxKeys > maxMaxKeys {
			v.failf("max_keys", "%d out of range: want 1 to %d", maxKeys, maxMaxKeys)
			maxKeys = defaultMaxKeys
		}
	}
	c.SettleMemory = defaultSettleMemory
	if doc.SettleMemory.Set {
		c.SettleMemory = int(v.intIn("settle_memory", doc.SettleMemory, defaultMaxBody, maxSettleMemory))
	}
	if doc.Global != nil {
		c.Global = v.global(doc.Global)
	}
	c.Response = v.response(&doc.Response)
	if doc.Shed != nil || len(doc.Shedders) > 0 {
		c.Shedders = v.shedders(doc)
	}

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
		dupName := false
		if r.Name != "" {
			if j, dup := names[r.Name]; dup {
				v.failf(path+".name", "%q is already the name of rules[%d]", r.Name, j)
				dupName = true
			}
			names[r.Name] = i
		}
		for j, l := range r.limits() {
			if dupName && namedAfterRule(rjs[i].Limits, l.Index) {
				continue // its policy name is the duplicate rule name, reported once above
			}
			lp := path + ".limits[" + strconv.Itoa(j) + "]"
			if prev, dup := policies[l.Name]; dup {
				v.failf(lp+".name", "policy name %q is already used by %s", l.Name, prev)
			}
			policies[l.Name] = lp
		}
		c.rules = append(c.rules, r)
	}
}

// namedAfterRule reports whether limit i of ljs has no name of its own (its policy name is the
// rule's).
func namedAfterRule(ljs []limitJSON, i int) bool { return i < len(ljs) && ljs[i].Name == "" }

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
	if len(s) == 0 || len(s) > maxNameLen || s[0] == '_' || s[0] == '.' || s[0] == '-' {
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
	// The validators of optional sections are called only when the section is there: V8 compiles
	// a function on its first call, so one that would only find its section absent costs the cold
	// start its compilation for nothing (docs/performance.md, "Cold start").
	r.match = match{all: true}
	if !rj.Match.empty() {
		r.match = v.match(path+".match", &rj.Match)
	}
	v.ruleKey(path, rj, r)
	if rj.MaxKeys.Set {
		if n := rj.MaxKeys.Value; n < 1 || n > maxMaxKeys {
			v.failf(path+".max_keys", "%d out of range: want 1 to %d", n, maxMaxKeys)
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
	r.cost = costSpec{constant: 1}
	if rj.Cost != nil {
		r.cost = v.cost(path+".cost", rj.Cost)
	}
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
	if rj.Scope != "" || rj.Lease != nil || len(rj.Fallback) > 0 {
		v.ruleScope(path, rj, r, c)
	}
	if rj.CountOn != nil {
		v.countOn(path+".count_on", rj.CountOn, r)
	}
	if rj.CacheDenials != nil || r.Scope != ScopeLocal {
		v.cacheDenials(path+".cache_denials", rj.CacheDenials, r)
	}
	if r.cost.reserve != nil {
		v.checkSettle(path, r)
	}
	if len(rj.Overflow) > maxLimits {
		v.failf(path+".overflow", "%d limits: at most %d are allowed", len(rj.Overflow), maxLimits)
	} else if len(rj.Overflow) > 0 {
		o := newLimitSet(0, v.limits(path+".overflow", rj.Overflow, rj.Name+"-overflow"), 1, "")
		r.overflow = &o
	}
	r.EnforcePercent = 100
	if rj.EnforcePercent.Set || setsConcurrency(rj) {
		v.checkConcurrencyRule(path, rj, r)
	}
	r.fingerprint = ruleFingerprint(r)
	if rj.Messages != nil {
		v.messages(path, rj, r)
	}
	return r
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
