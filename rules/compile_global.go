package rules

import (
	"os"
	"strings"
	"time"
)

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
	l := &Lease{}
	switch {
	case r.Scope != ScopeGlobal:
		v.failf(path, "only rules with scope global lease quota")
	case !lj.Batch.Set:
		v.failf(path+".batch", "required")
	default:
		l.Batch = v.intIn(path+".batch", lj.Batch, 1, maxLeaseBatch)
	}
	l.TTL = v.durationIn(path+".ttl", lj.TTL, defaultLeaseTTL, minLeaseTTL, maxLeaseTTL)
	for i, spec := range r.limits() {
		if c := spec.Limit.Capacity(); l.Batch > c {
			v.failf(path+".batch", "%d exceeds the capacity %d of limits[%d]: such a batch could never be granted", l.Batch, c, i)
		}
	}
	return l
}

func (v *validator) global(gj *globalJSON) *Global {
	g := &Global{Cluster: gj.Cluster, Authority: gj.Authority, Path: gj.Path, Secret: gj.Secret,
		BreakerFailures: defaultBreakerFailures, BreakerCooldown: defaultBreakerCooldown, ResetPoll: v.resetPoll(gj.ResetPoll)}
	if gj.SecretEnv != "" {
		if s := os.Getenv(gj.SecretEnv); s != "" {
			g.Secret = s
		}
	}
	if b := gj.Breaker; b != nil {
		if b.Failures.Set {
			g.BreakerFailures = int(v.intIn("global.breaker.failures", b.Failures, 1, maxBreakerFailures))
		}
		g.BreakerCooldown = v.durationIn("global.breaker.cooldown", b.Cooldown, defaultBreakerCooldown, minBreakerCooldown, maxBreakerCooldown)
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
	g.Timeout = v.durationIn("global.timeout", gj.Timeout, defaultGlobalTimeout, minGlobalTimeout, maxGlobalTimeout)
	return g
}

// resetPoll compiles global.reset_poll: empty is the default (defaultResetPoll), "off" or a
// zero duration turns the reset log off (0), anything else must be within minResetPoll to
// maxResetPoll.
func (v *validator) resetPoll(s string) time.Duration {
	if s == "" {
		return defaultResetPoll
	}
	if s == "off" {
		return 0
	}
	d, err := parseDuration(s)
	switch {
	case err != nil:
		v.failf("global.reset_poll", "%v (or \"off\")", err)
	case d == 0:
		return 0
	case d < minResetPoll || d > maxResetPoll:
		v.failf("global.reset_poll", "%s out of range: want %s to %s, or \"0s\" or \"off\" to never read the reset log",
			s, formatDuration(minResetPoll), formatDuration(maxResetPoll))
	default:
		return d
	}
	return defaultResetPoll
}
