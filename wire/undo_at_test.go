package wire

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
)

// The store's time of an admitting decision reaches the filter as at_us, and the filter's undo and
// settle entries carry it back unchanged, in place of an age.
func TestTheTimeOfAnAdmissionGoesToTheFilterAndComesBackWithItsUndoAndSettle(t *testing.T) {
	at := time.Date(2026, 11, 30, 0, 0, 0, 100_000_123, time.UTC) // 123 ns below the µs the store counts in
	b := AppendAnswerStart(nil, false)
	b = AppendDecision(b, 0, FromAlgorithms(algorithms.Decision{Allowed: true, Limit: 5, Remaining: 4, At: at.UnixNano()}, false))
	b = AppendDecision(b, 1, FromAlgorithms(algorithms.Decision{Limit: 1, At: at.UnixNano()}, false))
	b = AppendAnswerEnd(b)
	_, ds, err := DecodeAnswer(b, 2, nil)
	require.NoError(t, err, "%s", b)
	assert.Equal(t, at.UnixMicro(), ds[0].AtUs, "%s", b)
	assert.Zero(t, ds[1].AtUs, "a denial took nothing: it names no time")

	l := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 5, Window: time.Minute}
	k := Key{Plugin: "p", Rule: "r", Value: "v"}
	s := AppendSettleListStart(nil, false)
	s = AppendUndo(s, 0, k, l, 1, time.Second, ds[0].AtUs)
	s = AppendSettle(s, 1, k, l, -2, time.Second, ds[0].AtUs)
	s = AppendUndo(s, 2, k, l, 1, time.Second, 0)
	s = AppendRequestEnd(s)
	var req Request
	require.NoError(t, DecodeRequest(s, DecodeOptions{}, &req), "%s", s)
	assert.Equal(t, []Settle{
		{Key: "p/r/0/v", Limit: l, Delta: -1, AtUs: at.UnixMicro(), Undo: true},
		{Key: "p/r/0/v", Limit: l, Delta: -2, AtUs: at.UnixMicro()},
		{Key: "p/r/0/v", Limit: l, Delta: -1, Age: time.Second, Undo: true},
	}, req.Settle, "%s", s)
}

// at_us is a time the algorithms represent, and an entry names its time once.
func TestAnEntrysTimeIsInRangeAndNamedOnce(t *testing.T) {
	const lim = `"key":"k","algorithm":"fixed_window","quota":5,"window_ms":1000,"delta":-1,"undo":true`
	for body, reason := range map[string]string{
		`{"settle":[{` + lim + `,"at_us":0}]}`:                "settle[0].at_us: must be between 1 and",
		`{"settle":[{` + lim + `,"at_us":4503599627370497}]}`: "settle[0].at_us: must be between 1 and",
		`{"settle":[{` + lim + `,"at_us":-5}]}`:               "settle[0].at_us: must be between 1 and",
		`{"settle":[{` + lim + `,"at_us":"5"}]}`:              "settle[0].at_us",
		`{"settle":[{` + lim + `,"at_us":5,"at_us":5}]}`:      "settle[0].at_us: given twice",
		`{"settle":[{` + lim + `,"at_us":5,"age_ms":10}]}`:    "settle[0].at_us: given with age_ms",
		`{"settle":[{` + lim + `,"age_ms":10,"at_us":5}]}`:    "settle[0].at_us: given with age_ms",
	} {
		var req Request
		err := DecodeRequest([]byte(body), DecodeOptions{}, &req)
		require.Error(t, err, body)
		assert.Contains(t, err.Error(), reason, body)
	}
}
