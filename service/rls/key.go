package rls

import (
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/meshlimit/meshlimit/service/rlsconfig"
)

// appendKey appends the counter key of a descriptor: "rls:" then the domain, each entry as
// "|key=value" (or "|key~pattern" where shared[j] names the pattern of a level that shares its
// threshold), and "@unit", with '\', '|', '=', '~' and '@' escaped by '\' so that two
// different descriptors never share a key.
func appendKey(b []byte, domain string, d *pb.RateLimitRequest, i int, unit rlsconfig.Unit, shared []string) []byte {
	b = append(b, "rls:"...)
	b = appendEscaped(b, domain)
	for j, e := range d.GetDescriptors()[i].GetEntries() {
		b = append(b, '|')
		b = appendEscaped(b, e.GetKey())
		if j < len(shared) && shared[j] != "" {
			b = append(b, '~')
			b = appendEscaped(b, shared[j])
			continue
		}
		b = append(b, '=')
		b = appendEscaped(b, e.GetValue())
	}
	b = append(b, '@')
	return append(b, unit.String()...)
}

func appendEscaped(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\', '|', '=', '~', '@':
			b = append(b, '\\', c)
		default:
			b = append(b, c)
		}
	}
	return b
}
