package redistest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// MasterName is the name the sentinels of StartSentinel monitor the master by.
const MasterName = "meshlimit"

// DownAfter is the sentinels' down-after-milliseconds: how long the master may not answer
// before a sentinel holds it down. Short, so that a test's failover takes seconds, and long
// enough that a loaded machine does not stall a master that long.
const DownAfter = 2 * time.Second

// SentinelConfig configures StartSentinel. The zero value is plain TCP without passwords.
type SentinelConfig struct {
	// Password is the master's and the replica's requirepass, or with User the password of
	// that ACL user (the default user is then off); the replica (masteruser, masterauth) and the
	// sentinels (auth-user, auth-pass) authenticate with them.
	User, Password string
	// SentinelPassword is the sentinels' requirepass, or with SentinelUser the password of that
	// ACL user; the sentinels authenticate to each other with them (sentinel-user, sentinel-pass).
	SentinelUser, SentinelPassword string
	// TLS, when not nil, makes every port a TLS port (master, replica, sentinels), and
	// replication and the sentinels' own connections use TLS.
	TLS *PKI
	// NodeArgs are more arguments of the master and the replica (min-replicas-to-write, say).
	NodeArgs []string
}

// Sentinels is a master, one replica and three sentinels that monitor them as MasterName with
// a quorum of 2, all on 127.0.0.1.
type Sentinels struct {
	t         testing.TB
	Nodes     []*Server // the master and the replica as started; a failover swaps their roles
	Sentinels []*Server
}

// StartSentinel starts a master, its replica and three sentinels, and returns once the replica
// is in sync and every sentinel knows the replica and the two other sentinels (SENTINEL
// CKQUORUM): from then on SENTINEL FAILOVER, or the master's death, promotes the replica.
func StartSentinel(t testing.TB, cfg SentinelConfig) *Sentinels {
	t.Helper()
	Require(t)
	if _, err := exec.LookPath("redis-sentinel"); err != nil {
		t.Fatalf("redis-sentinel not found in PATH: install Redis (e.g. apt-get install redis-sentinel) to run the Sentinel tests")
	}
	s := &Sentinels{t: t}
	t.Cleanup(s.logOnFailure)
	master := s.startNode(cfg)
	replica := s.startNode(cfg, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port()))
	s.Nodes = []*Server{master, replica}
	WaitFor(t, clusterPatience, "the replica in sync", func() bool {
		info, err := replica.Do("INFO", "replication")
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	for range 3 {
		s.Sentinels = append(s.Sentinels, s.startSentinel(cfg, master.Port()))
	}
	for _, sn := range s.Sentinels {
		WaitFor(t, clusterPatience, "sentinel "+sn.Addr()+" ready to fail over", func() bool {
			ok, err := sn.Do("SENTINEL", "CKQUORUM", MasterName)
			return err == nil && strings.HasPrefix(ok, "OK 3 usable") && s.knowsReplica(sn, replica)
		})
	}
	return s
}

// logOnFailure logs what every process of the set logged, when the test failed.
func (s *Sentinels) logOnFailure() {
	if !s.t.Failed() {
		return
	}
	for i, n := range s.Nodes {
		s.t.Logf("node %d (%s), started as the %s:\n%s", i, n.Addr(), []string{"master", "replica"}[i], n.Log())
	}
	for _, sn := range s.Sentinels {
		s.t.Logf("sentinel %s:\n%s", sn.Addr(), sn.Log())
	}
}

// startNode starts a master or, with --replicaof, a replica.
func (s *Sentinels) startNode(cfg SentinelConfig, extra ...string) *Server {
	r := &Server{t: s.t, dir: s.t.TempDir(), user: cfg.User, pass: cfg.Password}
	if cfg.TLS != nil {
		r.tls = &TLS{PKI: cfg.TLS}
	}
	switch {
	case cfg.User != "":
		r.extra = []string{"--user", cfg.User, "on", ">" + cfg.Password, "~*", "&*", "+@all", "--user", "default", "off",
			"--masteruser", cfg.User, "--masterauth", cfg.Password}
	case cfg.Password != "":
		r.extra = []string{"--requirepass", cfg.Password, "--masterauth", cfg.Password}
	}
	r.extra = append(append(r.extra, cfg.NodeArgs...), extra...)
	r.startOnFreePort()
	s.t.Cleanup(r.Stop)
	return r
}

// startSentinel starts a sentinel that monitors the master on masterPort.
func (s *Sentinels) startSentinel(cfg SentinelConfig, masterPort int) *Server {
	r := &Server{t: s.t, dir: s.t.TempDir(), bin: "redis-sentinel", ready: "+monitor master",
		user: cfg.SentinelUser, pass: cfg.SentinelPassword}
	if cfg.TLS != nil {
		r.tls = &TLS{PKI: cfg.TLS}
	}
	lines := []string{
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2", MasterName, masterPort),
		fmt.Sprintf("sentinel down-after-milliseconds %s %d", MasterName, DownAfter.Milliseconds()),
		fmt.Sprintf("sentinel failover-timeout %s 10000", MasterName),
		fmt.Sprintf("sentinel parallel-syncs %s 1", MasterName),
	}
	if cfg.Password != "" {
		lines = append(lines, fmt.Sprintf("sentinel auth-pass %s %s", MasterName, cfg.Password))
	}
	if cfg.User != "" {
		lines = append(lines, fmt.Sprintf("sentinel auth-user %s %s", MasterName, cfg.User))
	}
	switch {
	case cfg.SentinelUser != "":
		lines = append(lines, fmt.Sprintf("user %s on >%s ~* &* +@all", cfg.SentinelUser, cfg.SentinelPassword), "user default off",
			"sentinel sentinel-user "+cfg.SentinelUser, "sentinel sentinel-pass "+cfg.SentinelPassword)
	case cfg.SentinelPassword != "":
		lines = append(lines, "requirepass "+cfg.SentinelPassword, "sentinel sentinel-pass "+cfg.SentinelPassword)
	}
	r.conf = filepath.Join(r.dir, "sentinel.conf")
	require.NoError(s.t, os.WriteFile(r.conf, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	r.startOnFreePort()
	s.t.Cleanup(r.Stop)
	return r
}

// knowsReplica reports whether sentinel sn lists replica as a replica in good standing.
func (s *Sentinels) knowsReplica(sn, replica *Server) bool {
	v, err := sn.Strings("SENTINEL", "REPLICAS", MasterName)
	if err != nil {
		return false
	}
	return slices.Contains(v, replica.Addr()) && fieldAfter(v, "flags") == "slave"
}

// fieldAfter returns the value after the first key in a flattened reply of fields and values.
func fieldAfter(v []string, key string) string {
	for i := 0; i+1 < len(v); i += 2 {
		if v[i] == key {
			return v[i+1]
		}
	}
	return ""
}

// Addrs are the sentinels' addresses.
func (s *Sentinels) Addrs() []string {
	addrs := make([]string, len(s.Sentinels))
	for i, sn := range s.Sentinels {
		addrs[i] = sn.Addr()
	}
	return addrs
}

// MasterAddr is the master's address as the first sentinel that answers names it.
func (s *Sentinels) MasterAddr() (string, error) {
	var err error
	for _, sn := range s.Sentinels {
		var v []string
		if v, err = sn.Strings("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MasterName); err == nil && len(v) == 2 {
			return net.JoinHostPort(v[0], v[1]), nil
		}
	}
	return "", fmt.Errorf("no sentinel names the master: %v", err)
}

// Master is the node the sentinels name the master.
func (s *Sentinels) Master() *Server {
	s.t.Helper()
	addr, err := s.MasterAddr()
	require.NoError(s.t, err)
	for _, n := range s.Nodes {
		if n.Addr() == addr {
			return n
		}
	}
	s.t.Fatalf("the sentinels name %s the master, which is none of the nodes", addr)
	return nil
}

// Replica is the node that is not the master.
func (s *Sentinels) Replica() *Server {
	m := s.Master()
	for _, n := range s.Nodes {
		if n != m {
			return n
		}
	}
	return nil
}

// WatchSwitch subscribes to +switch-master on the first sentinel: each failover that ends sends
// the new master's address.
func (s *Sentinels) WatchSwitch() <-chan string {
	sub := s.Sentinels[0].Subscribe("+switch-master")
	out := make(chan string, 4)
	go func() {
		defer close(out)
		for msg := range sub.Msgs { // "<name> <old ip> <old port> <new ip> <new port>"
			if f := strings.Fields(msg); len(f) == 5 && f[0] == MasterName {
				out <- net.JoinHostPort(f[3], f[4])
			}
		}
	}()
	return out
}

// Failover asks a sentinel to fail the master over to the replica (SENTINEL FAILOVER), without
// waiting for it to end: WatchSwitch tells when it does.
func (s *Sentinels) Failover() {
	s.t.Helper()
	out, err := s.Sentinels[0].Do("SENTINEL", "FAILOVER", MasterName)
	require.NoError(s.t, err)
	require.Equal(s.t, "OK", out)
}
