package filter

import (
	"github.com/meshlimit/meshlimit/shed"
)

// gradientEditor runs the controller on the shared GradientState (a record under a fixed key,
// see shedState). Without sum set it only reads the state.
type gradientEditor struct {
	g      *shed.Gradient
	now    int64
	run    bool
	sum    shed.Summary
	state  shed.GradientState // output: the state after the round
	step   shed.Step          // output
	stored bool               // output: the record held a state
}

func (e *gradientEditor) Vacant([]byte) bool { return false }

func (e *gradientEditor) Edit(dst, cur []byte) ([]byte, bool, error) {
	s, err := shed.DecodeGradientState(cur)
	if err != nil {
		s = shed.GradientState{} // unreadable: start fresh
	}
	e.state, e.step, e.stored = s, shed.Step{}, len(cur) > 0 && err == nil
	if !e.run {
		return dst, false, nil
	}
	e.state, e.step = e.g.Update(s, e.now, e.sum)
	if !e.step.Updated {
		return dst, false, nil
	}
	return e.state.AppendBinary(dst), true, nil
}

// histogramEditor merges a worker's histogram into the interval's shared one (add), reads it
// (neither add nor reset), or empties it (reset).
type histogramEditor struct {
	add    *shed.Histogram
	reset  bool
	merged shed.Histogram // output: the shared histogram after the round
}

func (e *histogramEditor) Vacant([]byte) bool { return false }

func (e *histogramEditor) Edit(dst, cur []byte) ([]byte, bool, error) {
	h, err := shed.DecodeHistogram(cur)
	if err != nil {
		h = shed.Histogram{}
	}
	switch {
	case e.reset:
		e.merged = shed.Histogram{}
		return e.merged.AppendBinary(dst), true, nil
	case e.add != nil && e.add.Count() > 0:
		h.Merge(e.add)
		e.merged = h
		return h.AppendBinary(dst), true, nil
	}
	e.merged = h
	return dst, false, nil
}

// tickShed runs the adaptive controller's part of a tick (see shedState): merge, update at most
// once per interval across workers, and refresh the capacity the request path uses. now 0 only
// reads the capacity.
func (p *pluginContext) tickShed(st *shedState, now int64) {
	g := st.cfg.Adaptive
	if g == nil {
		return
	}
	he, ge := &st.histEd, &st.gradEd
	*ge = gradientEditor{g: g, now: now}
	if now > 0 {
		*he = histogramEditor{add: &st.local}
		if _, err := p.records.UpdateShared(st.histKey, he); err != nil {
			return // contention: the samples stay local until the next tick
		}
		st.local.Reset()
		peak := p.peekShed(st, now)
		ge.run, ge.sum = true, g.Summarize(&he.merged, peak)
	}
	res, err := p.records.UpdateShared(st.gradKey, ge)
	if err != nil {
		return
	}
	if res.Written && ge.step.Updated {
		*he = histogramEditor{reset: true}
		_, _ = p.records.UpdateShared(st.histKey, he)
		e := &st.ed
		e.op, e.k, e.owner, e.now = opInterval, st.cfg.Policy.Classes(), p.conc.owner, now
		_, _ = p.records.UpdateShared(st.stateKey, e)
	}
	if c := ge.state.Capacity(); c > 0 {
		st.capacity = c
	}
	setGauge(st.metrics.capacity, st.capacity)
}

// peekShed returns the peak in flight of the current interval (at least the current total),
// without writing.
func (p *pluginContext) peekShed(st *shedState, now int64) int64 {
	e := &st.ed
	e.op, e.k, e.owner, e.now = opPeek, st.cfg.Policy.Classes(), p.conc.owner, now
	if _, err := p.records.UpdateShared(st.stateKey, e); err != nil {
		return 0
	}
	return e.peak
}
