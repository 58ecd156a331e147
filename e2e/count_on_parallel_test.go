package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// Issue 20, finding 4: count_on charges an attempt when it arrives, so guesses sent together reach
// the upstream no more often than guesses sent one after the other.

const loginGuard = `{"rules":[{"name":"login","match":{"path":{"exact":"/login"}},"key":["client_ip"],
	"limits":[{"rate":"5/m"}],"count_on":{"status":["401"],"penalty":"15m"}}]}`

// guessesReaching sends burst guesses from one address every interval for an hour, together (all in
// flight before any answer); the upstream answers 401. It returns how many reached the upstream.
func guessesReaching(t *testing.T, every time.Duration, burst int) int {
	const workers = 8
	clock := envoyhost.NewClock(epoch)
	p := load(t, module(t, "meshlimit"), loginGuard, workers, func(c *envoyhost.Config) { c.Clock = clock })
	return guessesThrough(t, p, every, burst)
}

// guessesThrough sends burst guesses to /login from one address every interval for an hour (on
// p's clock), spread over p's workers: every guess of a burst is decided (for a global rule, its
// check answered) before the upstream answers any of them, with a 401. It returns how many reached
// the upstream.
func guessesThrough(t *testing.T, p *envoyhost.Plugin, every time.Duration, burst int) int {
	workers, reached := len(p.VMs()), 0
	for range int(time.Hour / every) {
		streams := make([]*envoyhost.Stream, 0, burst)
		for i := range burst {
			s := p.VM(i % workers).NewStream(envoyhost.StreamInfo{SourceAddress: "198.51.100.7:4000"})
			_, err := s.SendRequestHeaders(get("app.example", "/login", "198.51.100.7").Headers, true)
			require.NoError(t, err)
			streams = append(streams, s)
		}
		var open []*envoyhost.Stream
		for _, s := range streams {
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			act, err := s.Wait(ctx)
			cancel()
			require.NoError(t, err)
			if act != envoyhost.ActionContinue {
				require.NoError(t, s.Close())
				continue
			}
			reached++
			open = append(open, s)
		}
		for _, s := range open { // the answers come once every guess of the burst is decided
			_, err := s.SendResponseHeaders(envoyhost.Headers{{":status", "401"}}, true)
			require.NoError(t, err)
			require.NoError(t, s.Close())
		}
		p.Clock().Advance(every)
	}
	return reached
}

func TestAThousandGuessesSentTogetherReachTheUpstreamNoMoreThanGuessesSentOneByOne(t *testing.T) {
	oneByOne := guessesReaching(t, time.Second, 1)
	together := guessesReaching(t, time.Minute, 1000)
	// 5 guesses, then 15 minutes in the penalty box: 4 rounds of 5 fit in an hour.
	assert.Equal(t, 20, oneByOne, "a guess a second for an hour")
	assert.Equal(t, 20, together, "1,000 guesses a minute, sent together, for an hour")
	t.Logf("guesses that reached the upstream in an hour: %d of one a second, %d of 1,000 a minute sent together", oneByOne, together)
}
