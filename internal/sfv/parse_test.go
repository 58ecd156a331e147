package sfv

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseListAcceptsValidListsAndRejectsMalformedOnes(t *testing.T) {
	got, err := ParseList(`"burst";q=100;w=60, "daily";q=1000;w=86400, tok;a, (1 2);x=?1, :aGk=:, -1.5`)
	require.NoError(t, err)
	require.Len(t, got, 6)
	assert.Equal(t, String("burst"), got[0].Value)
	assert.Equal(t, []Param{{"q", int64(100)}, {"w", int64(60)}}, got[0].Params)
	assert.Equal(t, Token("tok"), got[2].Value)
	assert.Equal(t, []Param{{"a", true}}, got[2].Params)
	assert.Equal(t, []Param{{"x", true}}, got[3].Params)
	assert.Equal(t, []byte("hi"), got[4].Value)
	for _, bad := range []string{`"a",`, `"a";Q=1`, `"a";q=1234567890123456`, `"a" "b"`, `"a\x"`, `"unterminated`, `"a";q=1;q=2`} {
		_, err := ParseList(bad)
		assert.Error(t, err, bad)
	}
}

func TestParsePoliciesReadsTheQuotaUnitAndPartitionKeyAndRejectsBadOnes(t *testing.T) {
	got, err := ParsePolicies(`"a";q=5;w=60;qu="requests";pk=:aGk=:, "b";q=3;qu="concurrent-requests"`)
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, Policy{Name: "a", Params: map[string]int64{"q": 5, "w": 60}, Unit: "requests", PartitionKey: []byte("hi")}, got[0])
	assert.Equal(t, "concurrent-requests", got[1].Unit)
	for _, bad := range []string{`"a";qu=requests`, `"a";qu="tokens"`, `"a";pk="aGk="`, `"a";pk=::`, `"a";q="5"`, `"a";q=-1`} {
		_, err := ParsePolicies(bad)
		assert.Error(t, err, bad)
	}
}
