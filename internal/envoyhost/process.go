package envoyhost

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Process is the state one Envoy process shares among all its Wasm VMs (§2, §5): the
// shared-data store and the shared queues, one namespace per vm_id, the global CAS
// counter, and the stats store that holds the metrics. Several plugins may share one
// Process, and all its methods are safe for concurrent use. The zero value is not
// usable; call NewProcess.
type Process struct {
	mu      sync.Mutex
	data    map[string]map[string]sharedValue // vm_id → key → value
	nextCAS uint32
	handles map[string]int // vm_id → live plugins holding it (Envoy's VmIdHandle)

	queues    map[queueKey]*queue
	queueByID map[uint32]*queue
	nextQueue uint32

	metricsMu sync.Mutex
	metrics   map[string]*metric

	yield atomic.Bool // see YieldOnSharedData
}

// YieldOnSharedData makes every proxy_get_shared_data and proxy_set_shared_data call yield
// the processor first (runtime.Gosched). Real worker threads run in parallel; VMs on
// goroutines on a few cores rarely interleave between one VM's read and its write, so
// tests of compare-and-swap under contention use this to make lost races common.
func (p *Process) YieldOnSharedData() { p.yield.Store(true) }

func (p *Process) maybeYield() {
	if p.yield.Load() {
		runtime.Gosched()
	}
}

type sharedValue struct {
	value []byte
	cas   uint32
}

type queueKey struct{ vmID, name string }

type queue struct {
	id    uint32
	owner *VM // the VM whose root context registered it; receives on_queue_ready
	items [][]byte
}

type metric struct {
	typ   MetricType
	value int64
	count uint64
	sum   uint64
}

// NewProcess returns an empty process whose CAS counter starts at 1.
func NewProcess() *Process {
	return &Process{
		data:      make(map[string]map[string]sharedValue),
		nextCAS:   1,
		handles:   make(map[string]int),
		queues:    make(map[queueKey]*queue),
		queueByID: make(map[uint32]*queue),
		metrics:   make(map[string]*metric),
	}
}

// GetSharedData returns a copy of the value stored under key in the vm_id namespace
// and its CAS, with Envoy's rules (§2): StatusNotFound when the key or the namespace is
// missing.
func (p *Process) GetSharedData(vmID, key string) ([]byte, uint32, Status) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.data[vmID][key]
	if !ok {
		return nil, 0, StatusNotFound
	}
	return append([]byte(nil), v.value...), v.cas, StatusOK
}

// getShared is GetSharedData for the host call: it hands the value to f while the
// lock is held so that nothing is copied twice. f must not retain the slice.
func (p *Process) getShared(vmID, key string, f func(value []byte, cas uint32)) Status {
	p.maybeYield()
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.data[vmID][key]
	if !ok {
		return StatusNotFound
	}
	f(v.value, v.cas)
	return StatusOK
}

// SetSharedData stores a copy of value under key with Envoy's CAS rules (§2): when the
// key exists and cas is non-zero and differs from the stored CAS, it returns
// StatusCasMismatch and changes nothing; otherwise (cas 0, a matching cas, or a missing
// key whatever cas was passed) it stores the value with a fresh CAS from the global
// counter, which skips 0, and returns StatusOK.
func (p *Process) SetSharedData(vmID, key string, value []byte, cas uint32) Status {
	p.maybeYield()
	p.mu.Lock()
	defer p.mu.Unlock()
	ns := p.data[vmID]
	if ns == nil {
		ns = make(map[string]sharedValue)
		p.data[vmID] = ns
	}
	if old, ok := ns[key]; ok && cas != 0 && cas != old.cas {
		return StatusCasMismatch
	}
	next := p.nextCAS
	p.nextCAS++
	if p.nextCAS == 0 {
		p.nextCAS = 1
	}
	// Reuse the old buffer when it is large enough: values are never handed out
	// without a copy, so the store owns its bytes.
	buf := ns[key].value[:0]
	ns[key] = sharedValue{value: append(buf, value...), cas: next}
	return StatusOK
}

// SharedData returns a copy of every key and value in the vm_id namespace.
func (p *Process) SharedData(vmID string) map[string][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string][]byte, len(p.data[vmID]))
	for k, v := range p.data[vmID] {
		out[k] = append([]byte(nil), v.value...)
	}
	return out
}

// SharedDataSize returns the number of keys in the vm_id namespace and the total size
// of their keys and values in bytes.
func (p *Process) SharedDataSize(vmID string) (keys, bytes int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, v := range p.data[vmID] {
		keys++
		bytes += len(k) + len(v.value)
	}
	return keys, bytes
}

// acquire registers one more live holder of vmID (Envoy's VmIdHandle).
func (p *Process) acquire(vmID string) {
	p.mu.Lock()
	p.handles[vmID]++
	p.mu.Unlock()
}

// release drops a holder of vmID; the last one erases the namespace's shared data and
// queues, as Envoy does when the last VM with that vm_id is destroyed (§2).
func (p *Process) release(vmID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.handles[vmID]--
	if p.handles[vmID] > 0 {
		return
	}
	delete(p.handles, vmID)
	delete(p.data, vmID)
	for k, q := range p.queues {
		if k.vmID == vmID {
			delete(p.queues, k)
			delete(p.queueByID, q.id)
		}
	}
}

// registerQueue returns the id of the queue name in vmID, creating it and making vm
// its owner; re-registering moves ownership to vm, as Envoy does.
func (p *Process) registerQueue(vmID, name string, vm *VM) uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := queueKey{vmID, name}
	if q, ok := p.queues[k]; ok {
		q.owner = vm
		return q.id
	}
	p.nextQueue++
	q := &queue{id: p.nextQueue, owner: vm}
	p.queues[k] = q
	p.queueByID[q.id] = q
	return q.id
}

func (p *Process) resolveQueue(vmID, name string) (uint32, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	q, ok := p.queues[queueKey{vmID, name}]
	if !ok {
		return 0, false
	}
	return q.id, true
}

// enqueue appends a copy of value and returns the queue's owner to notify.
func (p *Process) enqueue(id uint32, value []byte) (*VM, Status) {
	p.mu.Lock()
	defer p.mu.Unlock()
	q, ok := p.queueByID[id]
	if !ok {
		return nil, StatusNotFound
	}
	q.items = append(q.items, append([]byte(nil), value...))
	return q.owner, StatusOK
}

func (p *Process) dequeue(id uint32) ([]byte, Status) {
	p.mu.Lock()
	defer p.mu.Unlock()
	q, ok := p.queueByID[id]
	if !ok {
		return nil, StatusNotFound
	}
	if len(q.items) == 0 {
		return nil, StatusEmpty
	}
	v := q.items[0]
	q.items[0] = nil
	q.items = q.items[1:]
	return v, StatusOK
}

// Metrics returns a snapshot of every metric defined in the process, keyed by the
// name the guest defined (Envoy prefixes it with "wasmcustom." in its stats).
func (p *Process) Metrics() map[string]Metric {
	p.metricsMu.Lock()
	defer p.metricsMu.Unlock()
	out := make(map[string]Metric, len(p.metrics))
	for name, m := range p.metrics {
		out[name] = Metric{Type: m.typ, Value: m.value, Count: m.count, Sum: m.sum}
	}
	return out
}

// metric returns the process-wide metric name of type typ, creating it. Envoy keeps
// one stat per name; a name defined again with another type gets its own stat there,
// which this host models as a separate entry with the type appended.
func (p *Process) metric(name string, typ MetricType) *metric {
	p.metricsMu.Lock()
	defer p.metricsMu.Unlock()
	if m, ok := p.metrics[name]; ok {
		if m.typ == typ {
			return m
		}
		name += "#" + [...]string{"counter", "gauge", "histogram"}[typ]
		if m, ok := p.metrics[name]; ok {
			return m
		}
	}
	m := &metric{typ: typ}
	p.metrics[name] = m
	return m
}
