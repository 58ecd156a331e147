package rules

import (
	"math"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestDecimalsInHeadersAreWhatStrconvWrites(t *testing.T) {
	for _, n := range []int64{0, 1, 9, 10, 99, 100, 12345, maxSFInteger, math.MaxInt64, -1, -10, math.MinInt64} {
		assert.Equal(t, strconv.FormatInt(n, 10), string(appendDecimal([]byte("x"), n)[1:]), "%d", n)
	}
}
