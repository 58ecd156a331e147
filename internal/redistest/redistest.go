// Package redistest starts real redis-server processes for tests: standalone servers, Redis
// Clusters of three masters, TLS servers with certificates of a CA the test makes (tls.go), and
// Sentinel sets of a master, a replica and three sentinels (sentinel.go), on 127.0.0.1 ports,
// with no persistence, killed when the test ends (and with the test binary). A missing redis-server fails the test with a message saying how to
// install it: the Redis tests are part of the suite and never skip silently.
//
// redis-server cannot be handed a listening socket, nor report a port the kernel chose, so a server
// starts on a port that was free a moment before (FreePort) and the package watches what it does:
// it is up when its own log says it accepts connections (not when something on that port answers
// PING), and when it exits instead (the port, or a cluster's bus port, was taken meanwhile by
// another test) it is started again on another port. Every failure quotes the server's log.
package redistest

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Server is a redis-server process started by a test on a 127.0.0.1 port, with no persistence,
// killed when the test ends.
type Server struct {
	t     testing.TB
	port  int
	bus   bool // a cluster node: port+10000 is its cluster bus
	dir   string
	extra []string
	cmd   *exec.Cmd
	exit  chan struct{}
	log   *logWriter // the running process's stdout and stderr

	bin        string // the program: redis-server when empty (a sentinel: redis-sentinel)
	conf       string // a configuration file given before the arguments (a sentinel's, which it rewrites)
	ready      string // the log line that says it accepts connections: readyLine when empty
	tls        *TLS   // its port is a TLS port (tls.go)
	user, pass string // Do authenticates with these when pass is set
}

// Require fails the test when redis-server is not installed: the Redis tests are
// part of the suite and must not be skipped silently.
func Require(t testing.TB) {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found in PATH: install Redis (e.g. apt-get install redis-server) to run the service tests", bin)
		}
	}
}

// Start starts a redis-server with extra arguments and returns once it accepts connections.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	Require(t)
	r := &Server{t: t, dir: t.TempDir(), extra: extra}
	r.startOnFreePort()
	t.Cleanup(r.Stop)
	return r
}

func (r *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// Port is the server's port.
func (r *Server) Port() int { return r.port }

// portAttempts bounds the ports a server is tried on before the test fails.
const portAttempts = 8

// readyPatience is how long a started redis-server may take to say it accepts connections. It is
// a safety net against a server that hangs without exiting, far beyond what a loaded machine
// needs (Redis starts in milliseconds): the test waits for the server's own log line or its exit.
const readyPatience = 2 * time.Minute

// freePort is FreePort; a test replaces it to hand out a taken port.
var freePort = FreePort

// startOnFreePort starts the server on a free port, and on another one each time the port turns
// out to be taken when redis-server binds it.
func (r *Server) startOnFreePort() {
	r.t.Helper()
	var taken []string
	for range portAttempts {
		r.port = freePort(r.t, r.bus)
		err := r.launch()
		if err == nil {
			return
		}
		if !isBindFailure(err) {
			r.t.Fatal(err)
		}
		taken = append(taken, strconv.Itoa(r.port))
	}
	r.t.Fatalf("redis-server could not bind any of %d free-looking ports (%s): other processes took each first",
		portAttempts, strings.Join(taken, ", "))
}

// Start (re)starts the process on r's port, after Stop. A port taken meanwhile fails the test:
// whoever uses the server knows it by its address.
func (r *Server) Start() {
	r.t.Helper()
	if err := r.launch(); err != nil {
		r.t.Fatal(err)
	}
}

// startError is a redis-server that exited or hung before it accepted connections.
type startError struct {
	addr, why, log string
	bind           bool // it could not bind its port or its cluster bus port
}

func (e *startError) Error() string {
	return fmt.Sprintf("redis-server on %s %s; its log:\n%s", e.addr, e.why, e.log)
}

func isBindFailure(err error) bool {
	se, ok := err.(*startError)
	return ok && se.bind
}

// launch starts redis-server on r.port and waits until its log says it accepts connections, or it
// exits, or readyPatience passes.
func (r *Server) launch() error {
	r.t.Helper()
	bin, ready := cmp.Or(r.bin, "redis-server"), cmp.Or(r.ready, readyLine)
	r.log = newLogWriter(ready)
	r.cmd = exec.Command(bin, r.args()...)
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test binary
	require.NoError(r.t, r.cmd.Start())
	r.exit = make(chan struct{})
	go func(c *exec.Cmd, exit chan struct{}) { _ = c.Wait(); close(exit) }(r.cmd, r.exit)
	patience := time.NewTimer(readyPatience)
	defer patience.Stop()
	select {
	case <-r.log.seen:
		return nil
	case <-r.exit:
		r.cmd = nil
		log := r.log.String()
		return &startError{addr: r.Addr(), why: "exited before it accepted connections", log: log,
			bind: strings.Contains(log, "Address already in use")}
	case <-patience.C:
		r.Stop()
		return &startError{addr: r.Addr(), why: "did not say it accepts connections within " + readyPatience.String(), log: r.log.String()}
	}
}

// args are the process's arguments: its configuration file if it has one, its port (the TLS
// port of a TLS server, whose plain port is 0), no persistence, then its extra arguments.
func (r *Server) args() []string {
	var args []string
	if r.conf != "" {
		args = append(args, r.conf)
	}
	if r.tls != nil {
		args = append(args, "--port", "0", "--tls-port", strconv.Itoa(r.port))
		args = append(args, r.tls.args()...)
	} else {
		args = append(args, "--port", strconv.Itoa(r.port))
	}
	args = append(args, "--bind", "127.0.0.1", "--dir", r.dir,
		"--save", "", "--appendonly", "no", "--protected-mode", "no", "--loglevel", "notice")
	return append(args, r.extra...)
}

// readyLine is what redis-server logs (at notice level) once it listens: "Ready to accept
// connections tcp" from Redis 7, "Ready to accept connections" before.
const readyLine = "Ready to accept connections"

// Stop kills the process and waits for it to exit.
func (r *Server) Stop() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGCONT) // in case a test left it paused
	_ = r.cmd.Process.Kill()
	<-r.exit
	r.cmd = nil
}

func (r *Server) Signal(sig syscall.Signal) {
	r.t.Helper()
	require.NoError(r.t, r.cmd.Process.Signal(sig))
}

// Log returns what the server has logged since it was last started.
func (r *Server) Log() string { return r.log.String() }

// logWriter keeps a process's output and closes seen once the output contains want.
type logWriter struct {
	mu   sync.Mutex
	buf  []byte
	want string
	seen chan struct{}
	done bool
}

// maxLog bounds the output kept (a server that logs on and on keeps its first 64 KiB).
const maxLog = 64 << 10

func newLogWriter(want string) *logWriter {
	return &logWriter{want: want, seen: make(chan struct{})}
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if room := maxLog - len(w.buf); room > 0 {
		w.buf = append(w.buf, p[:min(len(p), room)]...)
	}
	if !w.done && strings.Contains(string(w.buf), w.want) {
		w.done = true
		close(w.seen)
	}
	return len(p), nil
}

func (w *logWriter) String() string {
	if w == nil {
		return ""
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.buf)
}

// Do sends one command over a fresh connection (TLS for a TLS server, after AUTH for one
// that requires it) and returns the first reply line, without its type prefix ("+OK" -> "OK",
// ":3" -> "3", bulk strings read whole).
func (r *Server) Do(args ...string) (string, error) {
	c, err := r.dial()
	if err != nil {
		return "", err
	}
	defer c.Close()
	return do(c, args...)
}

// Do sends one command to the plain Redis port addr over a fresh connection and returns the
// first reply line, as Server.Do does.
func Do(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return do(c, args...)
}

// dial connects to the server: over TLS with the test CA's client certificate for a TLS
// server, then AUTH when the server has a password.
func (r *Server) dial() (net.Conn, error) {
	var c net.Conn
	var err error
	if r.tls != nil {
		d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: r.tls.PKI.ClientConfig()}
		c, err = d.Dial("tcp", r.Addr())
	} else {
		c, err = net.DialTimeout("tcp", r.Addr(), 5*time.Second)
	}
	if err != nil || r.pass == "" {
		return c, err
	}
	auth := []string{"AUTH", r.pass}
	if r.user != "" {
		auth = []string{"AUTH", r.user, r.pass}
	}
	if _, err := do(c, auth...); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// do sends one command on c and reads the first line of its reply, as Do returns it.
func do(c net.Conn, args ...string) (string, error) {
	_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // a safety net against a server that never answers
	if err := writeCommand(c, args); err != nil {
		return "", err
	}
	rd := bufio.NewReader(c)
	line, err := rd.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	switch {
	case line == "":
		return "", fmt.Errorf("empty reply")
	case line[0] == '-':
		return "", fmt.Errorf("redis: %s", line[1:])
	case line[0] == '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return line[1:], nil
}

// FreePort returns a port on 127.0.0.1 that was free a moment ago. With bus, port+10000 (the
// Redis Cluster bus port) was free too. The ports are drawn at random below the kernel's
// ephemeral range, which the ports of outgoing connections and of listeners on port 0 come from,
// so that only another FreePort can take one before the caller binds it; Start notices that and
// tries another.
func FreePort(t testing.TB, bus bool) int {
	t.Helper()
	lo, hi := portRange(bus)
	for range 1000 {
		p := lo + rand.IntN(hi-lo)
		if !free(p) || bus && !free(p+10000) {
			continue
		}
		return p
	}
	t.Fatalf("no free port in %d..%d", lo, hi-1)
	return 0
}

// portRange is where FreePort draws from: [10000, the ephemeral range's start), less 10000 more
// with bus, so that port+10000 stays below the ephemeral range too.
func portRange(bus bool) (lo, hi int) {
	lo, hi = 10000, ephemeralStart()
	if bus {
		hi -= 10000
	}
	if hi-lo < 1000 { // an unusual ephemeral range: draw from above it, where Linux's default ends
		lo, hi = 61000, 65536
		if bus {
			lo, hi = 45000, 55535
		}
	}
	return lo, hi
}

// ephemeralStart reads the start of Linux's ephemeral port range (32768 by default).
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return n
}

func free(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// WaitFor polls cond every 10ms until it holds or d passes, where d is at least a minute whatever
// the caller says: the bound is a safety net against a hang, never what a test passes or fails by
// on a loaded machine.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	d = max(d, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within %v", what, d)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// clusterPatience bounds the joining of a cluster: a safety net, like readyPatience.
const clusterPatience = 2 * time.Minute

// StartCluster starts three cluster-enabled redis-servers on loopback, joins them as a
// Redis Cluster of three masters and waits until every node reports cluster_state:ok.
func StartCluster(t testing.TB) []*Server {
	t.Helper()
	Require(t)
	nodes := make([]*Server, 3)
	addrs := make([]string, 3)
	for i := range nodes {
		r := &Server{t: t, bus: true, dir: t.TempDir()}
		r.extra = []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"}
		r.startOnFreePort()
		t.Cleanup(r.Stop)
		nodes[i], addrs[i] = r, r.Addr()
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterPatience)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", append(append([]string{"--cluster", "create"}, addrs...),
		"--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	require.NoError(t, err, "redis-cli --cluster create: %s", out)
	for _, n := range nodes {
		WaitFor(t, clusterPatience, "cluster_state:ok on "+n.Addr(), func() bool {
			info, err := n.Do("CLUSTER", "INFO")
			return err == nil && strings.Contains(info, "cluster_state:ok")
		})
	}
	return nodes
}
