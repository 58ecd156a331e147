package filter

import (
	"errors"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/meshlimit/meshlimit/abi"
	"github.com/meshlimit/meshlimit/sharedstate"
)

// sdkHost is the host of the compiled module: the proxy-wasm SDK, and package abi for the calls
// that must not allocate (shared data, properties, header values, added headers, the local reply).
// It is the only file of the filter that calls either. Natively, abi goes through the SDK, so the
// SDK's emulator (proxytest) runs it.
//
// It must only be used from proxy-wasm callbacks (not during _initialize, where Envoy forbids host
// calls). Get receives the host's copy of a value into one buffer that it reuses, so a read
// allocates nothing once the buffer has grown to the largest value: the bytes Get returns are
// valid until the next Get, which is what sharedstate's callers rely on (they finish with a value
// before reading another).
type sdkHost struct {
	shared []byte // what Get's last value views
	sent   []byte // the local reply's headers, serialized as the host reads them
}

// Get implements sharedstate.Store.
func (s *sdkHost) Get(key string) ([]byte, uint32, error) {
	v, cas, st := abi.GetSharedData(key, s.shared)
	if cap(v) > cap(s.shared) {
		s.shared = v[:0] // the value did not fit: keep the larger memory for the next read
	}
	return v, cas, storeErr(st)
}

// Set implements sharedstate.Store.
func (*sdkHost) Set(key string, value []byte, cas uint32) error {
	return storeErr(abi.SetSharedData(key, value, cas))
}

// storeErr maps a host status to the errors sharedstate.Store reports.
func storeErr(st abi.Status) error {
	switch st {
	case abi.StatusOK:
		return nil
	case abi.StatusNotFound:
		return sharedstate.ErrNotFound
	case abi.StatusCasMismatch:
		return sharedstate.ErrCasMismatch
	}
	return st
}

func (*sdkHost) now() int64 { return abi.UnixNano() }

func (*sdkHost) setTick(ms uint32) error { return proxywasm.SetTickPeriodMilliSeconds(ms) }

func (*sdkHost) config() ([]byte, error) {
	data, err := proxywasm.GetPluginConfiguration()
	if errors.Is(err, types.ErrorStatusNotFound) {
		return nil, nil
	}
	return data, err
}

func (*sdkHost) property(path, buf []byte) ([]byte, bool) {
	v, st := abi.GetProperty(path, buf)
	return v, st == abi.StatusOK
}

func (*sdkHost) setProperty(path, value []byte) { _ = abi.SetProperty(path, value) }

// headerMap is the header map of a part of the stream (abi's numbering, proxy-wasm's).
func headerMap(p part) abi.MapType {
	if p == responsePart {
		return abi.ResponseHeaders
	}
	return abi.RequestHeaders
}

func (*sdkHost) header(p part, name string, buf []byte) ([]byte, bool) {
	v, st := abi.GetHeader(headerMap(p), name, buf)
	return v, st == abi.StatusOK
}

func (*sdkHost) headers(p part) ([][2]string, error) {
	switch p {
	case requestPart:
		return proxywasm.GetHttpRequestHeaders()
	case responsePart:
		return proxywasm.GetHttpResponseHeaders()
	}
	return proxywasm.GetHttpCallResponseHeaders()
}

func (*sdkHost) addHeader(p part, name string, value []byte) {
	_ = abi.AddHeader(headerMap(p), name, value)
}

func (*sdkHost) replaceHeader(p part, name, value string) bool {
	if p == responsePart {
		return proxywasm.ReplaceHttpResponseHeader(name, value) == nil
	}
	return proxywasm.ReplaceHttpRequestHeader(name, value) == nil
}

func (*sdkHost) body(p part, start, size int) ([]byte, error) {
	switch p {
	case requestPart:
		return proxywasm.GetHttpRequestBody(start, size)
	case responsePart:
		return proxywasm.GetHttpResponseBody(start, size)
	}
	return proxywasm.GetHttpCallResponseBody(start, size)
}

func (*sdkHost) chunk(p part, size int, buf []byte) ([]byte, bool) {
	v, st := abi.GetBody(uint32(p), 0, size, buf)
	return v, st == abi.StatusOK
}

func (*sdkHost) setBody(p part, data []byte) error {
	if p == responsePart {
		return proxywasm.ReplaceHttpResponseBody(data)
	}
	return proxywasm.ReplaceHttpRequestBody(data)
}

func (*sdkHost) closeStream() {
	if st := abi.CloseStream(); st != abi.StatusOK {
		proxywasm.LogErrorf("meshlimit: resetting the stream: %v", st)
	}
}

func (*sdkHost) enter(stream uint32) bool { return proxywasm.SetEffectiveContext(stream) == nil }

func (*sdkHost) resume(p part) {
	if p == responsePart {
		if err := proxywasm.ResumeHttpResponse(); err != nil {
			proxywasm.LogErrorf("meshlimit: resuming the response: %v", err)
		}
		return
	}
	if err := proxywasm.ResumeHttpRequest(); err != nil {
		proxywasm.LogErrorf("meshlimit: resuming the request: %v", err)
	}
}

func (s *sdkHost) sendReply(status uint32, headers [][2]string, body []byte, grpcStatus int32) error {
	var st abi.Status
	if s.sent, st = abi.SendLocalResponse(status, headers, body, grpcStatus, s.sent); st != abi.StatusOK {
		return st
	}
	return nil
}

func (*sdkHost) dispatch(cluster string, headers [][2]string, body []byte, timeoutMs uint32, onAnswer func(numHeaders, bodySize, numTrailers int)) error {
	_, err := proxywasm.DispatchHttpCall(cluster, headers, body, nil, timeoutMs, onAnswer)
	return err
}

func (*sdkHost) defineMetric(gauge bool, name string) uint32 {
	if gauge {
		return uint32(proxywasm.DefineGaugeMetric(name))
	}
	return uint32(proxywasm.DefineCounterMetric(name))
}

// addMetric adds to a counter or a gauge: both are proxy_increment_metric, which the SDK's
// MetricGauge.Add calls with a signed delta (and panics on a refusal).
func (*sdkHost) addMetric(id uint32, delta int64) { proxywasm.MetricGauge(id).Add(delta) }

func (*sdkHost) metric(id uint32) int64 { return proxywasm.MetricGauge(id).Value() }

func (*sdkHost) log(l logLevel, msg string) {
	switch l {
	case logDebug:
		proxywasm.LogDebug(msg)
	case logInfo:
		proxywasm.LogInfo(msg)
	case logWarn:
		proxywasm.LogWarn(msg)
	case logError:
		proxywasm.LogError(msg)
	default:
		proxywasm.LogCritical(msg)
	}
}
