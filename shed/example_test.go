package shed_test

import (
	"fmt"
	"time"

	"github.com/meshlimit/meshlimit/shed"
)

// With a capacity of 10, sheddable traffic is shed from 7 in flight, default traffic from 9,
// and critical traffic only at 10.
func ExamplePolicy_Admit() {
	p := shed.DefaultPolicy()
	var s shed.State
	var d shed.Decision
	for range 8 {
		s, d = p.Admit(s, 10, p.Class("sheddable"))
	}
	fmt.Println("8th sheddable:", d.Admitted, "in flight", s.Total())
	s, d = p.Admit(s, 10, p.Class("")) // no class: the default class
	fmt.Println("default:", d.Admitted, "threshold", d.Threshold)
	s, d = p.Admit(s, 10, p.Class("critical"))
	fmt.Println("critical:", d.Admitted, "in flight", s.Total())
	s = p.Release(s, p.Class("sheddable"))
	fmt.Println("after a release:", s.Total())
	// Output:
	// 8th sheddable: false in flight 7
	// default: true threshold 9
	// critical: true in flight 9
	// after a release: 8
}

// The controller measures the ideal latency first, with the capacity pinned low (the probe's
// first interval is not counted), then grows the capacity while the latency stays within the
// target and shrinks it when it does not.
func ExampleGradient_Update() {
	g := shed.DefaultGradient()
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	var c shed.GradientState
	var h shed.Histogram
	for i, lat := range []time.Duration{0, 30, 20, 20, 20, 40} { // no traffic in the first interval
		h.Reset()
		for range 50 * min(lat, 1) {
			h.Record(lat * time.Millisecond)
		}
		inFlight := min(c.Capacity(), 30)
		var st shed.Step
		c, st = g.Update(c, now+int64(i)*int64(100*time.Millisecond), g.Summarize(&h, inFlight))
		fmt.Println(st.Action, st.Limit, st.Ideal)
	}
	// Output:
	// probe 3 0s
	// probe 3 0s
	// probed 20 20ms
	// grow 21 20ms
	// grow 22 20ms
	// shrink 19 20ms
}
