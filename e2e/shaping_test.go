package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

func TestALeakyBucketDelaysABurstIntoAnEvenFlowAndRejectsWhatOverflowsItsQueue(t *testing.T) {
	p := load(t, module(t, "meshlimit"), `{"rules":[{"name":"shape","key":["client_ip"],
		"limits":[{"rate":"10/s","algorithm":"leaky_bucket","burst":3}]}]}`, 1)
	vm := p.VM(0)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	req := get("a.example", "/", "192.0.2.9")

	var streams []*envoyhost.Stream
	var actions []envoyhost.Action
	for range 4 {
		s := vm.NewStream(req.Info)
		act, err := s.SendRequestHeaders(req.Headers, true)
		require.NoError(t, err)
		streams, actions = append(streams, s), append(actions, act)
	}
	assert.Equal(t, []envoyhost.Action{envoyhost.ActionContinue, envoyhost.ActionPause, envoyhost.ActionPause, envoyhost.ActionStop}, actions,
		"the first goes at once, the next two wait their turn (100 ms apart), the fourth overflows a queue of 3")
	require.NotNil(t, streams[3].LocalReply())
	assert.Equal(t, 429, streams[3].LocalReply().Status)

	p.Clock().Advance(50 * time.Millisecond)
	assert.Equal(t, envoyhost.ActionPause, state(t, streams[1]), "not before its turn")
	p.Clock().Advance(55 * time.Millisecond)
	act, err := streams[1].Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, envoyhost.ActionContinue, act, "released at the first tick after 100 ms")
	assert.Equal(t, envoyhost.ActionPause, state(t, streams[2]))
	p.Clock().Advance(100 * time.Millisecond)
	act, err = streams[2].Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, envoyhost.ActionContinue, act)
	for _, s := range streams {
		require.NoError(t, s.Close())
	}
	assert.Zero(t, p.PollOneoffCalls())
}

// state reports whether s is still paused, without waiting for it.
func state(t *testing.T, s *envoyhost.Stream) envoyhost.Action {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Wait reads the state first: the state now, without waiting
	act, _ := s.Wait(ctx)
	return act
}

func TestAGlobalLeakyBucketShapesToo(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	p := load(t, module(t, "meshlimit"), globalConfig(`{"name":"shape","scope":"global","key":["client_ip"],
		"limits":[{"rate":"10/s","algorithm":"leaky_bucket","burst":3}]}`), 1, withService(svc, nil),
		func(c *envoyhost.Config) { c.Clock = clock })
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	req := get("a.example", "/", "192.0.2.19")

	first := p.VM(0).NewStream(req.Info)
	_, err := first.SendRequestHeaders(req.Headers, true)
	require.NoError(t, err)
	act, err := first.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, envoyhost.ActionContinue, act, "the first request goes as soon as the service answers")

	second := p.VM(0).NewStream(req.Info)
	_, err = second.SendRequestHeaders(req.Headers, true)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return counter(p, "meshlimit.rule.shape.allowed") == 2 }, patience, time.Millisecond,
		"the service's answer reached the filter")
	assert.Equal(t, envoyhost.ActionPause, state(t, second), "the service said: in 100 ms")
	clock.Advance(105 * time.Millisecond)
	act, err = second.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, envoyhost.ActionContinue, act)
	require.NoError(t, first.Close())
	require.NoError(t, second.Close())
}
