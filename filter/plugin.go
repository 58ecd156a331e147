package filter

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/sharedstate"
)

// NewVMContext returns the VM context that cmd/filter registers. Envoy creates one VM per worker thread
// (plus the main thread), so there is one VM context per thread; all of them share the shared data of
// their vm_id.
func NewVMContext() types.VMContext { return &vmContext{} }

// vmContext implements types.VMContext.
type vmContext struct{ types.DefaultVMContext }

// NewPluginContext implements types.VMContext.
func (*vmContext) NewPluginContext(uint32) types.PluginContext { return newPluginContext(&sdkHost{}) }

// env is what every feature of a plugin shares: the host, the configuration and the plugin's name
// (which namespaces every key), the cursors over its shared data, the request being decided, the
// response being read, and the panic guard. The features embed a pointer to their plugin's.
type env struct {
	host    host
	raw     host // host without the counters' wrapper (statsHost): one call fewer on the request path
	cfg     *rules.Config
	name    string
	records *sharedstate.Cursor // every record set: over-limit cache, leases, permits, shedders
	limiter *sharedstate.Limiter
	d       decision
	resp    hostResponse
	panics  panicGuard
}

// debugging reports whether the configuration logs at debug level. Check it before formatting a
// debug line: the formatting allocates.
func (e *env) debugging() bool { return e.cfg.LogLevel <= rules.LogDebug }

// updated counts the CAS rounds a shared-state update of the rule took and logs a failure that is
// not contention (which is counted); it returns err.
func (e *env) updated(rs *ruleState, attempts int, err error) error {
	if attempts > 1 {
		rs.metrics.casRetries.inc(uint64(attempts - 1))
	}
	if err != nil {
		if errors.Is(err, sharedstate.ErrContention) {
			rs.metrics.casExhausted.inc(1)
		} else {
			logf(e.host, logWarn, "meshlimit: rule %s: %v", rs.rule.Name, err)
		}
	}
	return err
}

// pluginContext implements types.PluginContext: it starts the features its configuration asks for
// and hands the timer to them; httpContext hands them the callbacks of each stream. doc.go lists
// the features and where each lives.
type pluginContext struct {
	types.DefaultPluginContext
	env
	stats        *statsHost // the host, with the counters kept in the guest until flushed
	rules        []ruleState
	configErrors counter
	free         []*httpContext       // contexts of finished streams, for the next streams (see recycle)
	ends         []func(*httpContext) // the features' ends of a stream, in order (endHooks)
	local        bool                 // the configuration uses only local rate rules (plansLocally)

	global  *globalClient // nil without a global object in the configuration
	leases  leaser
	resets  resetPoller
	cache   overLimitCache
	permits permits
	sheds   shedder
	shaper  shaper
	settle  settler
	body    bodyStage
	charges charger
	replies replier
	msgs    messageLimiter
}

// newPluginContext returns a plugin context on h, not started.
func newPluginContext(h host) *pluginContext {
	p := &pluginContext{stats: &statsHost{host: h}}
	p.host, p.raw = p.stats, h
	p.panics.host = p.stats
	return p
}

// keyPrefix is the start of every shared-data key the plugin writes. The shared data of a vm_id is one
// namespace that Istio gives every WasmPlugin (its vm_id is empty), so keys also carry the plugin name.
const keyPrefix = "meshlimit/"

// OnPluginStart implements types.PluginContext. A configuration that does not parse or validate makes
// the start fail, with the error (which names the field) in Envoy's log.
func (p *pluginContext) OnPluginStart(int) (status types.OnPluginStartStatus) {
	defer func() {
		if r := recover(); r != nil {
			p.panics.recovered("the plugin start", r)
			status = types.OnPluginStartStatusFailed
		}
		p.stats.flush() // a refused start gets no tick; a restart's old counts go now
	}()
	p.stats.flush() // what the configuration before counted
	p.configErrors = newCounter(p.host, "meshlimit.config_errors")
	p.panics.count = newCounter(p.host, "meshlimit.panics")
	if err := p.start(); err != nil {
		p.configErrors.inc(1)
		logf(p.host, logCritical, "meshlimit: invalid configuration: %v", err)
		return types.OnPluginStartStatusFailed
	}
	if period := p.tickPeriod(); period > 0 {
		if err := p.host.setTick(period); err != nil { // which flushes the counters too
			logf(p.host, logCritical, "meshlimit: shaping and leases need a timer: %v", err)
			return types.OnPluginStartStatusFailed
		}
	} else if err := p.host.setTick(statsFlushMillis); err != nil {
		p.stats.untimed = true
		logf(p.host, logWarn, "meshlimit: no timer for the counters' flush (%v): each stream's end flushes them", err)
	}
	logf(p.host, logInfo, "meshlimit: %s", p.cfg.Summary())
	return types.OnPluginStartStatusOK
}

// start reads and compiles the configuration and starts the features it asks for.
func (p *pluginContext) start() error {
	data, err := p.host.config()
	if err != nil {
		return fmt.Errorf("reading the plugin configuration: %w", err)
	}
	cfg, err := rules.ParseConfig(data)
	if err != nil {
		return err
	}
	name := pluginName(p.host)
	if err := cfg.CheckPluginName(name); err != nil {
		return err
	}
	u, err := sharedstate.NewUpdater(p.raw, keyPrefix+name+"/sentinel", 0)
	if err != nil {
		return err
	}
	p.cfg, p.limiter, p.records, p.name = cfg, sharedstate.NewLimiter(u), sharedstate.NewCursor(u), name
	p.d.host, p.d.req.host, p.resp.host = p.raw, p.raw, p.raw
	p.rules = make([]ruleState, 0, len(cfg.Rules()))
	for i, r := range cfg.Rules() {
		rs, err := newRuleState(p.host, keyPrefix+name+"/"+r.Name+"/", r)
		if err != nil {
			return fmt.Errorf("rules[%d]: %w", i, err)
		}
		p.rules = append(p.rules, rs)
	}
	p.startFeatures(newOwner())
	return nil
}

// startFeatures gives every feature its collaborators, and starts those the configuration asks
// for. owner is the plugin's owner id in the owned records (permits, shedding slots).
func (p *pluginContext) startFeatures(owner uint64) {
	e := &p.env
	p.cache = overLimitCache{env: e}
	p.permits = permits{env: e, owner: owner, rules: p.rules}
	p.shaper = shaper{host: p.host}
	p.replies = replier{env: e}
	if g := p.cfg.Global; g != nil {
		p.global = newGlobalClient(e, g, owner)
		p.global.leases, p.global.local, p.global.settle, p.global.cache, p.global.charges = &p.leases, &p.permits, &p.settle, &p.cache, &p.charges
		p.leases = leaser{env: e, g: p.global}
		p.resets.start(e, p.global, p.rules)
	}
	p.settle = settler{env: e, g: p.global, copyRefused: newCounter(p.host, "meshlimit.settle_copy_refused")}
	p.body = bodyStage{env: e, settle: &p.settle, g: p.global, shaper: &p.shaper}
	p.charges = charger{env: e, g: p.global, cache: &p.cache}
	p.sheds.start(e, owner, &p.permits, p.cfg.Shedders, keyPrefix+p.name+"/shed/")
	p.msgs.start(e, p.rules)
	p.ends = p.endHooks()
	p.markGiveBacks()
	p.d.reset(true) // nothing a configuration before left in the scratch: localHeaders resets only its own parts
	p.local = p.plansLocally()
}

// markGiveBacks tells each rule whether a decision after it may deny a request it admitted
// (ruleState.givesBack): a later rule, a shedder, the decision service, or a rule that reads its
// cost from the body or settles it, or counts messages, anywhere in the configuration.
func (p *pluginContext) markGiveBacks() {
	later := p.global != nil || len(p.sheds.list) > 0
	for i := range p.rules {
		r := p.rules[i].rule
		later = later || r.ReservesFromBody() || r.Settle() != nil || r.Messages() != nil || r.Scope != rules.ScopeLocal
	}
	for i := len(p.rules) - 1; i >= 0; i-- {
		p.rules[i].givesBack = later
		later = true // a rule before another: the later one may deny
	}
}

// newRuleState creates the shared-data tables of a rule, under keys that start with base: one per
// limit set, named by the fingerprint of what gives its state a meaning, so that a changed limit
// starts from fresh state and an unchanged one keeps its state across reconfigurations.
func newRuleState(h host, base string, r *rules.Rule) (ruleState, error) {
	rs := ruleState{rule: r, metrics: defineRuleMetrics(h, r.Name), overflow: r.LimitSets()[0].Limits}
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
	return rs, rs.newTables(base, fp)
}

// leaseTickMillis is the timer period of a plugin with leases: how soon a worker that saw a bucket run
// low asks for more.
const leaseTickMillis = 20

// tickPeriod is the timer period the plugin needs: the shaper's if any limit shapes, the lease
// renewal's (which also checks the deadlines of calls to the service) with a global service, else
// the owned records' (permits and shedders), else none.
func (p *pluginContext) tickPeriod() uint32 {
	t := p.sheds.tickMillis()
	if t == 0 && p.permits.any() {
		t = 1000 // renewals run every permitRenew
	}
	switch {
	case shapes(p.rules) || p.msgs.any:
		return shapeTickMillis // which serves the permits too
	case p.global != nil:
		return leaseTickMillis
	}
	return t
}

// pluginName returns the plugin_name property (Istio: "<namespace>.<name>"), or "default".
func pluginName(h host) string {
	v, ok := h.property(pluginNamePath, nil)
	if !ok || len(v) == 0 {
		return "default"
	}
	return string(v)
}

var pluginNamePath = propertyPath("plugin_name")

// NewHttpContext implements types.PluginContext.
func (p *pluginContext) NewHttpContext(id uint32) types.HttpContext { return p.newHTTPContext(id) }

// OnTick implements types.PluginContext: calls to the service that passed their deadline are given
// up, requests held by a leaky bucket are released when due, leases are renewed for keys that run
// low, the owned records renewed and the adaptive shedders run, and the reset log is read. A panic
// is recovered.
func (p *pluginContext) OnTick() {
	defer p.panics.recoverPanic("a tick")
	now := p.host.now()
	p.stats.flush() // first: a feature's panic does not keep the counts from the host
	if p.global != nil {
		p.global.tick(now)
	}
	testPanic(p.host, panicTick)
	p.shaper.release(now)
	p.msgs.tick(now)
	p.leases.refill(now)
	p.permits.renew(now)
	p.sheds.tick(now)
	p.resets.poll(now)
}

// OnPluginDone implements types.PluginContext: the counts still in the guest go to the host.
func (p *pluginContext) OnPluginDone() bool {
	p.stats.flush()
	return true
}
