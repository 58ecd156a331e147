package redistest

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hold listens on 127.0.0.1:port until the test ends, as another process would.
func hold(t *testing.T, port int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
}

func TestAServerIsUpWhenItsOwnLogSaysSoAndAnswersOnItsPort(t *testing.T) {
	r := Start(t)
	assert.Contains(t, r.Log(), readyLine)
	out, err := r.Do("PING")
	require.NoError(t, err)
	assert.Equal(t, "PONG", out)
	info, err := r.Do("INFO", "server")
	require.NoError(t, err)
	assert.Contains(t, info, "process_id:"+strconv.Itoa(r.cmd.Process.Pid), "the server on the port is the one this test started")
}

func TestAServerWhosePortWasTakenReportsABindFailureQuotingItsLog(t *testing.T) {
	Require(t)
	taken := FreePort(t, false)
	hold(t, taken)
	r := &Server{t: t, port: taken, dir: t.TempDir()}
	err := r.launch()
	require.Error(t, err)
	assert.True(t, isBindFailure(err), "%v", err)
	assert.Contains(t, err.Error(), "Address already in use", "the message quotes redis-server's own words")
	assert.Contains(t, err.Error(), "127.0.0.1:"+strconv.Itoa(taken))
}

func TestAClusterNodeWhoseBusPortWasTakenReportsABindFailure(t *testing.T) {
	Require(t)
	port := FreePort(t, true)
	hold(t, port+10000)
	r := &Server{t: t, port: port, bus: true, dir: t.TempDir(),
		extra: []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"}}
	err := r.launch()
	require.Error(t, err)
	assert.True(t, isBindFailure(err), "%v", err)
	assert.Contains(t, err.Error(), "(cluster)")
}

func TestAServerThatRefusesItsArgumentsIsNotABindFailureAndItsLogSaysWhy(t *testing.T) {
	Require(t)
	r := &Server{t: t, port: FreePort(t, false), dir: t.TempDir(), extra: []string{"--no-such-directive", "x"}}
	err := r.launch()
	require.Error(t, err)
	assert.False(t, isBindFailure(err))
	assert.Contains(t, err.Error(), "Bad directive")
}

func TestFreePortDrawsBelowTheEphemeralRangeWithRoomForTheBusPort(t *testing.T) {
	start := ephemeralStart()
	for range 50 {
		p := FreePort(t, false)
		assert.GreaterOrEqual(t, p, 10000)
		b := FreePort(t, true)
		if start >= 21000 { // the default range and most others
			assert.Less(t, p, start)
			assert.Less(t, b+10000, start, "the bus port is not an ephemeral port either")
		}
		assert.LessOrEqual(t, b+10000, 65535)
	}
}

func TestAServerRestartedOnItsPortKeepsItsAddress(t *testing.T) {
	r := Start(t)
	addr := r.Addr()
	_, err := r.Do("SET", "k", "v")
	require.NoError(t, err)
	r.Stop()
	_, err = r.Do("PING")
	require.Error(t, err, "stopped")
	r.Start()
	assert.Equal(t, addr, r.Addr())
	v, err := r.Do("GET", "k")
	require.NoError(t, err)
	assert.Empty(t, v, "no persistence: the restart forgot the key")
	assert.Equal(t, 1, strings.Count(r.Log(), readyLine), "the log is the restarted process's")
}

func TestAClusterOfThreeMastersServesEverySlot(t *testing.T) {
	nodes := StartCluster(t)
	require.Len(t, nodes, 3)
	for _, n := range nodes {
		info, err := n.Do("CLUSTER", "INFO")
		require.NoError(t, err)
		assert.Contains(t, info, "cluster_slots_assigned:16384")
	}
}

func TestAServerWhosePortIsTakenBeforeItBindsStartsOnAnother(t *testing.T) {
	taken := FreePort(t, false)
	hold(t, taken)
	var handed []int
	freePort = func(t testing.TB, bus bool) int {
		p := taken
		if len(handed) > 0 {
			p = FreePort(t, bus)
		}
		handed = append(handed, p)
		return p
	}
	t.Cleanup(func() { freePort = FreePort })
	r := Start(t)
	require.Len(t, handed, 2, "the taken port, then another")
	assert.Equal(t, handed[1], r.Port())
	out, err := r.Do("PING")
	require.NoError(t, err)
	assert.Equal(t, "PONG", out)
}
