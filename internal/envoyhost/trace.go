package envoyhost

// HostCall is one host function call the guest made, as TraceHostCalls records it.
type HostCall struct {
	// Func is the function's name without its module ("proxy_get_property", "clock_time_get").
	Func string
	// Args are the call's arguments, i32 ones masked to 32 bits; which are pointers and which are
	// sizes or values is the function's ABI signature.
	Args []uint64
	// Result is what the call returned (a proxy-wasm Status or a WASI errno), 0 for none.
	Result uint64
}

// TraceHostCalls starts recording every host call the guest makes on this VM, in order, and returns
// a function that stops recording and returns the calls recorded. A benchmark module that stands
// for the filter (cmd/hostfloor) is held to the filter's calls by comparing the two traces. While a
// trace is on, each host call costs an allocation of the host's: not for measurements.
func (v *VM) TraceHostCalls() (stop func() []HostCall) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.trace = &[]HostCall{}
	return func() []HostCall {
		v.mu.Lock()
		defer v.mu.Unlock()
		calls := *v.trace
		v.trace = nil
		return calls
	}
}

// traceCall records the call f made with s as its arguments (before the call) and results (after),
// when a trace is on.
func (v *VM) traceCall(f *hostFunc, args []uint64, s []uint64) {
	c := HostCall{Func: f.name, Args: args}
	if len(f.results) > 0 {
		c.Result = s[0]
	}
	*v.trace = append(*v.trace, c)
}

// traceArgs copies the arguments of a call to f, i32 ones masked to 32 bits.
func traceArgs(f *hostFunc, s []uint64) []uint64 {
	args := make([]uint64, len(f.params))
	for i, t := range f.params {
		args[i] = s[i]
		if t == i32 {
			args[i] = uint64(u32(s[i]))
		}
	}
	return args
}
