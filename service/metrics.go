package service

import (
	"bufio"
	"io"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
)

// Error kinds counted by meshlimit_errors_total.
const (
	errBadRequest   = iota // 400: the body is not a valid check request
	errTooLarge            // 413: the body exceeds the size limit
	errUnauthorized        // 401: the shared secret is missing or wrong
	errStore               // 503: the store failed
	errTimeout             // 503: the per-request deadline passed
	errStoreFull           // 503: the store refused a write for lack of memory (ErrStoreFull)
	numErrKinds
)

var errKindNames = [numErrKinds]string{"bad_request", "too_large", "unauthorized", "store", "timeout", "store_full"}

// Decision outcomes counted by meshlimit_decisions_total.
const (
	outAllowed = iota
	outDenied
	outSkipped
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"allowed", "denied", "skipped"}

// latencyBuckets are the upper bounds, in seconds, of the store latency histogram.
var latencyBuckets = [...]float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}

// Metrics counts what the service does, for Prometheus. The zero value is ready to use and
// all methods are safe for concurrent use; nothing on the request path takes a lock.
type Metrics struct {
	checks    [2]atomic.Uint64 // requests answered 200: denied, allowed
	decisions [len(algorithms.Kinds) + 1][numOutcomes]atomic.Uint64
	errors    [numErrKinds]atomic.Uint64
	latency   [len(latencyBuckets) + 1]atomic.Uint64 // the last is +Inf
	latencyNs atomic.Uint64
}

func (m *Metrics) check(allowed bool) {
	if allowed {
		m.checks[1].Add(1)
	} else {
		m.checks[0].Add(1)
	}
}

func (m *Metrics) decision(k algorithms.Kind, outcome int) { m.decisions[k][outcome].Add(1) }

func (m *Metrics) error(kind int) { m.errors[kind].Add(1) }

// observe records one store call's duration.
func (m *Metrics) observe(d time.Duration) {
	s := d.Seconds()
	i := 0
	for i < len(latencyBuckets) && s > latencyBuckets[i] {
		i++
	}
	m.latency[i].Add(1)
	m.latencyNs.Add(uint64(max(d, 0)))
}

// WriteTo writes the metrics in the Prometheus text exposition format (version 0.0.4).
// keys, when >= 0, is reported as the meshlimit_memory_keys gauge; evicted, when >= 0, as the
// meshlimit_store_evicted_keys_total counter.
func (m *Metrics) writeTo(w io.Writer, keys int, evicted int64) error {
	b := bufio.NewWriter(w)
	help := func(name, typ, text string) {
		b.WriteString("# HELP " + name + " " + text + "\n# TYPE " + name + " " + typ + "\n")
	}
	sample := func(name, labels string, v uint64) {
		b.WriteString(name)
		if labels != "" {
			b.WriteString("{" + labels + "}")
		}
		b.WriteByte(' ')
		b.WriteString(strconv.FormatUint(v, 10))
		b.WriteByte('\n')
	}

	help("meshlimit_checks_total", "counter", "Check requests answered, by overall result.")
	sample("meshlimit_checks_total", `result="denied"`, m.checks[0].Load())
	sample("meshlimit_checks_total", `result="allowed"`, m.checks[1].Load())

	help("meshlimit_decisions_total", "counter", "Descriptor decisions, by algorithm and outcome (skipped: not evaluated after an earlier denial).")
	for _, k := range algorithms.Kinds {
		for o := range numOutcomes {
			sample("meshlimit_decisions_total", `algorithm="`+k.String()+`",result="`+outcomeNames[o]+`"`, m.decisions[k][o].Load())
		}
	}

	help("meshlimit_errors_total", "counter", "Requests answered with an error, by kind.")
	for k := range numErrKinds {
		sample("meshlimit_errors_total", `kind="`+errKindNames[k]+`"`, m.errors[k].Load())
	}

	const lat = "meshlimit_store_duration_seconds"
	help(lat, "histogram", "Duration of one store decision (a Redis round trip for the Redis store).")
	var cum uint64
	for i, le := range latencyBuckets {
		cum += m.latency[i].Load()
		sample(lat+"_bucket", `le="`+strconv.FormatFloat(le, 'g', -1, 64)+`"`, cum)
	}
	cum += m.latency[len(latencyBuckets)].Load()
	sample(lat+"_bucket", `le="+Inf"`, cum)
	b.WriteString(lat + "_sum " + strconv.FormatFloat(float64(m.latencyNs.Load())/1e9, 'g', -1, 64) + "\n")
	sample(lat+"_count", "", cum)

	if evicted >= 0 {
		help("meshlimit_store_evicted_keys_total", "counter", "Keys Redis evicted (each one a counter that starts over), as seen by /readyz probes.")
		sample("meshlimit_store_evicted_keys_total", "", uint64(evicted))
	}
	if keys >= 0 {
		help("meshlimit_memory_keys", "gauge", "Keys held by the in-memory store.")
		b.WriteString("meshlimit_memory_keys " + strconv.FormatInt(int64(min(keys, math.MaxInt)), 10) + "\n")
	}
	return b.Flush()
}
