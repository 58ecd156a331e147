package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
)

// clockSyncEvery is how often a Store re-reads Redis TIME to correct its estimate of the
// Redis clock (a drift of 100 ppm between two syncs is 0.1 ms).
const clockSyncEvery = time.Second

// clockSyncTimeout bounds a background re-sync, the reconnect it may start included. rueidis
// makes every call that needs a connection wait, whatever its own deadline, for the one
// reconnect in flight, which is bounded by the context of the call that started it: a re-sync
// bounded by a second made every decision on a frozen Redis take a second instead of its
// -timeout (review r21 F3). A TIME round trip takes well under it; a re-sync that misses it
// keeps the last offset.
const clockSyncTimeout = 10 * time.Millisecond

// clock estimates Redis TIME from the local clock: the local time plus the offset seen
// by the best recent TIME round trip (the one with the shortest round trip, whose midpoint
// is closest to the instant Redis read its clock). Its error is at most half that round
// trip plus the drift since, which is within the life of any request the estimate times: a
// decision taken at the estimate could have been taken at Redis TIME by the same request.
// Before the first sync the offset is 0 (the local clock).
type clock struct {
	offset atomic.Int64 // ns to add to the local clock
	synced atomic.Bool
}

// now returns the estimate of Redis TIME.
func (c *clock) now() time.Time {
	return time.Now().Add(time.Duration(c.offset.Load()))
}

// syncClock reads Redis TIME three times and keeps the offset of the shortest round trip.
func (s *Store) syncClock(ctx context.Context) error {
	best, offset := time.Duration(-1), int64(0)
	for range 3 {
		t0 := time.Now()
		v, err := s.client.Do(ctx, s.client.B().Time().Build()).AsStrSlice()
		t1 := time.Now()
		if err != nil {
			return err
		}
		if len(v) != 2 {
			return fmt.Errorf("redisstore: TIME returned %d values, want 2", len(v))
		}
		sec, err1 := strconv.ParseInt(v[0], 10, 64)
		us, err2 := strconv.ParseInt(v[1], 10, 64)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("redisstore: TIME returned %q", v)
		}
		if rtt := t1.Sub(t0); best < 0 || rtt < best {
			mid := t0.Add(rtt / 2)
			best, offset = rtt, (sec*1e9+us*1e3)-mid.UnixNano()
		}
	}
	s.clock.offset.Store(offset)
	s.clock.synced.Store(true)
	return nil
}

// keepClockSynced re-syncs the clock every clockSyncEvery until done is closed. A failed
// sync keeps the last offset (Redis down: the decisions fail anyway).
func (s *Store) keepClockSynced(done <-chan struct{}) {
	t := time.NewTicker(clockSyncEvery)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), clockSyncTimeout)
			_ = s.syncClock(ctx)
			cancel()
		}
	}
}
