package envoyhost

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero/api"
)

// VM is one instance of the plugin's module: a thread VM (one per worker plus the
// main-thread VM), the canary or the base VM (§1.4, §5). Its guest calls are
// serialized by a mutex, as one Envoy thread would run them; different VMs run
// concurrently. A trap or proc_exit fails the whole VM (§7): later streams on it get a
// 503 local reply with details "wasm_fail_stream", or pass through when the plugin is
// fail-open.
type VM struct {
	p     *Plugin
	index int
	ctx   context.Context // carries the VM to host functions

	mu     sync.Mutex // serializes guest calls; guards everything below
	mod    api.Module
	mem    api.Memory
	ex     exports
	stack  [8]uint64
	mstack [1]uint64 // for re-entrant malloc calls

	failed  error
	closed  bool
	rootID  uint32
	nextID  uint32
	streams map[uint32]*Stream

	current   uint32 // context of the guest call in progress; 0 outside calls
	effective uint32 // set by proxy_set_effective_context; 0 = none
	allowed   []bool // allow-list of the restricted window in force; nil = none
	allocs    int    // allocations made by the host call in progress
	stopNext  bool   // a local reply forces the current callback to stop (§4)
	scratch   []byte // reused for values copied out to the guest
	pbuf      []byte // reused for encoded property values

	deferred    []deferredAction
	configuring bool // inside proxy_on_configure: the plugin configuration is visible
	callResp    *callResponse
	status      Status
	statusMsg   string
	filterState map[string][]byte // set_property outside a stream

	metricIDs  map[uint32]*metric
	nextMetric uint32
	nextCallID uint32
	calls      map[uint32]*pendingCall
	monoSkew   time.Duration // #533 poll_oneoff sleeps (see pollOneoff)

	hostCalls, guestAllocs atomic.Int64 // see HostCalls
	trace                  *[]HostCall  // see TraceHostCalls; nil = off

	// Guarded by p.clock.mu.
	tickPeriod time.Duration
	tickNext   time.Time
}

type vmKey struct{}

type deferredKind int

const (
	deferLocalReply deferredKind = iota
	deferContinue
	deferClose
)

// deferredAction is an effect a host call queued until the guest call returns (§4).
type deferredAction struct {
	kind   deferredKind
	stream *Stream
	dir    int // 0 request, 1 response
	reply  *LocalReply
}

// restrictedError is the trap raised for a host call outside the allow-list of a
// restricted window (§1.3, §7).
type restrictedError struct{ fn string }

func (e *restrictedError) Error() string {
	return "Uncaught Error: restricted_callback (" + e.fn + ")"
}

// HostCalls reports how many host functions (WASI and env) the guest has called on this VM, and how
// many times the host re-entered the guest's allocator to hand it a value. Both are deterministic for
// a given module and workload, unlike timings, so benchmarks report them per request.
func (v *VM) HostCalls() (calls, allocs int64) { return v.hostCalls.Load(), v.guestAllocs.Load() }

// Index returns the VM's index in Plugin.VMs: workers are 0..Workers-1 and the
// main-thread VM is Workers.
func (v *VM) Index() int { return v.index }

// RootContextID returns the id of the plugin's root context on this VM (1, from the
// VM's context counter).
func (v *VM) RootContextID() uint32 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.rootID
}

// Failed returns why the VM failed (a trap, proc_exit, a restricted callback or a
// failed start), or nil while it is healthy.
func (v *VM) Failed() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.failed
}

// MemoryBytes returns the size of the VM's linear memory in bytes. Wasm memory never
// shrinks, so this is the high-water mark.
func (v *VM) MemoryBytes() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.mem == nil {
		return 0
	}
	return uint64(v.mem.Size())
}

// TickPeriod returns the tick period the guest set with
// proxy_set_tick_period_milliseconds, 0 when none.
func (v *VM) TickPeriod() time.Duration {
	return v.p.clock.tickPeriodOf(v)
}

// call invokes fn with args as the guest call for context ctxID. It returns the first
// result (0 when the function has none) and false when the call failed, in which case
// the VM is failed. The effective context is reset for the call (§3). call requires
// v.mu.
func (v *VM) call(fn api.Function, name string, ctxID uint32, args ...uint64) (uint64, bool) {
	if v.failed != nil || v.closed {
		return 0, false
	}
	prevCur, prevEff := v.current, v.effective
	v.current, v.effective = ctxID, 0
	n := copy(v.stack[:], args)
	if n == 0 {
		n = 1
	}
	err := fn.CallWithStack(v.ctx, v.stack[:n])
	v.current, v.effective = prevCur, prevEff
	if err != nil {
		v.fail(name, err)
		return 0, false
	}
	return v.stack[0], true
}

// fail marks the VM failed with Envoy's message and logs it at critical. fail requires
// v.mu.
func (v *VM) fail(fn string, err error) {
	if v.failed != nil {
		return
	}
	msg := err.Error()
	var re *restrictedError
	if errors.As(err, &re) {
		msg = re.Error()
	} else if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i] // drop wazero's stack trace
	}
	v.failed = trapError{fn: fn, msg: msg}
	v.p.log(v.index, LogCritical, v.failed.Error())
	v.deferred = v.deferred[:0]
	v.cancelCalls()
}

// alloc re-enters the guest's allocator for size bytes inside the malloc window (§7)
// and returns the guest pointer, or false when the allocator returned 0. A trap in the
// allocator is re-raised so that the outer guest call fails. alloc requires v.mu and a
// host call in progress; the host never allocates twice in one host call.
func (v *VM) alloc(size uint32) (uint32, bool) {
	if v.allocs > 0 {
		panic("envoyhost: internal error: two guest allocations in one host call")
	}
	v.allocs++
	v.guestAllocs.Add(1)
	saved := v.allowed
	v.allowed = v.p.mallocAllow
	v.mstack[0] = uint64(size)
	err := v.ex.malloc.CallWithStack(v.ctx, v.mstack[:])
	v.allowed = saved
	if err != nil {
		panic(err)
	}
	ptr := uint32(v.mstack[0])
	return ptr, ptr != 0
}

// copyOut copies data into a fresh guest allocation and writes its address and size
// to ptrPtr and sizePtr, like cpp-host's copyToPointerSize: empty data writes 0 and 0
// without allocating.
func (v *VM) copyOut(data []byte, ptrPtr, sizePtr uint32) Status {
	var ptr uint32
	if len(data) > 0 {
		var ok bool
		if ptr, ok = v.alloc(uint32(len(data))); !ok {
			return StatusInvalidMemoryAccess
		}
		if !v.mem.Write(ptr, data) {
			return StatusInvalidMemoryAccess
		}
	}
	if !v.mem.WriteUint32Le(ptrPtr, ptr) || !v.mem.WriteUint32Le(sizePtr, uint32(len(data))) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}

// copyOutString is copyOut for a string.
func (v *VM) copyOutString(s string, ptrPtr, sizePtr uint32) Status {
	var ptr uint32
	if len(s) > 0 {
		var ok bool
		if ptr, ok = v.alloc(uint32(len(s))); !ok {
			return StatusInvalidMemoryAccess
		}
		if !v.mem.WriteString(ptr, s) {
			return StatusInvalidMemoryAccess
		}
	}
	if !v.mem.WriteUint32Le(ptrPtr, ptr) || !v.mem.WriteUint32Le(sizePtr, uint32(len(s))) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}

// view returns guest memory [ptr, ptr+size) without copying; it is valid until the
// next allocation.
func (v *VM) view(ptr, size uint32) ([]byte, bool) {
	if size == 0 {
		return nil, true
	}
	return v.mem.Read(ptr, size)
}

// str copies guest memory [ptr, ptr+size) into a string.
func (v *VM) str(ptr, size uint32) (string, bool) {
	b, ok := v.view(ptr, size)
	return string(b), ok
}

// stream returns the stream of the effective context (or the current one), nil when it
// is the root context or unknown.
func (v *VM) stream() *Stream {
	id := v.current
	if v.effective != 0 {
		id = v.effective
	}
	if id == v.rootID {
		return nil
	}
	return v.streams[id]
}

// runDeferred applies the effects queued during the guest call that just returned, in
// order (§4). It requires v.mu and may call into the guest again.
func (v *VM) runDeferred() {
	for len(v.deferred) > 0 {
		a := v.deferred[0]
		v.deferred = append(v.deferred[:0], v.deferred[1:]...)
		switch a.kind {
		case deferLocalReply:
			a.stream.sendLocalReply(a.reply, false)
		case deferContinue:
			a.stream.resume(a.dir)
		case deferClose:
			a.stream.resetStream()
		}
	}
}

// TickNow delivers a tick now, whatever the timer's due time, and leaves the timer as it was: a
// test reads what the guest hands the host on its tick (the counters it keeps) without moving the
// clock. A failed or closed VM gets none.
func (v *VM) TickNow() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.failed != nil || v.closed || v.ex.onTick == nil {
		return
	}
	v.call(v.ex.onTick, "proxy_on_tick", v.rootID, uint64(v.rootID))
	v.runDeferred()
}

// fireTick delivers one due tick (§5) and re-arms the timer. It is called by
// Clock.Advance without the clock's lock.
func (v *VM) fireTick(due time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	c := v.p.clock
	if v.failed != nil || v.closed {
		c.setTimer(v, 0)
		return
	}
	c.mu.Lock()
	stillDue := v.tickPeriod > 0 && !v.tickNext.After(due)
	c.mu.Unlock()
	if !stillDue {
		return
	}
	if v.ex.onTick != nil {
		v.call(v.ex.onTick, "proxy_on_tick", v.rootID, uint64(v.rootID))
		v.runDeferred()
	}
	if v.failed != nil {
		c.setTimer(v, 0)
		return
	}
	c.rearm(v)
}

// close drops the VM: its timers and outstanding HTTP calls go with it. close requires
// v.mu.
func (v *VM) close() {
	if v.closed {
		return
	}
	v.closed = true
	v.cancelCalls()
	v.p.clock.setTimer(v, 0)
	if v.mod != nil {
		_ = v.mod.Close(context.Background())
	}
}

// cancelCalls cancels every outstanding HTTP call of the VM. It requires v.mu.
func (v *VM) cancelCalls() {
	for id, c := range v.calls {
		c.cancel()
		delete(v.calls, id)
		if !c.due.IsZero() {
			v.p.clock.removeCallTimeout(c)
		}
	}
}

// trapError is a callback that trapped. Its text is Envoy's log line for it, capitalized as Envoy
// writes it ("Function: %s failed: %s"), which the V8 host prints alike and the tests compare.
type trapError struct{ fn, msg string }

func (e trapError) Error() string { return "Function: " + e.fn + " failed: " + e.msg }
