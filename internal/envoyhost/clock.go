package envoyhost

import (
	"sync"
	"time"
)

// Clock is the virtual time source of the host: WASI clock_time_get (realtime and
// monotonic), proxy_get_current_time_nanoseconds, the request.time property, the
// per-VM tick timers (§5) and, with Config.CallTimeoutsOnClock, the HTTP callout
// timeouts (§3) all read it. It only moves when Advance is called. A Clock may be
// shared by several plugins; it is safe for concurrent use.
type Clock struct {
	advanceMu sync.Mutex // serializes Advance

	mu       sync.Mutex
	start    time.Time
	now      time.Time
	timers   []*VM          // VMs with a tick period, in registration order
	timeouts []*pendingCall // outstanding callouts timed on this clock, in dispatch order
}

// monotonicBase keeps the monotonic clock away from 0, which some runtimes treat as
// "unset".
const monotonicBase = time.Second

// NewClock returns a clock that reads start until it is advanced.
func NewClock(start time.Time) *Clock {
	return &Clock{start: start, now: start}
}

// Now returns the current virtual time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// monotonic returns the virtual monotonic clock: time since the clock was created.
func (c *Clock) monotonic() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return monotonicBase + c.now.Sub(c.start)
}

// Advance moves the clock forward by d, firing every tick and callout timeout that
// falls due on the way in time order (ties in the order the timers were set; at the
// same instant, callout timeouts before ticks). Each tick calls proxy_on_tick on its VM
// with the clock reading the tick's due time, then re-arms the timer one period later
// (a fixed delay); each timeout answers its callout, if no answer came before, with
// Envoy's 504 (§3). Advance returns after the clock reads the old time plus d and every
// due tick and timeout has run. A negative d is treated as 0.
func (c *Clock) Advance(d time.Duration) {
	if d < 0 {
		d = 0
	}
	c.advanceMu.Lock()
	defer c.advanceMu.Unlock()
	c.mu.Lock()
	target := c.now.Add(d)
	c.mu.Unlock()
	for {
		vm, call, due := c.nextDue(target)
		if vm == nil && call == nil {
			break
		}
		c.mu.Lock()
		if due.After(c.now) {
			c.now = due
		}
		c.mu.Unlock()
		if call != nil {
			c.removeCallTimeout(call)
			call.timeOut()
		} else {
			vm.fireTick(due)
		}
	}
	c.mu.Lock()
	c.now = target
	c.mu.Unlock()
}

// nextDue returns the callout timeout, or else the VM's timer, due earliest at or
// before target.
func (c *Clock) nextDue(target time.Time) (*VM, *pendingCall, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var call *pendingCall
	var at time.Time
	for _, pc := range c.timeouts {
		if !pc.due.After(target) && (call == nil || pc.due.Before(at)) {
			call, at = pc, pc.due
		}
	}
	var best *VM
	for _, vm := range c.timers {
		if vm.tickPeriod <= 0 || vm.tickNext.After(target) {
			continue
		}
		if (call == nil && best == nil) || vm.tickNext.Before(at) {
			best, call, at = vm, nil, vm.tickNext
		}
	}
	return best, call, at
}

// addCallTimeout times call's timeout on the clock.
func (c *Clock) addCallTimeout(call *pendingCall) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timeouts = append(c.timeouts, call)
}

// removeCallTimeout forgets call's timeout (answered, cancelled or fired).
func (c *Clock) removeCallTimeout(call *pendingCall) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, pc := range c.timeouts {
		if pc == call {
			c.timeouts = append(c.timeouts[:i], c.timeouts[i+1:]...)
			return
		}
	}
}

// setTimer sets vm's tick period; 0 disables it. The first tick is one period from now.
func (c *Clock) setTimer(vm *VM, period time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	vm.tickPeriod = period
	vm.tickNext = c.now.Add(period)
	for i, t := range c.timers {
		if t == vm {
			if period <= 0 {
				c.timers = append(c.timers[:i], c.timers[i+1:]...)
			}
			return
		}
	}
	if period > 0 {
		c.timers = append(c.timers, vm)
	}
}

// rearm schedules vm's next tick one period after now, if it still has a period.
func (c *Clock) rearm(vm *VM) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if vm.tickPeriod > 0 {
		vm.tickNext = c.now.Add(vm.tickPeriod)
	}
}

// tickPeriodOf reads vm's period under the clock's lock.
func (c *Clock) tickPeriodOf(vm *VM) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return vm.tickPeriod
}
