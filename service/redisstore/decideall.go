package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/rueidis"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/service"
)

// decideAllStride is the arguments of one request in the batch script (lua/decide_all.lua): its
// kind and the nine of its own script.
const decideAllStride = 1 + scriptArgCount

// DecideAll implements service.BatchDecider: the requests go to Redis as one script
// (lua/decide_all.lua), which runs each request's own decision script in order and stops after
// the first denial, so a check costs one round trip whatever its number of descriptors. One
// request, and requests whose keys a Cluster holds in different slots, are decided one call
// each. While Redis refuses writes for lack of memory the batch is refused before it writes
// anything, and the requests are decided one call each (Decide's path for a full Redis).
func (s *Store) DecideAll(ctx context.Context, reqs []service.Request, out []algorithms.Decision) (int, error) {
	if len(out) != len(reqs) {
		return 0, errors.New("redisstore: DecideAll: out and reqs differ in length")
	}
	for _, r := range reqs {
		if err := r.Validate(); err != nil {
			return 0, err
		}
	}
	if len(reqs) == 1 || !s.oneSlot(reqs) {
		return service.DecideEach(ctx, s, reqs, out)
	}
	keys, args := s.batchCall(reqs)
	rows, err := s.scripts.all.Exec(ctx, s.client, keys, args).ToArray()
	if err != nil {
		if err = s.redisErr(err); errors.Is(err, service.ErrStoreFull) {
			// Refused at its first write, before any: each request on Decide's path.
			return service.DecideEach(ctx, s, reqs, out)
		}
		return 0, err
	}
	if len(rows) == 0 || len(rows) > len(reqs) {
		return 0, fmt.Errorf("redisstore: the batch script returned %d decisions for %d requests", len(rows), len(reqs))
	}
	for i, row := range rows {
		v, err := row.AsIntSlice()
		if err != nil {
			return 0, fmt.Errorf("redisstore: the batch script's decision %d: %w", i, err)
		}
		if out[i], err = decision(reqs[i].Limit, v); err != nil {
			return 0, err
		}
	}
	if n := len(rows); n < len(reqs) && out[n-1].Allowed {
		return 0, fmt.Errorf("redisstore: the batch script stopped after %d of %d requests without a denial", n, len(reqs))
	}
	return len(rows), nil
}

// batchCall returns the keys and arguments of the batch script for reqs. The digits of every
// argument and every key are written into one buffer, made a string once, and the arguments
// and keys are slices of it: three allocations whatever the number of requests.
func (s *Store) batchCall(reqs []service.Request) (keys, args []string) {
	var b strings.Builder
	size := 0
	for _, r := range reqs {
		size += batchArgBytes + s.keyLen(r.Limit.Kind.String(), -1, r.Key)
	}
	b.Grow(size)
	ends := make([]int32, 0, decideAllStride*len(reqs)+len(reqs))
	for _, r := range reqs {
		l := r.Limit
		writeInt(&b, int64(l.Kind))
		ends = append(ends, int32(b.Len()))
		ends = writeScriptArgs(&b, ends, l, r.Cost, pexpireMs(l.TTL()), r.Now)
	}
	for _, r := range reqs {
		s.writeKey(&b, r.Limit.Kind.String(), -1, r.Key)
		ends = append(ends, int32(b.Len()))
	}
	all := b.String()
	strs := make([]string, len(ends))
	start := int32(0)
	for i, end := range ends {
		strs[i], start = all[start:end], end
	}
	n := decideAllStride * len(reqs)
	return strs[n:], strs[:n]
}

// batchArgBytes is room for the digits of a request's ten arguments in the batch script as a check
// usually has them (a quota of 9 digits, a window of up to a day in µs, a TTL in ms, a burst, a
// cost and a calendar of one digit, now from Redis TIME): more (up to 96) grows the buffer once.
const batchArgBytes = 48

// oneSlot reports whether one script may hold every request's key: always outside a Cluster;
// in one, when their hash tags are equal.
func (s *Store) oneSlot(reqs []service.Request) bool {
	if s.client.Mode() != rueidis.ClientModeCluster {
		return true
	}
	tag := s.tag(reqs[0].Key)
	for _, r := range reqs[1:] {
		if s.tag(r.Key) != tag {
			return false
		}
	}
	return true
}
