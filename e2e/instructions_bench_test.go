package e2e

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"testing"

	"github.com/meshlimit/meshlimit/internal/callgrind"
	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// instrCases is the case file of scripts/bench-instructions.js (the same file drives the V8 side,
// v8host/instr.js). Without it BenchmarkInstructionsWazero is skipped.
var instrCases = flag.String("instr.cases", "", "the case file of scripts/bench-instructions.js: run BenchmarkInstructionsWazero's cases (under valgrind --tool=callgrind)")

// instrSpec is the case file: one request, sent to every case, warm requests before measuring,
// and the two request counts measured per case.
type instrSpec struct {
	Request struct {
		Headers [][2]string `json:"headers"`
		Source  string      `json:"source"`
	} `json:"request"`
	Warm int `json:"warm"`
	N1   int `json:"n1"`
	N2   int `json:"n2"`
	// Instrument is "measured" (run under --instr-atstart=no: instrumentation on for N1 and N2
	// only) or "all" (the whole process instrumented, no switch).
	Instrument string `json:"instrument"`
	Cases      []struct {
		Name     string `json:"name"`
		Module   string `json:"module"`
		Config   string `json:"config"`
		Response struct {
			Headers [][2]string `json:"headers"`
			Body    string      `json:"body"`
		} `json:"response"`
	} `json:"cases"`
}

// BenchmarkInstructionsWazero runs every case of -instr.cases on wazero: load, warm up, then
// instrMeasured with N1 requests and with N2 requests. Under valgrind --tool=callgrind each call
// of instrMeasured is one dump file holding the instructions of its loop only, on every thread
// (callgrind client requests around the loop, package internal/callgrind);
// (Ir(N2)-Ir(N1))/(N2-N1) is then one warm request, whatever entering and leaving the loop costs.
// It prints one line per call ("instr CASE N STATUS", the warm-up's first), in the order of the
// dumps. Natively (no valgrind) it runs the same loops and measures nothing. Unless the case file
// says "instrument": "all", valgrind instruments only the N1 and N2 loops (it runs with
// --instr-atstart=no): loading a case and its warm-up run at valgrind's bare speed. wazero compiled
// the module before the loops, so a warm request runs the same machine code either way. The
// warm-up's dump, uninstrumented then, holds no figure (zero, or garbage after a switch) and is
// never read.
func BenchmarkInstructionsWazero(b *testing.B) {
	if *instrCases == "" {
		b.Skip("-instr.cases not set: run `make bench-instructions`")
	}
	raw, err := os.ReadFile(*instrCases)
	if err != nil {
		b.Fatal(err)
	}
	var spec instrSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		b.Fatal(err)
	}
	req := &envoyhost.Request{Info: envoyhost.StreamInfo{SourceAddress: spec.Request.Source}}
	for _, h := range spec.Request.Headers {
		req.Headers = append(req.Headers, h)
	}
	for b.Loop() {
		for _, c := range spec.Cases {
			resp := &envoyhost.Response{Body: []byte(c.Response.Body)}
			for _, h := range c.Response.Headers {
				resp.Headers = append(resp.Headers, h)
			}
			wasm, err := os.ReadFile(c.Module)
			if err != nil {
				b.Fatal(err)
			}
			vm := load(b, wasm, c.Config, 1).VM(0)
			for i, n := range []int{spec.Warm, spec.N1, spec.N2} {
				if i == 1 && spec.Instrument != "all" {
					callgrind.StartInstrumentation()
				}
				runtime.GC()
				status := instrMeasured(b, vm, req, resp, n)
				fmt.Printf("instr %s %d %d\n", c.Name, n, status)
			}
			if spec.Instrument != "all" {
				callgrind.StopInstrumentation()
			}
			if err := vm.Failed(); err != nil {
				b.Fatalf("%s: %v", c.Name, err)
			}
		}
	}
}

// instrMeasured sends req n times through vm with resp as the upstream's answer and returns the
// status of the last local reply (0: forwarded upstream), between callgrind's ZeroStats and
// DumpStats.
func instrMeasured(b *testing.B, vm *envoyhost.VM, req *envoyhost.Request, resp *envoyhost.Response, n int) int {
	status := 0
	ctx := context.Background()
	callgrind.ZeroStats()
	defer callgrind.DumpStats()
	for range n {
		res, err := vm.RoundTrip(ctx, req, resp)
		if err != nil {
			b.Fatal(err)
		}
		status = 0
		if res.LocalReply != nil {
			status = res.LocalReply.Status
		}
	}
	return status
}
