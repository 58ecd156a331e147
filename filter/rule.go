package filter

import (
	"fmt"
	"strconv"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/fnv"
	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/sharedstate"
	"github.com/meshlimit/meshlimit/wire"
)

// ruleState is what a plugin keeps per configured rule: the shared-data records of each feature
// the rule uses, and its metrics.
type ruleState struct {
	rule      *rules.Rule
	tables    []*sharedstate.Table // one per rules.LimitSet, by its Index
	attempts  []*sharedstate.Table // a local counted rule's: its counted and in-flight attempts, per set
	fallback  *sharedstate.Table   // the fallback limits of a global rule, or nil
	blocked   *sharedstate.Records // the over-limit cache of a global rule, the penalty box of a counted one
	leases    *sharedstate.Records // the leased units of a rule with a lease
	permits   *sharedstate.Records // the permits of a rule with a local concurrency limit
	fbPermits *sharedstate.Records // the local fallback permits of a global concurrency rule
	overflow  []rules.LimitSpec    // what keys without room are decided against in tables[0]
	settle    *settleMetrics       // the counters of a rule whose cost settles (settle.go), once used
	metrics   ruleMetrics
	// givesBack: something decided after the rule may deny the request it admitted (a later rule,
	// a shedder, the service, the body stage), so its takes are recorded to be given back. Set
	// when the plugin starts (markGiveBacks); the last rule of a plain configuration records none.
	givesBack bool
}

// newTables creates the tables of a rate rule: one per limit set; a local counted rule has a second
// set of tables, where its attempts are charged when they arrive (charge.go).
func (rs *ruleState) newTables(base, fp string) error {
	var err error
	if rs.tables, err = rs.tablesAt(base, fp); err != nil || rs.rule.CountOn == nil || rs.rule.Scope != rules.ScopeLocal {
		return err
	}
	rs.attempts, err = rs.tablesAt(base+"attempts/", fp)
	return err
}

// tablesAt creates one table per limit set under base.
func (rs *ruleState) tablesAt(base, fp string) ([]*sharedstate.Table, error) {
	r := rs.rule
	var overflow []algorithms.Limit // nil: the rule's own limits
	if o := r.Overflow(); o != nil {
		overflow, rs.overflow = limitsOf(o.Limits), o.Limits
	}
	tables := make([]*sharedstate.Table, 0, len(r.LimitSets()))
	alike := map[*rules.LimitSpec]*sharedstate.Table{} // overrides that share a list of limits share its prepared limits
	for _, set := range r.LimitSets() {
		if set.Override == "" && set.Index == 0 {
			t, err := sharedstate.NewTable(base+fp, set.Slots, limitsOf(set.Limits), overflow)
			if err != nil {
				return nil, err
			}
			tables = append(tables, t)
			continue
		}
		// An override's table holds one key value, so it never overflows; its name carries that
		// value's hash, so that two overrides with the same limits never share a slot.
		prefix := base + "override/" + strconv.FormatUint(fnv.String(set.Override), 36) + "/" + strconv.FormatUint(set.Fingerprint, 36)
		t, err := overrideTable(alike, prefix, set)
		if err != nil {
			return nil, err
		}
		tables = append(tables, t)
	}
	return tables, nil
}

// overrideTable creates the table of an override's set under prefix, sharing the prepared limits
// of an earlier override's table whose set has the same list of limits (rules shares equal lists).
func overrideTable(alike map[*rules.LimitSpec]*sharedstate.Table, prefix string, set rules.LimitSet) (*sharedstate.Table, error) {
	if t, ok := alike[&set.Limits[0]]; ok {
		return t.Alike(prefix)
	}
	t, err := sharedstate.NewTable(prefix, set.Slots, limitsOf(set.Limits), nil)
	if err == nil {
		alike[&set.Limits[0]] = t
	}
	return t, err
}

// globalRecords creates what only a global rule has: its over-limit cache, its lease records and its
// fallback table (or fallback permits), each in max_keys slots.
func (rs *ruleState) globalRecords(base, fp string) (err error) {
	r := rs.rule
	if r.Scope == rules.ScopeLocal {
		return nil
	}
	if rs.blocked, err = sharedstate.NewRecords(base+"blocked/"+fp, r.MaxKeys); err != nil {
		return err
	}
	if r.Lease() != nil {
		if rs.leases, err = sharedstate.NewRecords(base+"lease/"+fp, r.MaxKeys); err != nil {
			return err
		}
	}
	if fb := r.FallbackConcurrency(); fb != nil {
		rs.fbPermits, err = sharedstate.NewRecords(base+"fallback-permits/"+strconv.FormatUint(fb.Fingerprint, 36), r.MaxKeys)
		return err
	}
	if fb := r.Fallback(); fb != nil {
		rs.fallback, err = sharedstate.NewTable(base+"fallback/"+strconv.FormatUint(fb.Fingerprint, 36), fb.Slots, limitsOf(fb.Limits), nil)
		if err != nil {
			return fmt.Errorf("fallback: %w", err)
		}
	}
	return nil
}

// penaltyRecords creates the penalty box of a counted local rule (a global rule has its over-limit
// cache already).
func (rs *ruleState) penaltyRecords(base, fp string) (err error) {
	if rs.rule.CountOn == nil || rs.blocked != nil {
		return nil
	}
	rs.blocked, err = sharedstate.NewRecords(base+"blocked/"+fp, rs.rule.MaxKeys)
	return err
}

// newPermits creates the permit records of a rule with a local concurrency limit.
func (rs *ruleState) newPermits(base, fp string) (err error) {
	if rs.rule.Scope == rules.ScopeGlobal {
		return nil
	}
	rs.permits, err = sharedstate.NewRecords(base+"permits/"+fp, rs.rule.MaxKeys)
	return err
}

func limitsOf(specs []rules.LimitSpec) []algorithms.Limit {
	limits := make([]algorithms.Limit, len(specs))
	for i := range specs {
		limits[i] = specs[i].Limit
	}
	return limits
}

// failed decides a request whose rule could not update its shared state: denied (and counted) when
// the rule fails closed and is enforced, else let through.
func (rs *ruleState) failed(enforced bool) (denied bool) {
	if rs.rule.FailureMode == rules.FailDeny && enforced {
		rs.metrics.failureDenied.inc(1)
		return true
	}
	return false
}

// placed counts where a Take found the key's state and returns the limits its decisions are of: the
// rule's overflow limits when the key had no room, else the set's own.
func (rs *ruleState) placed(pl sharedstate.Placement, own []rules.LimitSpec) []rules.LimitSpec {
	if pl < sharedstate.Evicted { // Owned, Claimed: inlined at the caller, nothing to count
		return own
	}
	return rs.placedElsewhere(pl, own)
}

func (rs *ruleState) placedElsewhere(pl sharedstate.Placement, own []rules.LimitSpec) []rules.LimitSpec {
	rs.countPlaced(pl)
	if pl == sharedstate.Overflow {
		return rs.overflow
	}
	return own
}

// countPlaced counts a decision in the overflow state, and an eviction.
func (rs *ruleState) countPlaced(pl sharedstate.Placement) {
	switch pl {
	case sharedstate.Overflow:
		rs.metrics.overflow.inc(1)
	case sharedstate.Evicted:
		rs.metrics.evictions.inc(1)
	}
}

// nearLimit counts a rule's decision that left some limit with less than a tenth of its quota.
func (rs *ruleState) nearLimit(ds []algorithms.Decision, specs []rules.LimitSpec) {
	for j := range ds {
		if ds[j].Allowed && j < len(specs) && ds[j].Remaining*10 < specs[j].Limit.Quota {
			rs.metrics.nearLimit.inc(1)
			return
		}
	}
}

// nearLimitWire is nearLimit for the service's decisions of one global item.
func (rs *ruleState) nearLimitWire(ds []wire.Decision, specs []rules.LimitSpec) {
	for j := range ds {
		if ds[j].Allowed && !ds[j].Skipped && j < len(specs) && ds[j].Remaining*10 < specs[j].Limit.Quota {
			rs.metrics.nearLimit.inc(1)
			return
		}
	}
}

// ruleNamed returns the state of the rule named name in rs, or nil.
func ruleNamed(rs []ruleState, name string) *ruleState {
	for i := range rs {
		if rs[i].rule.Name == name {
			return &rs[i]
		}
	}
	return nil
}
