package filter

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/meshlimit/meshlimit/internal/fnv"
	"github.com/meshlimit/meshlimit/rules"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/meshlimit/meshlimit/abi"
	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/sharedstate"
)

// NewVMContext returns the VM context that cmd/filter registers. Envoy creates one VM per worker thread
// (plus the main thread), so there is one VM context per thread; all of them share the shared data of
// their vm_id.
func NewVMContext() types.VMContext { return &vmContext{} }

// vmContext implements types.VMContext.
type vmContext struct{ types.DefaultVMContext }

// NewPluginContext implements types.VMContext.
func (*vmContext) NewPluginContext(uint32) types.PluginContext { return &pluginContext{} }

// pluginContext implements types.PluginContext. It holds the parsed configuration and what the
// request path needs: one shared-data table per set of limits, the limiter and the metrics.
type pluginContext struct {
	types.DefaultPluginContext
	cfg     *rules.Config
	rules   []ruleState
	limiter *sharedstate.Limiter
	records *sharedstate.Cursor // the over-limit cache and the lease records
	metrics pluginMetrics
	scratch scratch
	shaper  shaper
	name    string        // the plugin_name property, which namespaces every key
	global  *globalClient // nil without a global object in the configuration
	leases  leaseState
	blockEd sharedstate.BlockEditor // the editors of the over-limit cache and lease records, reused
	leaseEd sharedstate.LeaseEditor
	conc    concurrencyState // concurrency permits (concurrency.go)
	sheds   []shedState      // the load shedders (shed.go), in configuration order
	resets  resetPoller      // the reset log poll (resets.go)

	panicLogged bool // a recovered panic was logged (once per VM: see recover.go)
}

// ruleState is what a plugin keeps per configured rule.
type ruleState struct {
	rule      *rules.Rule
	tables    []*sharedstate.Table // one per rules.LimitSet, by its Index
	fallback  *sharedstate.Table   // the fallback limits of a global rule, or nil
	blocked   *sharedstate.Records // the over-limit cache of a global rule
	leases    *sharedstate.Records // the leased units of a rule with a lease
	permits   *sharedstate.Records // the permits of a rule with a local concurrency limit
	fbPermits *sharedstate.Records // the local fallback permits of a global concurrency rule
	overflow  []rules.LimitSpec    // what keys without room are decided against in tables[0]
	settle    *settleRule          // the counters of a rule whose cost settles (settle.go), once used
	metrics   ruleMetrics
}

// keyPrefix is the start of every shared-data key the plugin writes. The shared data of a vm_id is one
// namespace that Istio gives every WasmPlugin (its vm_id is empty), so keys also carry the plugin name.
const keyPrefix = "meshlimit/"

// OnPluginStart implements types.PluginContext. A configuration that does not parse or validate makes
// the start fail, with the error (which names the field) in Envoy's log.
func (p *pluginContext) OnPluginStart(int) (status types.OnPluginStartStatus) {
	defer func() {
		if r := recover(); r != nil {
			p.recovered("the plugin start", r)
			status = types.OnPluginStartStatusFailed
		}
	}()
	p.metrics = definePluginMetrics()
	if err := p.start(HostStore()); err != nil {
		p.metrics.configErrors.Increment(1)
		proxywasm.LogCriticalf("meshlimit: invalid configuration: %v", err)
		return types.OnPluginStartStatusFailed
	}
	if period := p.tickPeriod(); period > 0 {
		if err := proxywasm.SetTickPeriodMilliSeconds(period); err != nil {
			proxywasm.LogCriticalf("meshlimit: shaping and leases need a timer: %v", err)
			return types.OnPluginStartStatusFailed
		}
	}
	proxywasm.LogInfof("meshlimit: %s", p.cfg.Summary())
	return types.OnPluginStartStatusOK
}

// HostStore returns the shared data of the proxy the plugin runs in.
func HostStore() sharedstate.Store { return &hostStore{} }

func (p *pluginContext) start(store sharedstate.Store) error {
	data, err := proxywasm.GetPluginConfiguration()
	if err != nil && !errors.Is(err, types.ErrorStatusNotFound) {
		return fmt.Errorf("reading the plugin configuration: %w", err)
	}
	cfg, err := rules.ParseConfig(data)
	if err != nil {
		return err
	}
	name := pluginName()
	if err := cfg.CheckPluginName(name); err != nil {
		return err
	}
	u, err := sharedstate.NewUpdater(store, keyPrefix+name+"/sentinel", 0)
	if err != nil {
		return err
	}
	p.cfg, p.limiter, p.records, p.name = cfg, sharedstate.NewLimiter(u), sharedstate.NewCursor(u), name
	p.conc.owner = newOwner()
	if cfg.Global != nil {
		p.global = newGlobalClient(cfg.Global)
		p.startResets()
	}
	p.rules = make([]ruleState, 0, len(cfg.Rules()))
	for i, r := range cfg.Rules() {
		rs, err := newRuleState(keyPrefix+name+"/"+r.Name+"/", r)
		if err != nil {
			return fmt.Errorf("rules[%d]: %w", i, err)
		}
		p.rules = append(p.rules, rs)
	}
	p.sheds = make([]shedState, len(cfg.Shedders))
	for i, s := range cfg.Shedders {
		base := keyPrefix + name + "/shed/"
		if s.Name != "" {
			base += s.Name + "/"
		}
		p.startShed(&p.sheds[i], s, base)
	}
	return nil
}

// newRuleState creates the shared-data tables of a rule, under keys that start with base: one per
// limit set, named by the fingerprint of what gives its state a meaning, so that a changed limit
// starts from fresh state and an unchanged one keeps its state across reconfigurations.
func newRuleState(base string, r *rules.Rule) (ruleState, error) {
	rs := ruleState{rule: r, metrics: defineRuleMetrics(r.Name), overflow: r.LimitSets()[0].Limits}
	fp := strconv.FormatUint(r.Fingerprint(), 36)
	if err := rs.globalRecords(base, fp); err != nil {
		return rs, err
	}
	if err := rs.penaltyRecords(base, fp); err != nil {
		return rs, err
	}
	if r.Concurrency() != nil {
		return rs, rs.newPermits(base, fp)
	}
	var overflow []algorithms.Limit // nil: the rule's own limits
	if o := r.Overflow(); o != nil {
		overflow, rs.overflow = limitsOf(o.Limits), o.Limits
	}
	for _, set := range r.LimitSets() {
		prefix := base + fp
		if set.Override != "" || set.Index > 0 {
			// An override's table holds one key value; its name carries that value's hash, so that two
			// overrides with the same limits never share a slot.
			prefix = base + "override/" + strconv.FormatUint(fnv.String(set.Override), 36) + "/" + strconv.FormatUint(set.Fingerprint, 36)
		}
		var o []algorithms.Limit
		if set.Index == 0 {
			o = overflow // an override's table holds its one key: it never overflows
		}
		t, err := sharedstate.NewTable(prefix, set.Slots, limitsOf(set.Limits), o)
		if err != nil {
			return rs, err
		}
		rs.tables = append(rs.tables, t)
	}
	return rs, nil
}

// globalRecords creates what only a global rule has: its over-limit cache, its lease records and its
// fallback table, each in max_keys slots.
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

func limitsOf(specs []rules.LimitSpec) []algorithms.Limit {
	limits := make([]algorithms.Limit, len(specs))
	for i := range specs {
		limits[i] = specs[i].Limit
	}
	return limits
}

// leaseTickMillis is the timer period of a plugin with leases: how soon a worker that saw a bucket run
// low asks for more.
const leaseTickMillis = 20

// tickPeriod is the timer period the plugin needs: the shaper's if any limit shapes, the lease
// renewal's (which also checks the deadlines of calls to the service) with a global service, else none.
func (p *pluginContext) tickPeriod() uint32 {
	if t := p.permitTickMillis(); t > 0 && !p.shapes() && p.global == nil {
		return t // else the shorter period of shaping or leases serves the permits too
	}
	if p.shapes() {
		return shapeTickMillis
	}
	if p.global != nil {
		return leaseTickMillis
	}
	return 0
}

// pluginName returns the plugin_name property (Istio: "<namespace>.<name>"), or "default".
func pluginName() string {
	v, err := proxywasm.GetProperty([]string{"plugin_name"})
	if err != nil || len(v) == 0 {
		return "default"
	}
	return string(v)
}

// NewHttpContext implements types.PluginContext.
func (p *pluginContext) NewHttpContext(id uint32) types.HttpContext { return p.newHTTPContext(id) }

// OnTick implements types.PluginContext: requests held by a leaky bucket are released when due, and
// leases are renewed for keys that run low.
// Calls to the service that passed their deadline are given up. A panic is recovered.
func (p *pluginContext) OnTick() {
	defer p.recoverPanic("a tick")
	now := abi.UnixNano()
	p.expireCalls(now)
	testPanic(panicTick)
	p.shaper.release(now)
	p.refillLeases(now)
	p.tickOwned(now)
	p.pollResets(now)
}
