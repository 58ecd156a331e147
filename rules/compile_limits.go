package rules

import (
	"strconv"
	"strings"

	"github.com/meshlimit/meshlimit/algorithms"
)

// limits compiles a list of limits (a rule's, an override's, a fallback or an overflow), each a
// rate limit or a concurrency limit, refusing a policy name given twice.
func (v *validator) limits(path string, ljs []limitJSON, rule string) []LimitSpec {
	out := make([]LimitSpec, 0, len(ljs))
	seen := map[string]int{}
	for i := range ljs {
		lj := &ljs[i]
		lp := path + "[" + strconv.Itoa(i) + "]"
		s := LimitSpec{Name: v.limitName(lp, lj.Name, rule, i, len(ljs)), Index: i}
		if j, dup := seen[s.Name]; dup {
			v.failf(lp+".name", "policy name %q is already used by %s[%d]", s.Name, path, j)
		}
		seen[s.Name] = i
		if lj.Concurrency.Set {
			v.concurrencyLimit(lp, lj, &s)
		} else {
			v.rateLimit(lp, lj, &s)
		}
		out = append(out, s)
	}
	return out
}

// limitName returns the policy name of limit i of a list of n: its own name, else the rule's, with
// "-i" when the list has more than one limit.
func (v *validator) limitName(lp, name, rule string, i, n int) string {
	switch {
	case name == "" && n > 1:
		return rule + "-" + strconv.Itoa(i)
	case name == "":
		return rule
	case !validPolicyName(name):
		v.failf(lp+".name", "%q is not a valid policy name: want 1 to 64 of [A-Za-z0-9_.-], starting with a letter or digit", name)
	}
	return name
}

// rateLimit compiles a limit that sets a rate (with its algorithm and burst) into s; it reports
// problems at the limit's fields.
func (v *validator) rateLimit(lp string, lj *limitJSON, s *LimitSpec) {
	if q, u, cal := calendarRate(lj.Rate); cal {
		if v.calendarLimit(lp, lj, s, q, u) {
			if err := s.Limit.Validate(); err != nil {
				v.failf(lp, "%v", err)
			}
		}
		s.Fingerprint = limitFingerprint(s.Limit)
		return
	}
	if lj.CalendarOffset != nil {
		v.checkCalendarOffset(lp, lj)
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
		c.max = defaultMaxCost
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
