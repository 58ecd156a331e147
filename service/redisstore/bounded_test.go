package redisstore

import (
	"context"
	"fmt"
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

// The bounds of a check's work on Redis (review: one /v1/check of 64 descriptors, each on a
// sliding log of ~1,500 entries, held Redis 373–527 ms in one script, every entry of every log
// parsed and written back by interpreted Lua). The work is counted, never timed: the entries of a
// log the scripts read (through lua/sliding_log_index.lua's touch, counted by countingBatch) and
// the commands Redis ran (INFO commandstats, calls only).

// bigLog is a sliding log limit whose log may hold the largest number of entries a limit allows.
var bigLog = algorithms.Limit{Kind: algorithms.SlidingLog, Quota: algorithms.MaxLogQuota, Window: time.Hour}

// entriesPerDecision bounds the entries of a log of n runs that one decision reads: four
// binary searches of at most bits.Len(n) probes each, and at most eight reads besides.
func entriesPerDecision(n int) int { return 4*bits.Len(uint(n)) + 8 }

// commandsPerDecision bounds the commands a sliding-log decision of a check that neither grows
// the ring nor converts a text log runs besides its PEXPIRE: the header's GETRANGE and STRLEN,
// a GETRANGE of a block for each of the first four runs its searches and reads land in, and
// the SETRANGEs of a run and the header.
const commandsPerDecision = 8

// fillLog gives key a sliding log of n runs of one unit, one µs apart from logStart (µs), through
// the store's own decisions (in batches, one script each).
func fillLog(t *testing.T, s *Store, key string, n int, logStart int64) {
	t.Helper()
	ctx := context.Background()
	for done := 0; done < n; {
		reqs := make([]service.Request, min(64, n-done))
		for i := range reqs {
			reqs[i] = service.Request{Key: key, Limit: bigLog, Cost: 1, Now: time.UnixMicro(logStart + int64(done+i))}
		}
		got, err := s.DecideAll(ctx, reqs, make([]algorithms.Decision, len(reqs)))
		require.NoError(t, err)
		require.Equal(t, len(reqs), got, "every unit of the fill is admitted")
		done += len(reqs)
	}
}

// bigLogs makes keys descriptors' logs of n runs each, begun a minute ago: the first filled, the
// others its copies. The requests it returns are at the end of the logs.
func bigLogs(t *testing.T, rs *redistest.Server, s *Store, keys, n int) ([]service.Request, int64) {
	t.Helper()
	logStart := time.Now().Add(-time.Minute).UnixMicro()
	fillLog(t, s, "log 0", n, logStart)
	reqs := make([]service.Request, keys)
	for i := range reqs {
		key := fmt.Sprintf("log %d", i)
		if i > 0 {
			_, err := rs.Do("COPY", s.stateKey(bigLog.Kind, "log 0"), s.stateKey(bigLog.Kind, key))
			require.NoError(t, err)
		}
		reqs[i] = service.Request{Key: key, Limit: bigLog, Cost: 1, Now: time.UnixMicro(logStart + int64(n) + 1000)}
	}
	return reqs, logStart
}

// countingBatch runs the store's batch script for reqs with every log entry it reads counted;
// it returns the decisions made and the count.
func countingBatch(t *testing.T, s *Store, reqs []service.Request) (int, int) {
	t.Helper()
	src, err := decideAllScript()
	require.NoError(t, err)
	const touch, ret = "local function touch() end", "\nreturn out\n"
	require.Equal(t, 1, strings.Count(src, touch), "the sliding log reads its entries through touch")
	require.Equal(t, 1, strings.Count(src, ret))
	src = strings.Replace(src, touch, "local function touch() WORK[1] = WORK[1] + 1 end", 1)
	src = "local WORK = {0}\n" + strings.Replace(src, ret, "\nout[#out + 1] = WORK[1]\nreturn out\n", 1)
	keys, args := s.batchCall(reqs)
	rows, err := rueidis.NewLuaScript(src).Exec(context.Background(), s.client, keys, args).ToArray()
	require.NoError(t, err)
	n, err := rows[len(rows)-1].AsInt64()
	require.NoError(t, err)
	return len(rows) - 1, int(n)
}

// commandCalls returns the calls of each command since the last CONFIG RESETSTAT.
func commandCalls(t *testing.T, rs *redistest.Server) map[string]int {
	t.Helper()
	info, err := rs.Do("INFO", "commandstats")
	require.NoError(t, err)
	calls := map[string]int{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		require.NoError(t, err)
		calls[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return calls
}

// One check of 64 descriptors, each on a sliding log of 1,500 runs (the review's attack) or of
// the most a limit allows, reads a logarithm of each log, not its entries: at most
// entriesPerDecision(n) runs each (the scripts parsed and rewrote 96,000 runs for the review's
// check before, every run of every log, with one GET, one SET and one TIME per log). The whole
// check is one script that reads Redis TIME once and never a whole log: a few commands per log,
// none moving more than a block of 32 runs.
func TestOneCheckOfSixtyFourDescriptorsOnBigSlidingLogsReadsALogarithmOfEachLog(t *testing.T) {
	t.Parallel()
	for _, runs := range []int{1500, int(algorithms.MaxLogQuota) - 2} {
		t.Run(strconv.Itoa(runs), func(t *testing.T) {
			t.Parallel()
			rs := redistest.Start(t)
			s := newStore(t, rs.Addr())
			reqs, logStart := bigLogs(t, rs, s, 64, runs)

			decided, touched := countingBatch(t, s, reqs)
			assert.Equal(t, 64, decided, "every descriptor is admitted: its log has room")
			assert.LessOrEqual(t, touched, 64*entriesPerDecision(runs+1))
			t.Logf("%d runs per log: %d entries read for 64 decisions (%d per decision at most)", runs, touched, entriesPerDecision(runs+1))

			for i := range reqs {
				reqs[i].Now = time.Time{} // Redis TIME, as in production: within the logs' hour
			}
			_, err := rs.Do("CONFIG", "RESETSTAT")
			require.NoError(t, err)
			got, err := s.DecideAll(context.Background(), reqs, make([]algorithms.Decision, len(reqs)))
			require.NoError(t, err)
			assert.Equal(t, 64, got)
			calls := commandCalls(t, rs)
			t.Logf("commands of the check: %v", calls)
			assert.Equal(t, 1, calls["evalsha"], "one script for the check")
			assert.Equal(t, 1, calls["time"], "Redis TIME once for the check")
			assert.Zero(t, calls["get"]+calls["set"], "no log is read or written whole")
			assert.Equal(t, 64, calls["pexpire"])
			assert.LessOrEqual(t, calls["getrange"]+calls["strlen"]+calls["setrange"], 64*commandsPerDecision,
				"at most %d commands per decision, each of at most %d bytes", commandsPerDecision, 32*16)
			stats, err := rs.Do("INFO", "commandstats")
			require.NoError(t, err)
			t.Logf("Redis's own figures for the check (reported, not asserted): %s", evalshaStats(stats))

			// Half of every log expired: each decision searches deep into its log once.
			for i := range reqs {
				reqs[i].Now = time.UnixMicro(logStart + int64(bigLog.Window/time.Microsecond) + int64(runs/2))
			}
			decided, touched = countingBatch(t, s, reqs)
			assert.Equal(t, 64, decided)
			assert.LessOrEqual(t, touched, 64*entriesPerDecision(runs+2))
			t.Logf("half of each log expired: %d entries read for 64 decisions", touched)

			// A cost of the whole quota is denied only after the search for when its units free up,
			// which ends at the log's newest run: still a logarithm.
			big := []service.Request{reqs[0]}
			big[0].Cost = algorithms.MaxLogQuota
			decided, touched = countingBatch(t, s, big)
			assert.Equal(t, 1, decided)
			assert.LessOrEqual(t, touched, entriesPerDecision(runs+2))
			t.Logf("a cost of the whole quota: %d entries read", touched)
		})
	}
}

// evalshaStats is the evalsha line of INFO commandstats.
func evalshaStats(info string) string {
	for _, line := range strings.Split(info, "\n") {
		if strings.HasPrefix(line, "cmdstat_evalsha:") {
			return strings.TrimSpace(line)
		}
	}
	return "none"
}

// ringBytes is the length of a sliding log's state of cap slots (lua/sliding_log_index.lua).
func ringBytes(cap int) int { return logHead + logEntry*cap }

// A sliding log's ring holds at most twice its quota's slots: it doubles while it fills (4, 8,
// 16, 32, ...), keeping an eighth of its runs and 4 slots more free for the runs undos empty until
// they are swept out, and one admission past the quota is denied and grows nothing.
func TestASlidingLogsRingGrowsByDoublingAndNeverPastTwiceItsQuota(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	s := newStore(t, rs.Addr())
	ctx := context.Background()
	l := algorithms.Limit{Kind: algorithms.SlidingLog, Quota: 20, Window: time.Hour}
	key := s.stateKey(l.Kind, "ring")
	start := time.Now().UnixMicro()
	want := []int{4, 8, 8, 8, 16, 16, 16, 16, 16, 16, 16, 32, 32, 32, 32, 32, 32, 32, 32, 32}
	for i, cap := range want {
		d, err := s.Decide(ctx, service.Request{Key: "ring", Limit: l, Cost: 1, Now: time.UnixMicro(start + int64(i))})
		require.NoError(t, err)
		require.True(t, d.Allowed)
		n, err := rs.Do("STRLEN", key)
		require.NoError(t, err)
		assert.Equal(t, strconv.Itoa(ringBytes(cap)), n, "after %d runs", i+1)
	}
	d, err := s.Decide(ctx, service.Request{Key: "ring", Limit: l, Cost: 1, Now: time.UnixMicro(start + 100)})
	require.NoError(t, err)
	assert.False(t, d.Allowed, "one past the quota")
	n, err := rs.Do("STRLEN", key)
	require.NoError(t, err)
	assert.Equal(t, strconv.Itoa(ringBytes(32)), n, "a denial grows nothing")
}

// A sliding log in the text form (written before the ring, and by the undo script) is decided
// as the ring would be, converted once: the next decision reads a logarithm of it.
func TestASlidingLogInTheTextFormIsConvertedOnceThenReadInBlocks(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	s := newStore(t, rs.Addr())
	const runs = 1000
	logStart := time.Now().Add(-time.Minute).UnixMicro()
	text := []string{strconv.FormatInt(logStart+runs-1, 10)}
	for i := range runs {
		text = append(text, strconv.FormatInt(logStart+int64(i), 10), "1")
	}
	fillLog(t, s, "ring", runs, logStart)
	_, err := rs.Do("SET", s.stateKey(bigLog.Kind, "text"), strings.Join(text, " "))
	require.NoError(t, err)

	for i, want := range []struct{ min, max int }{{runs, runs + entriesPerDecision(runs+1)}, {0, entriesPerDecision(runs + 2)}} {
		now := time.UnixMicro(logStart + runs + 10 + int64(i))
		var ds [2]algorithms.Decision
		for j, key := range []string{"ring", "text"} {
			reqs := []service.Request{{Key: key, Limit: bigLog, Cost: 1, Now: now}}
			_, touched := countingBatch(t, s, reqs)
			if key == "text" {
				assert.GreaterOrEqual(t, touched, want.min, "decision %d", i)
				assert.LessOrEqual(t, touched, want.max, "decision %d", i)
			}
			var err error
			ds[j], err = s.Decide(context.Background(), reqs[0])
			require.NoError(t, err)
		}
		assert.Equal(t, ds[0], ds[1], "decision %d: the text log decides as the ring", i)
	}
}

// A sliding log's ring never needs more than its quota's slots, and the quota is bounded: one
// past algorithms.MaxLogQuota is refused, naming the quota, before Redis runs anything; a check
// holding such a descriptor is refused whole.
func TestASlidingLogOnePastTheLargestQuotaIsRefusedBeforeRedisRunsAnything(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	s := newStore(t, rs.Addr())
	ctx := context.Background()
	_, err := rs.Do("CONFIG", "RESETSTAT")
	require.NoError(t, err)
	over := bigLog
	over.Quota++
	_, err = s.Decide(ctx, service.Request{Key: "over", Limit: over, Cost: 1})
	require.ErrorContains(t, err, "sliding_log quota must be <= 10000")
	reqs := []service.Request{{Key: "ok", Limit: bigLog, Cost: 1}, {Key: "over", Limit: over, Cost: 1}}
	_, err = s.DecideAll(ctx, reqs, make([]algorithms.Decision, 2))
	require.ErrorContains(t, err, "sliding_log quota must be <= 10000")
	assert.Zero(t, commandCalls(t, rs)["evalsha"], "nothing ran")
	_, err = s.Decide(ctx, service.Request{Key: "at the bound", Limit: bigLog, Cost: algorithms.MaxLogQuota})
	require.NoError(t, err, "the largest quota and cost are decided")
}
