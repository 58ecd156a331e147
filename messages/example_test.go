package messages_test

import (
	"fmt"

	"github.com/meshlimit/meshlimit/messages"
)

// A filter keeps one framer per direction of a stream and feeds it each body chunk as Envoy hands
// it over; a message counts in the chunk that carries its first byte.
func ExampleGRPC_Feed() {
	var req messages.GRPC
	msg := []byte{0, 0, 0, 0, 3, 'a', 'b', 'c'} // flag 0, length 3, "abc"
	stream := append(append([]byte(nil), msg...), msg...)
	for _, chunk := range [][]byte{stream[:2], stream[2:9], stream[9:]} {
		n, err := req.Feed(chunk)
		fmt.Println(n, err, req.Boundary())
	}
	// Output:
	// 1 <nil> false
	// 1 <nil> false
	// 0 <nil> true
}

// Next gives the offset of each message's first byte, where a chunk can be cut.
func ExampleWebSocket_Next() {
	w := messages.WebSocket{FromClient: true}
	chunk := []byte{
		0x81, 0x80, 1, 2, 3, 4, // an empty text message, masked
		0x89, 0x80, 1, 2, 3, 4, // a ping: parsed, not counted
		0x82, 0x81, 1, 2, 3, 4, 'x' ^ 1, // a binary message of 1 byte
	}
	for off := 0; ; {
		at, ok := w.Next(chunk[off:])
		if !ok {
			break
		}
		fmt.Println("message at", off+at)
		off += at + 1
	}
	fmt.Println(w.Messages(), w.ControlFrames(), w.Err())
	// Output:
	// message at 0
	// message at 12
	// 2 1 <nil>
}

// AppendClose builds the frame a proxy writes to the client when it ends a session over its limit.
func ExampleAppendClose() {
	frame, err := messages.AppendClose(nil, messages.ClosePolicyViolation, "message rate limit")
	fmt.Printf("% x %v\n", frame[:4], err)
	// Output:
	// 88 14 03 f0 <nil>
}
