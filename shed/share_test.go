package shed

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const attackerKey, honestKey = 7, 9

func TestOneClientsSamplesWeighNoMoreThanAllTheOthersTogether(t *testing.T) {
	var ss SampleShare
	kept := map[uint64]int{}
	for range 100 { // ten fast answers from one client for each honest one
		for range 10 {
			if ss.Keep(attackerKey) {
				kept[attackerKey]++
			}
		}
		if ss.Keep(honestKey) {
			kept[honestKey]++
		}
	}
	assert.Equal(t, 100, kept[honestKey], "the honest client is under its share")
	assert.LessOrEqual(t, kept[attackerKey], kept[honestKey]+1)
}

func TestAClientAloneKeepsEverySample(t *testing.T) {
	var ss SampleShare
	for i := range 1000 {
		require.True(t, ss.Keep(honestKey), "sample %d", i)
	}
}

func TestAClientThatHoldsEveryProbeSlotCannotSetTheIdealLatency(t *testing.T) {
	g := testGradient() // a probe needs 4 samples when it times out after a second
	s := probed(t, g)   // ideal 10 ms
	s.nextProbe = quantize(base + int64(300*ms))
	var st Step
	s, st = g.Update(s, base+int64(300*ms), Summary{})
	require.Equal(t, Probe, st.Action)
	var ss SampleShare
	prev := Sampler{}
	for i := int64(4); i <= 14; i++ { // the probe's intervals: 1 µs answers fill its slots, the honest are shed
		now := base + i*int64(100*ms)
		sp := g.Sampler(&s)
		ss.Next(prev, sp)
		var h Histogram
		for j := range int64(200) {
			at := now - int64(100*ms) + j*int64(500*time.Microsecond)
			sp.RecordShared(&h, &ss, attackerKey, at, at, at+1000, Served)
			ss.Shed(honestKey)
		}
		prev = sp
		s, st = g.Update(s, now, g.Summarize(&h, 2))
		if !s.probing {
			break
		}
	}
	assert.Equal(t, Expired, st.Action, "one client's samples are too few to measure")
	assert.Equal(t, 10*ms, st.Ideal, "the last ideal latency stays")
}

func TestASampleShareSpansAProbeAndRestartsEachIntervalOutsideOne(t *testing.T) {
	var ss SampleShare
	probe := Sampler{probing: true}
	ss.Keep(attackerKey)
	ss.Next(probe, probe)
	assert.Equal(t, uint32(1), ss.keeps, "a probe's counts span its intervals")
	ss.Next(probe, Sampler{})
	assert.Zero(t, ss.keeps)
	ss.Keep(attackerKey)
	ss.Next(Sampler{}, Sampler{})
	assert.Zero(t, ss.keeps)
}
