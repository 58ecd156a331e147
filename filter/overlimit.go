package filter

import (
	"github.com/meshlimit/meshlimit/abi"
	"github.com/meshlimit/meshlimit/sharedstate"
)

// The over-limit cache: one sharedstate.Records set per global rule (max_keys slots), so that every
// worker thread answers a key the service denied without calling it again until its Retry-After. A
// key's record holds the time until which it is blocked and the index of the limit that denied. The
// records are owner-checked like every other: a key never reads or replaces another key's entry unless
// that entry has expired. A key that finds no room is simply not cached: that only costs one more call.
// A rule with cache_denials false caches nothing: it pays one call per request of a denied key, and in
// exchange an admin reset at the service is seen by the next request on every proxy (a cached denial
// is forgotten when the proxy reads the reset log, within global.reset_poll: resets.go).

// blocked reports whether the key is in the over-limit cache at now: until when, and which limit denied.
// A rule with cache_denials false never finds a key there (even one cached before a reload that
// turned the cache off): every request asks the service, so an admin reset is seen at once.
func (p *pluginContext) blocked(it *globalItem, now int64) (idx int, until int64, ok bool) {
	if !it.rs.rule.CacheDenials {
		return 0, 0, false
	}
	v, ok, err := p.records.Find(it.rs.blocked, []byte(it.key))
	if err != nil || !ok {
		return 0, 0, false
	}
	until, idx, ok = sharedstate.ParseBlock(v)
	if !ok || until <= now || idx >= len(it.spec) {
		return 0, 0, false
	}
	return idx, until, true
}

// block records that the key is denied by limit idx until then. A rule that settles is not cached: a
// refund (settle_global.go) may make room before the Retry-After; nor is one with cache_denials false.
func (p *pluginContext) block(it *globalItem, idx int, until int64) {
	if it.rs.rule.Settle() != nil || !it.rs.rule.CacheDenials {
		return
	}
	p.blockEd = sharedstate.BlockEditor{Now: abi.UnixNano(), Until: until, Limit: byte(idx)}
	_, _ = p.records.Update(it.rs.blocked, []byte(it.key), &p.blockEd)
}
