// Package callgrind sends client requests to valgrind's callgrind tool from Go, so that a benchmark
// counts the instructions of exactly the code between ZeroStats and DumpStats (all threads of the
// process), however much the process does before and after. Outside valgrind both are no-ops: the
// request is a sequence of instructions that change nothing on the CPU (valgrind.h's "special
// instruction preamble", four rotations of RDI summing to 128 bits and an exchange of RBX with
// itself), which valgrind recognises in the code it translates. On other architectures than amd64
// they do nothing.
//
// It exists for e2e's BenchmarkInstructionsWazero (`make bench-instructions`); nothing in the
// filter or the service uses it.
package callgrind

// The request codes of valgrind's callgrind.h: VG_USERREQ_TOOL_BASE('C','T') + 0 and + 1.
const (
	requestDumpStats = 'C'<<24 | 'T'<<16
	requestZeroStats = requestDumpStats + 1
)

// ZeroStats sets callgrind's counters of every thread to zero.
func ZeroStats() { send(requestZeroStats) }

// DumpStats writes the counters since the last ZeroStats or DumpStats to the next dump file
// (the --callgrind-out-file name followed by .1, .2, ...) and sets them to zero.
func DumpStats() { send(requestDumpStats) }

func send(code uint64) {
	args := [6]uint64{code}
	clientRequest(&args)
}
