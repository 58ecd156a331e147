// Package algorithms implements five rate-limit algorithms as pure functions over compact,
// versioned state bytes: token bucket, leaky bucket (a shaper), fixed window, sliding log and
// sliding window counter; the fixed window also aligns to the calendar (a day, ISO week, month
// or year at a fixed UTC offset). It does no I/O and never reads the clock: every decision takes
// the time as an argument, so the same code runs in the proxy-wasm filter (state in Envoy shared
// data) and in tests, and the Redis Lua scripts of the global service can transcribe it.
//
// # Usage
//
// A Limit holds the parameters; Limit.Decide maps (state, now, cost) to (next state, Decision):
//
//	l := algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 100, Window: time.Second}
//	next, d, err := l.Decide(state, now.UnixNano(), 1, buf[:0])
//
// Choosing: the token bucket admits bursts up to Burst and then Quota per Window, smoothly; the
// leaky bucket admits the same requests but spreads them out with Decision.Delay instead of
// letting a burst through; the fixed window is the cheapest and the easiest to explain, but can
// admit 2×Quota across a window edge; the sliding log is exact but costs 8 bytes per unit of
// Quota; the sliding window counter is nearly exact at a fixed 25 bytes. A quota sold per
// calendar period ("10,000 calls per month, renewed on the 1st") is a fixed window with a
// Calendar instead of a Window:
//
//	l := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 10_000,
//		Calendar: algorithms.Calendar{Unit: algorithms.CalendarMonth, Offset: -8 * time.Hour}}
//
// # Exact integers, identical in Lua
//
// There are no floats. Times are whole microseconds (now is truncated; Redis TIME gives µs) and
// every intermediate value stays within ±2^53, where IEEE doubles are exact, given the bounds
// that Limit.Validate enforces and decoding checks:
//
//	now              0 <= n <= 2^52 µs (clamped; the year 2112)
//	W = Window       1 ms <= W <= 400 days = 3.456e13 µs < 2^45
//	Q = Quota        1 <= Q <= 10^12 < 2^40 (sliding log: Q <= 10^4)
//	C = Capacity     Burst, or Q when Burst is 0; <= 10^12
//	τ = C×W/Q        <= MaxWindow for the buckets (time to refill an empty bucket)
//	o = offset       |o| <= 18 h = 6.48e10 µs, whole minutes (calendar windows)
//	calendar period  24 h to 366 days <= MaxWindow; its end e <= n + 366 days
//	civil days       −1 <= (n + o) // 1 day <= 52,125 (1969-12-31 to 2112-09-18); years 1969 to 2112
//	counts           <= 10^12; stored times <= 2^52 + 2^45
//
// Products that could exceed 2^53 go through one helper, muldivmod(x, y, z) = (floor(x×y/z),
// x×y mod z). Every call has x, y, z < 2^45 and a quotient < 2^45. In Go it uses 128-bit
// math/bits for a Limit's methods; a Prepared limit (Limit.Prepare, what the filter decides on)
// gets the same quotient and remainder from mulAddDiv, a float64 estimate corrected by the exact
// remainder modulo 2^64, which needs no 128-bit arithmetic (a software loop on wasm):
// TestAPreparedLimitDecidesExactlyAsItsLimitOverRandomInputs checks that both decide alike. In Lua
// it is long multiplication in base 128, whose intermediates stay below
// 2^45×128 + 2^45×127 = 2^53 − 2^45. math.floor(t / z) is exact for such t (a correctly
// rounded t/z can only reach the next integer when t >= 2^53 − 1), and so is every other
// floor division below. TestMulDivModInDoubles runs this transcription in float64:
//
//	local function muldivmod(x, y, z)
//	  local q, r = 0, 0
//	  for k = 6, 0, -1 do                        -- y < 2^49: seven base-128 digits
//	    local d = math.floor(y / 128 ^ k) % 128  -- exact: powers of two
//	    local t = r * 128 + x * d
//	    local qt = math.floor(t / z)
//	    q, r = q * 128 + qt, t - qt * z
//	  end
//	  return q, r
//	end
//
// Below, "a // b" is floor division, and a request has cost c >= 1 (c > C is denied at once
// with RetryAfter = RetryNever, after the state is normalized as for any denial). Durations
// in a Decision are microseconds × 1000.
//
// EffectiveWindow is the RetryAfter a request of cost 1 would get right after Remaining was
// spent at n: within it no client gets more than Remaining, whenever it sends (spending at once
// is what gets the most out of every algorithm), so it is the effective window of the RateLimit
// field (draft-ietf-httpapi-ratelimit-headers-11). Unlike Reset it ends when the first unit comes
// back, not the last: for the sliding log when the oldest live entry expires, not the newest.
//
// # Token bucket and leaky bucket (GCRA)
//
// Both are GCRA: the state is one theoretical arrival time TAT, the instant at which the
// bucket is full again (the token bucket's tokens are C − (TAT−now)/T), or the queue empty.
// TAT is an exact rational TAT = ti + tf/Q µs with 0 <= tf < Q, because the emission interval
// T = W/Q = Ti + Tr/Q (Ti = W // Q, Tr = W % Q) is rarely a whole number of µs. GCRA needs
// one timestamp where a classic bucket needs a token count and a timestamp, and its refill is
// continuous and exact; what changes for users is only that "tokens" are derived (Remaining),
// not stored. Rational arithmetic, with carry: (ai,af) + (bi,bf) = (ai+bi + (af+bf)//Q,
// (af+bf) % Q), and likewise for subtraction with a borrow; comparison is lexicographic.
//
//	c×T      = (c×Ti + q1, r1)                 where q1, r1 = muldivmod(c, Tr, Q)
//	τ        = C×T                             (c×Ti <= C×Ti <= τ <= 2^45)
//	TAT      = max(TAT, (n,0))                 (a full bucket; fresh state: TAT = (n,0))
//	next     = TAT + c×T
//	allowed  = next <= (n,0) + τ               then TAT = next
//	Delay    = ceil(TAT_before − n)             leaky bucket only, when allowed
//	RetryAfter = ceil(next − ((n,0) + τ))      when denied; exact: the same request at
//	                                            now + RetryAfter is admitted
//	Remaining = tokens((n,0) + τ − TAT), or 0 if negative
//	            tokens(si,sf) = q2 + (r2 + sf) // W,  q2, r2 = muldivmod(si, Q, W)
//	Reset    = ceil(TAT − n)
//	EffectiveWindow = ceil(TAT + (Remaining+1)×T − ((n,0) + τ))   (T when full)
//
// State (17 bytes): 0x11 (token) or 0x12 (leaky), ti (uint64 BE), tf (uint64 BE). A tf >= Q
// (written under a larger Quota) rounds TAT up to (ti+1, 0). TTL = ceil(τ).
//
// The leaky bucket is the NGINX limit_req shaper: a request that fits in the queue (capacity C,
// draining at Q per W) is admitted with Delay = its wait; one that would overflow is denied.
// NGINX's burst=N corresponds to Burst = N+1 here, because Capacity counts the request being
// served.
//
// # Fixed window
//
// Windows are [s, s+W) with s a multiple of W since the unix epoch (or calendar periods: below).
//
//	k        = min(k, (MaxDebt+1)×Q)
//	cur      = n − n % W
//	if cur > s then m = (cur − s) // W;  s, k = cur, max(k − min(m, MaxDebt+1)×Q, 0)
//	                                            (a later window: what passed Q is carried)
//	elseif n < s then n' = s                    (clock stepped back: stay in the stored window)
//	allowed  = c <= Q − k                       then k = k + c
//	after(j) = s + j×W                          (the start of the j-th window after s's)
//	Remaining = max(Q − k, 0);  Reset = after((k + Q − 1) // Q) − n if k > 0, else 0
//	RetryAfter = after((k + c − 1) // Q) − n;  EffectiveWindow = after(max(k, Q) // Q) − n
//
// Without debt (k <= Q) every j above is 1: the window's end. A count past Q is left only by
// Adjust (a settled over-run, at most (MaxDebt+1)×Q) and paid a quota per window: the key waits
// for the window in which the carried count leaves room for the request. State (17 bytes): 0x13,
// s µs, k. TTL = W (MaxDebt+1 windows for a state in debt). At most Q is admitted per aligned
// window, hence at most 2Q in any span of length W (Q at the end of one window and Q at the
// start of the next).
//
// # Calendar windows
//
// A fixed window with a Calendar counts per period of the civil calendar at a fixed UTC offset o
// (east positive): a day, an ISO 8601 week (from Monday 00:00), a Gregorian month or year. Only
// the window's start s and end e change; they come from integer civil-date math, with days
// counted from 1970-01-01 in the local time n + o (D = 1 day = 8.64e10 µs):
//
//	day      = (n + o) // D
//	day:     first = day,                       next = first + 1
//	week:    first = day − (day + 3) % 7,       next = first + 7      (1970-01-01 was a Thursday)
//	month:   first = day − (d − 1),             next = first + days_in(y, m)
//	year:    first = days_from_civil(y, 1, 1),  next = first + 365 + leap(y)
//	         where y, m, d = civil_from_days(day)
//	[s, e)   = [first×D − o, next×D − o)
//
// civil_from_days and days_from_civil are Howard Hinnant's algorithms for the proleptic
// Gregorian calendar ("chrono-Compatible Low-Level Date Algorithms"; calendar.go);
// leap(y) = 1 when 4 divides y, unless 100 does and 400 does not (2000 is a leap year, 2100 is
// not); days_in(y, m) = 28 + leap(y) for February, 30 + (m + m // 8) % 2 otherwise. A state
// (s, k) is placed at n by the period [cs, ce) of n, with cs raised to 0 (only the period that
// contains the epoch can begin before it):
//
//	s < cs             a later period:            s = cs, k = max(k − min(m, MaxDebt+1)×Q, 0)
//	                                              with m = index(n) − index(s)
//	cs <= s < ce       this period:               s = cs
//	s >= ce            the clock stepped back:    s, e = the period of s (k kept)
//	then as for the fixed window, with after(j) = start(index(s) + j)
//
// where index numbers the periods consecutively (the day; (day + 3) // 7; y×12 + m − 1; y) and
// start(i) is the start of period i (i×D − o; (7i − 3)×D − o; days_from_civil(i // 12,
// i % 12 + 1, 1)×D − o; days_from_civil(i, 1, 1)×D − o).
//
// So the boundary instant belongs to the new period, and Reset and RetryAfter are the real time
// to the period's end: a 28- to 31-day month, a 365- or 366-day year, and always 24-hour days (a
// fixed offset has no daylight saving time). TTL is the unit's longest period (24 h, 7, 31 or
// 366 days) and Limit.WindowAt the length of the current one. The state is the fixed window's
// (17 bytes: 0x13, s, k), so a state written under a rolling Window or another Calendar is
// placed by its start as above: what it counted in a period still current is kept, an older
// one resets, as for a change of Window. Adjust refunds only a reservation made in the current
// period.
//
// Only FixedWindow takes a Calendar (and then Window is 0): a bucket refills continuously and
// the sliding log and the sliding window counter look back over a span that moves with the
// clock, so no period of theirs could align to the calendar; Validate refuses them.
//
// Exact in doubles: n + o < 2^52 + 2^36; days, years and every civil intermediate are below
// 2^20; first×D <= 52,491 × 8.64e10 < 4.6e15 < 2^53. Every division but the first has a
// non-negative dividend below 2^53 − 1, so math.floor(t / z) is exact (see above); the first,
// (n + o) // D, has a dividend above −D when negative, where t / z lies in [−1 + 1/D, −1/D]
// and math.floor gives −1 exactly. The Lua functions are algorithms/testdata/calendar.lua
// (calendar_period and calendar_position, with their contract), ready for the service's
// scripts. TestCalendarLuaInDoubles runs their transcription in float64 against Go at every
// period edge from 1970 to 2^52 µs (every 7th day's), at nine offsets, and TestCalendarLuaOnRedis
// runs the file itself on redis-server on an even sample of those cases;
// TestCalendarPeriodMatchesTheTimePackage and FuzzCalendarPeriod check the Go against the time
// package.
//
// # Sliding log
//
//	n'       = max(n, clock);  clock = n'
//	live     = entries e with e > n' − W        (entries ascending)
//	allowed  = c <= Q − #live                   then append c copies of n'
//	RetryAfter = e_j + W − n  for the j-th oldest live entry, j = #live + c − Q (1-based)
//	Remaining = max(Q − #live, 0), counting this request if allowed
//	Reset    = newest live entry + W − n, or 0 if none
//	EffectiveWindow = e_j + W − n  for the j-th oldest live entry (this request's
//	           included), j = max(#live − Q, 0) + 1, or n' + W − n if there are fewer
//
// State (9 + 8×entries bytes, at most 9 + 8×Q): 0x14, clock µs, entries µs ascending; only
// the newest Q live entries are kept. TTL = W. Exact: at most Q in any span (t−W, t].
//
// # Sliding window counter
//
// Cloudflare's estimate prev×(W−e)/W + cur, with e = n − s the time into the current window,
// compared exactly: the weighted previous count is rounded up, so "estimate + c <= Q" is the
// exact rational test.
//
//	cur      = n − n % W
//	if cur == s + W then s, p, k = cur, k, 0
//	elseif cur > s + W then s, p, k = cur, 0, 0
//	elseif n < s then n' = s
//	e        = n' − s
//	weighted = q3 + (r3 > 0 and 1 or 0)        where q3, r3 = muldivmod(p, W − e, W)
//	avail    = Q − k − weighted
//	allowed  = c <= avail                       then k = k + c
//	Remaining = max(avail (after c), 0)
//	Reset    = s + 2W − n if k > 0; s + W − n if p > 0; else 0
//	RetryAfter, with a = Q − k − c:
//	  a >= 0:           s + W − q4 − n          where q4 = muldivmod(a, W, p)   (a < p)
//	  a < 0, Q−c >= k:  s + W − n
//	  a < 0, Q−c < k:   s + 2W − q5 − n         where q5 = muldivmod(Q − c, W, k)
//	EffectiveWindow = RetryAfter of c = 1 with k + Remaining in place of k (k after this request)
//
// State (25 bytes): 0x15, s µs, p, k. TTL = 2W. At most Q per aligned window (k <= Q), hence
// at most 2Q in any span of length W in the worst case: Q requests at the very end of a window
// followed by as many as admitted in the next let 2Q−1 through (TestEdgeBurst: fixed window
// 200, sliding window counter 199, sliding log 100, for Q = 100).
//
// # Accuracy of the sliding window counter
//
// TestAccuracy compares the counter with the sliding log on Poisson traffic, 100 requests per
// minute per client, one client in three bursty. On 10 million requests from clients at 0.8 to
// 1.25 times their limit, the counter as an estimator (Cloudflare's measure: all requests
// counted, the estimate on the other side of the limit from the exact count) is wrong for
// 8.4% of requests (4.3% wrongly allowed, 4.0% wrongly denied) where the fixed window is
// wrong for 43% (all wrongly allowed); with clients spread over 0.05 to 1.25 times the limit,
// 3.4% against 16%. Enforcing, the most a client got through in any one-minute span was 153
// (fixed window: 195). Cloudflare's 0.003% comes from production traffic, where few requests
// are near a limit; these traces put most requests there on purpose, where Poisson noise alone
// makes the difference.
//
// # Normalization, clocks, config changes
//
// Every decision, allowed or not, writes the state as seen at the (clamped) now: windows roll
// forward, expired log entries are dropped, TAT is raised to now. Window starts are realigned
// down to a multiple of W when read (a calendar window's into its period), so a state written
// under another Window or Calendar stays usable; so does one written under another Quota (counts
// above Quota just deny until they expire).
// Decoding rejects, with an error wrapping ErrMalformedState, a wrong length, version or kind,
// a time or count out of range, or log entries out of order.
package algorithms
