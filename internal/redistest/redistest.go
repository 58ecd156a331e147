// Package redistest starts real redis-server processes for tests: standalone servers and Redis
// Clusters of three masters, on free 127.0.0.1 ports, with no persistence, killed when the test ends
// (and with the test binary). A missing redis-server fails the test with a message saying how to
// install it: the Redis tests are part of the suite and never skip silently.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Server is a redis-server process started by a test on a free 127.0.0.1 port, with no
// persistence, killed when the test ends.
type Server struct {
	t     testing.TB
	port  int
	dir   string
	extra []string
	cmd   *exec.Cmd
	exit  chan struct{}
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

// Start starts a redis-server with extra arguments and waits until it answers PING.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	Require(t)
	r := &Server{t: t, port: FreePort(t, false), dir: t.TempDir(), extra: extra}
	r.Start()
	t.Cleanup(r.Stop)
	return r
}

func (r *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// Start (re)starts the process on r's port.
func (r *Server) Start() {
	r.t.Helper()
	args := append([]string{
		"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--dir", r.dir,
		"--save", "", "--appendonly", "no", "--protected-mode", "no", "--loglevel", "warning",
	}, r.extra...)
	r.cmd = exec.Command("redis-server", args...)
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test binary
	require.NoError(r.t, r.cmd.Start())
	r.exit = make(chan struct{})
	go func(c *exec.Cmd, exit chan struct{}) { _ = c.Wait(); close(exit) }(r.cmd, r.exit)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if out, err := r.Do("PING"); err == nil && out == "PONG" {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("redis-server on %s did not answer PING within 10s", r.Addr())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

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

// Do sends one inline command over a fresh connection and returns the first reply line,
// without its type prefix ("+OK" -> "OK", ":3" -> "3", bulk strings read whole).
func (r *Server) Do(args ...string) (string, error) {
	return Do(r.Addr(), args...)
}

func Do(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second)) // a safety net: a loaded machine may stall a few seconds
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
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
// Redis Cluster bus port) was free too.
func FreePort(t testing.TB, bus bool) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !bus {
			return p
		}
		if p+10000 > 65535 {
			continue
		}
		if l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+10000)); err == nil {
			l2.Close()
			return p
		}
	}
	t.Fatal("no free port")
	return 0
}

// WaitFor polls cond every 10ms until it holds or d passes.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
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

// StartCluster starts three cluster-enabled redis-servers on loopback, joins them as a
// Redis Cluster of three masters and waits until every node reports cluster_state:ok.
func StartCluster(t testing.TB) []*Server {
	t.Helper()
	Require(t)
	nodes := make([]*Server, 3)
	addrs := make([]string, 3)
	for i := range nodes {
		r := &Server{t: t, port: FreePort(t, true), dir: t.TempDir()}
		r.extra = []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"}
		r.Start()
		t.Cleanup(r.Stop)
		nodes[i], addrs[i] = r, r.Addr()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", append(append([]string{"--cluster", "create"}, addrs...),
		"--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	require.NoError(t, err, "redis-cli --cluster create: %s", out)
	for _, n := range nodes {
		WaitFor(t, 15*time.Second, "cluster_state:ok on "+n.Addr(), func() bool {
			info, err := n.Do("CLUSTER", "INFO")
			return err == nil && strings.Contains(info, "cluster_state:ok")
		})
	}
	return nodes
}

// Port is the server's port.
func (r *Server) Port() int { return r.port }
