package service

import (
	"container/heap"
	"context"
	"time"
)

// admission is a Gate's state, guarded by Gate.mu: the work in flight on the store, the calls
// waiting for room, ordered by start-time fair queueing, and the measure of the store's time.
type admission struct {
	// max is the bound of work in flight in force, in descriptors: at least floor
	// (GateConfig.MinWork), raised while the store keeps up (see ended), at most ceiling
	// (GateConfig.MaxWork).
	max, floor, ceiling int64
	inflight            int64
	queue               waitQueue
	flows               map[any]*flow // the flows with calls in the queue
	vtime               int64         // the start tag of the last call admitted from the queue
	seq                 uint64
	// sumWL and sumW are decayed sums of work × time at the store and of work over the calls
	// that ended: their ratio is the mean time a unit of work spends at the store.
	sumWL, sumW float64
	// least is the least time a call spent at the store lately (0 before any call ended): what
	// the store takes when nothing queues in front of a call there.
	least time.Duration
}

// keptUp is how much longer than the least time a call may take at the store for the store to
// count as keeping up with the work in flight: a store whose time grows with the work sent to
// it (its own queue) passes it soon, one whose time is its round trip (a remote store, a
// machine short of CPU) does not.
const keptUp = 2

// leastRise is how fast the least time follows calls that take longer (1/256 of the gap a
// call): a store that became slower for good raises it within a few hundred calls.
const leastRise = 256

// roomSlack is how far a call that finds room may be expected to pass its deadline and still be
// sent: refused only when a 1/roomSlack share of the mean store time would pass it.
const roomSlack = 2

// storeTimeDecay is the weight an ended call's time has in the mean (about the last 16 calls).
const storeTimeDecay = 1.0 / 16

// waiter is a call waiting in the queue, or just admitted from it.
type waiter struct {
	work, start int64
	seq         uint64
	flow        *flow
	deadline    time.Time // zero: none
	index       int       // in the queue; -1 once out of it
	admitted    bool      // set when it leaves the queue: admitted, or refused when false
	ready       chan struct{}
}

// flow is a caller's share of the queue: the finish tag of its last queued call.
type flow struct {
	key    any
	finish int64
	queued int
}

// storeTime is the mean time a unit of work spends at the store (0 before any call ended).
func (a *admission) storeTime() time.Duration {
	if a.sumW == 0 {
		return 0
	}
	return time.Duration(a.sumWL / a.sumW)
}

// maxStoreTimeJump bounds one call's time in the mean, as a multiple of the mean: one stall
// (a descheduled process, a store timeout) raises the mean a fifth at most, where a store that
// stays slow raises it call after call.
const maxStoreTimeJump = 4

// ended records a call of work units that spent d at the store, and moves the bound in force:
// a call answered within keptUp × the least time while others waited for room raises it by its
// work (the store keeps up: more in flight costs nobody time, and callers who wait for room
// would otherwise wait for the bound, not the store); a call that took longer lowers it by an
// eighth, never under floor. So the bound is the floor for a store
// whose time grows with the work in flight, and grows to what the callers ask of a store whose
// time is its round trip.
func (a *admission) ended(work int64, d time.Duration) {
	a.inflight -= work
	if d > 0 { // a clock that did not move measured nothing
		least := a.least
		if least == 0 {
			least = d // the first measure
		}
		switch {
		case d > keptUp*least:
			a.max = max(a.floor, a.max-a.max/8)
		case len(a.queue) > 0:
			a.max = min(a.ceiling, a.max+work)
		}
		switch {
		case a.least == 0 || d < a.least:
			a.least = d
		default:
			a.least += (d - a.least) / leastRise
		}
	}
	if mean := a.storeTime(); mean > 0 {
		d = min(d, maxStoreTimeJump*mean)
	}
	a.sumWL = a.sumWL*(1-storeTimeDecay) + float64(work)*float64(d)
	a.sumW = a.sumW*(1-storeTimeDecay) + float64(work)
}

// fits reports whether a call whose deadline is dl (zero: none), sent at now after waiting
// wait, is expected to be answered in time. A call is always expected to fit an idle store:
// an idle store's answer is how the gate learns that the store is fast again.
func (a *admission) fits(now, dl time.Time, wait time.Duration) bool {
	return dl.IsZero() || a.inflight == 0 || now.Add(wait+a.storeTime()).Before(dl)
}

// arrive decides what happens to a call of work units of flow key at now: it is admitted at
// once (nil, true), refused at once (nil, false), or queued (the waiter, true).
func (a *admission) arrive(key any, work int64, now, dl time.Time) (*waiter, bool) {
	if len(a.queue) == 0 && a.inflight+work <= a.max {
		// Room now: the bound already keeps the store's work in hand, so the call is refused
		// only when half the mean store time would pass its deadline (a store far slower
		// than the deadline, say one that hangs). A mean near the deadline is a mean: on a
		// machine short of CPU it rises towards the deadline while most calls are still
		// answered in time, and refusing them all made errors of answers (service/BENCHMARKS.md,
		// "Issue 22: the result").
		if !a.fits(now, dl, -a.storeTime()/roomSlack) {
			return nil, false
		}
		a.inflight += work
		return nil, true
	}
	f := a.flows[key]
	start := a.vtime
	if f != nil {
		start = max(start, f.finish)
	}
	a.seq++
	w := &waiter{work: work, start: start, seq: a.seq, deadline: dl, ready: make(chan struct{})}
	if !a.fits(now, dl, a.wait(w)) {
		return nil, false
	}
	if f == nil {
		f = &flow{key: key}
		a.flows[key] = f
	}
	f.finish, w.flow = start+work, f
	f.queued++
	heap.Push(&a.queue, w)
	return w, true
}

// wait is the expected wait of w for room: the work ahead of it and its own past the bound,
// at the rate the store ends work when it holds the bound (Little's law: max units in flight,
// each storeTime at the store).
func (a *admission) wait(w *waiter) time.Duration {
	ahead := a.inflight + w.work - a.max
	for _, q := range a.queue {
		if q.before(w) {
			ahead += q.work
		}
	}
	if ahead <= 0 {
		return 0
	}
	return time.Duration(ahead) * a.storeTime() / time.Duration(a.max)
}

// dispatch admits the calls at the head of the queue while there is room, and refuses those
// that can no longer be answered in their deadline; it returns nothing: each leaves the queue
// with admitted set and its ready closed.
func (a *admission) dispatch(now time.Time) {
	for len(a.queue) > 0 {
		w := a.queue[0]
		if a.inflight > 0 && a.inflight+w.work > a.max {
			return
		}
		heap.Pop(&a.queue)
		a.leaveQueue(w)
		a.vtime = w.start
		if w.admitted = a.fits(now, w.deadline, 0); w.admitted {
			a.inflight += w.work
		}
		close(w.ready)
	}
}

// cancel takes w out of the queue (its context ended), unless it has left it already; it
// reports whether it did.
func (a *admission) cancel(w *waiter) bool {
	if w.index < 0 {
		return false
	}
	heap.Remove(&a.queue, w.index)
	a.leaveQueue(w)
	return true
}

func (a *admission) leaveQueue(w *waiter) {
	if w.flow.queued--; w.flow.queued == 0 {
		delete(a.flows, w.flow.key)
	}
}

// waitQueue is a heap of waiters by start tag, then arrival.
type waitQueue []*waiter

func (w *waiter) before(o *waiter) bool {
	return w.start < o.start || w.start == o.start && w.seq < o.seq
}

func (q waitQueue) Len() int           { return len(q) }
func (q waitQueue) Less(i, j int) bool { return q[i].before(q[j]) }
func (q waitQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}

func (q *waitQueue) Push(x any) {
	w := x.(*waiter)
	w.index = len(*q)
	*q = append(*q, w)
}

func (q *waitQueue) Pop() any {
	old := *q
	w := old[len(old)-1]
	old[len(old)-1] = nil
	w.index = -1
	*q = old[:len(old)-1]
	return w
}

// flowKey is the context key of a call's flow (WithFlow).
type flowKey struct{}

// WithFlow returns ctx naming the flow its store calls belong to: a Gate shares the store's
// room fairly between flows (start-time fair queueing, by descriptors), so that one flow's big
// batches cannot starve another's single descriptors. The fronts name the client connection
// (its remote address); calls of no flow share one. key must be comparable.
func WithFlow(ctx context.Context, key any) context.Context {
	return context.WithValue(ctx, flowKey{}, key)
}

func flowOf(ctx context.Context) any { return ctx.Value(flowKey{}) }
