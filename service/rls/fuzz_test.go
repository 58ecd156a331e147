package rls

import (
	"context"
	"testing"
	"time"

	rlext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshlimit/meshlimit/service/memstore"
	"github.com/meshlimit/meshlimit/service/rlsconfig"
)

// FuzzDecide sends arbitrary descriptors against the fixture rules: the server must answer
// one status per descriptor, or an error for an empty domain or an unknown override unit,
// and never panic.
func FuzzDecide(f *testing.F) {
	f.Add("example9", "path", "/api/x/action", "route", "", uint32(0), uint64(1), false, int32(0), uint32(0), 2)
	f.Add("example7", "key_1", "value_1", "user", "bkthomps", uint32(3), uint64(0), true, int32(2), uint32(5), 3)
	f.Add("internal", "ldap", "", "azure", "x", uint32(1), uint64(9), false, int32(9), uint32(1), 1)
	rules := goodRules(f)
	store := memstore.New(memstore.Config{SweepInterval: -1})
	f.Cleanup(func() { store.Close() })
	s, err := NewServer(Config{Store: store, Rules: func() *rlsconfig.Config { return rules }, Headers: HeadersDraft03,
		Now: func() time.Time { return minuteStart }})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, domain, k1, v1, k2, v2 string, reqHits uint32, descHits uint64, setHits bool, unit int32, rpu uint32, n int) {
		n = 1 + (n&7)%4
		r := &pb.RateLimitRequest{Domain: domain, HitsAddend: reqHits % 1000}
		for i := range n {
			d := &rlext.RateLimitDescriptor{Entries: []*rlext.RateLimitDescriptor_Entry{{Key: k1, Value: v1}}}
			if i%2 == 1 {
				d.Entries = append(d.Entries, &rlext.RateLimitDescriptor_Entry{Key: k2, Value: v2})
			}
			if setHits && i == 0 {
				d.HitsAddend = wrapperspb.UInt64(descHits)
			}
			if unit != 0 && i == n-1 {
				d.Limit = &rlext.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: typev3.RateLimitUnit(unit)}
			}
			r.Descriptors = append(r.Descriptors, d)
		}
		resp, err := s.ShouldRateLimit(context.Background(), r)
		if err != nil {
			return
		}
		if len(resp.GetStatuses()) != n {
			t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), n)
		}
	})
}
