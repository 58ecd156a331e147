package service_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/memstore"
)

// heldCall is a call the held store holds: its name (the first key), the context the store got
// it under, and done, which the test closes to let it end.
type heldCall struct {
	name string
	ctx  context.Context
	done chan struct{}
}

// heldStore holds every decision call until the test ends it (calls hands each over), and
// records how much work was in it at once.
type heldStore struct {
	service.Store
	calls          chan heldCall
	in, most, seen atomic.Int64
}

func newHeldStore(t *testing.T) *heldStore {
	m := memstore.New(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { m.Close() })
	return &heldStore{Store: m, calls: make(chan heldCall, 64)}
}

func (h *heldStore) hold(ctx context.Context, name string, work int64) func() {
	h.seen.Add(1)
	n := h.in.Add(work)
	for m := h.most.Load(); n > m && !h.most.CompareAndSwap(m, n); m = h.most.Load() {
	}
	c := heldCall{name: name, ctx: ctx, done: make(chan struct{})}
	h.calls <- c
	<-c.done
	return func() { h.in.Add(-work) }
}

func (h *heldStore) Decide(ctx context.Context, r service.Request) (algorithms.Decision, error) {
	defer h.hold(ctx, r.Key, 1)()
	return h.Store.Decide(ctx, r)
}

func (h *heldStore) DecideAll(ctx context.Context, reqs []service.Request, out []algorithms.Decision) (int, error) {
	defer h.hold(ctx, reqs[0].Key, int64(len(reqs)))()
	return service.DecideEach(ctx, h.Store, reqs, out)
}

func (h *heldStore) CountWindow(ctx context.Context, r service.CountRequest) (int64, time.Duration, error) {
	defer h.hold(ctx, r.Key, 1)()
	return h.Store.CountWindow(ctx, r)
}

// fakeClock is a clock the test moves; it starts an hour ahead of the wall clock, so that the
// contexts' own timers, set from its deadlines, never fire during a test.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Now().Add(time.Hour)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// within is a context whose deadline is d after the clock's now.
func within(t *testing.T, c *fakeClock, d time.Duration) context.Context {
	ctx, cancel := context.WithDeadline(context.Background(), c.Now().Add(d))
	t.Cleanup(cancel)
	return ctx
}

var gateLimit = algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 100, Window: time.Minute}

func decideReq(key string) service.Request {
	return service.Request{Key: key, Limit: gateLimit, Cost: 1}
}

// batch is a batch of n descriptors, the first named key.
func batch(key string, n int) []service.Request {
	reqs := make([]service.Request, n)
	for i := range reqs {
		reqs[i] = decideReq(key + string(rune('a'+i)))
	}
	reqs[0].Key = key
	return reqs
}

// decideAsync decides reqs through g under ctx in a goroutine; the error arrives on the channel.
func decideAsync(g *service.Gate, ctx context.Context, reqs ...service.Request) <-chan error {
	errc := make(chan error, 1)
	go func() {
		var err error
		if len(reqs) == 1 {
			_, err = g.Decide(ctx, reqs[0])
		} else {
			_, err = g.DecideAll(ctx, reqs, make([]algorithms.Decision, len(reqs)))
		}
		errc <- err
	}()
	return errc
}

// waitQueued waits until n calls wait in g's queue.
func waitQueued(g *service.Gate, n int) {
	for g.Queued() < n {
		runtime.Gosched()
	}
}

// teach lets one call through the idle gate that takes d at the store by c, so that the gate
// has measured the store's time.
func teach(t *testing.T, g *service.Gate, h *heldStore, c *fakeClock, d time.Duration) {
	errc := decideAsync(g, context.Background(), decideReq("teach"))
	call := <-h.calls
	c.Advance(d)
	close(call.done)
	require.NoError(t, <-errc)
}

func TestAGateLetsNoMoreThanItsBoundOfWorkReachTheStore(t *testing.T) {
	h := newHeldStore(t)
	g := service.NewGate(h, service.GateConfig{MaxWork: 4, Now: newFakeClock().Now})
	var errs []<-chan error
	for i := range 5 {
		errs = append(errs, decideAsync(g, context.Background(), batch(string(rune('a'+i)), 2)...))
	}
	a, b := <-h.calls, <-h.calls // two batches of two in at once, the others queued
	close(a.done)
	close(b.done)
	for range 3 {
		close((<-h.calls).done)
	}
	for _, errc := range errs {
		require.NoError(t, <-errc)
	}
	assert.Equal(t, int64(5), h.seen.Load(), "every queued call reached the store in the end")
	assert.Equal(t, int64(4), h.most.Load(), "never more than four descriptors in the store at once")
}

func TestACallAdmittedToTheStoreIsNeverThrownAway(t *testing.T) {
	h := newHeldStore(t)
	c := newFakeClock()
	g := service.NewGate(h, service.GateConfig{MaxWork: 16, Now: c.Now})
	ctx, cancel := context.WithDeadline(context.Background(), c.Now().Add(10*time.Millisecond))
	errc := decideAsync(g, ctx, decideReq("admitted"))
	call := <-h.calls
	c.Advance(20 * time.Millisecond)
	cancel() // the caller's deadline passes while the store works on its call
	assert.NoError(t, call.ctx.Err(), "the store's call is not cancelled by its caller's deadline")
	close(call.done)
	require.NoError(t, <-errc, "the store's answer is returned, not thrown away")
	st := g.Stats()
	assert.Equal(t, int64(1), st.Late, "counted as a late answer")
	assert.Zero(t, st.Overloaded)
	d, err := h.Store.Decide(context.Background(), decideReq("admitted"))
	require.NoError(t, err)
	assert.Equal(t, int64(98), d.Remaining, "the late call was charged, and its answer used")
}

func TestAnAdmittedCallIsBoundedByTheStoreTimeout(t *testing.T) {
	h := newHeldStore(t)
	g := service.NewGate(h, service.GateConfig{MaxWork: 1, StoreTimeout: time.Hour})
	errc := decideAsync(g, context.Background(), decideReq("k"))
	call := <-h.calls
	dl, ok := call.ctx.Deadline()
	require.True(t, ok, "a call to the store always has a deadline")
	assert.WithinDuration(t, time.Now().Add(time.Hour), dl, time.Minute)
	close(call.done)
	require.NoError(t, <-errc)
}

func TestACallThatCannotBeServedInItsDeadlineIsRefusedBeforeTheStore(t *testing.T) {
	h := newHeldStore(t)
	c := newFakeClock()
	g := service.NewGate(h, service.GateConfig{MaxWork: 1, Now: c.Now})
	teach(t, g, h, c, 4*time.Millisecond) // the store takes 4ms a call
	first := decideAsync(g, context.Background(), decideReq("first"))
	held := <-h.calls // the gate is full: a call waits 4ms for room, then takes 4ms
	_, err := g.Decide(within(t, c, 7*time.Millisecond), decideReq("hopeless"))
	require.ErrorIs(t, err, service.ErrOverloaded, "refused at once: 8ms of work ahead of a 7ms deadline")
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "without waiting for its deadline")
	hopeful := decideAsync(g, within(t, c, 9*time.Millisecond), decideReq("hopeful"))
	waitQueued(g, 1)
	c.Advance(4 * time.Millisecond)
	close(held.done)
	require.NoError(t, <-first)
	next := <-h.calls
	assert.Equal(t, "hopeful", next.name, "a call that fits its deadline waits its turn")
	c.Advance(4 * time.Millisecond)
	close(next.done)
	require.NoError(t, <-hopeful)
	assert.Equal(t, int64(3), h.seen.Load(), "the refused call never reached the store")
	assert.Equal(t, int64(1), g.Stats().Overloaded)
	assert.Zero(t, g.Stats().Late)
}

func TestAQueuedCallThatCanNoLongerBeServedInTimeIsRefusedWhenItsTurnComes(t *testing.T) {
	h := newHeldStore(t)
	c := newFakeClock()
	g := service.NewGate(h, service.GateConfig{MaxWork: 2, Now: c.Now})
	teach(t, g, h, c, 2*time.Millisecond)
	first := decideAsync(g, context.Background(), decideReq("first"))
	held := <-h.calls
	second := decideAsync(g, context.Background(), decideReq("second"))
	other := <-h.calls
	queued := decideAsync(g, within(t, c, 5*time.Millisecond), decideReq("queued"))
	waitQueued(g, 1)                // expected: 1ms of wait and 2ms at the store, within its 5ms
	c.Advance(4 * time.Millisecond) // the store is slower than measured: 1ms of 5 is left
	close(held.done)
	require.NoError(t, <-first)
	require.ErrorIs(t, <-queued, service.ErrOverloaded, "refused at its turn: the store now takes longer than what is left")
	close(other.done)
	require.NoError(t, <-second)
	assert.Equal(t, int64(3), h.seen.Load(), "and never sent")
}

func TestACallWhoseContextEndsInTheGatesQueueNeverReachesTheStore(t *testing.T) {
	h := newHeldStore(t)
	g := service.NewGate(h, service.GateConfig{MaxWork: 1, Now: newFakeClock().Now})
	first := decideAsync(g, context.Background(), decideReq("first"))
	held := <-h.calls // the only room is taken
	ctx, cancel := context.WithCancel(context.Background())
	queued := decideAsync(g, ctx, decideReq("gone"))
	waitQueued(g, 1)
	cancel()
	err := <-queued
	require.ErrorIs(t, err, service.ErrOverloaded)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, g.Queued(), "it left the queue")
	close(held.done)
	require.NoError(t, <-first)
	assert.Equal(t, int64(1), h.seen.Load(), "only the first call reached the store")
	_, metrics := serve(newTestHandler(t, service.Config{Store: g}), "GET", "/metrics", "")
	assert.Contains(t, metrics, "meshlimit_store_overloaded_total 1\n")
	assert.Contains(t, metrics, "meshlimit_store_late_answers_total 0\n")
}

func TestABigBatchCallerCannotStarveSingleDescriptorCallers(t *testing.T) {
	h := newHeldStore(t)
	g := service.NewGate(h, service.GateConfig{MaxWork: 16, Now: newFakeClock().Now})
	big := service.WithFlow(context.Background(), "big connection")
	errs := []<-chan error{decideAsync(g, big, batch("big0", 16)...)}
	first := <-h.calls // one batch of 16 fills the store
	for i := 1; i < 4; i++ {
		errs = append(errs, decideAsync(g, big, batch("big"+string(rune('0'+i)), 16)...))
		waitQueued(g, i) // three more queued behind it, in order
	}
	errs = append(errs, decideAsync(g, service.WithFlow(context.Background(), "small connection"), decideReq("small")))
	waitQueued(g, 4)
	close(first.done)
	var order []string
	for range 4 {
		c := <-h.calls
		order = append(order, c.name)
		close(c.done)
	}
	assert.Equal(t, []string{"big1", "small", "big2", "big3"}, order,
		"the single descriptor waits for one of the big caller's batches, not for all it queued first")
	for _, errc := range errs {
		require.NoError(t, <-errc)
	}
}

func TestCallsOfOneFlowAreServedFirstComeFirstServed(t *testing.T) {
	h := newHeldStore(t)
	g := service.NewGate(h, service.GateConfig{MaxWork: 2, Now: newFakeClock().Now})
	errs := []<-chan error{decideAsync(g, context.Background(), batch("first", 2)...)}
	first := <-h.calls
	names := []string{"big", "one", "two"}
	for i, name := range names { // no flow named: one shared flow
		reqs := []service.Request{decideReq(name)}
		if name != "one" {
			reqs = batch(name, 2)
		}
		errs = append(errs, decideAsync(g, context.Background(), reqs...))
		waitQueued(g, i+1)
	}
	close(first.done)
	var order []string
	for range names {
		c := <-h.calls
		order = append(order, c.name)
		close(c.done)
	}
	assert.Equal(t, names, order, "the batch at the head is not passed by the single call behind it, nor that by the next batch")
	for _, errc := range errs {
		require.NoError(t, <-errc)
	}
}

func TestAGateThatMeasuredASlowStoreStillSendsOneCallWhenTheStoreIsIdle(t *testing.T) {
	h := newHeldStore(t)
	c := newFakeClock()
	g := service.NewGate(h, service.GateConfig{MaxWork: 16, Now: c.Now})
	teach(t, g, h, c, time.Second) // one call took a second: the mean is far past any deadline
	probe := decideAsync(g, within(t, c, 10*time.Millisecond), decideReq("probe"))
	call := <-h.calls
	_, err := g.Decide(within(t, c, 10*time.Millisecond), decideReq("second"))
	require.ErrorIs(t, err, service.ErrOverloaded, "while the probe is in flight, calls are refused at once")
	close(call.done)
	require.NoError(t, <-probe, "an idle store gets a call, whose answer is the gate's new measure")
}

func TestABatchTakesAsMuchRoomAsItHasDescriptorsAndCountsInOrder(t *testing.T) {
	m := memstore.New(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { m.Close() })
	g := service.NewGate(m, service.GateConfig{MaxWork: 1, Now: newFakeClock().Now})
	now := time.Unix(1_700_000_000, 0)
	reqs := []service.CountRequest{{Key: "k", Window: time.Minute, Hits: 2, Now: now}, {Key: "k", Window: time.Minute, Hits: 3, Now: now}}
	out := make([]service.CountResult, 2)
	require.NoError(t, g.CountWindows(context.Background(), reqs, out), "a batch larger than the bound takes all the room")
	assert.Equal(t, []int64{2, 5}, []int64{out[0].Count, out[1].Count})
	var _ service.BatchCounter = g
	var _ service.BatchDecider = g
}

// closedLoop runs callers that each send calls batches of work descriptors through g, each
// under a deadline of deadline, the next when the last is answered or refused; the test plays
// the store: every call in it is answered together, latency(work in the store) after the
// last answers. It returns the calls answered and refused.
func closedLoop(t *testing.T, g *service.Gate, h *heldStore, c *fakeClock, callers, calls, work int, deadline time.Duration, latency func(int64) time.Duration) (answered, refused int64) {
	var ok, no, finished atomic.Int64
	for i := range callers {
		go func() {
			defer finished.Add(1)
			for j := range calls {
				ctx, cancel := context.WithDeadline(context.Background(), c.Now().Add(deadline))
				_, err := g.DecideAll(ctx, batch(string(rune('a'+i))+string(rune('a'+j)), work), make([]algorithms.Decision, work))
				cancel()
				if err != nil {
					no.Add(1)
				} else {
					ok.Add(1)
				}
			}
		}()
	}
	var in, next []heldCall
	// settle waits until every caller is in the store (held, or in next), in the gate's queue,
	// or done: the answers of one round come one after the other, each caller's next call
	// decided before the next answer.
	settle := func(held int) {
		for held+len(next)+g.Queued()+int(finished.Load()) != callers {
			select {
			case call := <-h.calls:
				next = append(next, call)
			default:
				runtime.Gosched()
			}
		}
	}
	for {
		settle(0)
		if len(next) == 0 {
			return ok.Load(), no.Load()
		}
		in, next = append(in[:0], next...), next[:0]
		c.Advance(latency(h.in.Load()))
		for i, call := range in {
			close(call.done)
			settle(len(in) - i - 1)
		}
	}
}

func TestCallersWhoSendTheirNextCallWhenTheLastIsAnsweredAreNeverRefusedWhileTheStoreKeepsUp(t *testing.T) {
	h := newHeldStore(t)
	c := newFakeClock()
	g := service.NewGate(h, service.GateConfig{MinWork: 8, MaxWork: 128, Now: c.Now})
	// 8 callers of 4 descriptors each at a bound of 8: at that bound a call waits 4 of the store's
	// 10ms round trips, past its 35ms deadline, though the store answers any work in 10ms.
	answered, refused := closedLoop(t, g, h, c, 8, 6, 4, 35*time.Millisecond, func(int64) time.Duration { return 10 * time.Millisecond })
	assert.Zero(t, refused, "no call refused")
	assert.Equal(t, int64(8*6), answered)
	assert.Equal(t, int64(8*4), h.most.Load(), "the bound grew to every caller's work")
}

func TestAStoreWhoseTimeGrowsWithTheWorkInItKeepsTheGateNearItsBound(t *testing.T) {
	h := newHeldStore(t)
	c := newFakeClock()
	g := service.NewGate(h, service.GateConfig{MinWork: 8, MaxWork: 128, Now: c.Now})
	// The store takes 1ms a descriptor in it: more in flight only makes each call slower.
	closedLoop(t, g, h, c, 32, 6, 4, time.Second, func(in int64) time.Duration { return time.Duration(in) * time.Millisecond })
	// Each round trip the bound may double while the store answered within twice its least
	// time (16 descriptors here): it passes that once, then comes back; it never grows to the
	// 128 the callers ask for.
	assert.LessOrEqual(t, h.most.Load(), int64(4*2*8), "the store never holds much more than twice the work it answers in its least time")
}

func TestTheBoundInForceNeverPassesMaxWork(t *testing.T) {
	h := newHeldStore(t)
	c := newFakeClock()
	g := service.NewGate(h, service.GateConfig{MinWork: 8, MaxWork: 20, Now: c.Now})
	// The store answers any work in 10ms: the bound would grow to the 32 descriptors the callers
	// ask for, but MaxWork is the most the gate ever lets in.
	closedLoop(t, g, h, c, 8, 6, 4, time.Hour, func(int64) time.Duration { return 10 * time.Millisecond })
	assert.LessOrEqual(t, h.most.Load(), int64(20), "never more than MaxWork in flight")
	assert.Greater(t, h.most.Load(), int64(8), "the bound grew past MinWork")
}

func TestACallThatFindsRoomIsSentEvenWhenTheMeanStoreTimePassesItsDeadline(t *testing.T) {
	h := newHeldStore(t)
	c := newFakeClock()
	g := service.NewGate(h, service.GateConfig{MaxWork: 2, Now: c.Now})
	teach(t, g, h, c, 8*time.Millisecond) // a slow spell: the store took 8ms a call
	first := decideAsync(g, context.Background(), decideReq("first"))
	held := <-h.calls // one call in flight, room for one more
	second := decideAsync(g, within(t, c, 5*time.Millisecond), decideReq("second"))
	var next heldCall
	select {
	case next = <-h.calls:
	case err := <-second:
		t.Fatalf("refused before the store (%v): the bound had room, and the store may well answer in 5ms", err)
	}
	assert.Equal(t, "second", next.name)
	c.Advance(2 * time.Millisecond)
	close(next.done)
	require.NoError(t, <-second, "answered within its deadline")
	close(held.done)
	require.NoError(t, <-first)
	assert.Zero(t, g.Stats().Overloaded, "nothing refused")
}
