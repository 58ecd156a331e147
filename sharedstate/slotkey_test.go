package sharedstate

import (
	"math"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSlotKeysAreTheSlotNumberInBase36AfterThePrefix(t *testing.T) {
	r, err := NewRecords("p", MaxSlots)
	assert.NoError(t, err)
	for _, i := range []int{0, 1, 9, 10, 35, 36, 37, 1295, 1296, 46655, 46656, MaxSlots - 1} {
		assert.Equal(t, "p/v"+strconv.Itoa(recordVersion)+"/"+strconv.FormatUint(uint64(i), 36), string(r.SlotKey(nil, i)), "slot %d", i)
	}
	for _, u := range []uint64{math.MaxUint64, math.MaxUint64 / 36, 1 << 63} {
		assert.Equal(t, strconv.FormatUint(u, 36), string(appendBase36(nil, u)))
	}
}
