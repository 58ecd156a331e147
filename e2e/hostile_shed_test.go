package e2e

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// Issue 20, findings 1 and 2: a client that plays the shedder gets no more than the documented
// bounds (docs/threat-model.md).

// flight is a stream the simulated upstream answers: its response headers at headers, its end at
// end (a long answer streams in between).
type flight struct {
	s            *envoyhost.Stream
	headers, end time.Time
	status       string
	sent         bool
}

// shedSim drives an adaptive shedder's workers in virtual time, step by step, against an upstream
// whose answers the test times.
type shedSim struct {
	t       *testing.T
	p       *envoyhost.Plugin
	vms     int
	next    int
	open    []*flight
	offered map[string]int
	shedN   map[string]int
	caps    []int64
	addrs   int // honest requests come from this many addresses (192.0.2.1 on); 0: all from 192.0.2.9
	sent    int // honest requests sent, to rotate their addresses
}

func newShedSim(t *testing.T, adaptive string, vms int) *shedSim {
	return newShedSimWith(t, `"adaptive":{`+adaptive+`}`, vms)
}

// newShedSimWith is newShedSim with the shed object's fields besides class_header.
func newShedSimWith(t *testing.T, fields string, vms int) *shedSim {
	cfg := `{"rules":[{"name":"all","limits":[{"rate":"1000000/s"}]}],
		"shed":{"class_header":"x-priority",` + fields + `}}`
	return &shedSim{t: t, p: load(t, module(t, "meshlimit"), cfg, vms), vms: vms, offered: map[string]int{}, shedN: map[string]int{}}
}

// honestAddr returns the address of the next honest request.
func (m *shedSim) honestAddr() string {
	if m.addrs == 0 {
		return "192.0.2.9"
	}
	m.sent++
	return "192.0.2." + strconv.Itoa(m.sent%m.addrs+1)
}

// send offers one request of class whose response headers come after latency with status, and
// whose stream ends length after them; it reports whether the shedder admitted it.
// The counts are per class for the answers of status 200, per class/status for the others.
func (m *shedSim) send(class string, latency, length time.Duration, status string) bool {
	label := class
	if status != "200" {
		label += "/" + status
	}
	return m.sendFrom(m.honestAddr(), label, class, latency, length, status)
}

// sendFrom is send from the address ip, counted under label.
func (m *shedSim) sendFrom(ip, label, class string, latency, length time.Duration, status string) bool {
	m.offered[label]++
	req := get("api.example", "/", ip, [2]string{"x-priority", class})
	details := "via_upstream"
	if status == "504" { // the router's own answer when the upstream does not answer in time
		details = "upstream_response_timeout"
	}
	req.Info.Properties = map[string][]byte{envoyhost.Path("response", "code_details"): []byte(details)}
	s, ok := openStream(m.t, m.p.VM(m.next%m.vms), req)
	m.next++
	if !ok {
		m.shedN[label]++
		require.NoError(m.t, s.Close())
		return false
	}
	m.track(s, latency, length, status)
	return true
}

// track has the upstream answer the admitted stream s with status after latency, and end it
// length later.
func (m *shedSim) track(s *envoyhost.Stream, latency, length time.Duration, status string) {
	now := m.p.Clock().Now()
	m.open = append(m.open, &flight{s: s, headers: now.Add(latency), end: now.Add(latency + length), status: status})
	m.answer()
}

// answer sends the response headers and ends the streams that are due.
func (m *shedSim) answer() {
	now := m.p.Clock().Now()
	kept := m.open[:0]
	for _, f := range m.open {
		if !f.sent && !f.headers.After(now) {
			f.sent = true
			_, err := f.s.SendResponseHeaders(envoyhost.Headers{{":status", f.status}}, false)
			require.NoError(m.t, err)
		}
		if f.sent && !f.end.After(now) {
			require.NoError(m.t, f.s.Close())
			continue
		}
		kept = append(kept, f)
	}
	m.open = kept
}

// advance moves the clock on by d, answering what is due after each millisecond, and notes the
// capacity every 100 ms.
func (m *shedSim) advance(d time.Duration) {
	for ; d > 0; d -= time.Millisecond {
		m.p.Clock().Advance(time.Millisecond)
		m.answer()
		if m.p.Clock().Now().Sub(epoch)%(100*time.Millisecond) == 0 {
			m.caps = append(m.caps, counter(m.p, "meshlimit.shed.capacity"))
		}
	}
}

// honestInFlight counts the streams of the honest upstream work (status 200) not yet answered.
func (m *shedSim) waiting() int {
	n := 0
	for _, f := range m.open {
		if !f.sent && f.status == "200" {
			n++
		}
	}
	return n
}

// reset forgets what was offered and shed so far (the first probe, at the start, is not steady).
func (m *shedSim) reset() { m.offered, m.shedN = map[string]int{}, map[string]int{} }

func (m *shedSim) shedShare(class string) float64 {
	return float64(m.shedN[class]) / float64(max(m.offered[class], 1))
}

// idleBody opens a request that sends one byte of its body and then nothing: it never gets an
// answer while the test runs (Envoy's idle timeout is reset by each byte).
func idleBody(t *testing.T, vm *envoyhost.VM) {
	s := vm.NewStream(envoyhost.StreamInfo{SourceAddress: "198.51.100.66:40000"})
	_, err := s.SendRequestHeaders(classed("default").Headers, false)
	require.NoError(t, err)
	_, err = s.SendRequestBody([]byte("x"), false)
	require.NoError(t, err)
}

func TestFourIdleOneByteBodiesShedNoCriticalRequestAndAtMostTheProbesShareOfDefault(t *testing.T) {
	m := newShedSim(t, `"interval":"100ms"`, 4)
	for i := range 4 {
		idleBody(t, m.p.VM(i))
	}
	for range 10 * 60 * 10 { // 10 minutes: a critical and a default request every 100 ms, answered in 20 ms
		m.send("critical", 20*time.Millisecond, 0, "200")
		m.send("default", 20*time.Millisecond, 0, "200")
		m.advance(100 * time.Millisecond)
	}
	t.Logf("offered %v, shed %v", m.offered, m.shedN)
	assert.Zero(t, m.shedN["critical"], "the critical reserve holds whatever streams are open")
	assert.LessOrEqual(t, m.shedShare("default"), 0.05, "default is shed only while a probe is pinned by the idle streams")
}

func TestLLMStreamsOfTenSecondsWithAnObjectiveShedAtMostFivePercent(t *testing.T) {
	for _, length := range []time.Duration{2 * time.Second, 10 * time.Second} {
		t.Run(length.String(), func(t *testing.T) {
			m := newShedSim(t, `"interval":"100ms","objective":"2s"`, 4)
			for range 20 * 60 { // a minute at 20 requests a second, headers after 50 ms
				m.send("default", 50*time.Millisecond, length, "200")
				m.advance(50 * time.Millisecond)
			}
			t.Logf("offered %v, shed %v, capacity %v", m.offered, m.shedN, m.caps[len(m.caps)-5:])
			assert.LessOrEqual(t, m.shedShare("default"), 0.05)
		})
	}
}

func TestSlowReadersOfStartedAnswersHoldNoShedSlot(t *testing.T) {
	m := newShedSim(t, `"interval":"100ms"`, 4)
	for range 40 { // answers whose headers came and whose bodies the client never finishes reading
		m.send("default", time.Millisecond, time.Hour, "200")
	}
	for range 10 * 60 * 2 { // 2 minutes of honest requests, answered in 20 ms
		m.send("default", 20*time.Millisecond, 0, "200")
		m.advance(100 * time.Millisecond)
	}
	t.Logf("offered %v, shed %v", m.offered, m.shedN)
	assert.LessOrEqual(t, m.shedShare("default"), 0.05, "a started answer holds no slot, however long it streams")
}

// kneeUpstream answers honest work in base while at most k requests wait for it, and slower in
// proportion above that (a queue); a 404 costs it nothing and answers in a millisecond. The
// shedder starts at its initial limit of 20, half the knee.
const kneeK, kneeBase = 40, 20 * time.Millisecond

func (m *shedSim) honest(class string) (time.Duration, bool) {
	lat := kneeBase * time.Duration(max(m.waiting()+1, kneeK)) / kneeK
	return lat, m.send(class, lat, 0, "200")
}

func (m *shedSim) notFound(n int) {
	for range n {
		m.send("default", time.Millisecond, 0, "404")
	}
}

func TestBurstsOf404sCannotSetTheIdealLatencyAndShedHonestTraffic(t *testing.T) {
	m := newShedSim(t, `"interval":"100ms"`, 4)
	for ms := range 20_000 { // 20 s: honest traffic at half the knee, bursts of 404s answered in 5 ms
		if ms == 5000 {
			m.reset() // after the first probe
		}
		if ms%100 < 50 {
			for range 6 {
				m.send("default", 5*time.Millisecond, 0, "404")
			}
		}
		if ms%2 == 0 {
			m.honest("default")
		}
		m.advance(time.Millisecond)
	}
	m.requireHonestBelowTheKneeUnshed(t, "the capacity is not steered down")
}

func TestAFloodOf404sCannotRaiseTheCapacityPastTheUpstreamsKnee(t *testing.T) {
	m := newShedSim(t, `"interval":"100ms","probe_samples":30`, 4)
	var lats []time.Duration
	for ms := range 10_000 { // 10 s: honest traffic at twice the knee, 5 404s every millisecond
		if ms%2 == 0 {
			m.notFound(5)
		}
		for range 4 {
			if lat, ok := m.honest("default"); ok && ms >= 5000 {
				lats = append(lats, lat)
			}
		}
		if ms%2 == 1 {
			m.notFound(5)
		}
		m.advance(time.Millisecond)
	}
	late := m.caps[len(m.caps)/2:]
	slices.Sort(lats)
	p50 := lats[len(lats)/2]
	t.Logf("offered %v, shed %v, capacity in the second half %v, honest p50 %v", m.offered, m.shedN, late, p50)
	for _, c := range late {
		assert.LessOrEqual(t, c, int64(2*kneeK+10), "the capacity stays near the knee (plus the 404s in flight)")
	}
	assert.LessOrEqual(t, p50, 2*kneeBase, "the upstream is kept near its knee")
}

func TestRequestsThatMakeTheRouterTimeOutCannotShrinkTheCapacity(t *testing.T) {
	m := newShedSim(t, `"interval":"100ms"`, 4)
	for ms := range 20_000 { // 20 s: honest traffic at half the knee, and every 100 ms a request to a hanging endpoint
		if ms == 5000 {
			m.reset() // after the first probe
		}
		if ms%100 == 0 {
			m.send("default", time.Second, 0, "504") // the route's timeout: Envoy answers 504 itself
		}
		if ms%2 == 0 {
			m.honest("default")
		}
		m.advance(time.Millisecond)
	}
	m.requireHonestBelowTheKneeUnshed(t, "the router's answers are no latency sample")
}

func TestAClientWithAThousandIdleBodiesHoldsOnlyItsKeyShareOfTheShedder(t *testing.T) {
	cfg := `{"rules":[{"name":"all","limits":[{"rate":"1000000/s"}]}],
		"shed":{"capacity":100,"key_share":100}}`
	p := load(t, module(t, "meshlimit"), cfg, 4)
	held := 0
	for i := range 1000 { // one address, a thousand request bodies that never end
		s := p.VM(i % 4).NewStream(envoyhost.StreamInfo{SourceAddress: "198.51.100.66:40000"})
		_, err := s.SendRequestHeaders(get("api.example", "/upload", "198.51.100.66").Headers, false)
		require.NoError(t, err)
		if s.LocalReply() == nil {
			held++
		}
	}
	assert.Equal(t, 10, held, "the client holds its share: 10% of the capacity")
	assert.Equal(t, int64(990), counter(p, "meshlimit.shed.key_limited"))
	p.Clock().Advance(5 * time.Minute) // renewals keep the share counted
	others := 0
	for i := range 80 { // 80 other clients, each holding a stream: what default may use besides
		if _, ok := openStream(t, p.VM(i%4), get("api.example", "/", "192.0.2."+strconv.Itoa(i+1))); ok {
			others++
		}
	}
	assert.Equal(t, 80, others, "every other client is admitted")
	_, ok := openStream(t, p.VM(0), get("api.example", "/", "198.51.100.66"))
	assert.False(t, ok, "the client is still held to its share")
}

// requireHonestBelowTheKneeUnshed asserts what an attack on the controller must leave intact:
// honest traffic below the knee is not shed after the first probe, and the capacity of the
// run's second half stays at half the knee or more (why says which attack did not steer it).
func (m *shedSim) requireHonestBelowTheKneeUnshed(t *testing.T, why string) {
	t.Helper()
	late := m.caps[len(m.caps)/2:]
	t.Logf("offered %v, shed %v, capacity in the second half %v", m.offered, m.shedN, late)
	assert.LessOrEqual(t, m.shedShare("default"), 0.05, "honest traffic below the knee is not shed after the first probe")
	for _, c := range late {
		assert.GreaterOrEqual(t, c, int64(kneeK/2), why)
	}
}
