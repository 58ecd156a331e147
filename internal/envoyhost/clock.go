package envoyhost

import (
	"sync"
	"time"
)

// Clock is the virtual time source of the host: WASI clock_time_get (realtime and
// monotonic), proxy_get_current_time_nanoseconds, the request.time property and the
// per-VM tick timers (§5) all read it. It only moves when Advance is called. A Clock
// may be shared by several plugins; it is safe for concurrent use.
type Clock struct {
	advanceMu sync.Mutex // serializes Advance

	mu     sync.Mutex
	start  time.Time
	now    time.Time
	timers []*VM // VMs with a tick period, in registration order
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

// Advance moves the clock forward by d, firing every tick that falls due on the way in
// time order (ties in the order the timers were set). Each tick calls proxy_on_tick on
// its VM with the clock reading the tick's due time, then re-arms the timer one period
// later (a fixed delay). Advance returns after the clock reads the old time plus d and
// every due tick has run. A negative d is treated as 0.
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
		vm, due := c.nextDue(target)
		if vm == nil {
			break
		}
		c.mu.Lock()
		if due.After(c.now) {
			c.now = due
		}
		c.mu.Unlock()
		vm.fireTick(due)
	}
	c.mu.Lock()
	c.now = target
	c.mu.Unlock()
}

// nextDue returns the VM whose timer is due earliest at or before target.
func (c *Clock) nextDue(target time.Time) (*VM, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var best *VM
	var bestAt time.Time
	for _, vm := range c.timers {
		if vm.tickPeriod <= 0 || vm.tickNext.After(target) {
			continue
		}
		if best == nil || vm.tickNext.Before(bestAt) {
			best, bestAt = vm, vm.tickNext
		}
	}
	return best, bestAt
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
