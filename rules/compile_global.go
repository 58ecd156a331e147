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

// Bounds of global.reset_poll.
const (
	minResetPoll = 100 * time.Millisecond
	maxResetPoll = time.Hour
)

// resetPoll compiles global.reset_poll: empty is the default (DefaultResetPoll), "off" or a
// zero duration turns the reset log off (0), anything else must be within 100ms to 1h.
func (v *validator) resetPoll(s string) time.Duration {
	if s == "" {
		return DefaultResetPoll
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
		v.failf("global.reset_poll", "%s out of range: want 100ms to 1h, or \"0s\" or \"off\" to never read the reset log", s)
	default:
		return d
	}
	return DefaultResetPoll
}
