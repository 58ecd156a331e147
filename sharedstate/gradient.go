package sharedstate

import "github.com/meshlimit/meshlimit/shed"

// The adaptive shedder's shared records: the controller's state (a shed.GradientState) and the
// interval's merged latency histogram (a shed.Histogram), each under one fixed key that every
// worker updates. An unreadable record reads as a fresh one.

// GradientEditor runs the controller G on the shared state at Now with the summary Sum when Run
// is set; otherwise it only reads the state. It never claims a slot (Vacant is false).
type GradientEditor struct {
	G   *shed.Gradient
	Now int64
	Run bool
	Sum shed.Summary

	State shed.GradientState // output: the state after the round
	Step  shed.Step          // output: what the controller did
}

// Vacant implements Editor.
func (e *GradientEditor) Vacant([]byte) bool { return false }

// Edit implements Editor: it writes only when the controller updated the state.
func (e *GradientEditor) Edit(dst, cur []byte) ([]byte, bool, error) {
	s, err := shed.DecodeGradientState(cur)
	if err != nil {
		s = shed.GradientState{} // unreadable: start fresh
	}
	e.State, e.Step = s, shed.Step{}
	if !e.Run {
		return dst, false, nil
	}
	e.State, e.Step = e.G.Update(s, e.Now, e.Sum)
	if !e.Step.Updated {
		return dst, false, nil
	}
	return e.State.AppendBinary(dst), true, nil
}

// HistogramEditor merges a worker's histogram into the interval's shared one (Add), reads it
// (neither Add nor Reset), or empties it (Reset).
type HistogramEditor struct {
	Add   *shed.Histogram
	Reset bool

	Merged shed.Histogram // output: the shared histogram after the round
}

// Vacant implements Editor.
func (e *HistogramEditor) Vacant([]byte) bool { return false }

// Edit implements Editor.
func (e *HistogramEditor) Edit(dst, cur []byte) ([]byte, bool, error) {
	h, err := shed.DecodeHistogram(cur)
	if err != nil {
		h = shed.Histogram{}
	}
	switch {
	case e.Reset:
		e.Merged = shed.Histogram{}
		return e.Merged.AppendBinary(dst), true, nil
	case e.Add != nil && e.Add.Count() > 0:
		h.Merge(e.Add)
		e.Merged = h
		return h.AppendBinary(dst), true, nil
	}
	e.Merged = h
	return dst, false, nil
}
