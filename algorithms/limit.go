package algorithms

import (
	"errors"
	"fmt"
	"time"
)

// Kind names one of the five rate-limit algorithms. The zero Kind is invalid.
type Kind uint8

// The five algorithms. Their numeric values appear in state encodings and must not change.
const (
	// TokenBucket admits bursts of up to Burst cost units and refills Quota units per Window,
	// continuously. It is implemented as GCRA (a single theoretical arrival time).
	TokenBucket Kind = iota + 1
	// LeakyBucket is a shaper, like NGINX limit_req with burst: requests queue in a bucket of
	// Burst units that drains at Quota per Window, and Decision.Delay is each request's wait.
	LeakyBucket
	// FixedWindow counts cost per window aligned to unix-epoch multiples of Window, or, with a
	// Calendar, per calendar day, ISO week, month or year.
	FixedWindow
	// SlidingLog keeps the time of every admitted cost unit in the last Window: exact, and its
	// state grows to 9 + 8×Quota bytes.
	SlidingLog
	// SlidingWindow estimates the sliding count from two fixed windows (Cloudflare's counter):
	// prev×(Window−elapsed)/Window + cur.
	SlidingWindow
)

var kindNames = [...]string{
	TokenBucket:   "token_bucket",
	LeakyBucket:   "leaky_bucket",
	FixedWindow:   "fixed_window",
	SlidingLog:    "sliding_log",
	SlidingWindow: "sliding_window",
}

// Kinds lists every valid Kind in numeric order.
var Kinds = [...]Kind{TokenBucket, LeakyBucket, FixedWindow, SlidingLog, SlidingWindow}

// String returns the snake_case name that ParseKind accepts, or "kind(N)" for an invalid Kind.
func (k Kind) String() string {
	if k.valid() {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

func (k Kind) valid() bool { return k >= TokenBucket && k <= SlidingWindow }

// bucket reports whether k is one of the two bucket algorithms, which use Burst.
func (k Kind) bucket() bool { return k == TokenBucket || k == LeakyBucket }

// TakesBurst reports whether a Limit of kind k may set Burst: true for the two buckets, false
// for the window algorithms (whose Burst must be 0) and for an invalid Kind.
func (k Kind) TakesBurst() bool { return k.bucket() }

// MaxQuota returns the largest Quota a Limit of kind k accepts: MaxLogQuota for SlidingLog,
// MaxQuota for the others.
func (k Kind) MaxQuota() int64 {
	if k == SlidingLog {
		return MaxLogQuota
	}
	return MaxQuota
}

// ParseKind returns the Kind named s: "token_bucket", "leaky_bucket", "fixed_window",
// "sliding_log" or "sliding_window".
func ParseKind(s string) (Kind, error) {
	for _, k := range Kinds {
		if kindNames[k] == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("algorithms: unknown kind %q (want token_bucket, leaky_bucket, fixed_window, sliding_log or sliding_window)", s)
}

// Bounds on a Limit. They guarantee that every intermediate value of every algorithm stays
// within ±2^53, so the Lua scripts of the global service compute identical decisions (see the
// package documentation).
const (
	// MinWindow is the shortest Window.
	MinWindow = time.Millisecond
	// MaxWindow is the longest Window (a leap year with room to spare; 3.456e13 µs < 2^45). It
	// also bounds the time a bucket takes to refill from empty, Capacity×Window/Quota.
	MaxWindow = 400 * 24 * time.Hour
	// MaxQuota is the largest Quota and Burst (10^12 < 2^40).
	MaxQuota int64 = 1_000_000_000_000
	// MaxLogQuota is the largest Quota of a SlidingLog, whose state takes 9 + 8×Quota bytes
	// (at most 80,009 bytes).
	MaxLogQuota int64 = 10_000
)

// RetryNever is the Decision.RetryAfter of a request whose cost exceeds the limit's Capacity:
// no amount of waiting admits it. Callers should answer such a request without a Retry-After
// header (or with a 4xx other than 429).
const RetryNever time.Duration = 1<<63 - 1

// ErrMalformedState is wrapped by every error that Decide returns for state bytes it cannot
// decode: a wrong length, version or kind, or a value out of range. The state cannot be
// trusted; callers usually discard it and start fresh.
var ErrMalformedState = errors.New("algorithms: malformed state")

// Limit is one rate limit: Quota cost units per Window. Burst is the bucket capacity for the
// two bucket algorithms (0 means Quota); the window algorithms ignore it and require it to be 0.
//
// A Limit with a Calendar unit is a calendar window instead: Quota cost units per calendar day,
// ISO week, month or year of a fixed UTC offset ("10,000 per month, renewed on the 1st"). Only
// FixedWindow takes a Calendar, and its Window must then be 0: the period is the calendar's. The
// other kinds have no period to align: a bucket refills continuously, and the sliding log and
// the sliding window counter look back over a span that moves with the clock.
//
// A Limit is a plain value; its methods never read the clock and are safe for concurrent use.
// Valid limits satisfy 1 <= Quota <= MaxQuota (MaxLogQuota for SlidingLog),
// MinWindow <= Window <= MaxWindow with Window a whole number of microseconds (or Window == 0
// with a valid Calendar, for FixedWindow only), 0 <= Burst <= MaxQuota, and
// Capacity×Window/Quota <= MaxWindow for the buckets.
type Limit struct {
	Kind     Kind
	Quota    int64
	Window   time.Duration
	Burst    int64
	Calendar Calendar
}

// Validate reports what is wrong with l, or nil if l is valid.
func (l Limit) Validate() error {
	_, err := l.check()
	return err
}

// check validates l and, for a bucket, returns its GCRA constants.
func (l Limit) check() (g gcraParams, err error) {
	if !l.Kind.valid() {
		return g, fmt.Errorf("algorithms: unknown kind %d", uint8(l.Kind))
	}
	if l.Quota <= 0 {
		return g, fmt.Errorf("algorithms: quota must be > 0, got %d", l.Quota)
	}
	if l.Quota > MaxQuota {
		return g, fmt.Errorf("algorithms: quota must be <= %d, got %d", MaxQuota, l.Quota)
	}
	if l.Kind == SlidingLog && l.Quota > MaxLogQuota {
		return g, fmt.Errorf("algorithms: sliding_log quota must be <= %d (its state keeps one 8-byte time per unit), got %d", MaxLogQuota, l.Quota)
	}
	if l.Calendar != (Calendar{}) {
		return g, l.checkCalendar()
	}
	if l.Window < MinWindow || l.Window > MaxWindow {
		return g, fmt.Errorf("algorithms: window must be between %v and %v, got %v", MinWindow, MaxWindow, l.Window)
	}
	if l.Window%time.Microsecond != 0 {
		return g, fmt.Errorf("algorithms: window must be a whole number of microseconds, got %v", l.Window)
	}
	if !l.Kind.bucket() {
		if l.Burst != 0 {
			return g, fmt.Errorf("algorithms: burst must be 0 for %v, got %d", l.Kind, l.Burst)
		}
		return g, nil
	}
	if l.Burst < 0 || l.Burst > MaxQuota {
		return g, fmt.Errorf("algorithms: burst must be between 0 and %d, got %d", MaxQuota, l.Burst)
	}
	g, ok := l.gcra()
	if !ok {
		return g, fmt.Errorf("algorithms: capacity × window / quota (the time to refill an empty bucket) must be <= %v, got %d × %v / %d",
			MaxWindow, l.Capacity(), l.Window, l.Quota)
	}
	return g, nil
}

// checkCalendar validates a calendar window: a valid Calendar, FixedWindow, no Window, no Burst.
func (l Limit) checkCalendar() error {
	if err := l.Calendar.check(); err != nil {
		return err
	}
	if l.Kind != FixedWindow {
		why := "a sliding window looks back over a span that moves with the clock"
		if l.Kind.bucket() {
			why = "a bucket refills continuously"
		}
		return fmt.Errorf("algorithms: a calendar window needs the fixed_window kind, got %v (%s: there is no period to align)", l.Kind, why)
	}
	if l.Window != 0 {
		return fmt.Errorf("algorithms: window must be 0 with a calendar unit (the %v is the window), got %v", l.Calendar.Unit, l.Window)
	}
	if l.Burst != 0 {
		return fmt.Errorf("algorithms: burst must be 0 for %v, got %d", l.Kind, l.Burst)
	}
	return nil
}

// Capacity returns the most cost admitted at once: Burst (or Quota when Burst is 0) for the
// buckets, Quota for the window algorithms. A request whose cost exceeds Capacity is always
// denied, with RetryAfter set to RetryNever.
func (l Limit) Capacity() int64 {
	if l.Kind.bucket() && l.Burst > 0 {
		return l.Burst
	}
	return l.Quota
}

// TTL returns the longest time after a decision for which its state can still matter:
// after TTL, IdleAt reports true. It is the time to refill a full bucket
// (Capacity×Window/Quota, rounded up to a microsecond) for the buckets, Window for the fixed
// window and the sliding log, and 2×Window for the sliding window counter. For a calendar
// window it is the unit's longest period (CalendarUnit.MaxLength: 24 hours, 7, 31 or 366
// days), which a state written at any instant of a period outlives. A state that Adjust left in
// debt outlives TTL: by up to MaxDebt+1 times it from the settle (see Adjust). TTL returns 0 for
// an invalid Limit.
func (l Limit) TTL() time.Duration {
	if l.Validate() != nil {
		return 0
	}
	switch l.Kind {
	case TokenBucket, LeakyBucket:
		g, _ := l.gcra()
		return time.Duration(usToDuration(g.tau.ceil()))
	case SlidingWindow:
		return 2 * l.Window
	default:
		if l.Calendar.Unit != 0 {
			return l.Calendar.Unit.MaxLength()
		}
		return l.Window
	}
}

// WindowAt returns the length of l's window at now (unix nanoseconds): Window, or for a calendar
// window the real length of the period that contains now (a 28- to 31-day month, a 365- or
// 366-day year), what RateLimit-Policy's w advertises. It returns 0 for an invalid Limit.
func (l Limit) WindowAt(now int64) time.Duration {
	if l.Validate() != nil {
		return 0
	}
	if l.Calendar.Unit == 0 {
		return l.Window
	}
	start, end := l.Calendar.periodUs(quantize(now))
	return time.Duration(usToDuration(end - start))
}

// Decision is the outcome of one Decide call, with what a response needs. All durations are
// whole microseconds, measured from the now passed to Decide.
type Decision struct {
	// Allowed reports whether the request is admitted (for LeakyBucket: queued, see Delay).
	Allowed bool
	// Limit is the quota to advertise (the q of RateLimit-Policy): Limit.Quota.
	Limit int64
	// Remaining is the cost still available right after this decision, in [0, Capacity].
	Remaining int64
	// Reset is the time until the full Capacity is available again, assuming no further
	// requests; 0 exactly when Remaining == Capacity.
	Reset time.Duration
	// RetryAfter is 0 when allowed. When denied, it is the exact time until this same request
	// would be admitted if nothing else arrives (> 0), or RetryNever if its cost exceeds Capacity.
	RetryAfter time.Duration
	// Delay is, for an allowed LeakyBucket request, the time to hold it before forwarding: its
	// turn in the queue at Quota per Window. It is 0 otherwise.
	Delay time.Duration
	// EffectiveWindow is the time within which no more than Remaining cost can be admitted,
	// however requests arrive: the earliest time at which a request of cost 1 would be admitted
	// if a request of cost Remaining were admitted at now (> 0; "the effective window" of
	// draft-ietf-httpapi-ratelimit-headers-11, §4.1.2). For every algorithm but the sliding
	// window counter that is also when Remaining, left unspent, next grows; the counter gives
	// more to a client that spends now, whose use then weighs less and less in the next window.
	// On a denial it is at most RetryAfter. Decide and Peek
	// always set it; a decision rebuilt from fewer fields (another process's answer) may leave
	// it 0, and Limit.EffectiveWindowOf then tells what those fields allow.
	EffectiveWindow time.Duration
	// At is, for a decision a store of the decision service made, the time it decided at (unix
	// nanoseconds, on the store's clock: Redis TIME), which an undo or a settle of what it
	// admitted names to be applied in the window, the log and the state that took it (wire's
	// at_us); 0 when not known. Decide and Peek leave it 0: the caller knows its now.
	At int64
}

// Decide decides a request of the given cost at time now (unix nanoseconds) against the encoded
// state (nil or empty means fresh). It appends the next state's encoding to dst[:0] and returns
// it; nothing is allocated when dst has room (see EncodedSize). dst may be state itself, for an
// in-place update; otherwise it must not overlap state.
//
// now is truncated to microseconds and clamped to [0, 2^52 µs]. A now earlier than the time
// the state has already seen is treated as that time (the buckets need no clamp: an earlier now
// just finds fewer tokens), so a clock that steps back never admits extra.
//
// A denied request leaves the state logically unchanged: next may differ from state in bytes
// (windows roll forward, expired log entries are dropped, the log's clock advances), but no
// future decision does. A cost above Capacity is denied with RetryAfter == RetryNever.
//
// err is non-nil only for an invalid Limit, a cost < 1, or malformed state bytes (wrapping
// ErrMalformedState); then next is nil and d is the zero Decision.
func (l Limit) Decide(state []byte, now int64, cost int64, dst []byte) (next []byte, d Decision, err error) {
	g, err := l.check()
	if err != nil {
		return nil, Decision{}, err
	}
	return l.decide(&g, state, now, cost, dst)
}

// decide is Decide for a valid l whose bucket constants are g.
func (l Limit) decide(g *gcraParams, state []byte, now int64, cost int64, dst []byte) (next []byte, d Decision, err error) {
	if cost < 1 {
		return nil, Decision{}, fmt.Errorf("algorithms: cost must be >= 1, got %d", cost)
	}
	n := quantize(now)
	switch l.Kind {
	case TokenBucket, LeakyBucket:
		return l.decideBucket(g, state, n, cost, dst)
	case FixedWindow:
		return l.decideFixed(state, n, cost, dst)
	case SlidingLog:
		return l.decideLog(state, n, cost, dst)
	default:
		return l.decideSliding(state, n, cost, dst)
	}
}

// IdleAt reports whether the encoded state holds nothing that can affect a decision at now
// (unix nanoseconds) or later, so that its storage slot may be reused or its key may expire:
// a fresh state would decide the same. (The one thing an idle state may still hold is a clock
// later than now; forgetting it is harmless.) IdleAt reports true for an empty or malformed
// state (nothing in the latter can be trusted) and false for an invalid Limit. After
// Decide(…, now, …) returns next and d, IdleAt(next, t) holds for every t >= now + d.Reset,
// and so for every t >= max(now, latest now seen) + TTL() (MaxDebt+1 times TTL for a state that
// Adjust left in debt).
func (l Limit) IdleAt(state []byte, now int64) bool {
	g, err := l.check()
	if err != nil {
		return false
	}
	return l.idleAt(&g, state, now)
}

// idleAt is IdleAt for a valid l whose bucket constants are g.
func (l Limit) idleAt(g *gcraParams, state []byte, now int64) bool {
	if len(state) == 0 {
		return true
	}
	n := quantize(now)
	switch l.Kind {
	case TokenBucket, LeakyBucket:
		return l.idleBucket(g, state, n)
	case FixedWindow:
		return l.idleFixed(state, n)
	case SlidingLog:
		return l.idleLog(state, n)
	default:
		return l.idleSliding(state, n)
	}
}

// EncodedSize returns the largest encoding of a state of l in bytes: a dst of this capacity
// makes Decide allocation-free. It is 17 for the buckets and the fixed window, 25 for the
// sliding window counter and 9 + 8×Quota for the sliding log (0 for an invalid Limit).
func (l Limit) EncodedSize() int {
	if l.Validate() != nil {
		return 0
	}
	switch l.Kind {
	case SlidingLog:
		return logHeaderSize + 8*int(l.Quota)
	case SlidingWindow:
		return slidingSize
	default:
		return 17
	}
}
