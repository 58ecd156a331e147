package sharedstate

import (
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
)

func TestZZMem(t *testing.T) {
	for _, l := range []int{1, 8} {
		lims := make([]algorithms.Limit, l)
		for i := range lims {
			lims[i] = algorithms.Limit{Kind: algorithms.TokenBucket, Quota: int64(100 + i), Window: time.Second}
		}
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		ts := make([]*Table, 20000)
		for i := range ts {
			var err error
			ts[i], err = NewTable("meshlimit/abc/per-user/override/"+strconv.Itoa(i*7919)+"/abcdefgh", 1, lims, nil)
			if err != nil {
				t.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		t.Logf("limits %d: live %d B/table, total alloc %d B/table", l, (m1.HeapAlloc-m0.HeapAlloc)/20000, (m1.TotalAlloc-m0.TotalAlloc)/20000)
		runtime.KeepAlive(ts)
	}
}
