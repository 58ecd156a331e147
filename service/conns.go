package service

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// ConnLimiter is a net.Listener that holds at most Max connections, so that a flood of
// connections cannot exhaust the process's file descriptors. When a connection arrives at the
// cap, the limiter closes the connection that has been quiet longest to make room: an idle
// keep-alive connection first, else one that has sent no request for minQuiet since it
// connected. When every held connection is busy, the new one is closed at once: the caller
// sees a failed call and applies its failure policy, instead of waiting on a queue.
//
// Set ConnState as the http.Server's ConnState hook, so that the limiter knows which
// connections are idle.
type ConnLimiter struct {
	net.Listener
	max int

	mu    sync.Mutex
	conns map[*limitedConn]struct{}

	reclaimed, refused atomic.Uint64
}

// minQuiet is how long a connection that has sent no request yet is left alone when room is
// needed: a proxy sends its request right after connecting.
const minQuiet = 100 * time.Millisecond

// NewConnLimiter returns a listener that accepts from ln and holds at most max connections.
func NewConnLimiter(ln net.Listener, max int) *ConnLimiter {
	return &ConnLimiter{Listener: ln, max: max, conns: make(map[*limitedConn]struct{}, max)}
}

// Accept implements net.Listener.
func (l *ConnLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc := &limitedConn{Conn: c, l: l, since: time.Now(), state: http.StateNew}
		l.mu.Lock()
		if len(l.conns) >= l.max && !l.reclaimLocked(lc.since) {
			l.mu.Unlock()
			l.refused.Add(1)
			_ = c.Close()
			continue
		}
		l.conns[lc] = struct{}{}
		l.mu.Unlock()
		return lc, nil
	}
}

// reclaimLocked closes the quietest reclaimable connection; l.mu is held.
func (l *ConnLimiter) reclaimLocked(now time.Time) bool {
	var victim *limitedConn
	for c := range l.conns {
		switch {
		case c.state == http.StateIdle && (victim == nil || victim.state != http.StateIdle || c.since.Before(victim.since)):
			victim = c
		case c.state == http.StateNew && now.Sub(c.since) >= minQuiet && (victim == nil || victim.state == http.StateNew && c.since.Before(victim.since)):
			victim = c
		}
	}
	if victim == nil {
		return false
	}
	delete(l.conns, victim)
	go victim.Conn.Close() // never block Accept on a slow close
	l.reclaimed.Add(1)
	return true
}

// ConnState is the http.Server.ConnState hook that tells the limiter which connections are
// idle.
func (l *ConnLimiter) ConnState(c net.Conn, s http.ConnState) {
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if s == http.StateClosed || s == http.StateHijacked {
		delete(l.conns, lc)
		return
	}
	if s != http.StateActive {
		lc.since = time.Now()
	}
	lc.state = s
}

// limitedConn is a connection held by a ConnLimiter; its fields are guarded by l.mu.
type limitedConn struct {
	net.Conn
	l     *ConnLimiter
	since time.Time      // when it connected or last became idle
	state http.ConnState // as last reported by the server
	once  sync.Once
}

// Close implements net.Conn: the connection stops counting against the cap.
func (c *limitedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
