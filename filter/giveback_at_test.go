package filter

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ra (global) then rb (global): the service admits ra and denies rb, so ra's admission is given
// back. The undo names the store's time of ra's decision (its at_us) when the answer carries it,
// and an age only when it does not (a service before at_us).
func TestTheUndoOfAGlobalAdmissionNamesTheStoresTimeOfItsDecision(t *testing.T) {
	rules := `{"name":"ra","scope":"global","limits":[{"rate":"5/m"}]},{"name":"rb","scope":"global","key":[{"header":"x-user"}],"limits":[{"rate":"1/m"}]}`
	for _, tc := range []struct{ name, admitted, want, not string }{
		{"with at_us", strings.TrimSuffix(dec(true, 4, 0), "}") + `,"at_us":1795996800100000}`, `"at_us":1795996800100000`, `"age_ms"`},
		{"without", dec(true, 4, 0), `"age_ms":`, `"at_us"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			p := f.start(globalWith(``, rules))
			h, _ := f.open(p, user("eve"), true)
			f.answerCall(f.callOf(h), "200", checkAnswers(tc.admitted, dec(false, 0, 1000)))
			require.NotNil(t, f.of(h).reply, "rb denies")
			undo := f.pending()
			require.Len(t, undo, 1)
			assert.Contains(t, undo[0].body, `"undo":true`)
			assert.Contains(t, undo[0].body, tc.want)
			assert.NotContains(t, undo[0].body, tc.not)
			f.end(h)
			assert.Equal(t, int64(1), f.counter("meshlimit.rule.ra.given_back"))
		})
	}
}

// A give-back the cluster refuses gives nothing back, and given_back does not count it.
func TestAGiveBackThatIsNotSentCountsNothingGivenBack(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalWith(``, `{"name":"ra","scope":"global","limits":[{"rate":"5/m"}]},{"name":"rb","scope":"global","key":[{"header":"x-user"}],"limits":[{"rate":"1/m"}]}`))
	h, _ := f.open(p, user("eve"), true)
	f.refuse.dispatch = errors.New("cluster refused")
	f.answerCall(f.callOf(h), "200", checkAnswers(dec(true, 4, 0), dec(false, 0, 1000)))
	require.NotNil(t, f.of(h).reply, "rb denies")
	f.end(h)
	assert.Zero(t, f.counter("meshlimit.rule.ra.given_back"))
	assert.Equal(t, int64(1), f.counter("meshlimit.global.give_back_failed"))
}
