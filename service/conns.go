package service

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// ConnBudget is the number of connections a process holds at once over all its listeners, so
// that a flood of connections on any port cannot exhaust the process's file descriptors and
// starve the others. Each listener draws from it through a ConnLimiter (Limit, LimitQuiet).
type ConnBudget struct {
	mu    sync.Mutex
	max   int
	conns map[*limitedConn]struct{}
}

// NewConnBudget returns a budget of max connections.
func NewConnBudget(max int) *ConnBudget {
	return &ConnBudget{max: max, conns: make(map[*limitedConn]struct{}, max)}
}

// Limit returns a listener that accepts from ln within the budget, for an http.Server whose
// ConnState is the limiter's ConnState (so that it knows which connections are idle).
func (b *ConnBudget) Limit(ln net.Listener) *ConnLimiter {
	return &ConnLimiter{Listener: ln, b: b}
}

// LimitQuiet returns a listener that accepts from ln within the budget, for a server without a
// ConnState hook (gRPC): its connections are as quiet as the time since they last read.
func (b *ConnBudget) LimitQuiet(ln net.Listener) *ConnLimiter {
	return &ConnLimiter{Listener: ln, b: b, byReads: true}
}

// ConnLimiter is a net.Listener that draws its connections from a ConnBudget. When a
// connection arrives with the budget spent, the limiter closes the connection, of any listener
// of the budget, that has been quiet longest to make room: an idle keep-alive connection first,
// else one that has sent nothing for minQuiet (an HTTP connection since it connected without a
// request, a LimitQuiet one since its last read). When every held connection is busy, the new
// one is closed at once: the caller sees a failed call and applies its failure policy, instead
// of waiting on a queue.
type ConnLimiter struct {
	net.Listener
	b       *ConnBudget
	byReads bool // quiet is the time since the last read (no ConnState hook)

	reclaimed, refused atomic.Uint64
}

// minQuiet is how long a connection that has sent nothing yet is left alone when room is
// needed: a proxy sends its request right after connecting.
const minQuiet = 100 * time.Millisecond

// Accept implements net.Listener.
func (l *ConnLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		now := time.Now()
		lc := &limitedConn{Conn: c, l: l, since: now, state: http.StateNew}
		lc.lastRead.Store(now.UnixNano())
		b := l.b
		b.mu.Lock()
		if len(b.conns) >= b.max && !b.reclaimLocked(now) {
			b.mu.Unlock()
			l.refused.Add(1)
			_ = c.Close()
			continue
		}
		b.conns[lc] = struct{}{}
		b.mu.Unlock()
		return lc, nil
	}
}

// reclaimLocked closes the quietest reclaimable connection; b.mu is held.
func (b *ConnBudget) reclaimLocked(now time.Time) bool {
	var victim *limitedConn
	var victimIdle bool
	var victimSince time.Time
	for c := range b.conns {
		idle, since, ok := c.quietLocked(now)
		if !ok || victim != nil && (victimIdle && !idle || victimIdle == idle && !since.Before(victimSince)) {
			continue
		}
		victim, victimIdle, victimSince = c, idle, since
	}
	if victim == nil {
		return false
	}
	delete(b.conns, victim)
	go victim.Conn.Close() // never block Accept on a slow close
	victim.l.reclaimed.Add(1)
	return true
}

// quietLocked says whether c may be closed to make room, and how: idle (a keep-alive
// connection between requests, closed first) and quiet since when. b.mu is held.
func (c *limitedConn) quietLocked(now time.Time) (idle bool, since time.Time, ok bool) {
	switch {
	case c.l.byReads:
		since = time.Unix(0, c.lastRead.Load())
		return false, since, now.Sub(since) >= minQuiet
	case c.state == http.StateIdle:
		return true, c.since, true
	case c.state == http.StateNew:
		return false, c.since, now.Sub(c.since) >= minQuiet
	}
	return false, time.Time{}, false
}

// ConnState is the http.Server.ConnState hook that tells the limiter which connections are
// idle.
func (l *ConnLimiter) ConnState(c net.Conn, s http.ConnState) {
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	if s == http.StateClosed || s == http.StateHijacked {
		delete(l.b.conns, lc)
		return
	}
	if s != http.StateActive {
		lc.since = time.Now()
	}
	lc.state = s
}

// limitedConn is a connection held by a ConnLimiter; since and state are guarded by the
// budget's mu.
type limitedConn struct {
	net.Conn
	l        *ConnLimiter
	since    time.Time      // when it connected or last became idle
	state    http.ConnState // as last reported by the server
	lastRead atomic.Int64   // unix ns of the last read that returned bytes (byReads only)
	once     sync.Once
}

// Read implements net.Conn, noting when a LimitQuiet connection last read.
func (c *limitedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.l.byReads {
		c.lastRead.Store(time.Now().UnixNano())
	}
	return n, err
}

// Close implements net.Conn: the connection stops counting against the budget.
func (c *limitedConn) Close() error {
	c.once.Do(func() {
		c.l.b.mu.Lock()
		delete(c.l.b.conns, c)
		c.l.b.mu.Unlock()
	})
	return c.Conn.Close()
}
