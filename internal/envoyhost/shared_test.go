package envoyhost_test

import (
	"encoding/binary"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

func TestSharedDataFollowsEnvoysCASRules(t *testing.T) {
	type step struct {
		name       string
		vmID, key  string
		set        bool
		value      string
		cas        uint32
		wantStatus envoyhost.Status
		wantValue  string
		wantCAS    uint32
	}
	p := envoyhost.NewProcess()
	steps := []step{
		{name: "a get of a missing key is NotFound", key: "k", wantStatus: envoyhost.StatusNotFound},
		{name: "a set of a missing key with a non-zero cas succeeds", key: "k", set: true, value: "a", cas: 77},
		{name: "the first cas is 1", key: "k", wantValue: "a", wantCAS: 1},
		{name: "a set with a stale cas is a mismatch", key: "k", set: true, value: "b", cas: 99, wantStatus: envoyhost.StatusCasMismatch},
		{name: "a mismatch changes nothing", key: "k", wantValue: "a", wantCAS: 1},
		{name: "a set with the current cas succeeds", key: "k", set: true, value: "b", cas: 1},
		{name: "a successful set gets a fresh cas", key: "k", wantValue: "b", wantCAS: 2},
		{name: "a set with cas 0 is unconditional", key: "k", set: true, value: "c", cas: 0},
		{name: "an unconditional set also gets a fresh cas", key: "k", wantValue: "c", wantCAS: 3},
		{name: "the counter is global across keys", key: "k2", set: true, value: "x"},
		{name: "so another key's cas continues it", key: "k2", wantValue: "x", wantCAS: 4},
		{name: "the counter is global across vm_ids", vmID: "other", key: "k", set: true, value: "y"},
		{name: "so another vm_id's cas continues it", vmID: "other", key: "k", wantValue: "y", wantCAS: 5},
		{name: "vm_ids are separate namespaces", key: "k", wantValue: "c", wantCAS: 3},
		{name: "an empty value can be stored", key: "e", set: true, value: ""},
		{name: "an empty value reads back empty", key: "e", wantValue: "", wantCAS: 6},
		{name: "setting the same value changes the cas", key: "e", set: true, value: "", cas: 6},
		{name: "to a fresh one", key: "e", wantValue: "", wantCAS: 7},
	}
	for i, s := range steps {
		if s.set {
			got := p.SetSharedData(s.vmID, s.key, []byte(s.value), s.cas)
			require.Equal(t, s.wantStatus, got, "step %d: %s", i, s.name)
			continue
		}
		val, cas, st := p.GetSharedData(s.vmID, s.key)
		require.Equal(t, s.wantStatus, st, "step %d: %s", i, s.name)
		assert.Equal(t, s.wantValue, string(val), "step %d: %s", i, s.name)
		assert.Equal(t, s.wantCAS, cas, "step %d: %s", i, s.name)
	}
	keys, size := p.SharedDataSize("")
	assert.Equal(t, 3, keys)
	assert.Equal(t, len("k")+len("c")+len("k2")+len("x")+len("e"), size)
}

func TestSharedDataThroughTheABI(t *testing.T) {
	proc := envoyhost.NewProcess()
	p := newPlugin(t, "guest", envoyhost.Config{VMID: "rl", Process: proc, Workers: 1})
	vm0, vm1 := p.VM(0), p.VM(1)
	steps := []struct {
		name string
		vm   *envoyhost.VM
		req  envoyhost.Headers
		want map[string]string
	}{
		{"a get of a missing key is NotFound and writes nothing", vm0, op("get", "x-key", "k"),
			map[string]string{"x-status": "1", "x-untouched": "true"}},
		{"a set of a missing key with a non-zero cas succeeds", vm0, op("set", "x-key", "k", "x-value", "v1", "x-cas", "42"),
			map[string]string{"x-status": "0"}},
		{"another VM reads the value and cas 1", vm1, op("get", "x-key", "k"),
			map[string]string{"x-status": "0", "x-value": "v1", "x-cas": "1"}},
		{"a stale cas is CasMismatch", vm1, op("set", "x-key", "k", "x-value", "v2", "x-cas", "9"),
			map[string]string{"x-status": "8"}},
		{"cas 0 is unconditional", vm1, op("set", "x-key", "k", "x-value", "", "x-cas", "0"),
			map[string]string{"x-status": "0"}},
		{"an empty value is ptr 0 and size 0", vm0, op("get", "x-key", "k"),
			map[string]string{"x-status": "0", "x-value": "", "x-ptr": "0", "x-size": "0", "x-cas": "2"}},
	}
	for i, s := range steps {
		res := roundTrip(t, s.vm, s.req)
		for k, want := range s.want {
			assert.Equal(t, want, replyHeader(t, res, k), "step %d: %s: %s", i, s.name, k)
		}
	}

	t.Run("a plugin with the same vm_id shares the namespace", func(t *testing.T) {
		q := newPlugin(t, "guest", envoyhost.Config{VMID: "rl", Process: proc})
		res := roundTrip(t, q.VM(0), op("get", "x-key", "k"))
		assert.Equal(t, "0", replyHeader(t, res, "x-status"))
	})
	t.Run("a plugin with another vm_id does not", func(t *testing.T) {
		q := newPlugin(t, "guest", envoyhost.Config{VMID: "other", Process: proc})
		res := roundTrip(t, q.VM(0), op("get", "x-key", "k"))
		assert.Equal(t, "1", replyHeader(t, res, "x-status"))
	})
}

func TestConcurrentVMsShareOneStore(t *testing.T) {
	const workers, perVM = 3, 30
	p := newPlugin(t, "guest", envoyhost.Config{VMID: "c", Workers: workers})
	// The guest creates a missing key with cas 0, which Envoy accepts from every VM that saw it
	// missing (two first increments could both write 1): create it before the race.
	roundTrip(t, p.VM(0), op("incr", "x-key", "hits"))
	var wg sync.WaitGroup
	for _, vm := range p.VMs() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perVM; i++ {
				// No require in goroutines: assert only.
				res, err := vm.RoundTrip(t0ctx, &envoyhost.Request{Headers: op("incr", "x-key", "hits")}, ok200)
				if assert.NoError(t, err) && assert.NotNil(t, res.LocalReply) {
					st, _ := res.LocalReply.Headers.Get("x-status")
					assert.Equal(t, "0", st)
				}
			}
		}()
	}
	wg.Wait()
	val := p.Process().SharedData("c")["hits"]
	require.Len(t, val, 8)
	assert.Equal(t, uint64((workers+1)*perVM+1), binary.LittleEndian.Uint64(val),
		"every CAS increment from every VM is counted exactly once")
}

func TestTheLastPluginOfAVMIDErasesItsSharedData(t *testing.T) {
	proc := envoyhost.NewProcess()
	a := newPlugin(t, "guest", envoyhost.Config{VMID: "gone", Process: proc, PluginConfig: []byte("count=n")})
	b, err := envoyhostNewPlugin(proc)
	require.NoError(t, err)
	require.NoError(t, a.Close())
	keys, _ := proc.SharedDataSize("gone")
	assert.Equal(t, 1, keys, "another plugin still holds the vm_id")
	require.NoError(t, b.Close())
	keys, _ = proc.SharedDataSize("gone")
	assert.Equal(t, 0, keys)
}

func envoyhostNewPlugin(proc *envoyhost.Process) (*envoyhost.Plugin, error) {
	return envoyhost.NewPlugin(t0ctx, guests["guest"], envoyhost.Config{VMID: "gone", Process: proc})
}

func TestMetricsAreProcessWideByName(t *testing.T) {
	p := newPlugin(t, "guest", envoyhost.Config{Workers: 1})
	for i, vm := range p.VMs() {
		res := roundTrip(t, vm, op("metric", "x-name", "hits", "x-by", strconv.Itoa(i+1)))
		assert.Equal(t, "0", replyHeader(t, res, "x-status"))
	}
	res := roundTrip(t, p.VM(0), op("metric", "x-name", "hits", "x-by", "-1"))
	assert.Equal(t, "2", replyHeader(t, res, "x-status"), "a counter takes only positive increments")
	m := p.Process().Metrics()["hits"]
	assert.Equal(t, envoyhost.Counter, m.Type)
	assert.Equal(t, int64(3), m.Value)
}

func TestSharedQueueNotifiesTheRegisteringVM(t *testing.T) {
	p := newPlugin(t, "guest", envoyhost.Config{VMID: "qv", Workers: 1})
	res := roundTrip(t, p.VM(0), op("qreg"))
	require.Equal(t, "0", replyHeader(t, res, "x-status"))
	res = roundTrip(t, p.VM(1), op("qenq", "x-vm-id", "qv", "x-value", "hello"))
	require.Equal(t, "0", replyHeader(t, res, "x-status"))
	assert.Eventually(t, func() bool {
		return string(p.Process().SharedData("qv")["dequeued"]) == "hello"
	}, 2*time.Minute, 5*time.Millisecond, "proxy_on_queue_ready ran on VM 0 and dequeued the value")
	res = roundTrip(t, p.VM(1), op("qenq", "x-vm-id", "nope", "x-value", "x"))
	assert.Equal(t, "1", replyHeader(t, res, "x-status"), "an unknown queue is NotFound")
}
