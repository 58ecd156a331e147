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
