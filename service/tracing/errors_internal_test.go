package tracing

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A collector that fails every export must not flood the log: one JSON line per interval at
// most, each with the number of errors it stands for; every error is counted.
func TestFailingExportsLogOneJSONLinePerIntervalWithACount(t *testing.T) {
	var buf bytes.Buffer
	clock := time.Unix(1_700_000_000, 0)
	e := newErrorLog(slog.New(slog.NewJSONHandler(&buf, nil)), 10*time.Second, func() time.Time { return clock })
	for range 5 {
		e.Handle(errors.New("connection refused"))
		clock = clock.Add(time.Second)
	}
	clock = clock.Add(5 * time.Second) // 10 s after the first line
	e.Handle(errors.New("connection refused"))

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2, buf.String())
	var counts []float64
	for _, l := range lines {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &rec), l)
		assert.Equal(t, "connection refused", rec["err"])
		assert.Equal(t, "WARN", rec["level"])
		counts = append(counts, rec["errors"].(float64))
	}
	assert.Equal(t, []float64{1, 5}, counts, "the second line stands for the 4 held errors and its own")
	assert.Equal(t, uint64(6), e.total.Load())
}
