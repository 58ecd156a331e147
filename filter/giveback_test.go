package filter

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A request denied by a later rule gives back what the earlier rules took (giveback.go).

func TestARequestDeniedByALaterRuleSpendsNothingOfAnEarlierOne(t *testing.T) {
	for _, alg := range []string{"token_bucket", "leaky_bucket", "fixed_window", "sliding_log", "sliding_window"} {
		t.Run(alg, func(t *testing.T) {
			f := newFakeHost(t)
			p := f.start(fmt.Sprintf(`{"rules":[
				{"name":"ra","key":["path"],"limits":[{"rate":"2/m","algorithm":%q}]},
				{"name":"rb","key":[{"header":"x-user"}],"limits":[{"rate":"1/m"}]}]}`, alg))
			req := func(u string) [][2]string { return fakeReq("/x", [2]string{"x-user", u}) }
			steps := []struct {
				user   string
				denied bool
			}{
				{"u1", false}, // ra 1/2, rb(u1) 1/1
				{"u1", true},  // denied by rb: ra's unit is given back
				{"u1", true},
				{"u2", false}, // ra 2/2: u1's denials spent none of it
				{"u3", true},  // ra is spent by the two admitted requests alone
			}
			for i, s := range steps {
				h, _ := f.open(p, req(s.user), true)
				assert.Equal(t, s.denied, f.of(h).reply != nil, "request %d (%s) denied", i, s.user)
				f.end(h)
			}
			assert.Equal(t, int64(2), f.counter("meshlimit.rule.ra.given_back"))
		})
	}
}
