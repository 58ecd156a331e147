package redisstore

import (
	"context"
	"math/bits"
	"math/rand/v2"
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

// movedCounter is Lua that counts in MOVED the bytes the calls of counted move: what GET and
// GETRANGE return, what SET and SETRANGE are given. A script counts by calling counted for
// redis.call.
const movedCounter = `local MOVED = 0
local function counted(cmd, ...)
  local args = {...}
  local r = redis.call(cmd, ...)
  if cmd == 'SETRANGE' then MOVED = MOVED + #args[3] end
  if cmd == 'SET' then MOVED = MOVED + #args[2] end
  if type(r) == 'string' and (cmd == 'GET' or cmd == 'GETRANGE') then MOVED = MOVED + #r end
  return r
end
`

// countedUndoSource returns the sliding log's undo script with every Redis call counted: it
// returns {units given back, bytes moved}.
func countedUndoSource(t *testing.T) string {
	t.Helper()
	src, err := undoScript(algorithms.SlidingLog)
	require.NoError(t, err)
	require.Positive(t, strings.Count(src, "redis.call("))
	return movedCounter + "local function body()\n" + strings.ReplaceAll(src, "redis.call(", "counted(") + "\nend\nlocal given = body()\nreturn {given, MOVED}\n"
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
// four blocks read and rewritten in place, the blocks' offsets (and block 0's again) read and
// written once, and the sweep's step (lua/sliding_log_undo.lua: the three blocks of the 33 runs
// before the gap and two pairs of their offsets read, at most 32 runs and the header written).
// Only the offsets' 8 bytes a block of 32 slots grow with the log.
func undoBytes(n, cap int) int {
	block := 32 * logEntry
	return logHead + 8*(2*bits.Len(uint(n))+2) + 2*block + 2*4*block + 2*8*((cap+31)/32+1) +
		3*block + 2*16 + block + logHead
}

// An undo on a sliding log of 1,500 runs reads and writes a bounded number of bytes: whichever
// run it gives back from (the newest, which an undo mostly names, the oldest, one in the middle),
// at most undoBytes and less than a sixth of the ring's 32 KB (the undo before read the ring
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
		assert.Less(t, moved, int64(ring/6), c.name)
		t.Logf("an undo of %s of %d: %d bytes moved (the ring: %d)", c.name, runs, moved, ring)
		given, moved = countedUndo(t, s, src, req)
		assert.Zero(t, given, "%s: a repeated undo gives nothing back", c.name)
		assert.LessOrEqual(t, moved, int64(undoBytes(runs, 2048)), c.name)
	}

	_, err = rs.Do("CONFIG", "RESETSTAT")
	require.NoError(t, err)
	given, err := s.Settle(context.Background(), service.SettleRequest{Key: "big", Limit: bigLog, Delta: -1, At: time.UnixMicro(logStart + runs/3), Now: now, Undo: true})
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

// movedBatch runs reqs as one batch script whose Redis calls are counted (movedCounter) and
// returns the decisions made and the bytes the calls moved.
func movedBatch(t *testing.T, s *Store, reqs []service.Request) (int, int64) {
	t.Helper()
	src, err := decideAllScript()
	require.NoError(t, err)
	const ret = "\nreturn out\n"
	require.Equal(t, 1, strings.Count(src, ret))
	src = movedCounter + strings.Replace(strings.ReplaceAll(src, "redis.call(", "counted("), ret, "\nout[#out + 1] = MOVED\nreturn out\n", 1)
	keys, args := s.batchCall(reqs)
	rows, err := rueidis.NewLuaScript(src).Exec(context.Background(), s.client, keys, args).ToArray()
	require.NoError(t, err)
	n, err := rows[len(rows)-1].AsInt64()
	require.NoError(t, err)
	return len(rows) - 1, n
}

// Issue 22's service review, finding 1: an undo in the middle of a full sliding log (quota runs
// of one unit) left a run with no units there, and the next decision, finding the ring full,
// grew it by one slot: it applied the offsets by rewriting the whole ring (a GETRANGE and a SET
// of it: 162 KB each at quota 10^4) and moved a part of it; every further undo and decision did so again,
// and the ring grew past the quota without bound. Now each undo that empties a run sweeps a
// block of runs (lua/sliding_log_undo.lua) and the ring may hold twice the quota's slots: over
// three quotas of (undo, decision) cycles on a full log, whichever run the undos empty, every
// decision runs at most commandsPerDecision commands of at most a block each, never a SET, and
// the ring stays within twice the quota's slots. Every decision is admitted: an undo gave its
// unit back.
func TestDecisionsAfterUndosInAFullSlidingLogNeverRewriteTheRing(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	s := newStore(t, rs.Addr())
	ctx := context.Background()
	middle := func(held int) int { return held / 2 }
	r := rand.New(rand.NewPCG(20261203, 1))
	cases := []struct {
		name          string
		quota, cycles int
		which         func(held int) int // the index of the run to empty among the held ones
	}{
		{"an undo of the run in the middle", 100, 300, middle},
		{"an undo of the newest run", 100, 300, func(held int) int { return held - 1 }},
		{"an undo of the second oldest run", 100, 300, func(int) int { return 1 }},
		{"an undo of a random run", 100, 300, func(held int) int { return r.IntN(held) }},
		{"an undo of a random run of a log whose quota is just below a power of two", 1000, 2000, func(held int) int { return r.IntN(held) }},
		{"an undo of the run in the middle of a log of the largest quota", int(algorithms.MaxLogQuota), 40, middle},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			quota, cycles := c.quota, c.cycles
			l := algorithms.Limit{Kind: algorithms.SlidingLog, Quota: int64(quota), Window: time.Hour}
			key := "full " + c.name
			now := time.Now().Add(-time.Minute).UnixMicro()
			var held []int64 // the times of the runs that hold a unit, oldest first
			for range quota {
				d, err := s.Decide(ctx, service.Request{Key: key, Limit: l, Cost: 1, Now: time.UnixMicro(now)})
				require.NoError(t, err)
				require.True(t, d.Allowed)
				held = append(held, now)
				now += 10
			}
			heavy, maxLight, maxMoved := 0, 0, int64(0)
			for i := range cycles {
				j := c.which(len(held))
				given, err := s.Settle(ctx, service.SettleRequest{Key: key, Limit: l, Delta: -1, At: time.UnixMicro(held[j]), Now: time.UnixMicro(now), Undo: true})
				require.NoError(t, err)
				require.Equal(t, int64(1), given, "cycle %d: the undo gives its unit back", i)
				held = append(held[:j], held[j+1:]...)
				now += 10
				_, err = rs.Do("CONFIG", "RESETSTAT")
				require.NoError(t, err)
				decided, moved := movedBatch(t, s, []service.Request{{Key: key, Limit: l, Cost: 1, Now: time.UnixMicro(now)}})
				require.Equal(t, 1, decided, "cycle %d: the decision is admitted", i)
				held = append(held, now)
				now += 10
				calls := commandCalls(t, rs)
				onLog := calls["get"] + calls["set"] + calls["getrange"] + calls["setrange"] + calls["strlen"]
				if calls["set"] > 0 || onLog > commandsPerDecision {
					heavy++
					t.Logf("cycle %d: %d commands on the log, %d SET, %d bytes moved", i, onLog, calls["set"], moved)
				}
				maxLight, maxMoved = max(maxLight, onLog), max(maxMoved, moved)
			}
			t.Logf("%d cycles on a full log of quota %d: %d decisions rewrote or grew the ring; at most %d commands, %d bytes a decision",
				cycles, quota, heavy, maxLight, maxMoved)
			assert.Zero(t, heavy, "decisions that rewrote or grew the ring, or ran more than %d commands", commandsPerDecision)
			assert.LessOrEqual(t, maxMoved, int64(logHead+4*32*logEntry+2*16+2*logEntry+logHead), "the header, four blocks, offsets, a run and the header written")
			n, err := rs.Do("STRLEN", s.stateKey(l.Kind, key))
			require.NoError(t, err)
			size, err := strconv.Atoi(n)
			require.NoError(t, err)
			assert.LessOrEqual(t, size, ringBytes(2*quota)+8*((2*quota+31)/32+1), "never past twice the quota's slots")
		})
	}
}
