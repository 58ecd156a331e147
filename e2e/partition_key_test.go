package e2e

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
	"github.com/meshlimit/meshlimit/internal/sfv"
)

const partitionKeyConfig = `{
  "response": {"partition_key": true, "partition_key_secret": "e2e-secret-0123456789"},
  "rules": [{"name": "per-ip", "key": ["client_ip"], "limits": [{"name": "burst", "rate": "2/m"}]}]
}`

// pkOf reads the pk of the only member of both ietf fields, which must agree.
func pkOf(t *testing.T, h envoyhost.Headers) []byte {
	t.Helper()
	var pks [][]byte
	for _, name := range []string{"ratelimit-policy", "ratelimit"} {
		field, ok := h.Get(name)
		require.True(t, ok, name)
		ps, err := sfv.ParsePolicies(field)
		require.NoError(t, err, field)
		require.Len(t, ps, 1)
		pks = append(pks, ps[0].PartitionKey)
	}
	require.Len(t, pks[0], 8)
	require.Equal(t, pks[0], pks[1], "one partition, one pk on both fields")
	return pks[0]
}

func TestThePartitionKeyNamesTheClientsBucketOnEveryWorkerWithoutItsAddress(t *testing.T) {
	p := load(t, module(t, "meshlimit"), partitionKeyConfig, 2)
	first := roundTrip(t, p.VM(0), get("shop.example", "/a", "203.0.113.9"))
	require.Nil(t, first.LocalReply)
	pk := pkOf(t, first.Downstream)
	assert.False(t, bytes.Contains([]byte("203.0.113.9"), pk))

	second := roundTrip(t, p.VM(1), get("shop.example", "/a", "203.0.113.9"))
	require.Nil(t, second.LocalReply)
	assert.Equal(t, pk, pkOf(t, second.Downstream), "another worker names the same bucket alike")

	denied := roundTrip(t, p.VM(0), get("shop.example", "/a", "203.0.113.9"))
	require.NotNil(t, denied.LocalReply, "the third request of 2/m is denied")
	assert.Equal(t, pk, pkOf(t, denied.LocalReply.Headers), "the denial names the bucket that denied")

	other := roundTrip(t, p.VM(0), get("shop.example", "/a", "203.0.113.10"))
	require.Nil(t, other.LocalReply)
	assert.NotEqual(t, pk, pkOf(t, other.Downstream), "another client, another bucket, another pk")
}
