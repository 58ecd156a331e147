package sharedstate

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/shed"
)

func TestTheGradientRecordIsWrittenOnlyWhenTheControllerUpdates(t *testing.T) {
	g := shed.DefaultGradient()
	read := &GradientEditor{G: &g, Now: 1}
	_, write, err := read.Edit(nil, nil)
	require.NoError(t, err)
	assert.False(t, write, "a read writes nothing")

	run := &GradientEditor{G: &g, Now: int64(time.Second), Run: true, Sum: shed.Summary{Count: 10, Latency: time.Millisecond, InFlight: 5}}
	p, write, err := run.Edit(nil, nil)
	require.NoError(t, err)
	require.True(t, write, "the first run of an interval updates")
	assert.True(t, run.Step.Updated)

	again := &GradientEditor{G: &g, Now: int64(time.Second) + 1, Run: true, Sum: run.Sum}
	_, write, err = again.Edit(nil, p)
	require.NoError(t, err)
	assert.False(t, write, "a second run within the interval changes nothing")
	assert.Equal(t, run.State, again.State, "it reads the state the first run wrote")
	assert.False(t, again.Vacant(p), "the controller's record is never claimed")
}

func TestAnUnreadableGradientRecordStartsFresh(t *testing.T) {
	g := shed.DefaultGradient()
	e := &GradientEditor{G: &g}
	_, _, err := e.Edit(nil, []byte("garbage"))
	require.NoError(t, err)
	assert.Equal(t, shed.GradientState{}, e.State)
}

func TestTheHistogramRecordMergesReadsAndEmpties(t *testing.T) {
	var local shed.Histogram
	local.Record(2 * time.Millisecond)
	local.Record(4 * time.Millisecond)

	merge := &HistogramEditor{Add: &local}
	p, write, err := merge.Edit(nil, []byte("unreadable: an empty histogram"))
	require.NoError(t, err)
	require.True(t, write)
	p, _, err = (&HistogramEditor{Add: &local}).Edit(nil, p)
	require.NoError(t, err)

	read := &HistogramEditor{}
	_, write, err = read.Edit(nil, p)
	require.NoError(t, err)
	assert.False(t, write, "a read writes nothing")
	assert.Equal(t, int64(4), read.Merged.Count(), "two workers' samples")

	var empty shed.Histogram
	_, write, err = (&HistogramEditor{Add: &empty}).Edit(nil, p)
	require.NoError(t, err)
	assert.False(t, write, "merging no samples writes nothing")

	reset := &HistogramEditor{Reset: true}
	p, write, err = reset.Edit(nil, p)
	require.NoError(t, err)
	require.True(t, write)
	_, _, err = read.Edit(nil, p)
	require.NoError(t, err)
	assert.Zero(t, read.Merged.Count(), "the next interval starts empty")
	assert.False(t, reset.Vacant(p), "the histogram's record is never claimed")
}
