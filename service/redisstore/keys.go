package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/service"
)

// Inspect implements service.Store: it reads the key's fields as the scripts store them (see lua/) and
// rebuilds the algorithms package's encoding of the state (algorithms/doc.go) to peek at it. The
// time is req.Now or the service's clock.
func (s *Store) Inspect(ctx context.Context, req service.Request) (service.KeyState, error) {
	if err := req.Validate(); err != nil {
		return service.KeyState{}, err
	}
	now := req.Now
	if now.IsZero() {
		now = time.Now()
	}
	state, err := s.readState(ctx, req)
	if err != nil {
		return service.KeyState{}, err
	}
	return service.PeekState(req.Limit, state, now)
}

// readState returns the encoded state of req's key, or nil when it has none.
func (s *Store) readState(ctx context.Context, req service.Request) ([]byte, error) {
	key := s.stateKey(req.Limit.Kind, req.Key)
	k := req.Limit.Kind
	if k == algorithms.SlidingLog {
		raw, err := s.client.Do(ctx, s.client.B().Get().Key(key).Build()).ToString()
		if rueidis.IsRedisNil(err) {
			return nil, nil
		}
		if err != nil {
			return nil, s.redisErr(err)
		}
		return encodeLog(raw)
	}
	fields := map[algorithms.Kind][]string{
		algorithms.TokenBucket:   {"i", "f"},
		algorithms.LeakyBucket:   {"i", "f"},
		algorithms.FixedWindow:   {"s", "k"},
		algorithms.SlidingWindow: {"s", "p", "k"},
	}[k]
	msgs, err := s.client.Do(ctx, s.client.B().Hmget().Key(key).Field(fields...).Build()).ToArray()
	if err != nil {
		return nil, s.redisErr(err)
	}
	state := []byte{1<<4 | byte(k)}
	for i := range msgs {
		if msgs[i].IsNil() {
			return nil, nil
		}
		v, err := msgs[i].AsInt64()
		if err != nil || v < 0 {
			return nil, fmt.Errorf("redisstore: key %s field %s: not a state", key, fields[i])
		}
		state = binary.BigEndian.AppendUint64(state, uint64(v))
	}
	return state, nil
}

// encodeLog turns the sliding log's state into the algorithms package's encoding: the clock,
// then one entry per unit. The state is the run-length string "clock t1 n1 t2 n2 ..." or the
// ring form a decision writes (lua/sliding_log_index.lua).
func encodeLog(raw string) ([]byte, error) {
	nums, err := logNumbers(raw)
	if err != nil {
		return nil, err
	}
	state := binary.BigEndian.AppendUint64([]byte{1<<4 | byte(algorithms.SlidingLog)}, uint64(nums[0]))
	units := int64(0)
	for i := 1; i+1 < len(nums); i += 2 {
		for range min(nums[i+1], algorithms.MaxLogQuota-units) {
			state = binary.BigEndian.AppendUint64(state, uint64(nums[i]))
			units++
		}
	}
	return state, nil
}

// errNotALog is logNumbers' error for a value that is no sliding log state.
var errNotALog = errors.New("redisstore: sliding log: not a state")

// logNumbers returns a sliding log's state as the numbers of its text form: the clock, then each
// run's time and units.
func logNumbers(raw string) ([]int64, error) {
	if strings.HasPrefix(raw, "S") {
		return ringLogNumbers(raw)
	}
	vals := strings.Fields(raw)
	if len(vals)%2 != 1 {
		return nil, errNotALog
	}
	nums := make([]int64, len(vals))
	for i, v := range vals {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return nil, errNotALog
		}
		nums[i] = n
	}
	return nums, nil
}

// logHead and logEntry are the sizes of the ring form's header ('S', clock, base, start, count,
// cap, the sweep's gap: the run it follows and its slots, and a slot where the next sweep begins)
// and of a run (time, cumulative units modulo logCum), little-endian doubles; after an undo, the
// slots are followed by an offset per block of logBlock slots, to subtract from their counts
// (lua/sliding_log_index.lua).
const (
	logHead  = 65
	logEntry = 16
	logBlock = 32
	logCum   = 1 << 52
)

// ringLogNumbers is logNumbers for the ring form.
func ringLogNumbers(raw string) ([]int64, error) {
	num := func(at int) (int64, bool) {
		if at+8 > len(raw) {
			return 0, false
		}
		f := math.Float64frombits(binary.LittleEndian.Uint64([]byte(raw[at : at+8])))
		n := int64(f)
		return n, f >= 0 && f < logCum && float64(n) == f
	}
	var h [8]int64 // clock, base, start, count, cap, gap after, gap slots, next sweep
	for i := range h {
		var ok bool
		if h[i], ok = num(1 + 8*i); !ok {
			return nil, errNotALog
		}
	}
	clock, prev, start, count, capacity, gapAfter, gap := h[0], h[1], h[2], h[3], h[4], h[5], h[6]
	slots := logHead + logEntry*capacity
	offsets := capacity > 0 && int64(len(raw)) == slots+8*((capacity+logBlock-1)/logBlock+1) // an undo's (lua/sliding_log_undo.lua): each block's, then block 0's again
	if int64(len(raw)) != slots && !offsets || count > capacity || count > 0 && start >= capacity ||
		gapAfter > count || gap > capacity-count {
		return nil, errNotALog
	}
	nums := []int64{clock}
	for i := range count {
		p := start + i
		if i >= gapAfter {
			p += gap
		}
		p %= capacity
		at := logHead + logEntry*int(p)
		t, ok1 := num(at)
		c, ok2 := num(at + 8)
		if !ok1 || !ok2 {
			return nil, errNotALog
		}
		if offsets {
			o, ok := num(int(slots + 8*(p/logBlock)))
			if !ok {
				return nil, errNotALog
			}
			c -= o
		}
		nums = append(nums, t, ((c-prev)%logCum+logCum)%logCum)
		prev = c
	}
	return nums, nil
}

// Reset implements service.Store.
func (s *Store) Reset(ctx context.Context, req service.Request) (bool, error) {
	if err := req.Validate(); err != nil {
		return false, err
	}
	n, err := s.client.Do(ctx, s.client.B().Del().Key(s.stateKey(req.Limit.Kind, req.Key)).Build()).AsInt64()
	if err != nil {
		return false, s.redisErr(err)
	}
	return n > 0, nil
}
