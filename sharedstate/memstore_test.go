package sharedstate

import (
	"strings"
	"sync"
)

// memStore is an in-memory Store with Envoy's exact semantics, safe for concurrent use: the tests'
// shared data, on which they model several worker VMs. The zero value is ready to use.
type memStore struct {
	mu      sync.Mutex
	entries map[string]*memEntry
	nextCas uint32 // the last cas handed out; 0 before the first Set
	bytes   int    // sum of len(key)+len(value)
}

type memEntry struct {
	value []byte
	cas   uint32
}

// newMemStore returns an empty memStore.
func newMemStore() *memStore { return &memStore{} }

// Get implements Store. The returned slice is a copy.
func (m *memStore) Get(key string) ([]byte, uint32, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[key]
	if !ok {
		return nil, 0, ErrNotFound
	}
	return append([]byte(nil), e.value...), e.cas, nil
}

// Set implements Store.
func (m *memStore) Set(key string, value []byte, cas uint32) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[key]
	if ok && cas != 0 && cas != e.cas {
		return ErrCasMismatch
	}
	if m.entries == nil {
		m.entries = make(map[string]*memEntry)
	}
	m.nextCas++
	if m.nextCas == 0 { // the counter skips 0 when it wraps, as Envoy's does
		m.nextCas = 1
	}
	if ok {
		m.bytes -= len(e.value)
	} else {
		// The entry is inserted once and then updated in place: the map keeps the key string it was
		// given, and callers may pass one that aliases a reused buffer.
		e = &memEntry{}
		m.entries[strings.Clone(key)] = e
		m.bytes += len(key)
	}
	m.bytes += len(value)
	e.value, e.cas = append(e.value[:0:0], value...), m.nextCas
	return nil
}

// Len reports how many keys the store holds.
func (m *memStore) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.entries)
}

// Bytes reports the total size of the keys and values the store holds.
func (m *memStore) Bytes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bytes
}
