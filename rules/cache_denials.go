package rules

// cacheDenials compiles rules[].cache_denials onto r (after its scope and count_on); set is nil when
// the rule does not set it. A global rule caches the service's denials unless told not to.
//
// A counted global rule (count_on) cannot do without the cache: its request path never calls the
// service, it only checks the penalty box, which is the over-limit cache (the penalty, or the
// service's Retry-After of a denied charge, lives there and nowhere else). Without the cache such a
// rule would never deny, so cache_denials: false is refused on it, with or without a penalty.
func (v *validator) cacheDenials(path string, set *bool, r *Rule) {
	r.CacheDenials = r.Scope != ScopeLocal
	if set == nil {
		return
	}
	switch {
	case r.Scope == ScopeLocal:
		v.failf(path, "only rules with scope global or both cache the service's denials")
	case !*set && r.CountOn != nil:
		v.failf(path, "false cannot be combined with count_on: a counted global rule denies only from the over-limit cache (its penalty box)")
	default:
		r.CacheDenials = *set
	}
}
