package filter

import (
	"errors"
	"fmt"
	"time"

	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/sharedstate"
	"github.com/meshlimit/meshlimit/wire"
)

// The reset log (global.reset_poll): an admin reset at the service (service/admin.go) deletes a
// key's state in Redis, but what the proxies keep in their shared data — a global rule's cached
// denials and penalty box, every local rule's limit states and penalty box — the service cannot
// reach. So the service appends every reset key to a bounded log, and each proxy reads it
// (POST wire.ResetsPath) and forgets the same keys:
//
//   - one worker per proxy and period polls: a shared-data record holds the position applied
//     (seq) and when the last poll was claimed; on its tick a worker that finds the poll due
//     claims it by compare-and-swap, so two workers never both poll in one period;
//   - the call carries the global headers and secret and the global timeout, and only from the
//     tick: the request path is unchanged. It is never the breaker's probe and never counts
//     towards the breaker: a failure is counted (resets_poll_failed), warned about at most once
//     per rejectLogEvery per worker, and retried after the next period, from the same position; a
//     404 (a service that does not serve the log: an older version, during a rolling upgrade)
//     makes the worker that got it wait resetsMissingBackoff before it claims a poll again, so
//     such a cluster costs each worker one call and one warning a minute, not one a period;
//   - each entry names a descriptor key "<plugin>/<rule>/<fingerprint>/<value>". It is applied
//     when the plugin has a rule of that name with a limit of that fingerprint: the value is
//     forgotten (sharedstate.Cursor.Forget, owner-checked) in the tables of every limit set
//     holding that limit, in the rule's over-limit cache or penalty box, and in a global rule's
//     fallback table (what decides for the service while it is out of reach). Other keys are
//     ignored, and so are values the key encoder hashed (a "#" form): their original value is
//     not known. A key decided in a table's overflow state has no record to forget. An entry at
//     or before the position applied (a late answer) is not applied again (resetPosition);
//   - the position then advances by compare-and-swap, never backwards, except when the service
//     says the proxy's position is no longer in its log (truncated: the proxy fell behind the
//     log's bound, or the log was lost): the proxy adopts the service's position, counts it
//     (resets_truncated) and warns, since resets in between may be missed. An answer with more
//     entries to come makes the poll due again at the next tick.
//
// Only the service's answer to the proxy's own call is read: a client has no way to add to or
// forge the log (the admin API needs its token; the reset log endpoint the proxies' secret).

// resetsMissingBackoff is how long a worker waits to poll again after the service answered 404 to
// the reset log (when global.reset_poll is shorter).
const resetsMissingBackoff = int64(time.Minute)

// resetPoller is this worker's side of the reset log.
type resetPoller struct {
	*env
	g         *globalClient
	rules     []ruleState
	key       string // the shared-data poll record
	every     int64  // global.reset_poll (ns); 0: off
	headers   [][2]string
	timeout   uint32 // ms
	body      []byte
	val       []byte
	answer    []wire.Reset
	nextRead  int64 // before this, the record was seen not due: no need to read it
	inflight  int64 // the deadline of this worker's call in flight, or 0
	nextLogAt int64 // when a failure may be warned about again
	metrics   resetMetrics
}

// start prepares the reset log poll of a plugin with a global service g (off when
// global.reset_poll is 0), for the plugin's rules.
func (rp *resetPoller) start(e *env, g *globalClient, rules []ruleState) {
	*rp = resetPoller{env: e, g: g, rules: rules, key: keyPrefix + e.name + "/resets", every: int64(g.cfg.ResetPoll), timeout: g.timeout}
	if rp.every == 0 {
		return
	}
	rp.headers = append(rp.headers, g.headers...)
	for i := range rp.headers {
		if rp.headers[i][0] == ":path" {
			rp.headers[i][1] = wire.ResetsPath
		}
	}
	rp.metrics = defineResetMetrics(e.host)
}

// poll, on a tick, claims the poll when it is due and no other worker claimed it, and calls the
// service for the entries after the position applied.
func (rp *resetPoller) poll(now int64) {
	if rp.every == 0 || now < rp.nextRead || rp.inflight > now {
		return
	}
	rp.inflight = 0
	u := rp.records.Updater()
	v, cas, err := u.Read(rp.key)
	if err != nil {
		return
	}
	pos, _ := sharedstate.ParseResetPosition(v)
	seq := pos.Seq
	if due := pos.PolledAt + rp.every; now < due && pos.PolledAt <= now {
		rp.nextRead = due
		return
	}
	rp.nextRead = now + rp.every
	rp.val = sharedstate.ResetPosition{Seq: seq, PolledAt: now}.AppendBinary(rp.val[:0])
	if u.Write(rp.key, rp.val, cas) != nil {
		return // another worker claimed this period's poll (or the store failed: next period)
	}
	rp.body = wire.AppendResetsRequest(rp.body[:0], rp.name, seq)
	err = rp.host.dispatch(rp.g.cfg.Cluster, rp.headers, rp.body, rp.timeout, func(numHeaders, bodySize, _ int) {
		rp.onAnswer(seq, numHeaders, bodySize)
	})
	if err != nil {
		rp.failed(now, err)
		return
	}
	rp.inflight = now + int64(time.Duration(rp.timeout)*time.Millisecond+deadlineSlack)
}

// onAnswer applies the entries of an answer to the poll from position since, then advances the
// position. A failed or unreadable answer changes nothing: the next period asks again.
func (rp *resetPoller) onAnswer(since uint64, numHeaders, bodySize int) {
	defer rp.panics.recoverPanic("a reset log answer")
	rp.inflight = 0
	now := rp.host.now()
	a, err := rp.readAnswer(numHeaders, bodySize)
	if err != nil {
		if se, ok := err.(*statusError); ok && se.status == "404" {
			rp.nextRead = now + max(rp.every, resetsMissingBackoff)
			rp.nextLogAt = 0 // say so at once, and then once per wait
			err = fmt.Errorf("%w: the service does not serve the reset log (an older version?); this worker asks again in %v (global.reset_poll \"off\" stops asking)", err, time.Duration(max(rp.every, resetsMissingBackoff)))
		}
		rp.failed(now, err)
		return
	}
	applied := rp.position(since)
	for i := range a.Resets {
		if a.Resets[i].Seq > applied && rp.apply(a.Resets[i].Key) {
			rp.metrics.applied.inc(1)
		}
	}
	if a.Truncated {
		rp.metrics.truncated.inc(1)
		logf(rp.host, logWarn, "meshlimit: the reset log no longer holds position %d (this proxy fell behind it, or the service lost it): resets before position %d may not have reached this proxy's shared data", since, a.Seq)
	}
	if a.More {
		rp.nextRead = 0
	}
	rp.advance(since, &a)
}

// position returns the position applied as the poll record says now, at least since: a worker
// whose answer comes late (after another worker polled in a later period and applied the same
// entries) applies none of those again. Applying an entry twice is not idempotent in time: between
// the two, the key may have earned new state (a penalty box after its reset), which a stale entry
// must not forget.
func (rp *resetPoller) position(since uint64) uint64 {
	v, _, err := rp.records.Updater().Read(rp.key)
	if err != nil {
		return since
	}
	pos, _ := sharedstate.ParseResetPosition(v)
	return max(pos.Seq, since)
}

// readAnswer reads the answer of a reset log call: a 200 with a well-formed body.
func (rp *resetPoller) readAnswer(numHeaders, bodySize int) (wire.ResetsAnswer, error) {
	body, err := readCallBody(rp.host, numHeaders, bodySize)
	if err != nil {
		return wire.ResetsAnswer{}, err
	}
	a, err := wire.DecodeResetsAnswer(body, rp.answer)
	rp.answer = a.Resets[:0]
	if err != nil {
		return a, fmt.Errorf("decoding the body: %w", err)
	}
	return a, nil
}

// failed counts a failed poll and warns at most once per rejectLogEvery per worker.
func (rp *resetPoller) failed(now int64, err error) {
	rp.metrics.pollFailed.inc(1)
	if now >= rp.nextLogAt {
		rp.nextLogAt = now + int64(rejectLogEvery)
		logf(rp.host, logWarn, "meshlimit: reading the reset log on cluster %q: %v; admin resets reach this proxy's shared data once a poll succeeds (this warning: at most once per %v per worker; meshlimit.global.resets_poll_failed counts them)",
			rp.g.cfg.Cluster, err, rejectLogEvery)
	}
}

// advance moves the position applied to the answer's: never backwards, unless the answer is
// truncated and no other poll moved the position since this one's (then the service's position is
// adopted, as it may have started again lower). An answer with more to come makes the poll due.
func (rp *resetPoller) advance(since uint64, a *wire.ResetsAnswer) {
	u := rp.records.Updater()
	for range u.MaxAttempts() {
		v, cas, err := u.Read(rp.key)
		if err != nil {
			return
		}
		pos, ok := sharedstate.ParseResetPosition(v)
		next := max(pos.Seq, a.Seq)
		if a.Truncated && pos.Seq == since {
			next = a.Seq
		}
		if a.More {
			pos.PolledAt = 0
		}
		if next == pos.Seq && ok && !a.More {
			return
		}
		rp.val = sharedstate.ResetPosition{Seq: next, PolledAt: pos.PolledAt}.AppendBinary(rp.val[:0])
		if err := u.Write(rp.key, rp.val, cas); !errors.Is(err, sharedstate.ErrCasMismatch) {
			return
		}
	}
}

// apply forgets the key of one entry in this proxy's shared data and reports whether the
// entry named a limit of one of the plugin's rules (then it is applied, whether the key had state
// here or not).
func (rp *resetPoller) apply(key string) bool {
	rule, fp, value, ok := wire.ParseKey(key, rp.name)
	if !ok || hashedValue(value) {
		return false
	}
	rs := ruleNamed(rp.rules, rule)
	if rs == nil {
		return false
	}
	matched := false
	for i, set := range rs.rule.LimitSets() {
		if !hasFingerprint(set.Limits, fp) {
			continue
		}
		matched = true
		if i < len(rs.tables) && (set.Override == "" || set.Override == value) {
			_, err := rp.limiter.Forget(rs.tables[i], []byte(value))
			rp.forgot(rs, err)
			if i < len(rs.attempts) { // a counted rule's attempts: its counted ones are forgiven too
				_, err = rp.limiter.Forget(rs.attempts[i], []byte(value))
				rp.forgot(rs, err)
			}
		}
	}
	if matched && rs.blocked != nil {
		_, err := rp.records.Forget(rs.blocked, []byte(value))
		rp.forgot(rs, err)
	}
	if matched && rs.fallback != nil { // the global limit's stand-in while the service is out of reach
		_, err := rp.limiter.Forget(rs.fallback, []byte(value))
		rp.forgot(rs, err)
	}
	return matched
}

// forgot logs a reset key that could not be forgotten in one of rs's records.
func (rp *resetPoller) forgot(rs *ruleState, err error) {
	if err != nil {
		logf(rp.host, logWarn, "meshlimit: rule %s: forgetting a reset key: %v", rs.rule.Name, err)
	}
}

// hashedValue reports whether a key value is in the form the key encoder gives a value it cannot
// send as is ("#", hex, "-", hex): its original is not known, so it cannot be forgotten.
func hashedValue(v string) bool {
	if len(v) < 4 || v[0] != '#' {
		return false
	}
	dash := 0
	for i := 1; i < len(v); i++ {
		switch c := v[i]; {
		case c == '-' && dash == 0 && i > 1:
			dash = i
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f':
		default:
			return false
		}
	}
	return dash > 0 && dash < len(v)-1
}

// hasFingerprint reports whether one of limits has the fingerprint fp.
func hasFingerprint(limits []rules.LimitSpec, fp uint64) bool {
	for i := range limits {
		if limits[i].Fingerprint == fp {
			return true
		}
	}
	return false
}

// resetMetrics are the counters of the reset log.
type resetMetrics struct {
	applied, pollFailed, truncated counter
}

func defineResetMetrics(h host) resetMetrics {
	return resetMetrics{
		applied:    newCounter(h, "meshlimit.global.resets_applied"),
		pollFailed: newCounter(h, "meshlimit.global.resets_poll_failed"),
		truncated:  newCounter(h, "meshlimit.global.resets_truncated"),
	}
}
