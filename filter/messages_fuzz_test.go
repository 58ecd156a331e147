package filter

import (
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/meshlimit/meshlimit/messages"
)

// FuzzTheMessageLimiterCountsWhatTheFramerCounts feeds any bytes, cut into any chunks, to a stream
// of a message rule on the fake host: it never panics, it counts exactly the messages the framer
// counts over the whole stream, and a stream whose framing breaks is reset with every later chunk
// dropped (never passed uncounted). Bounded: a stream is at most 4 KiB.
func FuzzTheMessageLimiterCountsWhatTheFramerCounts(f *testing.F) {
	f.Add([]byte(grpcMsgs(3, 2)), []byte{1, 2, 3}, false)
	f.Add([]byte("\x01\xff\xff\xff\xffabc"), []byte{5}, false)
	f.Add([]byte(wsMsgs(2, true)+wsFrame(false, 1, "a", true)+wsFrame(true, 9, "", true)+wsFrame(true, 0, "b", true)), []byte{7, 1}, true)
	f.Add([]byte("GET / HTTP/1.1\r\n"), []byte{}, true)
	f.Fuzz(func(t *testing.T, stream, cuts []byte, ws bool) {
		if len(stream) > 4096 {
			return
		}
		fh := newFakeHost(t)
		// 10/s: a stream may be held (a watermark stop) when it carries more than 10 messages
		p := fh.start(msgConfig(`{"direction":"request"}`))
		req := grpcReq("ann")
		if ws {
			req = wsReq("ann")
		}
		h, _ := fh.open(p, req, false)
		if ws {
			fh.respond(h, [][2]string{{":status", "101"}}, false)
		}
		oracle := messages.WebSocket{FromClient: true}
		var g messages.GRPC
		want := 0
		broken := false
		for i, rest := 0, stream; len(rest) > 0; i++ {
			n := len(rest)
			if i < len(cuts) {
				n = min(n, int(cuts[i])+1)
			}
			chunk := rest[:n]
			rest = rest[n:]
			var got int
			var err error
			if ws {
				got, err = oracle.Feed(chunk)
			} else {
				got, err = g.Feed(chunk)
			}
			act := fh.deliver(h, requestPart, string(chunk))
			if !broken {
				want += got
			}
			switch {
			case broken || err != nil:
				broken = true
				if act != actionDrop {
					t.Fatalf("chunk %d of a broken stream got %v, want it dropped", i, act)
				}
			case act != types.ActionContinue && act != actionWatermark:
				t.Fatalf("chunk %d of a well-formed stream got %v", i, act)
			}
		}
		if c := fh.counter("meshlimit.messages.counted"); c != int64(want) {
			t.Fatalf("counted %d messages, the framer %d", c, want)
		}
		if broken && fh.of(h).closed != 1 {
			t.Fatalf("a broken stream was reset %d times, want once", fh.of(h).closed)
		}
	})
}
