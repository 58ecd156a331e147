package e2e

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Task glob22, finding 2: the keys a rule decides in its shared overflow state (its table full)
// share one count, so their RateLimit fields name one partition: the overflow's pk, not each key's.

// TestKeysCountedInTheSharedOverflowShowOnePartitionKey: a rule with one slot (max_keys 1) keeps
// the first client's state; the next five clients find it held and are counted together in the
// overflow state, whose quota they share (the sixth request is denied), and show one pk, which is
// neither the first client's nor any of theirs alone.
func TestKeysCountedInTheSharedOverflowShowOnePartitionKey(t *testing.T) {
	p := load(t, module(t, "meshlimit"), `{
		"response": {"partition_key": true, "partition_key_secret": "e2e-secret-0123456789"},
		"rules": [{"name": "per-ip", "key": ["client_ip"], "max_keys": 1, "limits": [{"rate": "5/m"}]}]}`, 2)
	first := roundTrip(t, p.VM(0), get("shop.example", "/a", "203.0.113.1"))
	require.Nil(t, first.LocalReply)
	owner := pkOf(t, first.Downstream)

	pks := map[string]int{}
	for i := 2; i <= 6; i++ {
		res := roundTrip(t, p.VM(i%2), get("shop.example", "/a", "203.0.113."+strconv.Itoa(i)))
		require.Nil(t, res.LocalReply, "client %d: the overflow's 5/m admits five", i)
		pks[string(pkOf(t, res.Downstream))]++
	}
	require.Equal(t, int64(5), counter(p, "meshlimit.rule.per-ip.overflow"), "the five newcomers were counted in the overflow state")
	assert.Len(t, pks, 1, "one shared count, one pk")
	for pk := range pks {
		assert.NotEqual(t, string(owner), pk, "the slot's owner has its own partition")
	}

	denied := roundTrip(t, p.VM(0), get("shop.example", "/a", "203.0.113.7"))
	require.NotNil(t, denied.LocalReply, "the overflow's quota is spent by the five")
	assert.Contains(t, pks, string(pkOf(t, denied.LocalReply.Headers)), "the denial names the overflow's partition")

	again := roundTrip(t, p.VM(1), get("shop.example", "/a", "203.0.113.1"))
	require.Nil(t, again.LocalReply, "the owner's own quota is untouched")
	assert.Equal(t, owner, pkOf(t, again.Downstream))
}
