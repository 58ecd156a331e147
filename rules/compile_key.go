package rules

import (
	"strconv"
	"strings"
)

// ruleKey compiles a rule's key parts and missing_key.
func (v *validator) ruleKey(path string, rj *ruleJSON, r *Rule) {
	if len(rj.Key) > maxKeyParts {
		v.failf(path+".key", "%d parts: at most %d are allowed", len(rj.Key), maxKeyParts)
	}
	for i := range rj.Key {
		if p, ok := v.keyPart(path+".key["+strconv.Itoa(i)+"]", &rj.Key[i]); ok {
			r.key = append(r.key, p)
		}
	}
	switch rj.MissingKey {
	case "", "skip":
	case "default":
		r.MissingKey = MissingKeyDefault
	default:
		v.failf(path+".missing_key", "unknown value %q (want skip or default)", rj.MissingKey)
	}
}

func (v *validator) keyPart(path string, kj *keyPartJSON) (keyPart, bool) {
	var p keyPart
	n := 0
	flag := func(b *bool, k keyKind) {
		if b == nil {
			return
		}
		n++
		p.kind = k
		if !*b {
			v.failf(path+"."+k.String(), "must be true (omit the part instead)")
		}
	}
	flag(kj.Path, keyPath)
	flag(kj.Method, keyMethod)
	flag(kj.Host, keyHost)
	flag(kj.RouteName, keyRouteName)
	if kj.ClientIP != nil {
		n++
		p = v.clientIPPart(path+".client_ip", kj.ClientIP)
	}
	if kj.Header != nil {
		n++
		p.kind, p.name = keyHeader, strings.ToLower(*kj.Header)
		if !isToken(*kj.Header) {
			v.failf(path+".header", "%q is not a valid header name", *kj.Header)
		}
	}
	if kj.Query != nil {
		n++
		p.kind, p.name = keyQuery, *kj.Query
		if *kj.Query == "" {
			v.failf(path+".query", "empty parameter name")
		}
	}
	if kj.Constant != nil {
		n++
		p.kind, p.name = keyConstant, *kj.Constant
		if *kj.Constant == "" || len(*kj.Constant) > maxPartLen {
			v.failf(path+".constant", "want 1 to %d bytes", maxPartLen)
		}
	}
	if kj.Property != nil {
		n++
		p.kind, p.property = keyProperty, kj.Property.segments
		v.propertyPath(path+".property", p.property)
	}
	if n != 1 {
		v.failf(path, "set exactly one of client_ip, header, path, method, host, route_name, query, constant or property")
		return p, false
	}
	return p, true
}

// clientIPPart compiles a client_ip key part.
func (v *validator) clientIPPart(path string, cj *clientIPJSON) keyPart {
	return keyPart{
		kind:        keyClientIP,
		trustedHops: int(v.intIn(path+".trusted_hops", cj.TrustedHops, 0, maxTrustedHops)),
		v4Bits:      v.maskBits(path+".ipv4_mask", cj.IPv4Mask, defaultIPv4Mask, 32),
		v6Bits:      v.maskBits(path+".ipv6_mask", cj.IPv6Mask, defaultIPv6Mask, 128),
	}
}

// propertyPath checks the segments of a property key part: at least one, none empty.
func (v *validator) propertyPath(path string, segments []string) {
	if len(segments) == 0 {
		v.failf(path, "empty property path")
	}
	for _, s := range segments {
		if s == "" {
			v.failf(path, "empty segment in %q", strings.Join(segments, "."))
			return
		}
	}
}

// maskBits returns the prefix length set in o, or def when unset. Every value is a prefix
// length: 0 is refused, since a /0 key puts every client into one bucket (a rule without the
// client_ip part does that explicitly), and the address length (32 or 128) keeps the whole
// address.
func (v *validator) maskBits(path string, o optInt, def, bits int64) int {
	if !o.Set {
		return int(def)
	}
	if o.Value < 1 || o.Value > bits {
		v.failf(path, "%d out of range: want a prefix length from 1 to %d (%d keeps the whole address)", o.Value, bits, bits)
		return int(def)
	}
	return int(o.Value)
}
