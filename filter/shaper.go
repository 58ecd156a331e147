package filter

import (
	"github.com/meshlimit/meshlimit/algorithms"
)

// shapeTickMillis is the timer period of a plugin with leaky-bucket limits: a held request is released
// at the first tick after its turn, so it waits at most this much longer than the bucket asked. Envoy
// runs one timer per worker thread, and each releases its own thread's requests.
const shapeTickMillis = 5

// shaper holds the requests that a leaky bucket admitted with a delay (NGINX's limit_req with burst and
// no nodelay): they are paused in OnHttpRequestHeaders and resumed on a tick once their turn comes. The
// filter cannot sleep (Envoy's poll_oneoff aborts the Go runtime) and needs no goroutine for this.
type shaper struct {
	host host
	held []heldRequest // in no particular order; a bucket's queue bounds its length
}

type heldRequest struct {
	stream uint32
	due    int64 // unix nanoseconds
}

func (s *shaper) hold(stream uint32, due int64) {
	s.held = append(s.held, heldRequest{stream: stream, due: due})
}

// release resumes every held request that is due at now. A request whose stream is gone (the client
// left) is dropped: the host refuses to make it the effective context.
func (s *shaper) release(now int64) {
	kept := s.held[:0]
	for _, h := range s.held {
		if h.due > now {
			kept = append(kept, h)
			continue
		}
		if s.host.enter(h.stream) {
			s.host.resume(requestPart)
		}
	}
	s.held = kept
}

// holds reports whether the stream is held.
func (s *shaper) holds(stream uint32) bool {
	for _, r := range s.held {
		if r.stream == stream {
			return true
		}
	}
	return false
}

// shapes reports whether any rule has a leaky-bucket limit, which is what needs the timer.
func shapes(rs []ruleState) bool {
	for _, rs := range rs {
		for _, set := range rs.rule.LimitSets() {
			for _, spec := range set.Limits {
				if spec.Limit.Kind == algorithms.LeakyBucket {
					return true
				}
			}
		}
	}
	return false
}
