package algorithms

import "time"

// windowUs returns l.Window in microseconds.
func (l Limit) windowUs() int64 { return int64(l.Window / time.Microsecond) }

// roll positions the window of a window-algorithm state for now n (µs). s is the stored window
// start, realigned down to a multiple of w (it is already aligned unless Window changed).
// It returns the current window start, the clamped now (never before the window start, so a
// clock that steps back stays in the stored window), and shift, the number of whole windows
// the state moves forward (0 when it stays, capped at 2).
func roll(s, n, w int64) (start, clamped, shift int64) {
	s -= s % w
	cur := n - n%w
	switch {
	case cur <= s:
		return s, max(n, s), 0
	case cur-s == w:
		return cur, n, 1
	default:
		return cur, n, 2
	}
}

const fixedSize = 1 + 8 + 8

// maxCount is the largest count a fixed-window state holds: a window full and MaxDebt more quotas of
// debt (MaxDebt+1 quotas, at most 6.5e13 < 2^46), which Adjust may leave.
const maxCount = (MaxDebt + 1) * MaxQuota

// decodeFixed decodes a non-empty fixed-window state: header, window start µs, count.
func decodeFixed(b []byte) (start, count int64, err error) {
	if err = checkHeader(b, FixedWindow, len(b) == fixedSize, "17"); err != nil {
		return 0, 0, err
	}
	if start, err = field(b, 1, maxTimeUs, "window start", FixedWindow); err != nil {
		return 0, 0, err
	}
	if count, err = field(b, 9, maxCount, "count", FixedWindow); err != nil {
		return 0, 0, err
	}
	return start, count, nil
}

// positionFixed places a fixed-window state (window start s, count k; s = n, k = 0 when fresh) at
// now n µs (placeFixed). It returns the window the decision falls in, [start, end), and the count
// in it: what was counted past the quota in s's window is carried into the windows after it, a
// quota paid per window, so m windows later the count is max(k − m×Quota, 0) (0 from MaxDebt+1
// windows on: k is at most MaxDebt+1 quotas).
func (l Limit) positionFixed(s, k, n int64) (start, end, count int64) {
	k = min(k, (MaxDebt+1)*l.Quota)
	start, end, m := l.placeFixed(s, n)
	if m > 0 {
		k = l.carry(k, m)
	}
	return start, end, k
}

// placeFixed returns the window [start, end) that a decision at now n µs falls in, for a stored
// window start s, and m, the number of windows from s's to it (0 when it is s's). A clock that
// steps back stays in the stored window. A rolling window realigns s down to a multiple of Window;
// a calendar window places s in its period: s before the period of n means a later period, s at or
// past that period's end means the clock stepped back, and the stored period (the one that contains
// s) is kept. The period that contains the unix epoch may begin before it: its start is stored as 0,
// which it contains.
func (l Limit) placeFixed(s, n int64) (start, end, m int64) {
	if l.Calendar.Unit == 0 {
		w := l.windowUs()
		s -= s % w
		if cur := n - n%w; cur > s {
			return cur, cur + w, (cur - s) / w
		}
		return s, s + w, 0
	}
	cs, ce := l.Calendar.periodUs(n)
	cs = max(cs, 0)
	switch {
	case s < cs:
		return cs, ce, l.Calendar.indexUs(n) - l.Calendar.indexUs(s)
	case s < ce:
		return cs, ce, 0
	}
	start, end = l.Calendar.periodUs(s) // s >= ce > 0: this start is positive
	return start, end, 0
}

// carry returns what is left of count k (at most MaxDebt+1 quotas) m >= 1 windows later.
func (l Limit) carry(k, m int64) int64 { return max(k-min(m, MaxDebt+1)*l.Quota, 0) }

// windowAfter returns the start (µs) of the m-th window after the one that starts at s (m >= 1, at
// most MaxDebt+1): s + m×Window, or the start of the m-th calendar period after s's.
func (l Limit) windowAfter(s, m int64) int64 {
	if l.Calendar.Unit == 0 {
		return s + m*l.windowUs()
	}
	return l.Calendar.startUs(l.Calendar.indexUs(s) + m)
}

// decideFixed admits cost when it fits what the window has left. A count k past the quota is a
// debt: a request of cost c waits for the window in which the carried count leaves room for it,
// the floor((k+c−1)/Quota)-th after this one (the next when k is within the quota), and the
// quota is full again ceil(k/Quota) windows on.
func (l Limit) decideFixed(state []byte, n, cost int64, dst []byte) ([]byte, Decision, error) {
	q := l.Quota
	s, k := n, int64(0)
	if len(state) > 0 {
		var err error
		if s, k, err = decodeFixed(state); err != nil {
			return nil, Decision{}, err
		}
	}
	s, _, k = l.positionFixed(s, k, n)
	d := Decision{Limit: q}
	switch {
	case cost > q:
		d.RetryAfter = RetryNever
	case cost <= q-k:
		d.Allowed = true
		k += cost
	default:
		d.RetryAfter = time.Duration(usToDuration(l.windowAfter(s, (k+cost-1)/q) - n))
	}
	d.Remaining = max(q-k, 0)
	if k > 0 {
		d.Reset = time.Duration(usToDuration(l.windowAfter(s, (k+q-1)/q) - n))
	}
	// Once Remaining is spent the count is max(k, q): a unit is back when it has been paid down.
	d.EffectiveWindow = time.Duration(usToDuration(l.windowAfter(s, max(k, q)/q) - n))
	dst = append(dst[:0], header(FixedWindow))
	dst = appendField(dst, s)
	dst = appendField(dst, k)
	return dst, d, nil
}

func (l Limit) idleFixed(state []byte, n int64) bool {
	s, k, err := decodeFixed(state)
	if err != nil {
		return true
	}
	_, _, k = l.positionFixed(s, k, n)
	return k == 0
}

const slidingSize = 1 + 8 + 8 + 8

// decodeSliding decodes a non-empty sliding-window state: header, current window start µs,
// previous window's count, current window's count.
func decodeSliding(b []byte) (start, prev, cur int64, err error) {
	if err = checkHeader(b, SlidingWindow, len(b) == slidingSize, "25"); err != nil {
		return 0, 0, 0, err
	}
	if start, err = field(b, 1, maxTimeUs, "window start", SlidingWindow); err != nil {
		return 0, 0, 0, err
	}
	if prev, err = field(b, 9, MaxQuota, "previous count", SlidingWindow); err != nil {
		return 0, 0, 0, err
	}
	if cur, err = field(b, 17, MaxQuota, "current count", SlidingWindow); err != nil {
		return 0, 0, 0, err
	}
	return start, prev, cur, nil
}

// decideSliding is Cloudflare's two-counter estimate, in exact integers. With e the time
// elapsed in the current window, the estimated count is ceil(prev×(W−e)/W) + cur, and a
// request of cost c is admitted when estimate + c <= Quota (the ceiling makes this the exact
// test of the rational estimate).
func (l Limit) decideSliding(state []byte, n, cost int64, dst []byte) ([]byte, Decision, error) {
	w, q := l.windowUs(), l.Quota
	s, p, k := n, int64(0), int64(0)
	if len(state) > 0 {
		var err error
		if s, p, k, err = decodeSliding(state); err != nil {
			return nil, Decision{}, err
		}
	}
	s, eff, shift := roll(s, n, w)
	switch shift {
	case 1:
		p, k = k, 0
	case 2:
		p, k = 0, 0
	}
	e := eff - s
	wq, wr := mulDivMod(p, w-e, w)
	weighted := wq
	if wr > 0 {
		weighted++
	}
	avail := q - k - weighted
	d := Decision{Limit: q}
	switch {
	case cost > q:
		d.RetryAfter = RetryNever
	case cost <= avail:
		d.Allowed = true
		k += cost
		avail -= cost
	default:
		d.RetryAfter = time.Duration(usToDuration(slidingRetry(s, p, k, q, w, cost) - n))
	}
	d.Remaining = max(avail, 0)
	switch {
	case k > 0:
		d.Reset = time.Duration(usToDuration(s + 2*w - n))
	case p > 0:
		d.Reset = time.Duration(usToDuration(s + w - n))
	}
	d.EffectiveWindow = slidingEffective(s, p, k, d.Remaining, q, w, n)
	dst = append(dst[:0], header(SlidingWindow))
	dst = appendField(dst, s)
	dst = appendField(dst, p)
	dst = appendField(dst, k)
	return dst, d, nil
}

// slidingRetry returns the earliest time (µs) at which a request of cost c <= q, denied in the
// window starting at s with counts p and k, is admitted if nothing else arrives.
func slidingRetry(s, p, k, q, w, c int64) int64 {
	if a := q - k - c; a >= 0 {
		// Later in this window, once ceil(p×(W−e)/W) <= a, i.e. e >= W − floor(a×W/p).
		// Denied now means a < ceil(p×(W−e)/W) <= p, so the quotient is < W.
		aw, _ := mulDivMod(a, w, p)
		return s + w - aw
	}
	// In the next window, where the previous count is k: once ceil(k×(W−e)/W) <= q−c.
	a := q - c
	if a >= k {
		return s + w
	}
	aw, _ := mulDivMod(a, w, k)
	return s + 2*w - aw
}

func (l Limit) idleSliding(state []byte, n int64) bool {
	s, p, k, err := decodeSliding(state)
	if err != nil {
		return true
	}
	w := l.windowUs()
	s -= s % w
	cur := n - n%w
	return cur >= s+2*w || (cur >= s+w && k == 0) || (k == 0 && p == 0)
}
