package sharedstate

import (
	"errors"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// HostStore is the Store of the proxy the plugin runs in: proxy_get_shared_data and
// proxy_set_shared_data, scoped by the host to the plugin's vm_id. It must only be used from proxy-wasm
// callbacks (not during _initialize, where Envoy forbids these calls).
//
// It goes through the SDK's functions, which allocate on every call. The filter uses a store of its
// own instead (filter/hoststore.go), which receives values into a reused buffer through package abi.
type HostStore struct{}

// Get implements Store. The value is a fresh copy made by the host.
func (HostStore) Get(key string) ([]byte, uint32, error) {
	v, cas, err := proxywasm.GetSharedData(key)
	return v, cas, hostErr(err)
}

// Set implements Store.
func (HostStore) Set(key string, value []byte, cas uint32) error {
	return hostErr(proxywasm.SetSharedData(key, value, cas))
}

func hostErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, types.ErrorStatusNotFound):
		return ErrNotFound
	case errors.Is(err, types.ErrorStatusCasMismatch):
		return ErrCasMismatch
	}
	return err
}
