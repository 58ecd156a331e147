package rls

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/meshlimit/meshlimit/internal/sfv"
)

// HeaderMode selects the response headers a Server asks Envoy to add.
type HeaderMode uint8

const (
	// HeadersOff adds none (envoyproxy/ratelimit's default).
	HeadersOff HeaderMode = iota
	// HeadersDraft03 adds RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset
	// (draft-ietf-httpapi-ratelimit-headers-03, what envoyproxy/ratelimit writes with
	// LIMIT_RESPONSE_HEADERS_ENABLED) describing one descriptor: the last one over the limit,
	// else the first with the fewest remaining among those with a limit.
	HeadersDraft03
	// HeadersIETF adds the structured fields RateLimit-Policy and RateLimit of
	// draft-ietf-httpapi-ratelimit-headers-11, one list member per descriptor with a limit, in
	// request order: q and w, r the available quota and t the effective window (see ietf).
	HeadersIETF
)

// ParseHeaderMode parses the -ratelimit-response-headers flag: "off" (or "" or "false"),
// "draft03" (or "true" or "on"), or "ietf".
func ParseHeaderMode(s string) (HeaderMode, error) {
	switch strings.ToLower(s) {
	case "", "off", "false":
		return HeadersOff, nil
	case "draft03", "true", "on":
		return HeadersDraft03, nil
	case "ietf":
		return HeadersIETF, nil
	}
	return 0, fmt.Errorf("want off, draft03 or ietf, got %q", s)
}

// headers returns the headers to add for statuses (one per plan).
func (m HeaderMode) headers(sts []*pb.RateLimitResponse_DescriptorStatus, plans []plan) []*core.HeaderValue {
	switch m {
	case HeadersDraft03:
		return draft03(sts, plans)
	case HeadersIETF:
		return ietf(sts, plans)
	}
	return nil
}

// draft03 describes the descriptor chosen as envoyproxy/ratelimit chooses it: the last one
// over its limit (a quota-mode one only competes on remaining), else the first with the
// fewest remaining.
func draft03(sts []*pb.RateLimitResponse_DescriptorStatus, plans []plan) []*core.HeaderValue {
	var pick *pb.RateLimitResponse_DescriptorStatus
	pickOver := false
	for i, st := range sts {
		if st.GetCurrentLimit() == nil {
			continue
		}
		over := st.GetCode() == pb.RateLimitResponse_OVER_LIMIT && !plans[i].rule.QuotaMode
		if over || pick == nil || (!pickOver && st.GetLimitRemaining() < pick.GetLimitRemaining()) {
			pick, pickOver = st, over || pickOver
		}
	}
	if pick == nil {
		return nil
	}
	return []*core.HeaderValue{
		{Key: "RateLimit-Limit", Value: strconv.FormatUint(uint64(pick.GetCurrentLimit().GetRequestsPerUnit()), 10)},
		{Key: "RateLimit-Remaining", Value: strconv.FormatUint(uint64(pick.GetLimitRemaining()), 10)},
		{Key: "RateLimit-Reset", Value: strconv.FormatInt(pick.GetDurationUntilReset().GetSeconds(), 10)},
	}
}

// ietf writes RateLimit-Policy and RateLimit with one member per descriptor with a limit: q is
// requests_per_unit and w the unit in seconds; r is the available quota, the status's
// LimitRemaining; t is the effective window, "the number of seconds within which the client can
// use no more than the available quota" (§4.1.2), rounded up: for the fixed window (the peer's
// counting, and the default) the window's end, DurationUntilReset; for an algorithm of the
// extension its decision's effective window (algorithms.Limit.EffectiveWindowOf), where
// DurationUntilReset is the time until the quota is full again.
//
// Members are named by policyName. Two descriptors of one name (the same descriptor sent twice,
// or two overrides of the same keys) make one member, the one with the least r, kept where the
// first stood: the name identifies one policy, and the binding one is what a client needs.
func ietf(sts []*pb.RateLimitResponse_DescriptorStatus, plans []plan) []*core.HeaderValue {
	var ms []ietfMember
	for i, st := range sts {
		l := st.GetCurrentLimit()
		if l == nil {
			continue
		}
		m := ietfMember{
			name: policyName(l, &plans[i]),
			q:    int64(l.GetRequestsPerUnit()),
			w:    int64(plans[i].limit.Unit.Duration() / time.Second),
			r:    int64(st.GetLimitRemaining()),
			t:    st.GetDurationUntilReset().GetSeconds(),
		}
		if w := plans[i].window; w > 0 {
			m.t = int64((w + time.Second - 1) / time.Second)
		}
		ms = addMember(ms, m)
	}
	if len(ms) == 0 {
		return nil
	}
	var policy, state []byte
	for i, m := range ms {
		if i > 0 {
			policy, state = append(policy, ", "...), append(state, ", "...)
		}
		start := len(policy)
		policy = sfv.AppendString(policy, m.name)
		state = append(state, policy[start:]...)
		policy = sfv.AppendInteger(append(policy, ";q="...), m.q)
		policy = sfv.AppendInteger(append(policy, ";w="...), m.w)
		state = sfv.AppendInteger(append(state, ";r="...), m.r)
		state = sfv.AppendInteger(append(state, ";t="...), m.t)
	}
	return []*core.HeaderValue{
		{Key: "RateLimit-Policy", Value: string(policy)},
		{Key: "RateLimit", Value: string(state)},
	}
}

// ietfMember is one policy of the ietf fields.
type ietfMember struct {
	name       string
	q, w, r, t int64
}

// addMember adds m to ms, or, when a member of its name is there, keeps the one with less r
// in that place.
func addMember(ms []ietfMember, m ietfMember) []ietfMember {
	for i := range ms {
		if ms[i].name == m.name {
			if m.r < ms[i].r {
				ms[i] = m
			}
			return ms
		}
	}
	return append(ms, m)
}

// policyName names a descriptor's policy, the same wherever the descriptor stands in the
// request: the limit's name, else its rule's path, else (an override) "override" and the
// domain's and the descriptor's keys; escaped by escapeName.
func policyName(l *pb.RateLimitResponse_RateLimit, p *plan) string {
	switch {
	case l.GetName() != "":
		return escapeName(l.GetName())
	case p.rule.Path != "":
		return escapeName(p.rule.Path)
	}
	return escapeName(p.overrideName)
}

// escapeName percent-encodes (as %XX) '%' and every byte an sf-string cannot hold (outside
// printable ASCII: UTF-8 names), so that distinct names stay distinct: "nämé" and "n??m??"
// no longer collide, as they did with a '?' for each such byte.
func escapeName(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '%' || c < 0x20 || c > 0x7e {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '%' || c < 0x20 || c > 0x7e {
			b = append(b, '%', hex[c>>4], hex[c&15])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}
