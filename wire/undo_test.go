package wire

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
)

// An undo entry reaches the service as the filter sends it, for every algorithm (those that do not
// settle too), as a negative delta with the age rounded up.
func TestEveryUndoTheFilterSendsIsWhatTheServiceDecodesForEveryKind(t *testing.T) {
	b := AppendSettleListStart(nil, false)
	var want []Settle
	for i, kind := range algorithms.Kinds {
		l := algorithms.Limit{Kind: kind, Quota: 100, Window: time.Minute}
		k := Key{Plugin: "p", Rule: "r", Value: kind.String()}
		b = AppendUndo(b, i, k, l, int64(i+1), 1500*time.Microsecond, 0)
		want = append(want, Settle{Key: "p/r/0/" + kind.String(), Limit: l, Delta: -int64(i + 1), Age: 2 * time.Millisecond, Undo: true})
	}
	b = AppendRequestEnd(b)
	var req Request
	require.NoError(t, DecodeRequest(b, DecodeOptions{}, &req), "%s", b)
	assert.Equal(t, want, req.Settle)
}

// A settle of a kind that does not settle is still refused, and an undo must give back a cost.
func TestAnUndoMustGiveBackACostAndASettleMustBeOfAKindThatSettles(t *testing.T) {
	for body, field := range map[string]string{
		`{"settle":[{"key":"k","algorithm":"sliding_log","quota":5,"window_ms":1000,"delta":-1}]}`:                          "settle[0].algorithm",
		`{"settle":[{"key":"k","algorithm":"sliding_log","quota":5,"window_ms":1000,"delta":1,"undo":true}]}`:               "settle[0].delta",
		`{"settle":[{"key":"k","algorithm":"token_bucket","quota":5,"window_ms":1000,"delta":-1,"undo":1}]}`:                "settle[0].undo",
		`{"settle":[{"key":"k","algorithm":"token_bucket","quota":5,"window_ms":1000,"delta":-1,"undo":true,"undo":true}]}`: "settle[0].undo",
	} {
		var req Request
		err := DecodeRequest([]byte(body), DecodeOptions{}, &req)
		require.Error(t, err, body)
		assert.Contains(t, err.Error(), field, body)
	}
	var req Request
	require.NoError(t, DecodeRequest([]byte(`{"settle":[{"key":"k","algorithm":"sliding_window","quota":5,"window_ms":1000,"delta":-1,"undo":true}]}`), DecodeOptions{}, &req))
	assert.True(t, req.Settle[0].Undo)
}
