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

// The request codes of valgrind's callgrind.h: VG_USERREQ_TOOL_BASE('C','T') + 0, + 1, + 4 and + 5.
const (
	requestDumpStats            = 'C'<<24 | 'T'<<16
	requestZeroStats            = requestDumpStats + 1
	requestStartInstrumentation = requestDumpStats + 4
	requestStopInstrumentation  = requestDumpStats + 5
)

// ZeroStats sets callgrind's counters of every thread to zero.
func ZeroStats() { send(requestZeroStats) }

// DumpStats writes the counters since the last ZeroStats or DumpStats to the next dump file
// (the --callgrind-out-file name followed by .1, .2, ...) and sets them to zero.
func DumpStats() { send(requestDumpStats) }

// StartInstrumentation turns callgrind's instrumentation on (CALLGRIND_START_INSTRUMENTATION).
// Run under valgrind --instr-atstart=no, the process runs uninstrumented, at valgrind's bare speed
// and counting nothing, until it calls StartInstrumentation; the switch discards valgrind's
// translations (valgrind's cost, not the process's).
func StartInstrumentation() { send(requestStartInstrumentation) }

// StopInstrumentation turns callgrind's instrumentation off (CALLGRIND_STOP_INSTRUMENTATION):
// nothing is counted until the next StartInstrumentation.
func StopInstrumentation() { send(requestStopInstrumentation) }

func send(code uint64) {
	args := [6]uint64{code}
	clientRequest(&args)
}
