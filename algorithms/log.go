package algorithms

import (
	"encoding/binary"
	"fmt"
	"time"
)

// The sliding log keeps, in ascending order, the time of every cost unit admitted in the last
// Window (a request of cost c adds c equal times), plus the latest now it has seen (its clock).
// A request of cost c at now (clamped to the clock) is admitted when the entries in
// (now−Window, now] number at most Quota−c. It is exact, and the slow, obviously correct
// reference for the other window algorithms.

const logHeaderSize = 1 + 8

// logState is a decoded view of a sliding-log state; entries are still encoded.
type logState struct {
	clock   int64
	entries []byte // 8 bytes per entry, ascending
}

func (s logState) len() int           { return len(s.entries) / 8 }
func (s logState) at(i int) int64     { return int64(binary.BigEndian.Uint64(s.entries[8*i:])) }
func (s logState) newest() int64      { return s.at(s.len() - 1) }
func (s logState) slice(i int) []byte { return s.entries[8*i:] }

// decodeLog checks and decodes a non-empty sliding-log state: header, clock µs, then at most
// MaxLogQuota entries, ascending, none after the clock.
func decodeLog(b []byte) (logState, error) {
	ok := len(b) >= logHeaderSize && (len(b)-logHeaderSize)%8 == 0 &&
		(len(b)-logHeaderSize)/8 <= int(MaxLogQuota)
	if err := checkHeader(b, SlidingLog, ok, "9 + 8×n with n <= 10000"); err != nil {
		return logState{}, err
	}
	clock, err := field(b, 1, maxTimeUs, "clock", SlidingLog)
	if err != nil {
		return logState{}, err
	}
	s := logState{clock: clock, entries: b[logHeaderSize:]}
	prev := int64(0)
	for i := range s.len() {
		t := s.at(i)
		if t < prev || t > clock {
			return logState{}, fmt.Errorf("%w: sliding_log entry %d (%d) is not in [%d, clock %d]", ErrMalformedState, i, t, prev, clock)
		}
		prev = t
	}
	return s, nil
}

// firstLive returns the index of the first entry after cut (entries are ascending).
func (s logState) firstLive(cut int64) int {
	lo, hi := 0, s.len()
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s.at(m) <= cut {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

func (l Limit) decideLog(state []byte, n, cost int64, dst []byte) ([]byte, Decision, error) {
	w, q := l.windowUs(), l.Quota
	var s logState
	if len(state) > 0 {
		var err error
		if s, err = decodeLog(state); err != nil {
			return nil, Decision{}, err
		}
	}
	eff := max(n, s.clock)
	first := s.firstLive(eff - w)
	count := int64(s.len() - first)
	d := Decision{Limit: q}
	switch {
	case cost > q:
		d.RetryAfter = RetryNever
	case cost <= q-count:
		d.Allowed = true
	default:
		// The oldest count+cost−q live entries must expire first; entry t expires at t+W.
		t := s.at(first + int(count+cost-q) - 1)
		d.RetryAfter = time.Duration(usToDuration(t + w - n))
	}
	newest := int64(-1)
	if d.Allowed {
		count += cost
		newest = eff
	} else if count > 0 {
		newest = s.newest()
	}
	d.Remaining = max(q-count, 0)
	if newest >= 0 {
		d.Reset = time.Duration(usToDuration(newest + w - n))
	}
	d.EffectiveWindow = s.effectiveWindow(first, count, q, w, eff, n)

	// Keep the live entries, at most the newest Quota of them (with more, only the newest
	// Quota can ever decide anything: the older ones expire first).
	keep := max(first, s.len()-int(q))
	live := s.slice(keep) // read before dst overwrites the header, which may alias state
	dst = append(dst[:0], header(SlidingLog))
	dst = appendField(dst, eff)
	dst = append(dst, live...)
	if d.Allowed {
		for range cost {
			dst = appendField(dst, eff)
		}
	}
	return dst, d, nil
}

func (l Limit) idleLog(state []byte, n int64) bool {
	s, err := decodeLog(state)
	if err != nil {
		return true
	}
	return s.len() == 0 || s.newest() <= max(n, s.clock)-l.windowUs()
}
