package service

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

// redisServer is a redis-server process started by a test on a free 127.0.0.1 port, with no
// persistence, killed when the test ends.
type redisServer struct {
	t     testing.TB
	port  int
	dir   string
	extra []string
	cmd   *exec.Cmd
	exit  chan struct{}
}

// requireRedisServer fails the test when redis-server is not installed: the Redis tests are
// part of the suite and must not be skipped silently.
func requireRedisServer(t testing.TB) {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found in PATH: install Redis (e.g. apt-get install redis-server) to run the service tests", bin)
		}
	}
}

// startRedis starts a redis-server with extra arguments and waits until it answers PING.
func startRedis(t testing.TB, extra ...string) *redisServer {
	t.Helper()
	requireRedisServer(t)
	r := &redisServer{t: t, port: freePort(t, false), dir: t.TempDir(), extra: extra}
	r.start()
	t.Cleanup(r.stop)
	return r
}

func (r *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// start (re)starts the process on r's port.
func (r *redisServer) start() {
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
		if out, err := r.do("PING"); err == nil && out == "PONG" {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("redis-server on %s did not answer PING within 10s", r.addr())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop kills the process and waits for it to exit.
func (r *redisServer) stop() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGCONT) // in case a test left it paused
	_ = r.cmd.Process.Kill()
	<-r.exit
	r.cmd = nil
}

func (r *redisServer) signal(sig syscall.Signal) {
	r.t.Helper()
	require.NoError(r.t, r.cmd.Process.Signal(sig))
}

// do sends one inline command over a fresh connection and returns the first reply line,
// without its type prefix ("+OK" -> "OK", ":3" -> "3", bulk strings read whole).
func (r *redisServer) do(args ...string) (string, error) {
	return redisDo(r.addr(), args...)
}

func redisDo(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
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

// freePort returns a port on 127.0.0.1 that was free a moment ago. With bus, port+10000 (the
// Redis Cluster bus port) was free too.
func freePort(t testing.TB, bus bool) int {
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

// newRedisStore returns a RedisStore on addrs, closed when the test ends.
func newRedisStore(t testing.TB, addrs ...string) *RedisStore {
	t.Helper()
	s, err := NewRedisStore(RedisConfig{Addrs: addrs})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// waitFor polls cond every 10ms until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
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
