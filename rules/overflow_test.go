package rules

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestARulesOverflowLimitsCompileWithTheirOwnPolicyNames(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"rules":[{"name":"per-key","key":[{"header":"x-api-key"}],
		"limits":[{"rate":"10/m"}],"overflow":[{"rate":"100/m"},{"rate":"1000/h"}]}]}`))
	require.NoError(t, err)
	o := cfg.Rules()[0].Overflow()
	require.NotNil(t, o)
	require.Len(t, o.Limits, 2)
	assert.Equal(t, "per-key-overflow-0", o.Limits[0].Name)
	assert.Equal(t, int64(100), o.Limits[0].Limit.Quota)
	assert.Equal(t, time.Hour, o.Limits[1].Limit.Window)
}

func TestWithoutOverflowLimitsTheRulesOwnApply(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"rules":[{"name":"per-key","key":[{"header":"x-api-key"}],"limits":[{"rate":"10/m"}]}]}`))
	require.NoError(t, err)
	assert.Nil(t, cfg.Rules()[0].Overflow())
}

func TestABadOverflowLimitIsRefusedNamingItsField(t *testing.T) {
	_, err := ParseConfig([]byte(`{"rules":[{"name":"per-key","limits":[{"rate":"10/m"}],"overflow":[{"rate":"0/m"}]}]}`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "rules[0].overflow[0].rate")
}
