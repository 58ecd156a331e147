package filter

import (
	"github.com/meshlimit/meshlimit/abi"
	"github.com/meshlimit/meshlimit/sharedstate"
)

// hostStore is the sharedstate.Store of the proxy the plugin runs in: proxy_get_shared_data and
// proxy_set_shared_data, scoped by the host to the plugin's vm_id. It must only be used from
// proxy-wasm callbacks (not during _initialize, where Envoy forbids these calls).
//
// Get receives the host's copy of the value into one buffer that it reuses, so a read allocates
// nothing once the buffer has grown to the largest value: the bytes Get returns are valid until the
// next Get, which is what sharedstate's callers rely on (they finish with a value before reading
// another).
type hostStore struct{ buf []byte }

// Get implements sharedstate.Store.
func (s *hostStore) Get(key string) ([]byte, uint32, error) {
	v, cas, st := abi.GetSharedData(key, s.buf)
	if cap(v) > cap(s.buf) {
		s.buf = v[:0] // the value did not fit: keep the larger memory for the next read
	}
	return v, cas, storeErr(st)
}

// Set implements sharedstate.Store.
func (s *hostStore) Set(key string, value []byte, cas uint32) error {
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
