// Package algorithms implements five rate-limit algorithms as pure functions over compact,
// versioned state bytes: token bucket, leaky bucket (a shaper), fixed window, sliding log and
// sliding window counter. It does no I/O and never reads the clock: every decision takes the
// time as an argument, so the same code runs in the proxy-wasm filter (state in Envoy shared
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
// Quota; the sliding window counter is nearly exact at a fixed 25 bytes.
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
//	counts           <= 10^12; stored times <= 2^52 + 2^45
//
// Products that could exceed 2^53 go through one helper, muldivmod(x, y, z) = (floor(x×y/z),
// x×y mod z). Every call has x, y, z < 2^45 and a quotient < 2^45. In Go it uses 128-bit
// math/bits; in Lua it is long multiplication in base 128, whose intermediates stay below
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
// Windows are [s, s+W) with s a multiple of W since the unix epoch.
//
//	cur      = n − n % W
//	if cur > s then s, k = cur, 0              (new window)
//	elseif n < s then n' = s                    (clock stepped back: stay in the stored window)
//	allowed  = c <= Q − k                       then k = k + c
//	Remaining = max(Q − k, 0);  Reset = s + W − n if k > 0, else 0
//	RetryAfter = s + W − n
//
// State (17 bytes): 0x13, s µs, k. TTL = W. At most Q per aligned window, hence at most 2Q in
// any span of length W (Q at the end of one window and Q at the start of the next).
//
// # Sliding log
//
//	n'       = max(n, clock);  clock = n'
//	live     = entries e with e > n' − W        (entries ascending)
//	allowed  = c <= Q − #live                   then append c copies of n'
//	RetryAfter = e_j + W − n  for the j-th oldest live entry, j = #live + c − Q (1-based)
//	Remaining = max(Q − #live, 0), counting this request if allowed
//	Reset    = newest live entry + W − n, or 0 if none
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
// down to a multiple of W when read, so a state written under another Window stays usable; so
// does one written under another Quota (counts above Quota just deny until they expire).
// Decoding rejects, with an error wrapping ErrMalformedState, a wrong length, version or kind,
// a time or count out of range, or log entries out of order.
package algorithms
