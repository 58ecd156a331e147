package algorithms_test

import (
	"fmt"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
)

func ExampleLimit_Decide() {
	l := algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 2, Window: time.Second}
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	state := make([]byte, 0, l.EncodedSize()) // decided in place: no allocation
	for range 3 {
		var d algorithms.Decision
		var err error
		state, d, err = l.Decide(state, now, 1, state)
		if err != nil {
			panic(err)
		}
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// true 1 0s
	// true 0 0s
	// false 0 500ms
}

// The leaky bucket admits a burst that fits its queue, but delays each request to its turn.
func ExampleLimit_Decide_leakyBucket() {
	l := algorithms.Limit{Kind: algorithms.LeakyBucket, Quota: 4, Window: time.Second}
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	var state []byte
	for range 5 {
		var d algorithms.Decision
		state, d, _ = l.Decide(state, now, 1, nil)
		fmt.Printf("allowed %v, delay %v, retry after %v\n", d.Allowed, d.Delay, d.RetryAfter)
	}
	// Output:
	// allowed true, delay 0s, retry after 0s
	// allowed true, delay 250ms, retry after 0s
	// allowed true, delay 500ms, retry after 0s
	// allowed true, delay 750ms, retry after 0s
	// allowed false, delay 0s, retry after 250ms
}

func ExampleLimit_Decide_costAboveCapacity() {
	l := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 10, Window: time.Minute}
	_, d, _ := l.Decide(nil, time.Now().UnixNano(), 11, nil)
	fmt.Println(d.Allowed, d.RetryAfter == algorithms.RetryNever)
	// Output: false true
}

// A calendar quota: 3 calls per month at UTC−08:00, renewed on the 1st at 00:00 local time. A
// denial on 28 February waits until 1 March, and RetryAfter follows the month's real length.
func ExampleLimit_Decide_calendarMonth() {
	l := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 3,
		Calendar: algorithms.Calendar{Unit: algorithms.CalendarMonth, Offset: -8 * time.Hour}}
	pst := time.FixedZone("UTC-8", -8*3600)
	var state []byte
	for _, at := range []time.Time{
		time.Date(2026, 2, 1, 0, 0, 0, 0, pst),
		time.Date(2026, 2, 28, 12, 0, 0, 0, pst),
		time.Date(2026, 3, 1, 0, 0, 0, 0, pst),
	} {
		var d algorithms.Decision
		state, d, _ = l.Decide(state, at.UnixNano(), 2, nil)
		start, end := l.Calendar.Period(at.UnixNano())
		fmt.Printf("%s: allowed %v, remaining %d, retry after %v, period %s to %s (%v)\n",
			at.Format("Jan 2"), d.Allowed, d.Remaining, d.RetryAfter,
			time.Unix(0, start).In(pst).Format("Jan 2"), time.Unix(0, end).In(pst).Format("Jan 2"), l.WindowAt(at.UnixNano()))
	}
	// Output:
	// Feb 1: allowed true, remaining 1, retry after 0s, period Feb 1 to Mar 1 (672h0m0s)
	// Feb 28: allowed false, remaining 1, retry after 12h0m0s, period Feb 1 to Mar 1 (672h0m0s)
	// Mar 1: allowed true, remaining 1, retry after 0s, period Mar 1 to Apr 1 (744h0m0s)
}
