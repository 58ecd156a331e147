// Package shedsim runs package shed against a synthetic upstream in virtual time: the same run
// backs shed's simulation tests and the plot of docs/shedding.png (cmd/mlplot -shedding).
//
// The upstream has a true capacity K (requests it works on at once): a request admitted while
// n requests wait for their response headers gets them after Base × max(1, n/K) × (1 ± Noise),
// so up to K it serves requests at Base and above K it only queues (its throughput stays K/Base
// while latency grows with n). The stream may then stay open (Config.Stream), as a response
// body streams, without holding its slot. Traffic is Poisson per class (Offered), plus Sources
// that answer differently (instant errors, cheap answers) and attackers that hold streams open
// without ever getting response headers (Stuck). The simulation drives the model as the filter
// does: Policy.AdmitKey at the request headers, Policy.Release and Sampler.Record at the
// response headers, and every Tick Gradient.Update with the interval's histogram and peak.
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

// Offer sets the offered rate of one class from At on (requests per second; 0 stops it): the
// honest traffic, which the upstream serves (shed.Served) at its loaded latency.
type Offer struct {
	At        time.Duration
	Class     int
	PerSecond float64
}

// Source is traffic besides the Offered classes, counted apart (Tick.Other): requests of Class
// at PerSecond (Poisson) from From to To (0: the end), answered as Answer after Latency whatever
// the load (0: the upstream's loaded latency), by one Key (0: each request its own key).
type Source struct {
	Class        int
	PerSecond    float64
	From, To     time.Duration
	WhileProbing bool // only while the controller probes: an attacker who sees the capacity drop
	Answer       shed.Answer
	Latency      time.Duration
	Key          int
}

// Stuck is an attacker that keeps N streams of Class open from At on, whose request bodies
// never end, so that they never get response headers: it opens a new one whenever it holds
// fewer than N (the shedder admitting it), and they hold their slots to the end of the run.
// They wait on the client, not on the upstream, so they do not load it.
type Stuck struct {
	At    time.Duration
	Class int
	N     int
	Key   int // 0: each stream its own key
}

// Config is one simulation.
type Config struct {
	Gradient shed.Gradient
	Policy   shed.Policy
	Base     time.Duration // the upstream's latency up to K in flight (unless a Change sets it)
	Noise    float64       // relative latency noise, uniform in ±Noise
	K        []Change      // the true capacity over time, ascending At; the first at 0
	Offered  []Offer       // offered rates over time, ascending At
	Stream   time.Duration // how long an Offered request's stream stays open after its headers
	Sources  []Source
	Stuck    []Stuck
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
	Samples  int64 // latency samples the interval fed the controller
	Peak     int64 // most requests holding a slot during the interval (State.EndInterval)
	InFlight [shed.MaxClasses]int64
	Open     int64 // streams open at the end of the interval, with or without their headers
	Admitted [shed.MaxClasses]int64
	Shed     [shed.MaxClasses]int64
	// Other counts the requests of the Sources and Stuck attackers, apart from Admitted and Shed.
	OtherAdmitted, OtherShed int64
}

// event is a response's headers (the slot is released, the latency sampled) or a stream's end.
type event struct {
	at       time.Duration
	headers  bool
	class    int
	key      int
	client   uint64 // the client's hash in share
	admitted time.Duration
	answer   shed.Answer
	stream   time.Duration // after the headers
}

type events []event

func (h events) Len() int           { return len(h) }
func (h events) Less(i, j int) bool { return h[i].at < h[j].at }
func (h events) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *events) Push(x any)        { *h = append(*h, x.(event)) }
func (h *events) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// run is the mutable state of one simulation.
type run struct {
	cfg     Config
	rng     *rand.Rand
	start   int64 // unix ns of time 0
	state   shed.State
	ctrl    shed.GradientState
	probing bool
	sampler shed.Sampler
	share   shed.SampleShare // each client's share of the samples, as a worker keeps it
	clients uint64           // clients of their own (Key 0) so far
	hist    shed.Histogram
	pending events
	next    []time.Duration // next arrival: per class, then per source
	rate    [shed.MaxClasses]float64
	keys    map[int]int64 // slots held per key
	stuck   []int         // streams each Stuck attacker holds
	idle    int64         // slots held by stuck streams
	open    int64
	cur     Tick
}

// Run simulates cfg and returns one Tick per interval.
func Run(cfg Config) []Tick {
	r := &run{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 7)), start: int64(1_700_000_000 * time.Second)}
	r.next = make([]time.Duration, shed.MaxClasses+len(cfg.Sources))
	r.keys, r.stuck = map[int]int64{}, make([]int, len(cfg.Stuck))
	for i, s := range cfg.Sources {
		r.next[shed.MaxClasses+i] = s.From
	}
	var ticks []Tick
	r.update(0, shed.Summary{}) // fresh: the first probe starts
	for t := time.Duration(0); t < cfg.Span; t += cfg.Tick {
		r.setRates(t)
		r.cur = Tick{At: t + cfg.Tick, K: r.k(t)}
		r.interval(t, t+cfg.Tick)
		r.state, r.cur.Peak = r.state.EndInterval()
		sum := cfg.Gradient.Summarize(&r.hist, r.cur.Peak)
		r.cur.Step, r.cur.Latency, r.cur.Samples = r.update(t+cfg.Tick, sum), sum.Latency, sum.Count
		for c := range r.state.InFlight {
			r.cur.InFlight[c] = int64(r.state.InFlight[c])
		}
		r.cur.Open = r.open
		ticks = append(ticks, r.cur)
		r.hist.Reset()
	}
	return ticks
}

// update runs the controller at t and takes the Sampler of the next interval, as a worker's
// tick does.
func (r *run) update(t time.Duration, sum shed.Summary) shed.Step {
	var st shed.Step
	r.ctrl, st = r.cfg.Gradient.Update(r.ctrl, r.start+int64(t), sum)
	r.probing = st.Action == shed.Probe
	prev := r.sampler
	r.sampler = r.cfg.Gradient.Sampler(&r.ctrl)
	r.share.Next(prev, r.sampler)
	return st
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

// rateOf returns the current rate of arrival stream i (a class, then the sources) at t.
func (r *run) rateOf(i int, t time.Duration) float64 {
	if i < shed.MaxClasses {
		return r.rate[i]
	}
	s := r.cfg.Sources[i-shed.MaxClasses]
	if t < s.From || s.To > 0 && t >= s.To || s.WhileProbing && !r.probing {
		return 0
	}
	return s.PerSecond
}

// interval runs the events in [from, to): arrivals, response headers and stream ends in time
// order, and the stuck attackers' attempts once at its start.
func (r *run) interval(from, to time.Duration) {
	r.attack(from)
	for {
		at, arrival := to, -1
		for i := range r.next {
			if r.rateOf(i, from) > 0 && r.next[i] < at {
				at, arrival = r.next[i], i
			}
		}
		if len(r.pending) > 0 && r.pending[0].at <= at && r.pending[0].at < to {
			r.complete(heap.Pop(&r.pending).(event))
			continue
		}
		if arrival < 0 {
			for i := range r.next { // a stream that is off waits for the next interval
				r.next[i] = max(r.next[i], to)
			}
			return
		}
		r.arrive(at, arrival)
		r.next[arrival] = at + time.Duration(r.rng.ExpFloat64()/r.rateOf(arrival, from)*float64(time.Second))
	}
}

// complete handles a response's headers (release, sample, then the stream's end) or a stream's
// end.
func (r *run) complete(e event) {
	if !e.headers {
		r.open--
		return
	}
	r.state = r.cfg.Policy.Release(r.state, e.class)
	if e.key != 0 {
		r.keys[e.key]--
	}
	at := r.start + int64(e.admitted)
	r.sampler.RecordShared(&r.hist, &r.share, e.client, at, at, r.start+int64(e.at), e.answer)
	if e.stream > 0 {
		heap.Push(&r.pending, event{at: e.at + e.stream})
		return
	}
	r.open--
}

// admit decides a request of class from key (0: a key of its own) at at, and counts it.
func (r *run) admit(class, key int, other bool) bool {
	capacity := r.ctrl.Capacity()
	before := r.state
	var d shed.Decision
	r.state, d = r.cfg.Policy.AdmitKey(r.state, capacity, class, r.keys[key])
	if r.cfg.OnDecision != nil {
		r.cfg.OnDecision(before, capacity, class, d)
	}
	switch {
	case !d.Admitted && other:
		r.cur.OtherShed++
	case !d.Admitted:
		r.cur.Shed[class]++
	case other:
		r.cur.OtherAdmitted++
	default:
		r.cur.Admitted[class]++
	}
	if d.Admitted {
		r.open++
		if key != 0 {
			r.keys[key]++
		}
	}
	return d.Admitted
}

func (r *run) arrive(at time.Duration, i int) {
	src := Source{Class: i, Answer: shed.Served}
	if i >= shed.MaxClasses {
		src = r.cfg.Sources[i-shed.MaxClasses]
	}
	client := uint64(src.Key) << 40
	if src.Key == 0 {
		r.clients++
		client = r.clients
	}
	if !r.admit(src.Class, src.Key, i >= shed.MaxClasses) {
		r.share.Shed(client)
		return
	}
	lat := src.Latency
	if lat == 0 {
		u := r.upstream(at)
		load := max(1, float64(r.state.Total()-r.idle)/float64(u.K))
		noise := 1 + r.cfg.Noise*(2*r.rng.Float64()-1)
		lat = time.Duration(float64(u.Base) * load * noise)
	}
	e := event{at: at + lat, headers: true, class: src.Class, key: src.Key, client: client, admitted: at, answer: src.Answer}
	if i < shed.MaxClasses {
		e.stream = r.cfg.Stream
	}
	heap.Push(&r.pending, e)
}

// attack lets every Stuck attacker active at t open streams up to its N.
func (r *run) attack(t time.Duration) {
	for i, s := range r.cfg.Stuck {
		for t >= s.At && r.stuck[i] < s.N && r.admit(s.Class, s.Key, true) {
			r.stuck[i]++
			r.idle++
		}
	}
}
