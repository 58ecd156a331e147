package rules

import (
	"strconv"
	"strings"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
)

// countOnJSON is rules[].count_on: the rule charges a request only when its response matches.
type countOnJSON struct {
	// Status lists the response statuses that count: "401", a class "5xx", or a range
	// "400-404", each within 100 to 599. A response counts when its status is in any of them.
	Status []string `json:"status"`
	// Headers are response header conditions (the request match's header syntax), which must
	// all hold. With Status too, a response counts when both do. At least one of the two.
	Headers []headerMatchJSON `json:"headers"`
	// Penalty, when set, blocks the key for this long (1s to 24h) once a counted response
	// exhausts the limits or a charge is denied. Default: none (the limits alone block).
	Penalty string `json:"penalty"`
	// CountUnanswered charges a request whose stream ends without a response (the client
	// left first). Default true, so that leaving early never avoids the charge.
	CountUnanswered *bool `json:"count_unanswered"`
}

// CountOn is a compiled count_on: the request path only checks the key's state, and the
// response path charges it when the response matches.
type CountOn struct {
	// Penalty is how long the key stays blocked once it exhausts its limits; 0 for none.
	Penalty time.Duration
	// CountUnanswered charges a request that ended without a response.
	CountUnanswered bool

	status  []statusRange
	headers []headerMatch
}

// statusRange is an inclusive range of response statuses.
type statusRange struct{ lo, hi int }

// HeaderSource reads the values of a header by lower-case name: the i-th value (from 0) and
// whether there is one. Request implements it; so does the filter's view of response headers.
type HeaderSource interface {
	HeaderValue(name string, i int) (string, bool)
}

// Counts reports whether a response of this status and headers is charged: its status is
// in one of the ranges (when any are configured) and every header condition holds.
func (c *CountOn) Counts(status int, h HeaderSource) bool {
	if len(c.status) > 0 {
		in := false
		for _, r := range c.status {
			in = in || (status >= r.lo && status <= r.hi)
		}
		if !in {
			return false
		}
	}
	for i := range c.headers {
		if !c.headers[i].matches(h) {
			return false
		}
	}
	return true
}

// countOn compiles rules[].count_on onto r; cj is nil when the rule has none.
func (v *validator) countOn(path string, cj *countOnJSON, r *Rule) {
	if cj == nil {
		return
	}
	c := &CountOn{CountUnanswered: cj.CountUnanswered == nil || *cj.CountUnanswered}
	if len(cj.Status) == 0 && len(cj.Headers) == 0 {
		v.failf(path, "set status, headers or both")
	}
	if len(cj.Status) > maxStatusRanges {
		v.failf(path+".status", "%d items: at most %d are allowed", len(cj.Status), maxStatusRanges)
	}
	for i, s := range cj.Status {
		rg, ok := parseStatusRange(s)
		if !ok {
			v.failf(path+".status["+strconv.Itoa(i)+"]", `%q is not a status: want "401", a class such as "5xx", or a range such as "400-404", within 100 to 599`, s)
		}
		c.status = append(c.status, rg)
	}
	if len(cj.Headers) > maxResponseHeaders {
		v.failf(path+".headers", "%d items: at most %d are allowed", len(cj.Headers), maxResponseHeaders)
	} else if len(cj.Headers) > 0 {
		c.headers = v.match(path, &matchJSON{Headers: cj.Headers}).headers
	}
	if cj.Penalty != "" {
		d, err := parseDuration(cj.Penalty)
		switch {
		case err != nil:
			v.failf(path+".penalty", "%v", err)
		case d < minPenalty || d > maxPenalty:
			v.failf(path+".penalty", "%s out of range: want 1s to 24h", cj.Penalty)
		default:
			c.Penalty = d
		}
	}
	v.countOnFits(path, r)
	r.CountOn = c
}

// countOnFits refuses what a counted rule cannot do: decide at request time from the service
// alone (both, lease), charge elsewhere than its own limits (fallback, a settled cost, a
// concurrency limit), or delay a request (a leaky bucket shapes at request time, but the charge
// comes after the response).
func (v *validator) countOnFits(path string, r *Rule) {
	switch {
	case r.Scope == ScopeBoth:
		v.failf(path, `works with scope "local" or "global", not "both"`)
	case r.lease != nil:
		v.failf(path, "cannot be combined with lease: a counted rule charges after the response")
	case r.fallback != nil:
		v.failf(path, "cannot be combined with fallback: a counted response the service cannot charge is not charged")
	case r.cost.reserve != nil:
		v.failf(path, "cannot be combined with a cost that reserves and settles: the charge already waits for the response")
	case r.Concurrency() != nil:
		v.failf(path, "cannot be combined with a concurrency limit")
	}
	for _, set := range r.sets {
		for _, s := range set.Limits {
			if s.Limit.Kind == algorithms.LeakyBucket {
				v.failf(path, "limit %q is a leaky_bucket: a counted rule cannot delay a request, use token_bucket", s.Name)
				return
			}
		}
	}
}

// parseStatusRange parses "401", "5xx" or "400-404" within 100 to 599.
func parseStatusRange(s string) (statusRange, bool) {
	if len(s) == 3 && (s[1:] == "xx" || s[1:] == "XX") && s[0] >= '1' && s[0] <= '5' {
		lo := int(s[0]-'0') * 100
		return statusRange{lo, lo + 99}, true
	}
	a, b, isRange := strings.Cut(s, "-")
	lo, err1 := strconv.Atoi(a)
	hi, err2 := lo, error(nil)
	if isRange {
		hi, err2 = strconv.Atoi(b)
	}
	if err1 != nil || err2 != nil || len(a) != 3 || (isRange && len(b) != 3) || lo < 100 || hi > 599 || lo > hi {
		return statusRange{}, false
	}
	return statusRange{lo, hi}, true
}
