package filter

import (
	"errors"
	"fmt"
	"strconv"
	"unsafe"

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
	cfg     *Config
	rules   []ruleState
	limiter *sharedstate.Limiter
	store   sharedstate.Store
	metrics pluginMetrics
	scratch scratch
	shaper  shaper
	name    string        // the plugin_name property, which namespaces every key
	global  *globalClient // nil without a global object in the configuration
	leases  leaseState
}

// ruleState is what a plugin keeps per configured rule.
type ruleState struct {
	rule          *Rule
	tables        map[*LimitSpec]*sharedstate.Table // keyed by the first LimitSpec of the rule's or an override's list
	fallback      *sharedstate.Table                // the fallback limits of a global rule, or nil
	blockedPrefix string                            // the over-limit cache of a global rule
	leasePrefix   string                            // the leased units of a rule with a lease
	metrics       ruleMetrics
}

// keyPrefix is the start of every shared-data key the plugin writes. The shared data of a vm_id is one
// namespace that Istio gives every WasmPlugin (its vm_id is empty), so keys also carry the plugin name.
const keyPrefix = "meshlimit/"

// OnPluginStart implements types.PluginContext. A configuration that does not parse or validate makes
// the start fail, with the error (which names the field) in Envoy's log.
func (p *pluginContext) OnPluginStart(int) types.OnPluginStartStatus {
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
func HostStore() sharedstate.Store { return sharedstate.HostStore{} }

func (p *pluginContext) start(store sharedstate.Store) error {
	data, err := proxywasm.GetPluginConfiguration()
	if err != nil && !errors.Is(err, types.ErrorStatusNotFound) {
		return fmt.Errorf("reading the plugin configuration: %w", err)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return err
	}
	name := pluginName()
	u, err := sharedstate.NewUpdater(store, keyPrefix+name+"/sentinel", 0)
	if err != nil {
		return err
	}
	p.cfg, p.store, p.limiter, p.name = cfg, store, sharedstate.NewLimiter(u), name
	if cfg.Global != nil {
		p.global = newGlobalClient(cfg.Global)
	}
	p.rules = make([]ruleState, 0, len(cfg.Rules()))
	for i, r := range cfg.Rules() {
		rs := ruleState{rule: r, tables: map[*LimitSpec]*sharedstate.Table{}, metrics: defineRuleMetrics(r.Name)}
		base := keyPrefix + name + "/" + r.Name + "/"
		if r.Scope != ScopeLocal {
			rs.blockedPrefix = base + "blocked/" + strconv.FormatUint(r.Fingerprint(), 36) + "/"
			if r.lease != nil {
				rs.leasePrefix = base + "lease/" + strconv.FormatUint(r.Fingerprint(), 36) + "/"
			}
			if len(r.fallback) > 0 {
				t, err := sharedstate.NewTable(base+"fallback/"+strconv.FormatUint(specsFingerprint(r.fallback), 36), r.MaxKeys, limitsOf(r.fallback))
				if err != nil {
					return fmt.Errorf("rules[%d].fallback: %w", i, err)
				}
				rs.fallback = t
			}
		}
		if err := rs.addTable(base+strconv.FormatUint(r.Fingerprint(), 36), r.MaxKeys, r.limits); err != nil {
			return fmt.Errorf("rules[%d]: %w", i, err)
		}
		for _, o := range r.overrides {
			if o.unlimited {
				continue
			}
			// An override applies to one key value, so its table needs one slot.
			if err := rs.addTable(base+"override/"+strconv.FormatUint(specsFingerprint(o.limits), 36), 1, o.limits); err != nil {
				return fmt.Errorf("rules[%d].overrides: %w", i, err)
			}
		}
		p.rules = append(p.rules, rs)
	}
	return nil
}

func (rs *ruleState) addTable(prefix string, slots int, specs []LimitSpec) error {
	if _, ok := rs.tables[&specs[0]]; ok {
		return nil
	}
	t, err := sharedstate.NewTable(prefix, slots, limitsOf(specs))
	if err != nil {
		return err
	}
	rs.tables[&specs[0]] = t
	return nil
}

func limitsOf(specs []LimitSpec) []algorithms.Limit {
	limits := make([]algorithms.Limit, len(specs))
	for i := range specs {
		limits[i] = specs[i].Limit
	}
	return limits
}

// table returns the table that holds the state of the given limits (a rule's or an override's list).
func (rs *ruleState) table(specs []LimitSpec) *sharedstate.Table {
	return rs.tables[unsafe.SliceData(specs)]
}

// specsFingerprint combines the fingerprints of a list of limits.
func specsFingerprint(specs []LimitSpec) uint64 {
	h := uint64(fnvOffset64)
	for _, s := range specs {
		h ^= s.Fingerprint
		h *= fnvPrime64
	}
	return h
}

const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// leaseTickMillis is the timer period of a plugin with leases: how soon a worker that saw a bucket run
// low asks for more.
const leaseTickMillis = 20

// tickPeriod is the timer period the plugin needs: the shaper's if any limit shapes, the lease
// renewal's if any rule leases, else none.
func (p *pluginContext) tickPeriod() uint32 {
	if p.shapes() {
		return shapeTickMillis
	}
	for _, rs := range p.rules {
		if rs.rule.lease != nil {
			return leaseTickMillis
		}
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
func (p *pluginContext) NewHttpContext(id uint32) types.HttpContext {
	return &httpContext{plugin: p, id: id}
}

// OnTick implements types.PluginContext: requests held by a leaky bucket are released when due, and
// leases are renewed for keys that run low.
func (p *pluginContext) OnTick() {
	now := nowNanos()
	p.shaper.release(now)
	p.refillLeases(now)
}

// nowNanos reads the clock, in unix nanoseconds, with one host call.
func nowNanos() int64 { return abi.UnixNano() }
