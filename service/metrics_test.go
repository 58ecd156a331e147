package service

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTheZeroMetricsValueCounts(t *testing.T) {
	var m Metrics
	m.check(true)
	m.error(errTimeout)
	var b strings.Builder
	require.NoError(t, m.writeTo(&b, Stats{Keys: -1, Evicted: -1}))
	assert.Contains(t, b.String(), `meshlimit_checks_total{result="allowed"} 1`)
	assert.Contains(t, b.String(), `meshlimit_errors_total{kind="timeout"} 1`)
	assert.NotContains(t, b.String(), "meshlimit_memory_keys", "no store gauge without a store")
}
