package rules

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func resetPollConfig(field string) string {
	return `{"global":{"cluster":"outbound|8081||svc.ns.svc.cluster.local"` + field + `},
		"rules":[{"name":"login","scope":"global","key":[{"header":"x-user"}],"limits":[{"rate":"5/m"}]}]}`
}

func TestResetPollIsOneSecondUnlessSetOrTurnedOff(t *testing.T) {
	for _, tc := range []struct {
		name, field string
		want        time.Duration
	}{
		{"a global service reads the reset log every second by default", ``, time.Second},
		{"a shorter period is taken as written", `,"reset_poll":"200ms"`, 200 * time.Millisecond},
		{"the shortest period is 100ms", `,"reset_poll":"100ms"`, 100 * time.Millisecond},
		{"the longest period is an hour", `,"reset_poll":"1h"`, time.Hour},
		{"off never reads the log", `,"reset_poll":"off"`, 0},
		{"a zero duration never reads the log", `,"reset_poll":"0s"`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, resetPollConfig(tc.field))
			assert.Equal(t, tc.want, c.Global.ResetPoll)
		})
	}
}

func TestResetPollRejectsWhatItCannotDoNamingTheField(t *testing.T) {
	for _, tc := range []struct {
		name, field, msg string
	}{
		{"a period below 100ms would poll the service too often", `,"reset_poll":"50ms"`, "50ms out of range: want 100ms to 1h"},
		{"a period above an hour is refused", `,"reset_poll":"2h"`, "2h out of range: want 100ms to 1h"},
		{"a word other than off is refused", `,"reset_poll":"never"`, "invalid duration"},
		{"a number is not a duration", `,"reset_poll":5`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(resetPollConfig(tc.field)))
			require.Error(t, err)
			assert.Nil(t, c)
			assert.Contains(t, err.Error(), "global.reset_poll")
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
}
