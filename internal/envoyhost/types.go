package envoyhost

import (
	"strings"
)

// Generation selects which proxy-wasm-cpp-host generation the host reproduces (§1.1).
// The zero value is Gen427, what deployed Envoy ≥ 1.33 ships.
type Generation int

const (
	// Gen427 is the cpp-host after PR #427: 18 WASI functions, poll_oneoff returns
	// ENOSYS, narrow restricted-callback allow-lists.
	Gen427 Generation = iota
	// Gen533 is the cpp-host after PR #533: 27 more WASI functions, poll_oneoff
	// reports zero events, wider allow-lists.
	Gen533
	// GenPre133 is Envoy before 1.33: Gen427 without sched_yield, poll_oneoff and
	// fd_fdstat_set_flags, so a Go 1.24+ module fails to link.
	GenPre133
)

// String returns the generation's name: "#427", "#533" or "pre-1.33".
func (g Generation) String() string {
	switch g {
	case Gen427:
		return "#427"
	case Gen533:
		return "#533"
	case GenPre133:
		return "pre-1.33"
	}
	return "unknown"
}

// Status is a proxy-wasm status code (spec proxy_status_t, §2).
type Status uint32

// Status codes returned by host functions.
const (
	StatusOK                   Status = 0
	StatusNotFound             Status = 1
	StatusBadArgument          Status = 2
	StatusSerializationFailure Status = 3
	StatusParseFailure         Status = 4
	StatusInvalidMemoryAccess  Status = 6
	StatusEmpty                Status = 7
	StatusCasMismatch          Status = 8
	StatusInternalFailure      Status = 10
	StatusBrokenConnection     Status = 11
	StatusUnimplemented        Status = 12
)

// LogLevel is a proxy-wasm log level. The zero value is LogTrace.
type LogLevel int

// Log levels, numbered as in the proxy-wasm ABI.
const (
	LogTrace LogLevel = iota
	LogDebug
	LogInfo
	LogWarn
	LogError
	LogCritical
)

// String returns the level's lower-case name.
func (l LogLevel) String() string {
	switch l {
	case LogTrace:
		return "trace"
	case LogDebug:
		return "debug"
	case LogInfo:
		return "info"
	case LogWarn:
		return "warn"
	case LogError:
		return "error"
	case LogCritical:
		return "critical"
	}
	return "unknown"
}

// VM indices used in LogEntry.VM for the VMs that tests cannot drive.
const (
	BaseVM   = -2 // the base VM, which only runs _initialize
	CanaryVM = -1 // the canary, dropped after proxy_on_configure
)

// LogEntry is one captured log line: a proxy_log call, one fd_write to stdout (info)
// or stderr (error), or a message the host logs the way Envoy would (a failed guest
// call at critical, WASI trace messages).
type LogEntry struct {
	VM      int // index in Plugin.VMs, or BaseVM or CanaryVM
	Level   LogLevel
	Message string
}

// Action is the state of a stream direction after the host delivered something to it.
type Action int

const (
	// ActionContinue means the filter let the data through (iteration continued).
	ActionContinue Action = iota
	// ActionPause means the filter stopped iteration and has not resumed it yet;
	// Stream.Wait blocks until it does.
	ActionPause
	// ActionStop means the stream ended: a local reply was sent (Stream.LocalReply)
	// or the filter reset it (Stream.Reset).
	ActionStop
)

// String returns "continue", "pause" or "stop".
func (a Action) String() string {
	switch a {
	case ActionContinue:
		return "continue"
	case ActionPause:
		return "pause"
	case ActionStop:
		return "stop"
	}
	return "unknown"
}

// Headers is an ordered list of header (name, value) pairs, pseudo-headers first,
// as Envoy keeps them. Names are compared case-insensitively and stored lower-case by
// the host.
type Headers [][2]string

// Get returns the first value of name and whether it was present.
func (h Headers) Get(name string) (string, bool) {
	for _, kv := range h {
		if strings.EqualFold(kv[0], name) {
			return kv[1], true
		}
	}
	return "", false
}

// Values returns every value of name, in order.
func (h Headers) Values(name string) []string {
	var vs []string
	for _, kv := range h {
		if strings.EqualFold(kv[0], name) {
			vs = append(vs, kv[1])
		}
	}
	return vs
}

// Clone returns a copy of h that shares no memory with it.
func (h Headers) Clone() Headers {
	if h == nil {
		return nil
	}
	return append(Headers(nil), h...)
}

// LocalReply is a response the filter (proxy_send_local_response) or the host
// (wasm_fail_stream) sent instead of forwarding the request.
type LocalReply struct {
	Status     int
	Headers    Headers // the headers the filter passed, without :status
	Body       []byte
	GRPCStatus int32  // -1 when the filter asked for no grpc-status
	Details    string // response code details, with spaces replaced by '_'
}

// MetricType is the kind of a metric defined with proxy_define_metric.
type MetricType int

// Metric types, numbered as in the proxy-wasm ABI.
const (
	Counter MetricType = iota
	Gauge
	Histogram
)

// Metric is a snapshot of one process-wide metric.
type Metric struct {
	Type MetricType
	// Value is the counter's or gauge's value; for a histogram, the last recorded value.
	Value int64
	// Count and Sum summarise the values recorded into a histogram.
	Count uint64
	Sum   uint64
}

// Node is the Envoy node identity, readable as xds.node, xds.node.id,
// xds.node.cluster and xds.node.metadata.<KEY>.
type Node struct {
	ID       string
	Cluster  string
	Metadata map[string]string
}

// StreamInfo carries the per-request facts Envoy knows from the connection and the
// route, readable through proxy_get_property (§6).
type StreamInfo struct {
	// SourceAddress is source.address, "ip:port" ("[ip]:port" for IPv6). Empty means
	// "127.0.0.1:40000".
	SourceAddress string
	// DestinationAddress is destination.address. Empty means "127.0.0.1:10000".
	DestinationAddress string
	// RouteName and ClusterName are xds.route_name and xds.cluster_name; empty means
	// NotFound.
	RouteName   string
	ClusterName string
	// Protocol is request.protocol. Empty means "HTTP/1.1".
	Protocol string
	// Properties overrides or adds properties for this stream, keyed by the path as the
	// guest sends it (segments joined with NUL; see Path).
	Properties map[string][]byte
}

// Path joins property path segments the way proxy-wasm encodes them: with NUL
// separators and no trailing NUL.
func Path(segments ...string) string { return strings.Join(segments, "\x00") }

// Request is one downstream request for VM.RoundTrip.
type Request struct {
	// Headers must hold the pseudo-headers :method, :path, :authority and usually
	// :scheme.
	Headers  Headers
	Body     []byte  // nil or empty: the headers end the stream unless Trailers is set
	Trailers Headers // nil: no trailers
	Info     StreamInfo
}

// Response is a canned upstream response for VM.RoundTrip.
type Response struct {
	Headers  Headers // must hold :status
	Body     []byte
	Trailers Headers
}

// Result is what one VM.RoundTrip produced.
type Result struct {
	// LocalReply is non-nil when the filter or the host answered locally; the
	// upstream response was then not used.
	LocalReply *LocalReply
	// Upstream is the request headers as forwarded upstream, nil when the request was
	// never forwarded.
	Upstream Headers
	// Downstream is the response headers sent downstream after the filter's
	// proxy_on_response_headers (for a local reply too, except host failure replies).
	Downstream Headers
	// Reset reports that the filter reset the stream with proxy_close_stream.
	Reset bool
	// FilterState holds what the filter set with proxy_set_property on this stream, keyed
	// as Envoy names the filter state an access log reads: "wasm.<path>" (path segments
	// joined with "."; a one-segment path is the name the guest passed).
	FilterState map[string]string
}
