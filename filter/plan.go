package filter

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/meshlimit/meshlimit/rules"
)

// plansLocally reports whether the configuration uses only local rate rules: no decision service,
// no shedder, no message limit, no shaping delay, and no rule that counts its answers, settles or
// reserves its cost, or holds permits. Such a plugin decides its request headers with localHeaders,
// one straight line with no per-feature test; it decides and answers every request exactly as the
// general path (decideHeaders) would.
func (p *pluginContext) plansLocally() bool {
	if p.global != nil || len(p.sheds.list) > 0 || p.msgs.any || p.permits.any() || shapes(p.rules) {
		return false
	}
	for i := range p.rules {
		r := p.rules[i].rule
		if r.Scope != rules.ScopeLocal || r.CountOn != nil || r.Settle() != nil || r.ReservesFromBody() ||
			r.Messages() != nil || r.Concurrency() != nil {
			return false
		}
	}
	return true
}

// localHeaders decides the request headers of a plugin that plansLocally: every rule the request
// may match, in order, up to the first enforced denial, which sends the local response (and gives
// back the takes of the rules before it); an admitted request keeps its outcomes for the quota
// fields. Nothing else is looked at: no reservation, charge, permit, message limit, shedder,
// shaping delay or call can come of such a configuration.
func (p *pluginContext) localHeaders(h *httpContext) types.Action {
	d := &p.d
	d.req.reset()
	d.outcomes, d.denier = d.outcomes[:0], nil
	now := p.raw.now()
	d.taken.at = now
	var denied bool
	if len(p.rules) == 1 { // Matches decides alone what the selection would narrow first
		d.deciding = 0
		denied = p.decidePlanned(&p.rules[0], now)
		d.deciding = -1
	} else {
		denied = p.decideRules(now, true)
	}
	h.planned = true
	if denied {
		h.deny()
		d.taken.reset(0)
		return types.ActionPause
	}
	if len(d.taken.list) > 0 {
		d.taken.reset(0) // admitted: its takes are spent
	}
	if len(d.outcomes) > 0 && p.cfg.Response.QuotaHeadersOnAllowed {
		h.quota.adopt(&d.outcomes)
	}
	return types.ActionContinue
}

// decidePlanned is decide for a rule of a plugin that plansLocally: match, key, limits, cost, and
// the decision against its table.
func (p *pluginContext) decidePlanned(rs *ruleState, now int64) (denied bool) {
	r := rs.rule
	key, set, applies, denied := p.keyed(rs)
	if !applies {
		return denied
	}
	cost := p.cost(r)
	enforced := p.cfg.Enforce && !r.Shadow && (r.EnforcePercent == 100 || r.EnforcedFor(key))
	return p.decideLocal(rs, set, key, cost, now, enforced)
}
