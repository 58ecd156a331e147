package rules

import (
	"strconv"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/fnv"
)

// Concurrency limits and percent enforcement.
//
// A limit {"concurrency": N} (instead of "rate") bounds the requests of one key that are in
// flight at once: a permit is taken when the request headers arrive and returned when the
// stream ends, whatever ends it. Such a limit must be the rule's only limit, and the rule
// takes no cost, overrides or lease: a permit is one request. A key without room in max_keys
// slots shares one overflow permit pool with the other keys without room: of the rule's limit,
// or of its overflow, one concurrency limit (OverflowConcurrency).
// The filter (filter/concurrency.go) holds the permits in shared data under a lease.
//
// enforce_percent on a rule enforces it for a deterministic share of key values: a key is
// enforced when FNV-1a of the rule name and the key, modulo 100, is below the percentage, so
// a key is enforced or shadowed the same way on every proxy and across restarts, and raising
// the percentage only adds keys. Keys left out are decided in shadow: counted in
// shadow_limited, never denied. It is a rollout tool, not a security boundary: a client that
// chooses its key and knows the rule name can find a shadowed one while the rollout lasts.

// concurrencyLimit compiles a limit that sets concurrency into s; it reports problems at
// the limit's fields.
func (v *validator) concurrencyLimit(lp string, lj *limitJSON, s *LimitSpec) {
	if lj.Rate != "" {
		v.failf(lp+".rate", "a limit sets either rate or concurrency, not both")
	}
	if lj.Algorithm != "" {
		v.failf(lp+".algorithm", "a concurrency limit takes no algorithm")
	}
	if lj.Burst.Set {
		v.failf(lp+".burst", "a concurrency limit takes no burst")
	}
	v.checkCalendarOffset(lp, lj)
	if n := lj.Concurrency.Value; n < 1 || n > maxConcurrency {
		v.failf(lp+".concurrency", "%d out of range: want 1 to %d", n, maxConcurrency)
	} else {
		s.Concurrency = n
	}
	s.Fingerprint = fnv.Mix(fnv.Offset64, uint64(s.Concurrency)|1<<63)
}

// setsConcurrency reports whether a limit of rj, of its fallback or of an override sets
// concurrency (checkConcurrencyRule has something to check).
func setsConcurrency(rj *ruleJSON) bool {
	for _, ljs := range [][]limitJSON{rj.Limits, rj.Fallback} {
		for i := range ljs {
			if ljs[i].Concurrency.Set {
				return true
			}
		}
	}
	for i := range rj.Overrides {
		for j := range rj.Overrides[i].Limits {
			if rj.Overrides[i].Limits[j].Concurrency.Set {
				return true
			}
		}
	}
	return false
}

// checkConcurrencyRule reports what a rule with a concurrency limit may not have, and
// compiles enforce_percent for every rule.
func (v *validator) checkConcurrencyRule(path string, rj *ruleJSON, r *Rule) {
	r.EnforcePercent = 100
	if rj.EnforcePercent.Set {
		r.EnforcePercent = int(v.intIn(path+".enforce_percent", rj.EnforcePercent, 0, 100))
		if r.EnforcePercent != 100 && r.Scope != ScopeLocal {
			v.failf(path+".enforce_percent", "only rules with scope local take enforce_percent (for now)")
		}
	}
	conc := false
	for _, lj := range rj.Limits {
		conc = conc || lj.Concurrency.Set
	}
	if !conc {
		for i, lj := range rj.Fallback {
			if lj.Concurrency.Set {
				v.failf(path+".fallback["+strconv.Itoa(i)+"].concurrency", "only a rule whose limit is a concurrency limit may fall back to one")
			}
		}
		for i, lj := range rj.Overrides {
			for j, l := range lj.Limits {
				if l.Concurrency.Set {
					v.failf(path+".overrides["+strconv.Itoa(i)+"].limits["+strconv.Itoa(j)+"].concurrency", "only a rule whose limit is a concurrency limit may override it")
				}
			}
		}
		return
	}
	switch {
	case len(rj.Limits) != 1:
		v.failf(path+".limits", "a concurrency limit must be the rule's only limit")
	case rj.Cost != nil:
		v.failf(path+".cost", "a rule with a concurrency limit takes no cost: a permit is one request")
	case len(rj.Overrides) > 0:
		v.failf(path+".overrides", "a rule with a concurrency limit takes no overrides")
	case len(rj.Overflow) > 1 || len(rj.Overflow) == 1 && !rj.Overflow[0].Concurrency.Set:
		v.failf(path+".overflow", "the overflow of a concurrency rule is one concurrency limit, the permits every key without room shares, e.g. [{\"concurrency\": 100}]")
	case len(rj.Overflow) == 1 && r.Scope == ScopeGlobal:
		v.failf(path+".overflow", "a global concurrency rule keeps no local permits: only scope local or both take an overflow")
	case rj.Lease != nil:
		v.failf(path+".lease", "a rule with a concurrency limit takes no lease")
	case len(rj.Fallback) > 0:
		v.concurrencyFallback(path, rj, r)
	}
}

// concurrencyFallback checks the fallback of a global concurrency rule: one local concurrency
// limit, the permits the proxy holds itself while the service cannot decide.
func (v *validator) concurrencyFallback(path string, rj *ruleJSON, r *Rule) {
	switch {
	case r.Scope == ScopeBoth:
		v.failf(path+".fallback", "a concurrency rule with scope both takes no fallback: its local permits already bound the proxy")
	case len(rj.Fallback) != 1 || !rj.Fallback[0].Concurrency.Set:
		v.failf(path+".fallback", "the fallback of a concurrency rule is one concurrency limit, e.g. [{\"concurrency\": 10}]")
	}
}

// FallbackConcurrency returns the local concurrency limit a global concurrency rule applies
// while the service cannot decide, or nil.
func (r *Rule) FallbackConcurrency() *LimitSpec {
	if r.fallback != nil && len(r.fallback.Limits) == 1 && r.fallback.Limits[0].Concurrency > 0 {
		return &r.fallback.Limits[0]
	}
	return nil
}

// OverflowConcurrency returns the concurrency limit that the keys without room share: the
// rule's overflow, or its own limit when it has none (nil when its limits are rates).
func (r *Rule) OverflowConcurrency() *LimitSpec {
	if o := r.overflow; o != nil && len(o.Limits) == 1 && o.Limits[0].Concurrency > 0 {
		return &o.Limits[0]
	}
	return r.Concurrency()
}

// Concurrency returns the rule's concurrency limit, or nil when its limits are rates.
func (r *Rule) Concurrency() *LimitSpec {
	if l := &r.sets[0].Limits; len(*l) == 1 && (*l)[0].Concurrency > 0 {
		return &(*l)[0]
	}
	return nil
}

// EnforcedFor reports whether the rule enforces key (see enforce_percent): always at 100,
// never at 0, else for a fixed share of the key values. It does not allocate.
func (r *Rule) EnforcedFor(key []byte) bool {
	switch r.EnforcePercent {
	case 100:
		return true
	case 0:
		return false
	}
	return r.enforcedHash(fnv.AddBytes(fnv.AddString(fnv.Offset64, r.Name+"\x00"), key))
}

// EnforcedForString is EnforcedFor of a key held as a string.
func (r *Rule) EnforcedForString(key string) bool {
	if r.EnforcePercent == 100 {
		return true
	}
	return r.enforcedHash(fnv.AddString(fnv.AddString(fnv.Offset64, r.Name+"\x00"), key))
}

func (r *Rule) enforcedHash(h uint64) bool {
	if r.EnforcePercent <= 0 {
		return false
	}
	h = (h ^ h>>33) * 0xff51afd7ed558ccd // FNV's low bits mix poorly: finish them (MurmurHash3's fmix64)
	h ^= h >> 33
	return int(h%100) < r.EnforcePercent
}

// ConcurrencyDecision is the decision of a concurrency limit of limit permits that found
// inFlight of them taken, as the response reports it: q is the limit, r the permits left
// after this request, and a denial carries RetryNever, so that its response has no
// Retry-After and its RateLimit no t: when a permit comes back depends on requests in
// flight, and no wait can be promised.
func ConcurrencyDecision(limit, inFlight int64, allowed bool) algorithms.Decision {
	d := algorithms.Decision{Allowed: allowed, Limit: limit, Remaining: max(limit-inFlight-1, 0)}
	if !allowed {
		d.Remaining, d.RetryAfter = 0, algorithms.RetryNever
	}
	return d
}
