// Package shedsim runs package shed against a synthetic upstream in virtual time: the same run
// backs shed's simulation tests and the plot of docs/shedding.png (cmd/mlplot -shedding).
//
// The upstream has a true capacity K (in-flight requests): a request admitted while n requests
// are in flight takes Base × max(1, n/K) × (1 ± Noise), so up to K it serves requests at Base
// and above K it only queues (its throughput stays K/Base while latency grows with n). Traffic
// is Poisson per class. Every Tick the controller reads the interval's latency histogram and
// peak in-flight count and sets the capacity the shedder admits against.
package shedsim

import (
	"cmp"
	"container/heap"
	"math/rand/v2"
	"time"

	"github.com/meshlimit/meshlimit/shed"
)

// Change sets the upstream's true capacity from At on, and its latency at low load when Base
// is not 0 (else it is Config.Base).
type Change struct {
	At   time.Duration
	K    int64
	Base time.Duration
}

// Offer sets the offered rate of one class from At on (requests per second; 0 stops it).
type Offer struct {
	At        time.Duration
	Class     int
	PerSecond float64
}

// Config is one simulation.
type Config struct {
	Gradient shed.Gradient
	Policy   shed.Policy
	Base     time.Duration // the upstream's latency up to K in flight (unless a Change sets it)
	Noise    float64       // relative latency noise, uniform in ±Noise
	K        []Change      // the true capacity over time, ascending At; the first at 0
	Offered  []Offer       // offered rates over time, ascending At
	Tick     time.Duration // the controller's interval
	Span     time.Duration
	Seed     uint64
	// OnDecision, if set, sees every admission decision with the state it was made against.
	OnDecision func(before shed.State, capacity int64, class int, d shed.Decision)
}

// Tick is what happened in one interval, reported at its end.
type Tick struct {
	At       time.Duration
	K        int64     // the true capacity
	Step     shed.Step // the controller's update at the end of the interval
	Latency  time.Duration
	Peak     int64 // most requests in flight during the interval (State.EndInterval)
	InFlight [shed.MaxClasses]int64
	Admitted [shed.MaxClasses]int64
	Shed     [shed.MaxClasses]int64
}

type done struct {
	at      time.Duration
	class   int
	latency time.Duration
}

type doneHeap []done

func (h doneHeap) Len() int           { return len(h) }
func (h doneHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h doneHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *doneHeap) Push(x any)        { *h = append(*h, x.(done)) }
func (h *doneHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// run is the mutable state of one simulation.
type run struct {
	cfg     Config
	rng     *rand.Rand
	state   shed.State
	ctrl    shed.GradientState
	hist    shed.Histogram
	pending doneHeap
	next    [shed.MaxClasses]time.Duration // next arrival per class
	rate    [shed.MaxClasses]float64
	cur     Tick
}

// Run simulates cfg and returns one Tick per interval.
func Run(cfg Config) []Tick {
	r := &run{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 7))}
	start := int64(1_700_000_000 * time.Second)
	var ticks []Tick
	r.ctrl, _ = cfg.Gradient.Update(r.ctrl, start, shed.Summary{}) // fresh: the first probe starts
	for t := time.Duration(0); t < cfg.Span; t += cfg.Tick {
		r.setRates(t)
		r.cur = Tick{At: t + cfg.Tick, K: r.k(t)}
		r.interval(t, t+cfg.Tick)
		r.state, r.cur.Peak = r.state.EndInterval()
		sum := cfg.Gradient.Summarize(&r.hist, r.cur.Peak)
		var step shed.Step
		r.ctrl, step = cfg.Gradient.Update(r.ctrl, start+int64(t+cfg.Tick), sum)
		r.cur.Step, r.cur.Latency = step, sum.Latency
		for c := range r.state.InFlight {
			r.cur.InFlight[c] = int64(r.state.InFlight[c])
		}
		ticks = append(ticks, r.cur)
		r.hist.Reset()
	}
	return ticks
}

func (r *run) k(t time.Duration) int64 { return r.upstream(t).K }

// upstream returns the Change in force at t, with its Base filled in.
func (r *run) upstream(t time.Duration) Change {
	u := r.cfg.K[0]
	for _, c := range r.cfg.K {
		if c.At <= t {
			u = c
		}
	}
	u.Base = cmp.Or(u.Base, r.cfg.Base)
	return u
}

// setRates applies the offers in force at t, and schedules a first arrival for a class that
// starts.
func (r *run) setRates(t time.Duration) {
	var rate [shed.MaxClasses]float64
	for _, o := range r.cfg.Offered {
		if o.At <= t {
			rate[o.Class] = o.PerSecond
		}
	}
	for c := range rate {
		if r.rate[c] == 0 && rate[c] > 0 {
			r.next[c] = t
		}
		r.rate[c] = rate[c]
	}
}

// interval runs the events in [from, to): arrivals and completions in time order.
func (r *run) interval(from, to time.Duration) {
	for {
		at, class := to, -1
		for c, rate := range r.rate {
			if rate > 0 && r.next[c] < at {
				at, class = r.next[c], c
			}
		}
		if len(r.pending) > 0 && r.pending[0].at <= at && r.pending[0].at < to {
			d := heap.Pop(&r.pending).(done)
			r.state = r.cfg.Policy.Release(r.state, d.class)
			r.hist.Record(d.latency)
			continue
		}
		if class < 0 {
			return
		}
		r.arrive(at, class)
		r.next[class] = at + time.Duration(r.rng.ExpFloat64()/r.rate[class]*float64(time.Second))
	}
}

func (r *run) arrive(at time.Duration, class int) {
	capacity := r.ctrl.Capacity()
	before := r.state
	var d shed.Decision
	r.state, d = r.cfg.Policy.Admit(r.state, capacity, class)
	if r.cfg.OnDecision != nil {
		r.cfg.OnDecision(before, capacity, class, d)
	}
	if !d.Admitted {
		r.cur.Shed[class]++
		return
	}
	r.cur.Admitted[class]++
	n := r.state.Total()
	u := r.upstream(at)
	load := max(1, float64(n)/float64(u.K))
	noise := 1 + r.cfg.Noise*(2*r.rng.Float64()-1)
	lat := time.Duration(float64(u.Base) * load * noise)
	heap.Push(&r.pending, done{at: at + lat, class: class, latency: lat})
}
