package filter

import (
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

// overLimitCache keeps the over-limit entries of the plugin's rules (rs.blocked): a global rule's
// cached denials, and a counted rule's penalty box (charge.go), which share the record format
// (sharedstate.BlockEditor).
type overLimitCache struct {
	*env
	ed sharedstate.BlockEditor // reused
}

// find reports whether key is blocked in rec at now: until when, and which of its limits (fewer
// than limits) denied it.
func (o *overLimitCache) find(rec *sharedstate.Records, key []byte, limits int, now int64) (idx int, until int64, ok bool) {
	v, ok, err := o.records.Find(rec, key)
	if err != nil || !ok {
		return 0, 0, false
	}
	until, idx, ok = sharedstate.ParseBlock(v)
	if !ok || until <= now || idx >= limits {
		return 0, 0, false
	}
	return idx, until, true
}

// put blocks key in rec until then (limit idx denied it).
func (o *overLimitCache) put(rec *sharedstate.Records, key []byte, idx int, until int64) {
	o.ed = sharedstate.BlockEditor{Now: o.host.now(), Until: until, Limit: byte(idx)}
	_, _ = o.records.Update(rec, key, &o.ed)
}

// blocked reports whether the key is in the over-limit cache at now: until when, and which limit denied.
// A rule with cache_denials false never finds a key there (even one cached before a reload that
// turned the cache off): every request asks the service, so an admin reset is seen at once.
func (o *overLimitCache) blocked(it *globalItem, now int64) (idx int, until int64, ok bool) {
	if !it.rs.rule.CacheDenials {
		return 0, 0, false
	}
	return o.find(it.rs.blocked, []byte(it.key), len(it.spec), now)
}

// block records that the key is denied by limit idx until then. A rule that settles is not cached: a
// refund (settle_global.go) may make room before the Retry-After; nor is one with cache_denials false.
func (o *overLimitCache) block(it *globalItem, idx int, until int64) {
	if it.rs.rule.Settle() != nil || !it.rs.rule.CacheDenials {
		return
	}
	o.put(it.rs.blocked, []byte(it.key), idx, until)
}
