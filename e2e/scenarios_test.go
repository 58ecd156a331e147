package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
	"github.com/meshlimit/meshlimit/internal/sfv"
)

// The shared scenarios (scenarios/*.json, format in scenarios/README.md) run on the wazero host here
// and on the V8 host (v8host/, under node with Envoy's V8 flags). Each engine's observations must
// meet the scenarios' expectations, and the two engines must have observed exactly the same thing:
// every status, every header sent upstream and downstream, the body bytes that passed each way, every
// reset, every metric, every critical log line.

// v8Flags are the V8 flags Envoy starts V8 with.
var v8Flags = []string{"--no-liftoff", "--wasm-max-mem-pages=16384"}

type scenario struct {
	Name               string            `json:"name"`
	Comment            string            `json:"comment"`
	Config             json.RawMessage   `json:"config"`
	ConfigText         *string           `json:"config_text"`
	Workers            int               `json:"workers"`
	BufferLimit        int               `json:"buffer_limit"` // Envoy's per_connection_buffer_limit_bytes; 0: 1 MiB
	Module             string            `json:"module"`       // meshlimit (default), or a host test guest: guest, badimport
	Env                map[string]string `json:"env"`
	Steps              []scenarioStep    `json:"steps"`
	ExpectStartFailure *struct {
		ErrorContains string `json:"error_contains"`
		LogContains   string `json:"log_contains"`
	} `json:"expect_start_failure"`
	ExpectMetrics   map[string]int64 `json:"expect_metrics"`
	ExpectFailedVMs []int            `json:"expect_failed_vms"`
	// ExpectVMFailure is a substring of every failed VM's reason (engines word traps differently).
	ExpectVMFailure string `json:"expect_vm_failure"`
	// ExpectPollOneoff is how many times the guest may call poll_oneoff (ENOSYS in Envoy's #427 host).
	ExpectPollOneoff int64 `json:"expect_poll_oneoff"`
}

type scenarioStep struct {
	Request   *scenarioRequest  `json:"request"`
	Response  *scenarioResponse `json:"response"`
	VM        int               `json:"vm"`
	VMs       []int             `json:"vms"`
	Repeat    int               `json:"repeat"`
	AdvanceMS *int64            `json:"advance_ms"`
	Open      *string           `json:"open"`
	Check     *string           `json:"check"`
	Finish    *string           `json:"finish"`
	Respond   *string           `json:"respond"`
	Answer    *string           `json:"answer"` // the upstream answers s once its request headers went upstream
	Send      *string           `json:"send"`   // more body (and trailers) of s's request or response
	Expect    *expectation      `json:"expect"`
}

type scenarioRequest struct {
	Method    string      `json:"method"`
	Path      string      `json:"path"`
	Authority string      `json:"authority"`
	Source    string      `json:"source"`
	Route     string      `json:"route"`
	Headers   [][2]string `json:"headers"`
	scenarioBody
}

// scenarioResponse is the upstream's answer; a step without one gets 200 text/plain "ok".
type scenarioResponse struct {
	Status  int          `json:"status"`  // 200 by default
	Headers *[][2]string `json:"headers"` // content-type: text/plain by default
	scenarioBody
}

// scenarioBody is the body of a request or a response and how it arrives: Chunks as given, or
// Body (or BodySize bytes of 'x') in pieces of ChunkSize bytes. Trailers, when given, end the stream
// after the body; otherwise the last chunk (or, without a body, the headers) carries end_of_stream.
// EndStream false leaves the stream unended: no end_of_stream and no trailers.
type scenarioBody struct {
	Body      *string     `json:"body"`
	BodySize  int         `json:"body_size"`
	Chunks    []string    `json:"chunks"`
	ChunkSize int         `json:"chunk_size"`
	EndStream *bool       `json:"end_stream"`
	Trailers  [][2]string `json:"trailers"`
}

// ending is how the message ends: whether its last chunk (or its headers) carries end_of_stream,
// and the trailers that end it instead (nil when none are sent).
func (b *scenarioBody) ending() (eos bool, trailers envoyhost.Headers) {
	if b.EndStream != nil && !*b.EndStream {
		return false, nil
	}
	if b.Trailers != nil {
		return false, envoyhost.Headers(b.Trailers)
	}
	return true, nil
}

// expectation is what a step's observations must show; absent fields are not checked.
type expectation struct {
	Status         int               `json:"status"`
	Statuses       map[string]int    `json:"statuses"`
	Forwarded      *bool             `json:"forwarded"`
	Headers        map[string]string `json:"headers"`
	Absent         []string          `json:"absent"`
	Upstream       map[string]string `json:"upstream"`
	UpstreamAbsent []string          `json:"upstream_absent"`
	Remaining      map[string]int64  `json:"remaining"`
	GRPCStatus     *int32            `json:"grpc_status"`
	Action         string            `json:"action"`
	BodyContains   string            `json:"body_contains"`
	// The body bytes forwarded upstream and sent downstream (the upstream's or a local reply's), and
	// whether the host reset the stream.
	UpstreamBodyBytes   *int  `json:"upstream_body_bytes"`
	DownstreamBodyBytes *int  `json:"downstream_body_bytes"`
	Reset               *bool `json:"reset"`
	// Envoy's flow control and the body writes past the filter (envoyhost.Flow).
	ClientReadDisabled   *bool `json:"client_read_disabled"`
	UpstreamReadDisabled *bool `json:"upstream_read_disabled"`
	UpstreamChunks       *int  `json:"upstream_chunks"`
	DownstreamChunks     *int  `json:"downstream_chunks"`
}

// observation is what one request looked like to the client and to the upstream.
type observation struct {
	Action     string      `json:"action"`
	Status     int         `json:"status"`
	GRPCStatus int32       `json:"grpc_status"`
	Forwarded  bool        `json:"forwarded"`
	Upstream   [][2]string `json:"upstream"`
	Downstream [][2]string `json:"downstream"`
	Body       string      `json:"body"`
	// UpstreamBodyBytes and DownstreamBodyBytes count the body bytes that passed the filter.
	UpstreamBodyBytes   int  `json:"upstream_body_bytes"`
	DownstreamBodyBytes int  `json:"downstream_body_bytes"`
	Reset               bool `json:"reset"`
	// ClientReadDisabled and UpstreamReadDisabled report that Envoy stopped reading from the client
	// or the upstream; UpstreamChunks and DownstreamChunks count the body writes past the filter.
	ClientReadDisabled   bool `json:"client_read_disabled"`
	UpstreamReadDisabled bool `json:"upstream_read_disabled"`
	UpstreamChunks       int  `json:"upstream_chunks"`
	DownstreamChunks     int  `json:"downstream_chunks"`
}

// outcome is one engine's run of one scenario.
type outcome struct {
	Name            string           `json:"name"`
	StartFailed     bool             `json:"start_failed"`
	StartError      string           `json:"start_error"`
	CriticalLogs    []string         `json:"critical_logs"`
	Steps           [][]observation  `json:"steps"`
	Metrics         map[string]int64 `json:"metrics"`
	FailedVMs       []int            `json:"failed_vms"`
	VMFailures      []string         `json:"vm_failures"`
	PollOneoffCalls int64            `json:"poll_oneoff_calls"`
}

func TestTheSharedScenariosRunAlikeOnWazeroAndV8(t *testing.T) {
	modules := map[string]string{"meshlimit": filepath.Join("..", "build", "meshlimit.wasm")}
	buildHostGuests(t, modules)
	wasm := map[string][]byte{}
	snapshot := t.TempDir()
	for name, path := range modules {
		b, err := os.ReadFile(path)
		require.NoError(t, err, "%s is missing: run `make wasm`", path)
		wasm[name] = b
		// V8 runs these very bytes, even if the build rewrites the file meanwhile.
		modules[name] = filepath.Join(snapshot, name+".wasm")
		require.NoError(t, os.WriteFile(modules[name], b, 0o600))
	}
	files, err := filepath.Glob(filepath.Join("scenarios", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no scenarios in e2e/scenarios")
	onV8 := runOnV8(t, modules, files)
	for _, f := range files {
		scs := readScenarios(t, f)
		require.Len(t, onV8[filepath.Base(f)], len(scs), "the V8 host ran every scenario of %s", f)
		for i, sc := range scs {
			t.Run(strings.TrimSuffix(filepath.Base(f), ".json")+"/"+sc.Name, func(t *testing.T) {
				t.Parallel() // each scenario has its own process, clock and plugin
				v8 := onV8[filepath.Base(f)][i]
				require.Contains(t, wasm, sc.moduleName(), "the scenario's module")
				wz := runOnWazero(t, wasm[sc.moduleName()], sc)
				for engine, o := range map[string]outcome{"wazero": wz, "v8": v8} {
					checkOutcome(t, engine, sc, o)
				}
				sameOnBothEngines(t, wz, v8)
			})
		}
	}
}

// sameOnBothEngines fails at the first step where the engines observed something different, then on
// any other difference (metrics, logs, failed VMs).
func sameOnBothEngines(t *testing.T, wz, v8 outcome) {
	t.Helper()
	for i := range min(len(wz.Steps), len(v8.Steps)) {
		if !assert.Equal(t, wz.Steps[i], v8.Steps[i], "the engines diverge at step %d (expected: wazero, actual: V8)", i+1) {
			return
		}
	}
	// Each host words its own wrapper of Envoy's messages and its engine's trap messages.
	wz.StartError, v8.StartError, wz.VMFailures, v8.VMFailures = "", "", nil, nil
	assert.Equal(t, wz, v8, "the engines diverge (expected: wazero, actual: V8)")
}

func readScenarios(t *testing.T, file string) []scenario {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var scs []scenario
	require.NoError(t, dec.Decode(&scs), "%s", file)
	return scs
}

func (sc *scenario) moduleName() string {
	if sc.Module == "" {
		return "meshlimit"
	}
	return sc.Module
}

// buildHostGuests compiles the host tests' guest modules (internal/envoyhost/testdata), which
// exercise host functions the filter does not use, and adds their paths to modules.
func buildHostGuests(t *testing.T, modules map[string]string) {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"guest", "badimport"} {
		out := filepath.Join(dir, name+".wasm")
		cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, "../internal/envoyhost/testdata/"+name)
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
		b, err := cmd.CombinedOutput()
		require.NoError(t, err, "building %s: %s", name, b)
		modules[name] = out
	}
}

// runOnV8 runs every file on the V8 host in one node process.
func runOnV8(t *testing.T, modules map[string]string, files []string) map[string][]outcome {
	t.Helper()
	node, err := exec.LookPath("node")
	require.NoError(t, err, "node (Node.js, whose V8 is the engine Envoy uses) is not installed: apt-get install nodejs. "+
		"The shared scenarios must run on V8 as well as on wazero.")
	// Reading the host's sources makes them inputs of the test, so that go test's cache does not
	// answer for a V8 host that changed.
	sources, err := filepath.Glob(filepath.Join("v8host", "*.js"))
	require.NoError(t, err)
	for _, f := range sources {
		_, err := os.ReadFile(f)
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := append(append([]string(nil), v8Flags...), filepath.Join("v8host", "main.js"), "scenarios")
	for name, path := range modules {
		args = append(args, "--module", name+"="+path)
	}
	cmd := exec.CommandContext(ctx, node, append(args, files...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "the V8 host failed: %s", stderr.String())
	var res map[string][]outcome
	require.NoError(t, json.Unmarshal(out, &res))
	return res
}

// runOnWazero runs one scenario on the wazero host, the way the V8 host runs it.
func runOnWazero(t *testing.T, wasm []byte, sc scenario) outcome {
	t.Helper()
	// The configuration's bytes are the V8 host's (JSON.stringify of the parsed config: compact), so
	// that the guest's heap, and what it logs of it, is laid out alike on both engines.
	var compact bytes.Buffer
	if len(sc.Config) > 0 {
		require.NoError(t, json.Compact(&compact, sc.Config))
	}
	config := compact.String()
	if sc.ConfigText != nil {
		config = *sc.ConfigText
	}
	out := outcome{Name: sc.Name, CriticalLogs: []string{}, Steps: [][]observation{}, FailedVMs: []int{}, VMFailures: []string{}}
	critical := func(e envoyhost.LogEntry) {
		if e.Level == envoyhost.LogCritical && !strings.HasPrefix(e.Message, "Function: ") {
			out.CriticalLogs = append(out.CriticalLogs, e.Message)
		}
	}
	proc := envoyhost.NewProcess()
	p, err := envoyhost.NewPlugin(context.Background(), wasm, envoyhost.Config{
		VMID: "meshlimit", PluginName: "istio-system.meshlimit", RootID: "meshlimit", PluginConfig: []byte(config),
		Workers: max(sc.Workers, 1), BufferLimit: sc.BufferLimit, Clock: envoyhost.NewClock(epoch), Process: proc, LogLevel: envoyhost.LogInfo, OnLog: critical,
		Env: sc.Env,
	})
	if err != nil {
		out.StartFailed, out.StartError = true, err.Error()
		out.Metrics = metricValues(proc)
		return out
	}
	defer p.Close()
	open := map[string]*scenarioStream{}
	for _, st := range sc.Steps {
		out.Steps = append(out.Steps, runStepOnWazero(t, p, open, st))
	}
	for _, o := range open {
		require.NoError(t, o.s.Close())
	}
	if sc.moduleName() == "meshlimit" {
		flushCounters(p) // the counters meshlimit keeps in the guest reach the host on a tick
	}
	out.Metrics = metricValues(proc)
	for _, vm := range p.VMs() {
		if err := vm.Failed(); err != nil {
			out.FailedVMs = append(out.FailedVMs, vm.Index())
			out.VMFailures = append(out.VMFailures, err.Error())
		}
	}
	out.PollOneoffCalls = p.PollOneoffCalls()
	return out
}

// scenarioStream is the stream of an open step, and whether the upstream answered it yet.
type scenarioStream struct {
	s         *envoyhost.Stream
	responded bool
}

// respond sends the upstream's answer r if the request was let through and not answered yet.
func (o *scenarioStream) respond(t *testing.T, r *scenarioResponse) {
	if !o.responded && streamState(o.s) == envoyhost.ActionContinue {
		o.responded = true
		sendResponse(t, o.s, r)
	}
}

// answer sends the upstream's answer r once the request headers went upstream, whatever the
// request body does: the upstream of a bidirectional stream or a WebSocket answers early.
func (o *scenarioStream) answer(t *testing.T, r *scenarioResponse) {
	if !o.responded && o.s.UpstreamHeaders() != nil && streamState(o.s) != envoyhost.ActionStop {
		o.responded = true
		sendResponse(t, o.s, r)
	}
}

// send sends more of the request's body (or, with a response, of the response's) through s.
func (o *scenarioStream) send(t *testing.T, st scenarioStep) {
	t.Helper()
	if st.Response != nil {
		require.True(t, o.responded, "send: the upstream has not answered yet")
		sendBody(t, o.s.SendResponseBody, o.s.SendResponseTrailers, &st.Response.scenarioBody)
		return
	}
	sendBody(t, o.s.SendRequestBody, o.s.SendRequestTrailers, &st.Request.scenarioBody)
}

func runStepOnWazero(t *testing.T, p *envoyhost.Plugin, open map[string]*scenarioStream, st scenarioStep) []observation {
	t.Helper()
	switch {
	case st.AdvanceMS != nil:
		p.Clock().Advance(time.Duration(*st.AdvanceMS) * time.Millisecond)
		return []observation{}
	case st.Open != nil:
		s := p.VM(st.VM).NewStream(st.Request.build().Info)
		sendRequest(t, s, st.Request)
		open[*st.Open] = &scenarioStream{s: s}
		return []observation{observeStream(s, streamState(s).String())}
	case st.Check != nil:
		s := open[*st.Check].s
		return []observation{observeStream(s, streamState(s).String())}
	case st.Respond != nil:
		o := open[*st.Respond]
		o.respond(t, st.Response)
		return []observation{observeStream(o.s, streamState(o.s).String())}
	case st.Answer != nil:
		o := open[*st.Answer]
		o.answer(t, st.Response)
		return []observation{observeStream(o.s, streamState(o.s).String())}
	case st.Send != nil:
		o := open[*st.Send]
		o.send(t, st)
		return []observation{observeStream(o.s, streamState(o.s).String())}
	case st.Finish != nil:
		o := open[*st.Finish]
		delete(open, *st.Finish)
		o.respond(t, st.Response)
		require.NoError(t, o.s.Close())
		return []observation{observeStream(o.s, "")}
	}
	obs := []observation{}
	for i := range max(st.Repeat, 1) {
		vm := st.VM
		if len(st.VMs) > 0 {
			vm = st.VMs[i%len(st.VMs)]
		}
		s := p.VM(vm).NewStream(st.Request.build().Info)
		sendRequest(t, s, st.Request)
		if streamState(s) == envoyhost.ActionContinue {
			sendResponse(t, s, st.Response)
		}
		require.NoError(t, s.Close())
		obs = append(obs, observeStream(s, ""))
	}
	return obs
}

// sendRequest sends a scenario request's headers, body chunks and trailers through a new stream.
func sendRequest(t *testing.T, s *envoyhost.Stream, r *scenarioRequest) {
	t.Helper()
	chunks := r.chunks()
	eos, trailers := r.ending()
	_, err := s.SendRequestHeaders(r.build().Headers, eos && len(chunks) == 0)
	require.NoError(t, err)
	sendMessage(t, s.SendRequestBody, s.SendRequestTrailers, chunks, eos, trailers)
}

// sendBody sends a body's chunks, then its trailers, through one direction of a stream.
func sendBody(t *testing.T, body func([]byte, bool) (envoyhost.Action, error), tr func(envoyhost.Headers) (envoyhost.Action, error), b *scenarioBody) {
	t.Helper()
	eos, trailers := b.ending()
	sendMessage(t, body, tr, b.chunks(), eos, trailers)
}

func sendMessage(t *testing.T, body func([]byte, bool) (envoyhost.Action, error), tr func(envoyhost.Headers) (envoyhost.Action, error), chunks [][]byte, eos bool, trailers envoyhost.Headers) {
	t.Helper()
	for i, c := range chunks {
		_, err := body(c, eos && i == len(chunks)-1)
		require.NoError(t, err)
	}
	if trailers != nil {
		_, err := tr(trailers)
		require.NoError(t, err)
	}
}

// sendResponse sends the upstream's answer (200 text/plain "ok" when r is nil) through a stream
// whose request was let through.
func sendResponse(t *testing.T, s *envoyhost.Stream, r *scenarioResponse) {
	t.Helper()
	h, chunks, eos := ok200.Headers, [][]byte{ok200.Body}, true
	var trailers envoyhost.Headers
	if r != nil {
		h = envoyhost.Headers{{":status", strconv.Itoa(cmp.Or(r.Status, 200))}}
		if r.Headers == nil {
			h = append(h, [2]string{"content-type", "text/plain"})
		} else {
			h = append(h, *r.Headers...)
		}
		chunks = r.chunks()
		eos, trailers = r.ending()
	}
	_, err := s.SendResponseHeaders(h, eos && len(chunks) == 0)
	require.NoError(t, err)
	sendMessage(t, s.SendResponseBody, s.SendResponseTrailers, chunks, eos, trailers)
}

// chunks is the body as the list of chunks it arrives in.
func (b *scenarioBody) chunks() [][]byte {
	if b.Chunks != nil {
		out := make([][]byte, len(b.Chunks))
		for i, c := range b.Chunks {
			out[i] = []byte(c)
		}
		return out
	}
	body := bytes.Repeat([]byte("x"), b.BodySize)
	if b.Body != nil {
		body = []byte(*b.Body)
	}
	size := cmp.Or(b.ChunkSize, len(body))
	var out [][]byte
	for len(body) > 0 {
		n := min(size, len(body))
		out = append(out, body[:n])
		body = body[n:]
	}
	return out
}

// streamState reports a stream's state without waiting: ticks run inside Clock.Advance, so nothing
// changes between steps.
func streamState(s *envoyhost.Stream) envoyhost.Action {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	act, _ := s.Wait(ctx)
	return act
}

func (r *scenarioRequest) build() *envoyhost.Request {
	or := func(s, def string) string {
		if s == "" {
			return def
		}
		return s
	}
	h := envoyhost.Headers{{":method", or(r.Method, "GET")}, {":path", or(r.Path, "/")}, {":authority", or(r.Authority, "a.example")}, {":scheme", "http"}}
	return &envoyhost.Request{
		Headers: append(h, r.Headers...),
		Info:    envoyhost.StreamInfo{SourceAddress: or(r.Source, "192.0.2.1:40000"), RouteName: r.Route},
	}
}

func observeStream(s *envoyhost.Stream, action string) observation {
	o := observeResult(envoyhost.Result{LocalReply: s.LocalReply(), Upstream: s.UpstreamHeaders(), Downstream: s.DownstreamHeaders()}, action)
	o.UpstreamBodyBytes, o.DownstreamBodyBytes, o.Reset = len(s.UpstreamBody()), len(s.DownstreamBody()), s.Reset()
	req, resp := s.Flow()
	o.ClientReadDisabled, o.UpstreamReadDisabled = req.ReadDisabled, resp.ReadDisabled
	o.UpstreamChunks, o.DownstreamChunks = req.Chunks, resp.Chunks
	return o
}

func observeResult(res envoyhost.Result, action string) observation {
	o := observation{Action: action, GRPCStatus: -1, Forwarded: res.Upstream != nil,
		Upstream: sortedHeaders(res.Upstream), Downstream: sortedHeaders(res.Downstream)}
	if code, ok := res.Downstream.Get(":status"); ok {
		o.Status, _ = strconv.Atoi(code)
	}
	if r := res.LocalReply; r != nil {
		o.Status, o.GRPCStatus, o.Body = r.Status, r.GRPCStatus, string(r.Body)
	}
	return o
}

func sortedHeaders(h envoyhost.Headers) [][2]string {
	if h == nil {
		return nil
	}
	out := append([][2]string{}, h...)
	sort.Slice(out, func(i, j int) bool { return out[i][0]+"\x00"+out[i][1] < out[j][0]+"\x00"+out[j][1] })
	return out
}

func metricValues(proc *envoyhost.Process) map[string]int64 {
	out := map[string]int64{}
	for name, m := range proc.Metrics() {
		if m.Type != envoyhost.Histogram {
			out[name] = m.Value
		}
	}
	return out
}

// checkOutcome checks one engine's outcome against the scenario's expectations.
func checkOutcome(t *testing.T, engine string, sc scenario, o outcome) {
	t.Helper()
	if f := sc.ExpectStartFailure; f != nil {
		assert.True(t, o.StartFailed, "%s: plugin start must fail", engine)
		if f.ErrorContains == "" {
			f.ErrorContains = "Failed to configure base Wasm plugin"
		}
		assert.Contains(t, o.StartError, f.ErrorContains, engine)
		if f.LogContains != "" {
			assert.True(t, containsLine(o.CriticalLogs, f.LogContains),
				"%s: a critical log line contains %q; got %q", engine, f.LogContains, o.CriticalLogs)
		}
		return
	}
	require.False(t, o.StartFailed, "%s: the plugin starts: %s %q", engine, o.StartError, o.CriticalLogs)
	require.Len(t, o.Steps, len(sc.Steps), engine)
	for i, st := range sc.Steps {
		if st.Expect != nil {
			checkStep(t, engine+" step "+strconv.Itoa(i+1), *st.Expect, o.Steps[i])
		}
	}
	for name, want := range sc.ExpectMetrics {
		assert.Equal(t, want, o.Metrics[name], "%s: metric %s", engine, name)
	}
	assert.Equal(t, append([]int{}, sc.ExpectFailedVMs...), o.FailedVMs, "%s: the failed VMs %q", engine, o.VMFailures)
	for _, reason := range o.VMFailures {
		assert.Contains(t, reason, sc.ExpectVMFailure, "%s: why the VM failed", engine)
	}
	assert.Equal(t, sc.ExpectPollOneoff, o.PollOneoffCalls, "%s: poll_oneoff calls (the filter's Go runtime must never wait)", engine)
}

func checkStep(t *testing.T, where string, e expectation, obs []observation) {
	t.Helper()
	if e.Statuses != nil {
		got := map[string]int{}
		for _, o := range obs {
			got[strconv.Itoa(o.Status)]++
		}
		assert.Equal(t, e.Statuses, got, "%s: statuses", where)
	}
	for _, o := range obs {
		checkObservation(t, where, e, o)
	}
}

func checkObservation(t *testing.T, where string, e expectation, o observation) {
	t.Helper()
	if e.Status != 0 {
		assert.Equal(t, e.Status, o.Status, "%s: status", where)
	}
	if e.Action != "" {
		assert.Equal(t, e.Action, o.Action, "%s: action", where)
	}
	if e.Forwarded != nil {
		assert.Equal(t, *e.Forwarded, o.Forwarded, "%s: forwarded upstream", where)
	}
	if e.GRPCStatus != nil {
		assert.Equal(t, *e.GRPCStatus, o.GRPCStatus, "%s: grpc status", where)
	}
	assert.Contains(t, o.Body, e.BodyContains, "%s: body", where)
	if e.UpstreamBodyBytes != nil {
		assert.Equal(t, *e.UpstreamBodyBytes, o.UpstreamBodyBytes, "%s: body bytes forwarded upstream", where)
	}
	if e.DownstreamBodyBytes != nil {
		assert.Equal(t, *e.DownstreamBodyBytes, o.DownstreamBodyBytes, "%s: body bytes sent downstream", where)
	}
	if e.Reset != nil {
		assert.Equal(t, *e.Reset, o.Reset, "%s: stream reset", where)
	}
	checkFlow(t, where, e, o)
	for name, want := range e.Headers {
		got, ok := header(o.Downstream, name)
		if assert.True(t, ok, "%s: downstream header %s present", where, name) {
			assert.Equal(t, want, got, "%s: downstream header %s", where, name)
		}
	}
	for _, name := range e.Absent {
		_, ok := header(o.Downstream, name)
		assert.False(t, ok, "%s: downstream header %s absent", where, name)
	}
	for name, want := range e.Upstream {
		got, ok := header(o.Upstream, name)
		if assert.True(t, ok, "%s: upstream header %s present", where, name) {
			assert.Equal(t, want, got, "%s: upstream header %s", where, name)
		}
	}
	for _, name := range e.UpstreamAbsent {
		_, ok := header(o.Upstream, name)
		assert.False(t, ok, "%s: upstream header %s absent", where, name)
	}
	for policy, want := range e.Remaining {
		got, err := remaining(o.Downstream, policy)
		if assert.NoError(t, err, where) {
			assert.Equal(t, want, got, "%s: remaining quota of %s", where, policy)
		}
	}
}

// checkFlow checks what Envoy's flow control did and how many body writes passed the filter.
func checkFlow(t *testing.T, where string, e expectation, o observation) {
	t.Helper()
	for _, c := range []struct {
		want *bool
		got  bool
		what string
	}{{e.ClientReadDisabled, o.ClientReadDisabled, "Envoy stopped reading from the client"}, {e.UpstreamReadDisabled, o.UpstreamReadDisabled, "Envoy stopped reading from the upstream"}} {
		if c.want != nil {
			assert.Equal(t, *c.want, c.got, "%s: %s", where, c.what)
		}
	}
	if e.UpstreamChunks != nil {
		assert.Equal(t, *e.UpstreamChunks, o.UpstreamChunks, "%s: body writes upstream", where)
	}
	if e.DownstreamChunks != nil {
		assert.Equal(t, *e.DownstreamChunks, o.DownstreamChunks, "%s: body writes downstream", where)
	}
}

func header(h [][2]string, name string) (string, bool) {
	return envoyhost.Headers(h).Get(name)
}

// remaining reads r of the policy in the RateLimit field.
func remaining(h [][2]string, policy string) (int64, error) {
	field, ok := header(h, "ratelimit")
	if !ok {
		return 0, errors.New("no ratelimit header")
	}
	ps, err := sfv.ParsePolicies(field)
	if err != nil {
		return 0, err
	}
	for _, p := range ps {
		if p.Name == policy {
			return p.Params["r"], nil
		}
	}
	return 0, errors.New("policy " + policy + " not in " + field)
}

func containsLine(lines []string, substr string) bool {
	for _, l := range lines {
		if strings.Contains(l, substr) {
			return true
		}
	}
	return false
}
