package e2e

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// TestTheCompiledFilterBoundsAServicesWaitsByTheCalendarPeriod is review 23's hostile service run
// through the compiled module: whatever an answer claims (nothing, 0, 400 days, 2^63 ms), a monthly
// quota a minute before the month ends tells the client t=60 and, on a denial, Retry-After 60.
func TestTheCompiledFilterBoundsAServicesWaitsByTheCalendarPeriod(t *testing.T) {
	const days400, max = "34560000000", "9223372036854775807"
	for _, tc := range []struct {
		name, decision string
		want           calendarSeen
	}{
		{"an admission without an effective window nor a reset",
			`{"allowed":true,"limit":10,"remaining":9,"reset_ms":0,"retry_after_ms":0}`, calendarSeen{200, 31 * 86400, 9, 60, ""}},
		{"a denial without a reset nor a retry",
			`{"allowed":false,"limit":10,"remaining":0,"reset_ms":0,"retry_after_ms":0}`, calendarSeen{429, 31 * 86400, 0, 60, "60"}},
		{"a denial of 400 days",
			`{"allowed":false,"limit":10,"remaining":0,"reset_ms":` + days400 + `,"retry_after_ms":` + days400 + `,"effective_ms":` + days400 + `}`, calendarSeen{429, 31 * 86400, 0, 60, "60"}},
		{"an admission of 2^63 ms",
			`{"allowed":true,"limit":10,"remaining":3,"reset_ms":` + max + `,"retry_after_ms":0,"effective_ms":` + max + `}`, calendarSeen{200, 31 * 86400, 3, 60, ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := envoyhost.NewClock(time.Date(2026, 1, 31, 23, 59, 0, 0, time.UTC))
			var calls atomic.Int64
			allowed := tc.want.status == 200
			body := `{"allowed":` + map[bool]string{true: "true", false: "false"}[allowed] + `,"decisions":[` + tc.decision + `]}`
			p := load(t, module(t, "meshlimit"), globalConfig(`{"name":"plan","scope":"global","cache_denials":false,
				"key":["client_ip"],"limits":[{"rate":"10/month"}]}`), 1, toCluster(answering(t, 200, body, 0, &calls), clock))
			got := calendarOf(t, roundTrip(t, p.VM(0), get("a.example", "/", "192.0.2.30")))
			assert.Equal(t, tc.want, got)
			assert.Equal(t, int64(1), calls.Load())
		})
	}
}
