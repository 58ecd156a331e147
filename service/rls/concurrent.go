package rls

import (
	"context"
	"sync"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// decideAll decides every descriptor of req. With more than one counted descriptor, the
// store calls go out together (the Redis client pipelines them: one round trip instead of
// one per descriptor): descriptors with different counters are decided concurrently, and
// descriptors that share a counter in request order, one after the other. On an error it
// returns the first, in request order.
func (s *Server) decideAll(ctx context.Context, req *pb.RateLimitRequest, plans []plan, now time.Time, sc *scratch) ([]*pb.RateLimitResponse_DescriptorStatus, error) {
	sts := make([]*pb.RateLimitResponse_DescriptorStatus, len(plans))
	counted := 0
	for i := range plans {
		if plans[i].kind == planLimit {
			counted++
		}
	}
	if counted <= 1 {
		for i := range plans {
			st, err := s.decideOne(ctx, req, i, &plans[i], now, sc)
			if err != nil {
				return nil, err
			}
			sts[i] = st
		}
		return sts, nil
	}
	keys := make([]string, len(plans))
	for i := range plans {
		if plans[i].kind == planLimit {
			keys[i] = string(appendKey(sc.key[:0], req.GetDomain(), req, i, plans[i].limit.Unit, plans[i].rule.Shared))
		} else {
			sts[i] = staticStatus(&plans[i])
		}
	}
	errs := make([]error, len(plans))
	var wg sync.WaitGroup
	for _, group := range counterGroups(plans, keys) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, i := range group {
				sts[i], errs[i] = s.decideKey(ctx, keys[i], &plans[i], now)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return sts, nil
}

// counterGroups groups the counted descriptors by counter key, each group in request order,
// the groups in the order of their first descriptor. It is linear in the descriptors.
func counterGroups(plans []plan, keys []string) [][]int {
	var groups [][]int
	index := make(map[string]int, len(plans))
	for i := range plans {
		if plans[i].kind != planLimit {
			continue
		}
		if g, ok := index[keys[i]]; ok {
			groups[g] = append(groups[g], i)
			continue
		}
		index[keys[i]] = len(groups)
		groups = append(groups, []int{i})
	}
	return groups
}
