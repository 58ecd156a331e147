package rls

import (
	"fmt"
	"strings"
	"time"

	rlext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/service/rlsconfig"
)

// planKind is what a descriptor's plan does.
type planKind uint8

const (
	planNone      planKind = iota // no rule, no limit, or replaced: OK, nothing counted
	planUnlimited                 // OK, remaining 4294967295, nothing counted
	planLimit                     // count and compare
)

// plan is how one descriptor of a request is decided.
type plan struct {
	kind  planKind
	limit rlsconfig.RateLimit // for planLimit (and Replaces for planUnlimited)
	rule  rlsconfig.Rule      // the matched rule (zero for an override)
	hits  int64
	over  bool // decided: the count is over the limit (shadow or not)
	// window is, decided by an algorithm of the extension, its effective window (for t); 0 for
	// the fixed window, whose effective window is DurationUntilReset.
	window time.Duration
	// overrideName names an override's policy in the ietf fields: "override." and the domain
	// and the descriptor's keys, joined by "."; "" for a rule.
	overrideName string
}

// overrideUnits maps the units of Envoy's limit override to rlsconfig's.
var overrideUnits = map[typev3.RateLimitUnit]rlsconfig.Unit{
	typev3.RateLimitUnit_SECOND: rlsconfig.Second,
	typev3.RateLimitUnit_MINUTE: rlsconfig.Minute,
	typev3.RateLimitUnit_HOUR:   rlsconfig.Hour,
	typev3.RateLimitUnit_DAY:    rlsconfig.Day,
	typev3.RateLimitUnit_MONTH:  rlsconfig.Month,
	typev3.RateLimitUnit_YEAR:   rlsconfig.Year,
}

// makePlans resolves every descriptor of req against c into plans[:len(descriptors)]: the
// rule or override, the hits to charge, and the limits dropped by replaces. It returns an
// error for an override with an unknown unit.
func makePlans(c *rlsconfig.Config, req *pb.RateLimitRequest, plans []plan) ([]plan, error) {
	descs := req.GetDescriptors()
	plans = append(plans[:0], make([]plan, len(descs))...)
	reqHits := int64(req.GetHitsAddend())
	if reqHits == 0 {
		reqHits = 1
	}
	replaced := false
	for i, d := range descs {
		p := &plans[i]
		p.hits = reqHits
		if h := d.GetHitsAddend(); h != nil {
			p.hits = int64(min(h.GetValue(), uint64(algorithms.MaxQuota)))
		}
		if !c.HasDomain(req.GetDomain()) {
			continue
		}
		if o := d.GetLimit(); o != nil {
			u, ok := overrideUnits[o.GetUnit()]
			if !ok {
				return nil, fmt.Errorf("descriptors[%d].limit.unit: unknown unit %v", i, o.GetUnit())
			}
			p.kind, p.limit = planLimit, rlsconfig.RateLimit{Unit: u, RequestsPerUnit: o.GetRequestsPerUnit()}
			p.overrideName = overrideName(req.GetDomain(), d)
			continue
		}
		entries := d.GetEntries()
		rule, ok := c.Match(req.GetDomain(), len(entries), func(j int) rlsconfig.Entry {
			return rlsconfig.Entry{Key: entries[j].GetKey(), Value: entries[j].GetValue()}
		})
		if !ok || rule.Limit == nil {
			continue
		}
		p.rule, p.limit = rule, *rule.Limit
		p.kind = planLimit
		if rule.Limit.Unlimited {
			p.kind = planUnlimited
		}
		replaced = replaced || len(rule.Limit.Replaces) > 0
	}
	if replaced {
		dropReplaced(plans)
	}
	return plans, nil
}

// dropReplaced turns every limit named by a matched limit's replaces into planNone.
func dropReplaced(plans []plan) {
	names := make(map[string]bool)
	for _, p := range plans {
		if p.kind != planNone {
			for _, n := range p.limit.Replaces {
				names[n] = true
			}
		}
	}
	for i := range plans {
		if p := &plans[i]; p.kind == planLimit && p.limit.Name != "" && names[p.limit.Name] {
			p.kind = planNone
		}
	}
}

// overrideName is the policy name of an override on descriptor d of domain.
func overrideName(domain string, d *rlext.RateLimitDescriptor) string {
	var b strings.Builder
	b.WriteString("override.")
	b.WriteString(domain)
	for _, e := range d.GetEntries() {
		b.WriteByte('.')
		b.WriteString(e.GetKey())
	}
	return b.String()
}
