package envoyhost

// BodyStats is what one direction of a stream did with its body, for tests and benchmarks
// that bound what a filter buffers: how often the filter asked Envoy to buffer, and what it
// copied out of the host into its own memory.
type BodyStats struct {
	// Buffered counts the body callbacks that returned StopIterationAndBuffer: Envoy then
	// holds the body and calls again with the whole buffer.
	Buffered int
	// Copies counts the proxy_get_buffer_bytes calls that copied body bytes into the guest.
	Copies int
	// CopiedBytes is the sum of the bytes those calls copied.
	CopiedBytes int64
	// MaxCopy is the largest single copy in bytes.
	MaxCopy int
}

// BodyStats returns the body statistics of the request and of the response so far.
func (s *Stream) BodyStats() (request, response BodyStats) {
	s.vm.mu.Lock()
	defer s.vm.mu.Unlock()
	return s.bodyStats[dirRequest], s.bodyStats[dirResponse]
}

// countCopy records n body bytes copied into the guest from buffer type t (0 request body,
// 1 response body) of the stream of the guest call in progress. It requires v.mu.
func (v *VM) countCopy(t uint32, n int) {
	st := v.stream()
	if st == nil || t > 1 {
		return
	}
	bs := &st.bodyStats[t]
	bs.Copies++
	bs.CopiedBytes += int64(n)
	bs.MaxCopy = max(bs.MaxCopy, n)
}
