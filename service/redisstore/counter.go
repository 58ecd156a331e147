package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/service"
)

// counterGrace is how long a counter outlives its window: a replica whose clock is behind (up
// to this much) still finds the window's count.
const counterGrace = time.Second

// CountWindow implements service.Store with no script: the count of a window is a plain
// integer under a key of its own (windowKey), charged with INCRBY and given a TTL (the time to
// the window's end and counterGrace) by PEXPIRE NX in the same round trip; hits 0 is a GET.
// That is a sixth of the Redis CPU of the fixed-window script. The window is chosen by the
// time of the request (req.Now), or else by s.clock, the local estimate of Redis TIME.
//
// A charge that takes the count past MaxQuota is undone with DECRBY, so that calls one after
// the other count exactly as a FixedWindow of quota MaxQuota does (the memory store's
// counter); only calls racing at MaxQuota (10^12 hits in one window) may see a count that
// another call is about to undo.
func (s *Store) CountWindow(ctx context.Context, req service.CountRequest) (int64, time.Duration, error) {
	if err := req.Validate(); err != nil {
		return 0, 0, err
	}
	now := req.Now
	if now.IsZero() {
		now = s.clock.now()
	}
	w := s.window(req, now)
	key, hits, left := w.key, w.hits, w.left
	if hits == 0 {
		n, err := s.client.Do(ctx, s.client.B().Get().Key(key).Build()).AsInt64()
		if rueidis.IsRedisNil(err) || err == nil && n <= 0 {
			return 0, 0, nil
		}
		if err != nil {
			return 0, 0, s.redisErr(err)
		}
		return min(n, algorithms.MaxQuota), left, nil
	}
	ttl := pexpireMs(left + counterGrace)
	res := s.client.DoMulti(ctx,
		s.client.B().Incrby().Key(key).Increment(hits).Build(),
		s.client.B().Pexpire().Key(key).Milliseconds(ttl).Nx().Build())
	n, err := res[0].AsInt64()
	if err == nil {
		err = res[1].Error()
	}
	if err != nil {
		return 0, 0, s.redisErr(err)
	}
	if n > algorithms.MaxQuota { // a fixed window denies the charge: undo it
		if n, err = s.client.Do(ctx, s.client.B().Decrby().Key(key).Decrement(hits).Build()).AsInt64(); err != nil {
			return 0, 0, s.redisErr(err)
		}
		n = min(n, algorithms.MaxQuota)
	}
	return n, left, nil
}

// windowKey returns the Redis key of the count of key's window that starts at startUs:
// KeyPrefix + "{" + tag + "}:count:" + startUs + ":" + key, with the tag of Store.key (the
// same Cluster slot as every other state of key).
func (s *Store) windowKey(key string, startUs int64) string {
	return s.keyAt(countKind, startUs, key)
}

// countKind is the kind of the window counters' keys.
const countKind = "count"

// CountWindows implements service.BatchCounter: every request's commands (those of
// CountWindow) go out in one DoMulti, so a batch costs one pipelined round trip per Redis node
// whatever its size; requests without their own Now share one reading of the clock. Redis runs
// one connection's commands in order, so a counter named twice is charged in request order.
// The rare charges that pass MaxQuota are then undone and replayed one by one (redoOver), so
// that the batch counts as its calls one after the other would.
func (s *Store) CountWindows(ctx context.Context, reqs []service.CountRequest, out []service.CountResult) error {
	if len(out) != len(reqs) {
		return errors.New("redisstore: CountWindows: out and reqs differ in length")
	}
	for _, r := range reqs {
		if err := r.Validate(); err != nil {
			return err
		}
	}
	var clockNow time.Time
	b := batch{windows: make([]counterWindow, len(reqs)), cmds: make(rueidis.Commands, 0, 2*len(reqs))}
	size := 0
	for i, r := range reqs {
		now := r.Now
		if now.IsZero() {
			if clockNow.IsZero() {
				clockNow = s.clock.now()
			}
			now = clockNow
		}
		b.windows[i] = s.windowAt(r, now)
		size += s.keyLen(countKind, b.windows[i].start, r.Key)
	}
	// Every window key in one allocation, and a TTL formatted once for the requests that share
	// it (a request's descriptors are mostly of one unit, so of one window).
	var keys strings.Builder
	keys.Grow(size)
	var ttl string
	ttlMs := int64(-1)
	for i, r := range reqs {
		w := &b.windows[i]
		from := keys.Len()
		s.writeKey(&keys, countKind, w.start, r.Key)
		w.key = keys.String()[from:] // the bytes written are never changed
		if w.hits == 0 {
			b.cmds = append(b.cmds, s.client.B().Get().Key(w.key).Build())
			continue
		}
		if ms := pexpireMs(w.left + counterGrace); ms != ttlMs {
			ttl, ttlMs = strconv.FormatInt(ms, 10), ms
		}
		b.cmds = append(b.cmds, s.client.B().Incrby().Key(w.key).Increment(w.hits).Build(),
			s.client.B().Arbitrary("PEXPIRE").Keys(w.key).Args(ttl, "NX").Build())
	}
	over, err := s.readBatch(s.client.DoMulti(ctx, b.cmds...), b.windows, out)
	if err != nil || !over {
		return err
	}
	return s.redoOver(ctx, reqs, b.windows, out)
}

// batch is the commands of a CountWindows call and the window of each request.
type batch struct {
	windows []counterWindow
	cmds    rueidis.Commands
}

// counterWindow is where one count request counts: its window's key, the time left in the
// window, the hits to charge (at most MaxQuota) and the window's start (µs).
type counterWindow struct {
	key   string
	left  time.Duration
	hits  int64
	start int64
}

// window returns the counterWindow of r at now.
func (s *Store) window(r service.CountRequest, now time.Time) counterWindow {
	w := s.windowAt(r, now)
	w.key = s.windowKey(r.Key, w.start)
	return w
}

// windowAt is window without the key.
func (s *Store) windowAt(r service.CountRequest, now time.Time) counterWindow {
	us := clampUs(now)
	w := int64(r.Window / time.Microsecond)
	start := us - us%w
	return counterWindow{left: time.Duration(start+w-us) * time.Microsecond, hits: min(r.Hits, algorithms.MaxQuota), start: start}
}

// readBatch reads the replies of a batch into out, and reports whether a charge passed
// MaxQuota (its out is then not final).
func (s *Store) readBatch(res []rueidis.RedisResult, windows []counterWindow, out []service.CountResult) (bool, error) {
	over, j := false, 0
	for i, w := range windows {
		if w.hits == 0 {
			n, err := res[j].AsInt64()
			j++
			switch {
			case rueidis.IsRedisNil(err) || err == nil && n <= 0:
				out[i] = service.CountResult{}
			case err != nil:
				return false, s.redisErr(err)
			default:
				out[i] = service.CountResult{Count: min(n, algorithms.MaxQuota), Reset: w.left}
			}
			continue
		}
		n, err := res[j].AsInt64()
		if err == nil {
			err = res[j+1].Error()
		}
		j += 2
		if err != nil {
			return false, s.redisErr(err)
		}
		out[i] = service.CountResult{Count: n, Reset: w.left}
		over = over || n > algorithms.MaxQuota
	}
	return over, nil
}

// redoOver makes a batch in which some charge passed MaxQuota count as its calls one after the
// other would: on every counter with such a charge, the batch's charges from the first one
// past MaxQuota on are undone in one DECRBY, and those requests are replayed in order by
// CountWindow (each undoing a charge that passes MaxQuota), in the same window.
func (s *Store) redoOver(ctx context.Context, reqs []service.CountRequest, windows []counterWindow, out []service.CountResult) error {
	first := map[string]int{} // window key → index of its first charge past MaxQuota
	for i, w := range windows {
		if _, ok := first[w.key]; !ok && w.hits > 0 && out[i].Count > algorithms.MaxQuota {
			first[w.key] = i
		}
	}
	undo := map[string]int64{}
	for i, w := range windows {
		if f, ok := first[w.key]; ok && i >= f {
			undo[w.key] += w.hits
		}
	}
	for key, hits := range undo {
		if err := s.client.Do(ctx, s.client.B().Decrby().Key(key).Decrement(hits).Build()).Error(); err != nil {
			return s.redisErr(err)
		}
	}
	for i, w := range windows {
		if f, ok := first[w.key]; !ok || i < f {
			continue
		}
		r := reqs[i]
		r.Now = time.UnixMicro(w.start + int64(r.Window/time.Microsecond) - int64(w.left/time.Microsecond))
		n, reset, err := s.CountWindow(ctx, r)
		if err != nil {
			return err
		}
		out[i] = service.CountResult{Count: n, Reset: reset}
	}
	return nil
}
