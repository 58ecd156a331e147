package redisstore

import (
	"context"
	"math/bits"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/service"
)

// The bounds of an undo's work on Redis (issue 22, ring22: an undo of a sliding-log admission
// read the whole log with GET, rewrote it whole as text with SET, and the next decision converted
// the text back: O(runs) bytes, each time, for a client whose big log triggers undos). The work is
// counted, never timed: the bytes the script's Redis calls move (what GETRANGE and GET return,
// what SETRANGE and SET are given) and the commands Redis ran (INFO commandstats).

// countedUndoSource returns the sliding log's undo script with every Redis call counted: it
// returns {units given back, bytes moved}.
func countedUndoSource(t *testing.T) string {
	t.Helper()
	src, err := undoScript(algorithms.SlidingLog)
	require.NoError(t, err)
	const counter = `local MOVED = 0
local function counted(cmd, ...)
  local args = {...}
  local r = redis.call(cmd, ...)
  if cmd == 'SETRANGE' then MOVED = MOVED + #args[3] end
  if cmd == 'SET' then MOVED = MOVED + #args[2] end
  if type(r) == 'string' and (cmd == 'GET' or cmd == 'GETRANGE') then MOVED = MOVED + #r end
  return r
end
local function body()
`
	require.Positive(t, strings.Count(src, "redis.call("))
	return counter + strings.ReplaceAll(src, "redis.call(", "counted(") + "\nend\nlocal given = body()\nreturn {given, MOVED}\n"
}

// countedUndo runs req's undo through countedUndoSource and returns the units it gave back and
// the bytes its Redis calls moved.
func countedUndo(t *testing.T, s *Store, src string, req service.SettleRequest) (int64, int64) {
	t.Helper()
	args := scriptArgs(make([]string, 0, scriptArgCount+1), req.Limit, req.Delta, pexpireMs(req.Limit.TTL()), req.Now, "0")
	args = append(args, strconv.FormatInt(req.At.UnixMicro(), 10))
	got, err := rueidis.NewLuaScript(src).Exec(context.Background(), s.client, []string{s.stateKey(req.Limit.Kind, req.Key)}, args).AsIntSlice()
	require.NoError(t, err)
	require.Len(t, got, 2)
	return got[0], got[1]
}

// undoBytes bounds the bytes an undo of a sliding log of n runs in cap slots moves: the header,
// the search's runs read alone (8 bytes, at most two probes a bit of n) and its last two blocks,
// four blocks read and rewritten in place, and the blocks' offsets read and written once. Only the
// offsets' 8 bytes a block of 32 slots grow with the log.
func undoBytes(n, cap int) int {
	block := 32 * logEntry
	return logHead + 8*(2*bits.Len(uint(n))+2) + 2*block + 2*4*block + 2*8*((cap+31)/32)
}

// An undo on a sliding log of 1,500 runs reads and writes a bounded number of bytes: whichever
// run it gives back from (the newest, which an undo mostly names, the oldest, one in the middle),
// at most undoBytes and less than an eighth of the ring's 32 KB (the undo before read the ring
// whole and wrote it back whole as text); a repeated undo gives nothing back; it runs a logarithm
// of GETRANGEs and a few SETRANGEs, never GET or SET of the whole log; and a decision after it
// still reads a logarithm of the log.
func TestAnUndoOnASlidingLogOf1500RunsReadsAndWritesABoundedNumberOfBytes(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	s := newStore(t, rs.Addr())
	const runs = 1500
	logStart := time.Now().Add(-time.Minute).UnixMicro()
	fillLog(t, s, "big", runs, logStart)
	ring := ringBytes(2048)
	n, err := rs.Do("STRLEN", s.stateKey(bigLog.Kind, "big"))
	require.NoError(t, err)
	require.Equal(t, strconv.Itoa(ring), n, "1,500 runs fill a ring of 2,048 slots")
	src := countedUndoSource(t)
	now := time.UnixMicro(logStart + runs + 10)
	for _, c := range []struct {
		name string
		run  int
	}{{"the newest run", runs - 1}, {"a run in the middle", runs / 2}, {"the oldest run", 0}, {"a run in the first block", 7}} {
		req := service.SettleRequest{Key: "big", Limit: bigLog, Delta: -1, At: time.UnixMicro(logStart + int64(c.run)), Now: now, Undo: true}
		given, moved := countedUndo(t, s, src, req)
		assert.Equal(t, int64(1), given, c.name)
		assert.LessOrEqual(t, moved, int64(undoBytes(runs, 2048)), c.name)
		assert.Less(t, moved, int64(ring/8), c.name)
		t.Logf("an undo of %s of %d: %d bytes moved (the ring: %d)", c.name, runs, moved, ring)
		given, moved = countedUndo(t, s, src, req)
		assert.Zero(t, given, "%s: a repeated undo gives nothing back", c.name)
		assert.LessOrEqual(t, moved, int64(undoBytes(runs, 2048)), c.name)
	}

	_, err = rs.Do("CONFIG", "RESETSTAT")
	require.NoError(t, err)
	given, err := s.GiveBack(context.Background(), service.SettleRequest{Key: "big", Limit: bigLog, Delta: -1, At: time.UnixMicro(logStart + runs/3), Now: now, Undo: true})
	require.NoError(t, err)
	assert.Equal(t, int64(1), given)
	calls := commandCalls(t, rs)
	t.Logf("an undo in the middle of %d runs: %v", runs, calls)
	assert.Zero(t, calls["get"]+calls["set"], "never the whole log")
	// the header, the probes, two blocks, four blocks edited (read and written), the offsets (read,
	// written, and extended the first time)
	assert.LessOrEqual(t, calls["getrange"]+calls["setrange"], 1+2*bits.Len(uint(runs))+2+2+2*4+3)

	reqs := []service.Request{{Key: "big", Limit: bigLog, Cost: 1, Now: now}}
	decided, touched := countingBatch(t, s, reqs)
	assert.Equal(t, 1, decided)
	assert.LessOrEqual(t, touched, entriesPerDecision(runs+1), "a decision after undos still reads a logarithm of the log")
	_, err = rs.Do("CONFIG", "RESETSTAT")
	require.NoError(t, err)
	_, err = s.Decide(context.Background(), service.Request{Key: "big", Limit: bigLog, Cost: 1, Now: now.Add(time.Microsecond)})
	require.NoError(t, err)
	calls = commandCalls(t, rs)
	t.Logf("a decision on the log after the undos: %v", calls)
	assert.LessOrEqual(t, calls["getrange"]+calls["setrange"]+calls["strlen"], commandsPerDecision+4, "and a few commands: an offset read with each of its blocks")
}
