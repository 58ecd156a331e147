package e2e

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Issue 20 (review r20, findings 2, 3 and 4 of the second review): one client whose own requests
// are answered fast, with a status that is no error (a 200, a 304), against the K = 40, 20 ms
// upstream, honest traffic from one other address. Every such answer was a sample: a flood of them
// pulled the ideal latency and the interval's sample down, and the capacity up; the same answers
// only while a probe ran set a low ideal latency, after which honest traffic was shed. Now one
// client's samples weigh no more than all the others' together (shed.SampleShare).

const attackerIP = "198.51.100.7"

// fastFromOne sends n requests from attackerIP answered with status after latency.
func (m *shedSim) fastFromOne(n int, latency time.Duration, status string) {
	for range n {
		m.sendFrom(attackerIP, "atk", "default", latency, 0, status)
	}
}

func TestAFloodOfFastAnswersFromOneClientDoesNotRaiseTheCapacity(t *testing.T) {
	for _, status := range []string{"200", "304"} {
		t.Run(status, func(t *testing.T) {
			m := newShedSim(t, `"interval":"100ms","probe_samples":30`, 4)
			var lats []time.Duration
			for ms := range 10_000 { // 10 s: 5 answers of 1 ms a millisecond, honest traffic at twice the knee
				m.fastFromOne(5, time.Millisecond, status)
				for range 4 {
					if lat, ok := m.honest("default"); ok && ms >= 5000 {
						lats = append(lats, lat)
					}
				}
				m.advance(time.Millisecond)
			}
			late := m.caps[len(m.caps)/2:]
			slices.Sort(lats)
			p50 := lats[len(lats)/2]
			lo, hi := minMax(late)
			t.Logf("capacity in the second half %d to %d, honest p50 %v", lo, hi, p50)
			assert.LessOrEqual(t, hi, int64(2*kneeK+10), "the capacity stays near the knee (plus the flood in flight)")
			assert.LessOrEqual(t, p50, 2*kneeBase, "the upstream is kept near its knee")
		})
	}
}

// probeRun returns the honest shedding of span ms with attack (nil: none) against honest
// traffic at half the knee from one address, counted from 7 s on.
func probeRun(t *testing.T, span int, attack func(m *shedSim, ms int)) float64 {
	m := newShedSim(t, `"interval":"100ms"`, 4)
	for ms := range span {
		if ms == 7000 {
			m.reset()
		}
		if attack != nil {
			attack(m, ms)
		}
		if ms%2 == 0 {
			m.honest("default")
		}
		m.advance(time.Millisecond)
	}
	lo, hi := minMax(m.caps[70:])
	t.Logf("offered %v, shed %v, capacity after 7 s %d to %d", m.offered, m.shedN, lo, hi)
	return m.shedShare("default")
}

func TestFastAnswersDuringAProbeDoNotSetTheIdealLatency(t *testing.T) {
	control := probeRun(t, 20_000, nil)
	attacked := probeRun(t, 20_000, func(m *shedSim, ms int) {
		if ms < 6000 { // the first probe: 3 answers of 1 ms a millisecond, then nothing
			m.fastFromOne(3, time.Millisecond, "200")
		}
	})
	t.Logf("honest shed %.1f%% (control %.1f%%)", 100*attacked, 100*control)
	assert.LessOrEqual(t, attacked, control+steerBound, "what the probe measured is the honest latency")
}

func TestAClientThatFollowsTheProbesCannotShedHonestTraffic(t *testing.T) {
	control := probeRun(t, 70_000, nil)
	floodUntil, floods := -1, 0
	attacked := probeRun(t, 70_000, func(m *shedSim, ms int) {
		// a canary every 10 ms; when one is shed (a probe), 2.5 s of 3 answers of 1 ms a millisecond
		if ms%10 == 0 && !m.sendFrom(attackerIP, "canary", "default", time.Millisecond, 0, "200") && ms > floodUntil {
			floodUntil, floods = ms+2500, floods+1
		}
		if ms <= floodUntil {
			m.fastFromOne(3, time.Millisecond, "200")
		}
	})
	// What the client still has: the probes it fills with its own requests run to probe_timeout
	// (2 s) with the honest requests shed, and expire, keeping the last ideal latency.
	probeTime := float64(floods) * 2 / 63 // of the 63 s counted
	t.Logf("floods %d, honest shed %.1f%% (control %.1f%%, bound %.1f%%)", floods, 100*attacked, 100*control, 100*(control+steerBound+probeTime))
	assert.Positive(t, floods)
	assert.LessOrEqual(t, floods, 70/60+1, "the client finds only the periodic probes: no probe measures its latency and collapses the capacity")
	assert.LessOrEqual(t, attacked, control+steerBound+probeTime, "besides the probes it fills, honest traffic is shed as in the control")
}
