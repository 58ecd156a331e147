package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/service"
)

// batchSlot is the bytes of one request's numbers in the batch script's first argument
// (lua/decide_all.lua): eight little-endian doubles.
const batchSlot = 8 * 8

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

// batchCall returns the keys and arguments of the batch script for reqs (lua/decide_all.lua):
// ARGV[1] holds every request's numbers as doubles (exact: each is an integer below 2^53, or a
// cost past every quota, which any rounding keeps past it), so that Redis makes no Lua string of
// them and the script parses none; ARGV[1+i] is request i's TTL in milliseconds, which the script
// hands to PEXPIRE as it is. The keys and the TTLs are slices of one string: four allocations
// whatever the number of requests.
func (s *Store) batchCall(reqs []service.Request) (keys, args []string) {
	var b strings.Builder
	size := batchSlot * len(reqs)
	for _, r := range reqs {
		size += 11 + s.keyLen(stateKind(r.Limit.Kind), -1, r.Key)
	}
	b.Grow(size)
	for _, r := range reqs {
		l := r.Limit
		nowUs := int64(-1) // Redis TIME
		if !r.Now.IsZero() {
			nowUs = clampUs(r.Now)
		}
		for _, v := range [batchSlot / 8]int64{int64(l.Kind), l.Quota, int64(l.Window / time.Microsecond), l.Burst,
			r.Cost, nowUs, int64(l.Calendar.Unit), int64(l.Calendar.Offset / time.Microsecond)} {
			var d [8]byte
			binary.LittleEndian.PutUint64(d[:], math.Float64bits(float64(v)))
			b.Write(d[:])
		}
	}
	ends := make([]int, 0, 2*len(reqs)+1)
	ends = append(ends, b.Len())
	for _, r := range reqs {
		writeInt(&b, max(pexpireMs(r.Limit.TTL()), 1))
		ends = append(ends, b.Len())
	}
	for _, r := range reqs {
		s.writeKey(&b, stateKind(r.Limit.Kind), -1, r.Key)
		ends = append(ends, b.Len())
	}
	all := b.String()
	strs := make([]string, len(ends))
	start := 0
	for i, end := range ends {
		strs[i], start = all[start:end], end
	}
	return strs[1+len(reqs):], strs[:1+len(reqs)]
}

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
