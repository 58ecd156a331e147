package sharedstate

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTheTestsStoreFollowsEnvoysCasRules(t *testing.T) {
	type op struct {
		key     string
		value   string
		cas     uint32 // for set; 0xffffffff means "the cas last read for key"
		wantErr error
	}
	const lastRead = 0xffffffff
	tests := []struct {
		name string
		ops  []op
		want map[string]string
	}{
		{"a set with cas 0 on a missing key creates it", []op{{"k", "v", 0, nil}}, map[string]string{"k": "v"}},
		{"a set with a non-zero cas on a missing key still creates it", []op{{"k", "v", 12345, nil}}, map[string]string{"k": "v"}},
		{"a set with cas 0 on an existing key overwrites it", []op{{"k", "v1", 0, nil}, {"k", "v2", 0, nil}}, map[string]string{"k": "v2"}},
		{"a set with the cas last read succeeds", []op{{"k", "v1", 0, nil}, {"k", "v2", lastRead, nil}}, map[string]string{"k": "v2"}},
		{"a set with a stale cas fails and changes nothing", []op{{"k", "v1", 0, nil}, {"k", "v2", 999, ErrCasMismatch}}, map[string]string{"k": "v1"}},
		{"an empty value is stored as empty", []op{{"k", "", 0, nil}}, map[string]string{"k": ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newMemStore()
			for _, o := range tc.ops {
				cas := o.cas
				if cas == lastRead {
					_, c, err := s.Get(o.key)
					require.NoError(t, err)
					cas = c
				}
				err := s.Set(o.key, []byte(o.value), cas)
				assert.ErrorIs(t, err, o.wantErr)
				if o.wantErr == nil {
					assert.NoError(t, err)
				}
			}
			for k, v := range tc.want {
				got, _, err := s.Get(k)
				require.NoError(t, err)
				assert.Equal(t, v, string(got))
			}
		})
	}
}

func TestTheTestsStoreNumbersVersionsFromOneCounterForAllKeys(t *testing.T) {
	s := newMemStore()
	require.NoError(t, s.Set("a", []byte("1"), 0))
	require.NoError(t, s.Set("b", []byte("1"), 0))
	require.NoError(t, s.Set("a", []byte("1"), 0))
	_, casA, _ := s.Get("a")
	_, casB, _ := s.Get("b")
	assert.Equal(t, uint32(3), casA, "the third set anywhere gets cas 3, even with the same value")
	assert.Equal(t, uint32(2), casB)
	_, _, err := s.Get("missing")
	assert.ErrorIs(t, err, ErrNotFound)
}

func TestTheTestsStoreCounterSkipsZeroWhenItWraps(t *testing.T) {
	s := &memStore{nextCas: 0xffffffff}
	require.NoError(t, s.Set("k", nil, 0))
	_, cas, err := s.Get("k")
	require.NoError(t, err)
	assert.Equal(t, uint32(1), cas)
}

func TestTheTestsStoreDoesNotKeepTheCallersKeyOrValueBuffers(t *testing.T) {
	s := newMemStore()
	key, value := []byte("key1"), []byte("value")
	require.NoError(t, s.Set(bytesString(key), value, 0))
	copy(key, "XXXX")
	copy(value, "XXXXX")
	got, _, err := s.Get("key1")
	require.NoError(t, err)
	assert.Equal(t, "value", string(got))
	assert.Equal(t, 1, s.Len())
	assert.Equal(t, len("key1")+len("value"), s.Bytes())
}

func TestUpdaterCreatesAKeyOnlyIfNoOtherWorkerCreatedItFirst(t *testing.T) {
	s := newMemStore()
	u1, err := NewUpdater(s, "sentinel", 0)
	require.NoError(t, err)
	u2, err := NewUpdater(s, "sentinel", 0)
	require.NoError(t, err)

	_, cas1, err := u1.Read("k")
	require.NoError(t, err)
	_, cas2, err := u2.Read("k")
	require.NoError(t, err)
	require.NoError(t, u2.Write("k", []byte("from u2"), cas2), "the first creator wins")
	assert.ErrorIs(t, u1.Write("k", []byte("from u1"), cas1), ErrCasMismatch, "the second creator must re-read, not overwrite")

	v, cas, err := u1.Read("k")
	require.NoError(t, err)
	assert.Equal(t, "from u2", string(v))
	assert.NoError(t, u1.Write("k", []byte("from u1"), cas))
}

func TestNewUpdaterKeepsAnExistingSentinel(t *testing.T) {
	s := newMemStore()
	require.NoError(t, s.Set("sentinel", []byte("x"), 0))
	_, before, _ := s.Get("sentinel")
	u, err := NewUpdater(s, "sentinel", 3)
	require.NoError(t, err)
	_, after, _ := s.Get("sentinel")
	assert.Equal(t, before, after, "a second plugin start must not rewrite the sentinel")
	assert.Equal(t, 3, u.MaxAttempts())
}
