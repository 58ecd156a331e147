package envoyhost_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

func TestTicksFirePerVMOnTheVirtualClock(t *testing.T) {
	clock := envoyhost.NewClock(time.Unix(1_700_000_000, 0))
	p := newPlugin(t, "guest", envoyhost.Config{Workers: 2, Clock: clock, PluginConfig: []byte("tick=100")})
	ticksPerVM := func() map[int]int {
		n := map[int]int{}
		for _, e := range p.Logs() {
			if e.Message == "tick" {
				n[e.VM]++
			}
		}
		return n
	}
	for _, vm := range p.VMs() {
		assert.Equal(t, 100*time.Millisecond, vm.TickPeriod())
	}
	steps := []struct {
		name    string
		advance time.Duration
		want    map[int]int
	}{
		{"no tick before one period has passed", 99 * time.Millisecond, map[int]int{}},
		{"the first tick comes one period after the timer was set", time.Millisecond, map[int]int{0: 1, 1: 1, 2: 1}},
		{"every thread VM ticks once per period", 250 * time.Millisecond, map[int]int{0: 3, 1: 3, 2: 3}},
	}
	for i, s := range steps {
		clock.Advance(s.advance)
		assert.Equal(t, s.want, ticksPerVM(), "step %d: %s", i, s.name)
	}
	assert.Equal(t, int64(9), p.Process().Metrics()["ticks"].Value, "the canary's timer went with it")
}
