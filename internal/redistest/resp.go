package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// writeCommand writes args to w as one RESP command.
func writeCommand(w io.Writer, args []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Strings sends one command as Do does and returns its whole reply as strings: an array's
// elements in order (nested arrays flattened, a nil element as ""), or the one value of any
// other reply.
func (r *Server) Strings(args ...string) ([]string, error) {
	c, err := r.dial()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := writeCommand(c, args); err != nil {
		return nil, err
	}
	return readStrings(bufio.NewReader(c))
}

// readStrings reads one RESP2 reply from rd, flattened as Strings returns it.
func readStrings(rd *bufio.Reader) ([]string, error) {
	line, err := rd.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return nil, fmt.Errorf("empty reply")
	}
	switch line[0] {
	case '-':
		return nil, fmt.Errorf("redis: %s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return []string{""}, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return nil, err
		}
		return []string{string(buf[:n])}, nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return nil, err
		}
		var all []string
		for range max(n, 0) {
			v, err := readStrings(rd)
			if err != nil {
				return nil, err
			}
			all = append(all, v...)
		}
		return all, nil
	}
	return []string{line[1:]}, nil
}

// Subscription is a connection subscribed to one channel of a server.
type Subscription struct {
	c    net.Conn
	rd   *bufio.Reader
	Msgs chan string // the payload of each message, in order; closed when the connection ends
}

// Subscribe subscribes to channel on the server and returns once the server confirmed it; the
// subscription ends with the test.
func (r *Server) Subscribe(channel string) *Subscription {
	r.t.Helper()
	c, err := r.dial()
	if err != nil {
		r.t.Fatalf("subscribing to %s on %s: %v", channel, r.Addr(), err)
	}
	s := &Subscription{c: c, rd: bufio.NewReader(c), Msgs: make(chan string, 64)}
	r.t.Cleanup(func() { c.Close() })
	if err := writeCommand(c, []string{"SUBSCRIBE", channel}); err != nil {
		r.t.Fatalf("subscribing to %s on %s: %v", channel, r.Addr(), err)
	}
	if v, err := readStrings(s.rd); err != nil || len(v) == 0 || v[0] != "subscribe" {
		r.t.Fatalf("subscribing to %s on %s: %q, %v", channel, r.Addr(), v, err)
	}
	_ = c.SetDeadline(time.Time{}) // a subscription waits as long as its test
	go s.read()
	return s
}

func (s *Subscription) read() {
	defer close(s.Msgs)
	for {
		v, err := readStrings(s.rd)
		if err != nil {
			return
		}
		if len(v) == 3 && v[0] == "message" {
			s.Msgs <- v[2]
		}
	}
}

// DoAll sends cmds in order over one fresh connection, as Do sends one, and returns their
// replies: a command that changes what a new connection needs (CONFIG SET of the TLS files)
// does not lock the next ones out.
func (r *Server) DoAll(cmds ...[]string) ([]string, error) {
	c, err := r.dial()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var out []string
	for _, cmd := range cmds {
		s, err := do(c, cmd...)
		if err != nil {
			return out, fmt.Errorf("%s: %w", cmd[0], err)
		}
		out = append(out, s)
	}
	return out, nil
}
