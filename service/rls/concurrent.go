package rls

import (
	"context"
	"slices"
	"sync"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/meshlimit/meshlimit/service"
)

// decideAll decides every descriptor of req. With more than one counted descriptor, the
// store calls go out together: when every counted descriptor is a window count and the store
// is a service.BatchCounter (the Redis store), in one batch (countAll: one pipelined round
// trip, no goroutine); otherwise (the extension's algorithms, a store without batches)
// descriptors with different counters are decided concurrently, and descriptors that share a
// counter in request order, one after the other. On an error it returns the first, in request
// order.
func (s *Server) decideAll(ctx context.Context, req *pb.RateLimitRequest, plans []plan, now time.Time, sc *scratch) ([]*pb.RateLimitResponse_DescriptorStatus, error) {
	sts := make([]*pb.RateLimitResponse_DescriptorStatus, len(plans))
	ans := make([]answer, len(plans))
	counted, counts := 0, true
	for i := range plans {
		if plans[i].kind == planLimit {
			counted++
			counts = counts && plans[i].limit.Algorithm == 0
		}
	}
	if counted <= 1 {
		for i := range plans {
			st, err := s.decideOne(ctx, req, i, &plans[i], now, sc, &ans[i])
			if err != nil {
				return nil, err
			}
			sts[i] = st
		}
		return sts, nil
	}
	if bc, ok := s.cfg.Store.(service.BatchCounter); ok && counts {
		if err := s.countAll(ctx, bc, req, plans, now, sc, sts, ans); err != nil {
			return nil, err
		}
		return sts, nil
	}
	keys := make([]string, len(plans))
	for i := range plans {
		if plans[i].kind == planLimit {
			keys[i] = string(appendKey(sc.key[:0], req.GetDomain(), req, i, plans[i].limit.Unit, plans[i].rule.Shared))
		} else {
			sts[i] = ans[i].static(&plans[i])
		}
	}
	errs := make([]error, len(plans))
	var wg sync.WaitGroup
	for _, group := range counterGroups(plans, keys) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, i := range group {
				sts[i], errs[i] = s.decideKey(ctx, keys[i], &plans[i], now, &ans[i])
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

// maxScratchCounts and maxScratchKeys (bytes) bound the batch a pooled scratch keeps between
// requests.
const (
	maxScratchCounts = 64
	maxScratchKeys   = 16 << 10
)

// countAll decides plans, whose counted descriptors are all window counts, with one call of
// bc (in request order, so a shared counter is charged in request order), into sts (their
// rooms in ans).
func (s *Server) countAll(ctx context.Context, bc service.BatchCounter, req *pb.RateLimitRequest, plans []plan, now time.Time, sc *scratch, sts []*pb.RateLimitResponse_DescriptorStatus, ans []answer) error {
	counts, ends := sc.counts[:0], sc.ends[:0]
	sc.key = sc.key[:0]
	for i := range plans {
		p := &plans[i]
		if p.kind != planLimit {
			sts[i] = ans[i].static(p)
			continue
		}
		sc.key = appendKey(sc.key, req.GetDomain(), req, i, p.limit.Unit, p.rule.Shared)
		ends = append(ends, len(sc.key))
		counts = append(counts, service.CountRequest{Window: p.limit.Unit.Duration(), Hits: p.hits, Now: now})
	}
	keys, from := string(sc.key), 0 // every key in one allocation
	for j, end := range ends {
		counts[j].Key, from = keys[from:end], end
	}
	results := slices.Grow(sc.results[:0], len(counts))[:len(counts)]
	start := time.Now()
	err := bc.CountWindows(ctx, counts, results)
	s.cfg.Metrics.store(time.Since(start))
	if err == nil {
		j := 0
		for i := range plans {
			if plans[i].kind == planLimit {
				sts[i] = s.countedStatus(&plans[i], results[j], now, &ans[i])
				j++
			}
		}
	}
	clear(counts) // the keys are not kept past the request
	if cap(counts) <= maxScratchCounts {
		sc.counts, sc.results, sc.ends = counts, results, ends
	}
	if cap(sc.key) > maxScratchKeys {
		sc.key = nil
	}
	return err
}
