package filter

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
	"github.com/meshlimit/meshlimit/sharedstate"
)

// fakeHost is the host of the native feature tests: the proxy's shared data is that of the
// Envoy-faithful host (internal/envoyhost: Envoy's exact compare-and-swap), the clock is the test's, and every stream's
// headers, bodies, local reply and resumes, every call dispatched, every metric and every log line
// is recorded for the test to read. It answers a call as Envoy does: with the calling stream as the
// current context, and not at all once that stream is gone. The zero value is not usable: see
// newFakeHost.
type fakeHost struct {
	sharedData
	t        *testing.T
	clock    int64
	tick     uint32
	cfg      []byte
	props    map[string]string // by encoded path
	streams  map[uint32]*fakeStream
	cur      *fakeStream // the current stream; nil: the plugin's context
	next     uint32
	calls    []*fakeCall
	answer   *fakeCall // the call whose answer is being delivered
	metrics  []fakeMetric
	logs     []fakeLog
	refuse   fakeRefusals
	replyErr error            // what sendReply returns, when set
	plugins  []*pluginContext // started on f: counter flushes their counts first
	boom     string           // a host call that panics: "now", "answer" (its headers), "pairs" (the request's headers), "body", "header:<name>"
}

// fakeRefusals makes host calls fail.
type fakeRefusals struct {
	dispatch error // every dispatch
	tick     error // setTick
	config   error
}

type fakeStream struct {
	id        uint32
	req, resp [][2]string
	reqBody   []byte
	respBody  []byte
	reply     *fakeReply
	resumed   [2]int // request, response
	closed    int    // closeStream calls
	props     map[string]string
	gone      bool
}

type fakeReply struct {
	status  uint32
	headers [][2]string
	body    []byte
	grpc    int32
}

type fakeCall struct {
	stream   *fakeStream // nil: dispatched from the plugin's context (a tick)
	cluster  string
	headers  [][2]string
	body     string
	timeout  uint32
	onAnswer func(numHeaders, bodySize, numTrailers int)
	// the answer, once given
	answered bool
	aHeaders [][2]string
	aBody    []byte
}

type fakeMetric struct {
	name  string
	gauge bool
	value int64
}

type fakeLog struct {
	level logLevel
	msg   string
}

// sharedData is the shared data of one vm_id of an envoyhost.Process, as a sharedstate.Store. Set
// copies the key: sharedstate passes keys that view buffers it reuses, and the Process keeps the
// string it is given (its wasm host copies keys out of guest memory first).
type sharedData struct{ p *envoyhost.Process }

const fakeVMID = "meshlimit"

func (s sharedData) Get(key string) ([]byte, uint32, error) {
	v, cas, st := s.p.GetSharedData(fakeVMID, key)
	return v, cas, sharedErr(st)
}

func (s sharedData) Set(key string, value []byte, cas uint32) error {
	return sharedErr(s.p.SetSharedData(fakeVMID, strings.Clone(key), value, cas))
}

func sharedErr(st envoyhost.Status) error {
	switch st {
	case envoyhost.StatusOK:
		return nil
	case envoyhost.StatusNotFound:
		return sharedstate.ErrNotFound
	case envoyhost.StatusCasMismatch:
		return sharedstate.ErrCasMismatch
	}
	return fmt.Errorf("envoyhost: status %d", st)
}

// contended is shared data where every write of a key under prefix loses its race, as if another
// worker always wrote first.
type contended struct {
	sharedData
	prefix string
}

func (s contended) Set(key string, value []byte, cas uint32) error {
	if strings.HasPrefix(key, s.prefix) {
		return sharedstate.ErrCasMismatch
	}
	return s.sharedData.Set(key, value, cas)
}

// contendedUpdater is an updater on f's shared data where every write under prefix loses its race.
func contendedUpdater(f *fakeHost, prefix string) *sharedstate.Updater {
	u, err := sharedstate.NewUpdater(contended{f.sharedData, prefix}, "meshlimit/test.meshlimit/sentinel", 0)
	require.NoError(f.t, err)
	return u
}

// fakeEpoch is where the fake clock starts: a plausible unix time, far from 0.
const fakeEpoch = int64(1_767_225_600) * int64(time.Second)

func newFakeHost(t *testing.T) *fakeHost {
	return &fakeHost{sharedData: sharedData{envoyhost.NewProcess()}, t: t, clock: fakeEpoch, streams: map[uint32]*fakeStream{},
		props: map[string]string{"plugin_name": "test.meshlimit", "source\x00address": "192.0.2.10:5555"}}
}

func (f *fakeHost) now() int64 {
	f.explode("now")
	return f.clock
}

// explode panics when the test asked for a panic at call.
func (f *fakeHost) explode(call string) {
	if f.boom == call {
		panic("fake host: a panic in " + call)
	}
}

func (f *fakeHost) setTick(ms uint32) error {
	if f.refuse.tick != nil {
		return f.refuse.tick
	}
	f.tick = ms
	return nil
}

func (f *fakeHost) config() ([]byte, error) { return f.cfg, f.refuse.config }

func (f *fakeHost) property(path, buf []byte) ([]byte, bool) {
	v, ok := f.props[string(path)]
	if !ok {
		return buf[:0], false
	}
	return append(buf[:0], v...), true
}

func (f *fakeHost) setProperty(path, value []byte) {
	s := f.stream()
	if s.props == nil {
		s.props = map[string]string{}
	}
	s.props[string(path)] = string(value)
}

func (f *fakeHost) stream() *fakeStream {
	require.NotNil(f.t, f.cur, "a stream call outside a stream's callback")
	return f.cur
}

func (f *fakeHost) pairs(p part) *[][2]string {
	switch p {
	case requestPart:
		return &f.stream().req
	case responsePart:
		return &f.stream().resp
	}
	require.NotNil(f.t, f.answer, "an answer read outside a call's callback")
	return &f.answer.aHeaders
}

func (f *fakeHost) header(p part, name string, buf []byte) ([]byte, bool) {
	f.explode("header:" + name)
	for _, kv := range *f.pairs(p) {
		if kv[0] == name {
			return append(buf[:0], kv[1]...), true
		}
	}
	return buf[:0], false
}

func (f *fakeHost) headers(p part) ([][2]string, error) {
	switch p {
	case answerPart:
		f.explode("answer")
	case requestPart:
		f.explode("pairs")
	}
	return append([][2]string(nil), *f.pairs(p)...), nil
}

func (f *fakeHost) addHeader(p part, name string, value []byte) {
	hs := f.pairs(p)
	*hs = append(*hs, [2]string{name, string(value)})
}

func (f *fakeHost) replaceHeader(p part, name, value string) bool {
	hs := f.pairs(p)
	for i := range *hs {
		if (*hs)[i][0] == name {
			(*hs)[i][1] = value
			return true
		}
	}
	*hs = append(*hs, [2]string{name, value})
	return true
}

func (f *fakeHost) body(p part, start, size int) ([]byte, error) {
	f.explode("body")
	var b []byte
	switch p {
	case requestPart:
		b = f.stream().reqBody
	case responsePart:
		b = f.stream().respBody
	default:
		require.NotNil(f.t, f.answer, "an answer read outside a call's callback")
		b = f.answer.aBody
	}
	if start < 0 || size < 0 || start+size > len(b) {
		return nil, errors.New("fake host: body range out of bounds")
	}
	return append([]byte(nil), b[start:start+size]...), nil
}

func (f *fakeHost) enter(stream uint32) bool {
	s, ok := f.streams[stream]
	if !ok || s.gone {
		return false
	}
	f.cur = s
	return true
}

func (f *fakeHost) resume(p part) { f.stream().resumed[p]++ }

func (f *fakeHost) closeStream() { f.stream().closed++ }

func (f *fakeHost) chunk(p part, size int, buf []byte) ([]byte, bool) {
	b, err := f.body(p, 0, size)
	return append(buf[:0], b...), err == nil
}

func (f *fakeHost) setBody(p part, data []byte) error {
	s := f.stream()
	if p == responsePart {
		s.respBody = append([]byte(nil), data...)
	} else {
		s.reqBody = append([]byte(nil), data...)
	}
	return nil
}

func (f *fakeHost) sendReply(status uint32, headers [][2]string, body []byte, grpcStatus int32) error {
	if f.replyErr != nil {
		return f.replyErr
	}
	s := f.stream()
	require.Nil(f.t, s.reply, "a second local reply on stream %d", s.id)
	s.reply = &fakeReply{status: status, headers: append([][2]string(nil), headers...), body: append([]byte(nil), body...), grpc: grpcStatus}
	return nil
}

func (f *fakeHost) dispatch(cluster string, headers [][2]string, body []byte, timeoutMs uint32, onAnswer func(numHeaders, bodySize, numTrailers int)) error {
	if f.refuse.dispatch != nil {
		return f.refuse.dispatch
	}
	f.calls = append(f.calls, &fakeCall{stream: f.cur, cluster: cluster, headers: append([][2]string(nil), headers...),
		body: string(body), timeout: timeoutMs, onAnswer: onAnswer})
	return nil
}

func (f *fakeHost) defineMetric(gauge bool, name string) uint32 {
	for i, m := range f.metrics {
		if m.name == name {
			return uint32(i)
		}
	}
	f.metrics = append(f.metrics, fakeMetric{name: name, gauge: gauge})
	return uint32(len(f.metrics) - 1)
}

func (f *fakeHost) addMetric(id uint32, delta int64) {
	m := &f.metrics[id]
	require.True(f.t, m.gauge || delta > 0, "counter %s incremented by %d", m.name, delta)
	m.value += delta
}

func (f *fakeHost) metric(id uint32) int64 { return f.metrics[id].value }

func (f *fakeHost) log(l logLevel, msg string) { f.logs = append(f.logs, fakeLog{l, msg}) }

// The test's side.

// counter returns the value of the metric name (0 when it was never defined), once the plugins
// started on f flushed what they counted in the guest (as their next tick would).
func (f *fakeHost) counter(name string) int64 {
	for _, p := range f.plugins {
		p.stats.flush()
	}
	return f.hostCounter(name)
}

// hostCounter returns the value of the metric name as the host has it now, without a flush.
func (f *fakeHost) hostCounter(name string) int64 {
	for _, m := range f.metrics {
		if m.name == name {
			return m.value
		}
	}
	return 0
}

// logged returns the log lines of level l that contain s.
func (f *fakeHost) logged(l logLevel, s string) []string {
	var out []string
	for _, g := range f.logs {
		if g.level == l && strings.Contains(g.msg, s) {
			out = append(out, g.msg)
		}
	}
	return out
}

// start starts a plugin of configuration cfg on f and requires it to start.
func (f *fakeHost) start(cfg string) *pluginContext {
	f.t.Helper()
	p, status := f.startStatus(cfg)
	require.Equal(f.t, types.OnPluginStartStatusOK, status, "logs: %v", f.logs)
	return p
}

func (f *fakeHost) startStatus(cfg string) (*pluginContext, types.OnPluginStartStatus) {
	f.cfg = []byte(cfg)
	p := newPluginContext(f)
	f.plugins = append(f.plugins, p)
	f.cur = nil
	return p, p.OnPluginStart(0)
}

// fakeReq is a request's headers: a GET of path on a.example, with extra headers.
func fakeReq(path string, extra ...[2]string) [][2]string {
	return append([][2]string{{":method", "GET"}, {":path", path}, {":authority", "a.example"}}, extra...)
}

// open starts a stream of p on f and runs its request headers (eos: they end the request).
func (f *fakeHost) open(p *pluginContext, headers [][2]string, eos bool) (*httpContext, types.Action) {
	f.next++
	s := &fakeStream{id: f.next, req: headers}
	f.streams[s.id] = s
	h := p.NewHttpContext(s.id).(*httpContext)
	f.cur = s
	defer f.leave()
	return h, h.OnHttpRequestHeaders(len(headers), eos)
}

// leave ends a callback: no stream is current.
func (f *fakeHost) leave() { f.cur = nil }

// of returns the fake stream of h.
func (f *fakeHost) of(h *httpContext) *fakeStream { return f.streams[h.id] }

// requestBody delivers a chunk of h's request body (the whole buffered body, as Envoy does after a
// StopIterationAndBuffer).
func (f *fakeHost) requestBody(h *httpContext, chunk string, eos bool) types.Action {
	s := f.of(h)
	s.reqBody = append(s.reqBody, chunk...)
	f.cur = s
	defer f.leave()
	return h.OnHttpRequestBody(len(s.reqBody), eos)
}

// requestTrailers delivers h's request trailers.
func (f *fakeHost) requestTrailers(h *httpContext) types.Action {
	f.cur = f.of(h)
	defer f.leave()
	return h.OnHttpRequestTrailers(0)
}

// respond delivers the upstream's response headers to h (eos: they end the response).
func (f *fakeHost) respond(h *httpContext, headers [][2]string, eos bool) types.Action {
	s := f.of(h)
	s.resp = append(s.resp, headers...)
	f.cur = s
	defer f.leave()
	return h.OnHttpResponseHeaders(len(headers), eos)
}

// responseBody delivers a chunk of h's response body.
func (f *fakeHost) responseBody(h *httpContext, chunk string, eos bool) types.Action {
	s := f.of(h)
	s.respBody = []byte(chunk)
	f.cur = s
	defer f.leave()
	return h.OnHttpResponseBody(len(chunk), eos)
}

// responseTrailers delivers h's response trailers.
func (f *fakeHost) responseTrailers(h *httpContext) types.Action {
	f.cur = f.of(h)
	defer f.leave()
	return h.OnHttpResponseTrailers(0)
}

// end ends h's stream: OnHttpStreamDone, then the stream is gone.
func (f *fakeHost) end(h *httpContext) {
	s := f.of(h)
	f.cur = s
	h.OnHttpStreamDone()
	f.leave()
	s.gone = true
}

// pending returns the calls not answered yet.
func (f *fakeHost) pending() []*fakeCall {
	var out []*fakeCall
	for _, c := range f.calls {
		if !c.answered {
			out = append(out, c)
		}
	}
	return out
}

// callTo returns the one unanswered call to path, failing the test if there is not exactly one.
func (f *fakeHost) callTo(path string) *fakeCall {
	f.t.Helper()
	var out []*fakeCall
	for _, c := range f.pending() {
		if p, _ := pairValue(c.headers, ":path"); p == path {
			out = append(out, c)
		}
	}
	require.Len(f.t, out, 1, "one call to %s", path)
	return out[0]
}

// callOf returns the one unanswered call h's stream made.
func (f *fakeHost) callOf(h *httpContext) *fakeCall {
	f.t.Helper()
	var out []*fakeCall
	for _, c := range f.pending() {
		if c.stream != nil && c.stream == f.of(h) {
			out = append(out, c)
		}
	}
	require.Len(f.t, out, 1, "one call of stream %d", h.id)
	return out[0]
}

// answerCall delivers the answer to c (no headers: a reset), as Envoy would: dropped when the
// calling stream is gone.
func (f *fakeHost) answerCall(c *fakeCall, status, body string) {
	require.False(f.t, c.answered, "a call answered twice")
	c.answered = true
	if c.stream != nil && c.stream.gone {
		return
	}
	if status != "" {
		c.aHeaders = [][2]string{{":status", status}, {"content-type", "application/json"}}
	}
	c.aBody = []byte(body)
	f.cur, f.answer = c.stream, c
	defer func() { f.cur, f.answer = nil, nil }()
	c.onAnswer(len(c.aHeaders), len(c.aBody), 0)
}

// advance moves the clock on by d.
func (f *fakeHost) advance(d time.Duration) { f.clock += int64(d) }

// tickNow runs p's timer once at the current time.
func (f *fakeHost) tickNow(p *pluginContext) {
	f.cur = nil
	p.OnTick()
}

// pairValue returns the first value of name in h.
func pairValue(h [][2]string, name string) (string, bool) {
	for _, kv := range h {
		if kv[0] == name {
			return kv[1], true
		}
	}
	return "", false
}
