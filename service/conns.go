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
	mu     sync.Mutex
	max    int
	conns  map[*limitedConn]struct{}
	byAddr map[connAddr]*limitedConn // the LimitQuiet ones, for Work
	// Now is the clock (time.Now from NewConnBudget): set it, before the listeners accept, to
	// judge quiet on another clock (a test's).
	Now func() time.Time

	// OnClose, when set before the listeners accept, is called (without the budget's lock)
	// each time the budget closes a connection: for a metric and a rate-limited log.
	OnClose func(ConnClosure)
}

// ConnClosure says why the budget closed a connection.
type ConnClosure string

// The closures of a ConnBudget.
const (
	// ClosedUnproven: a held connection that had completed no request or RPC, to make room.
	ClosedUnproven ConnClosure = "reclaimed_unproven"
	// ClosedQuiet: a held connection that had completed some but was quiet, to make room.
	ClosedQuiet ConnClosure = "reclaimed_quiet"
	// ClosedRefused: a new connection, closed at once because every held one was busy.
	ClosedRefused ConnClosure = "refused"
)

// connAddr names a connection by its two ends, as a gRPC stats handler sees it.
type connAddr struct{ local, remote string }

// NewConnBudget returns a budget of max connections.
func NewConnBudget(max int) *ConnBudget {
	return &ConnBudget{max: max, conns: make(map[*limitedConn]struct{}, max),
		byAddr: make(map[connAddr]*limitedConn), Now: time.Now}
}

// Work returns the useful-work record of the LimitQuiet connection between local and remote
// (nil if the budget holds none): a gRPC server reports each RPC's start and end to it through
// a stats handler, so that the connection is judged by its RPCs, not by the bytes it sends.
func (b *ConnBudget) Work(local, remote net.Addr) *ConnWork {
	if local == nil || remote == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if c := b.byAddr[connAddr{local.String(), remote.String()}]; c != nil {
		return &c.work
	}
	return nil
}

// ConnWork is the useful work of one connection: its RPCs open and when it last completed one.
// Control frames (WINDOW_UPDATE, PING, SETTINGS) and bytes never count.
type ConnWork struct {
	b        *ConnBudget
	open     atomic.Int32
	lastDone atomic.Int64 // unix ns of the last completed RPC, 0 before the first
}

// Begin notes that an RPC started on the connection.
func (w *ConnWork) Begin() { w.open.Add(1) }

// End notes that an RPC of the connection completed.
func (w *ConnWork) End() {
	w.open.Add(-1)
	w.lastDone.Store(w.b.Now().UnixNano())
}

// Limit returns a listener that accepts from ln within the budget, for an http.Server whose
// ConnState is the limiter's ConnState (so that it knows which connections are idle).
func (b *ConnBudget) Limit(ln net.Listener) *ConnLimiter {
	return &ConnLimiter{Listener: ln, b: b}
}

// LimitQuiet returns a listener that accepts from ln within the budget, for a server without a
// ConnState hook (gRPC) that reports its RPCs to Work: a connection is quiet when it has no RPC
// open and has completed none for minQuiet (or none at all since it connected minQuiet ago).
func (b *ConnBudget) LimitQuiet(ln net.Listener) *ConnLimiter {
	return &ConnLimiter{Listener: ln, b: b, byReads: true}
}

// ConnLimiter is a net.Listener that draws its connections from a ConnBudget. When a
// connection arrives with the budget spent, the limiter closes a quiet connection of any
// listener of the budget to make room, judged by useful work (completed requests or RPCs),
// never by bytes: first one that has completed nothing since it connected minQuiet ago (an
// HTTP connection without a request, a gRPC one without an RPC, however many control frames
// it sends), the oldest first; else an idle keep-alive HTTP connection or a gRPC one with no
// RPC open for minQuiet, the longest quiet first. When every held connection is busy, the new
// one is closed at once: the caller sees a failed call and applies its failure policy, instead
// of waiting on a queue.
type ConnLimiter struct {
	net.Listener
	b       *ConnBudget
	byReads bool // judged by its ConnWork (no ConnState hook)

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
		b := l.b
		now := b.Now()
		lc := &limitedConn{Conn: c, l: l, since: now, state: http.StateNew}
		lc.work.b = b
		b.mu.Lock()
		reclaimed, proven := false, false
		if len(b.conns) >= b.max {
			if reclaimed, proven = b.reclaimLocked(now); !reclaimed {
				b.mu.Unlock()
				l.refused.Add(1)
				_ = c.Close()
				b.closed(ClosedRefused)
				continue
			}
		}
		b.conns[lc] = struct{}{}
		if l.byReads {
			b.byAddr[lc.addr()] = lc
		}
		b.mu.Unlock()
		if reclaimed && proven {
			b.closed(ClosedQuiet)
		} else if reclaimed {
			b.closed(ClosedUnproven)
		}
		return lc, nil
	}
}

// closed reports a closure to OnClose.
func (b *ConnBudget) closed(why ConnClosure) {
	if b.OnClose != nil {
		b.OnClose(why)
	}
}

// reclaimLocked closes the quietest reclaimable connection and says whether it had done
// useful work; b.mu is held.
func (b *ConnBudget) reclaimLocked(now time.Time) (reclaimed, proven bool) {
	var victim *limitedConn
	var victimProven bool
	var victimSince time.Time
	for c := range b.conns {
		p, since, ok := c.quietLocked(now)
		if !ok || victim != nil && (!victimProven && p || victimProven == p && !since.Before(victimSince)) {
			continue
		}
		victim, victimProven, victimSince = c, p, since
	}
	if victim == nil {
		return false, false
	}
	b.forgetLocked(victim)
	go victim.Conn.Close() // never block Accept on a slow close
	victim.l.reclaimed.Add(1)
	return true, victimProven
}

// quietLocked says whether c may be closed to make room, and how: proven (it completed a
// request or RPC; the unproven are closed first) and quiet since when. b.mu is held.
func (c *limitedConn) quietLocked(now time.Time) (proven bool, since time.Time, ok bool) {
	switch {
	case c.l.byReads:
		if c.work.open.Load() > 0 {
			return false, time.Time{}, false
		}
		since = c.since
		if done := c.work.lastDone.Load(); done != 0 {
			proven, since = true, time.Unix(0, done)
		}
		return proven, since, now.Sub(since) >= minQuiet
	case c.state == http.StateIdle:
		return true, c.since, true
	case c.state == http.StateNew:
		return false, c.since, now.Sub(c.since) >= minQuiet
	}
	return false, time.Time{}, false
}

// forgetLocked stops counting c against the budget; b.mu is held.
func (b *ConnBudget) forgetLocked(c *limitedConn) {
	delete(b.conns, c)
	if b.byAddr[c.addr()] == c {
		delete(b.byAddr, c.addr())
	}
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
		l.b.forgetLocked(lc)
		return
	}
	if s != http.StateActive {
		lc.since = l.b.Now()
	}
	lc.state = s
}

// limitedConn is a connection held by a ConnLimiter; since and state are guarded by the
// budget's mu.
type limitedConn struct {
	net.Conn
	l     *ConnLimiter
	since time.Time      // when it connected or last became idle
	state http.ConnState // as last reported by the server
	work  ConnWork       // its RPCs (byReads only)
	once  sync.Once
}

// addr names c by its two ends.
func (c *limitedConn) addr() connAddr {
	return connAddr{c.LocalAddr().String(), c.RemoteAddr().String()}
}

// Close implements net.Conn: the connection stops counting against the budget.
func (c *limitedConn) Close() error {
	c.once.Do(func() {
		c.l.b.mu.Lock()
		c.l.b.forgetLocked(c)
		c.l.b.mu.Unlock()
	})
	return c.Conn.Close()
}
