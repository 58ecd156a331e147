package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
	"github.com/meshlimit/meshlimit/messages"
)

// The message limits: rule chat counts the messages of gRPC streams and WebSocket sessions
// (rules[].messages), 5 a second per user in each direction. The section runs its own filter on
// two worker VMs and a virtual clock of its own, and drives the streams as Envoy would hand them
// over: a gRPC-style client that writes a message every 20 ms unless the filter holds its stream
// (Envoy's flow control pushing back), and a WebSocket client whose server echoes every message it
// gets; then the same limit with on_limit "end".

const streamsConfig = `{"rules":[{"name":"chat","key":[{"header":"x-user"}],"limits":[{"rate":"5/s"}],
 "messages":{"direction":"both","on_limit":"%s","max_hold":"30s"}}]}`

// streamsSection prints what the message limits did.
func streamsSection(ctx context.Context, out io.Writer, module []byte) error {
	fmt.Fprintln(out, "\nRule chat counts stream messages (messages: 5/s per user, each way), 4 s of virtual time:")
	p, err := streamsPlugin(ctx, module, "shape")
	if err != nil {
		return err
	}
	defer p.Close()
	g, err := openStreamOf(p.VM(0), grpcHeaders("ann"), "200")
	if err != nil {
		return err
	}
	ws, err := openStreamOf(p.VM(1), wsHeaders("bob"), "101")
	if err != nil {
		return err
	}
	wsFromClient := []byte{0x81, 0x82, 1, 2, 3, 4, 'h' ^ 1, 'i' ^ 2} // "hi", masked
	echoed := 0
	for range 200 { // 4 s in steps of 20 ms
		if err := writeUnlessHeld(g, 0, grpcFrame()); err != nil {
			return err
		}
		if err := writeUnlessHeld(ws, 0, wsFromClient); err != nil {
			return err
		}
		for got := countWS(ws.UpstreamBody(), true); echoed < got && !held(ws, 1); echoed++ {
			if _, err := ws.SendResponseBody([]byte{0x81, 2, 'h', 'i'}, false); err != nil {
				return err
			}
		}
		p.Clock().Advance(20 * time.Millisecond)
	}
	var gc messages.GRPC
	sent, _ := gc.Feed(g.UpstreamBody())
	fmt.Fprintf(out, "  gRPC stream (ann), the client writing every 20 ms when not held: %d messages reached the server (5 burst + 5/s)\n", sent)
	fmt.Fprintf(out, "  WebSocket echo (bob): %d messages reached the server, %d echoes reached the client\n",
		countWS(ws.UpstreamBody(), true), countWS(ws.DownstreamBody(), false))
	fmt.Fprintf(out, "  held %d times, never buffered in the filter: Envoy holds the bytes and the tick resumes them\n",
		metricsOf(p)["meshlimit.messages.holds"].Value)
	_ = g.Close()
	_ = ws.Close()
	return streamsEnd(ctx, out, module)
}

// streamsEnd shows on_limit "end": the 6th message at once ends a gRPC stream with RESOURCE_EXHAUSTED.
func streamsEnd(ctx context.Context, out io.Writer, module []byte) error {
	p, err := streamsPlugin(ctx, module, "end")
	if err != nil {
		return err
	}
	defer p.Close()
	s := p.VM(0).NewStream(envoyhost.StreamInfo{SourceAddress: "192.0.2.7:40000"})
	if _, err := s.SendRequestHeaders(grpcHeaders("cat"), false); err != nil {
		return err
	}
	var six []byte
	for range 6 {
		six = append(six, grpcFrame()...)
	}
	if _, err := s.SendRequestBody(six, false); err != nil {
		return err
	}
	fmt.Fprintf(out, "  on_limit end, 6 messages at once (cat): the client gets %v\n", s.DownstreamHeaders())
	return s.Close()
}

func streamsPlugin(ctx context.Context, module []byte, onLimit string) (*envoyhost.Plugin, error) {
	return envoyhost.NewPlugin(ctx, module, envoyhost.Config{
		VMID: "meshlimit", PluginName: pluginName, RootID: "meshlimit", Workers: 2,
		PluginConfig: []byte(fmt.Sprintf(streamsConfig, onLimit)), Clock: envoyhost.NewClock(time.Now()),
	})
}

func grpcHeaders(user string) envoyhost.Headers {
	return envoyhost.Headers{{":method", "POST"}, {":path", "/chat.Chat/Talk"}, {":authority", "chat.example"},
		{"content-type", "application/grpc"}, {"te", "trailers"}, {"x-user", user}}
}

func wsHeaders(user string) envoyhost.Headers {
	return envoyhost.Headers{{":method", "GET"}, {":path", "/ws"}, {":authority", "chat.example"},
		{"upgrade", "websocket"}, {"connection", "Upgrade"}, {"sec-websocket-version", "13"}, {"x-user", user}}
}

// openStreamOf opens a stream whose upstream answered status.
func openStreamOf(vm *envoyhost.VM, h envoyhost.Headers, status string) (*envoyhost.Stream, error) {
	s := vm.NewStream(envoyhost.StreamInfo{SourceAddress: "192.0.2.7:40000"})
	if _, err := s.SendRequestHeaders(h, false); err != nil {
		return nil, err
	}
	_, err := s.SendResponseHeaders(envoyhost.Headers{{":status", status}}, false)
	return s, err
}

// grpcFrame is one length-prefixed gRPC message of 8 bytes.
func grpcFrame() []byte {
	return append(binary.BigEndian.AppendUint32([]byte{0}, 8), "message!"...)
}

// held reports whether the filter holds direction dir (0 request, 1 response) of s.
func held(s *envoyhost.Stream, dir int) bool {
	req, resp := s.Flow()
	return dir == 0 && req.Held > 0 || dir == 1 && resp.Held > 0
}

func writeUnlessHeld(s *envoyhost.Stream, dir int, b []byte) error {
	if held(s, dir) {
		return nil
	}
	_, err := s.SendRequestBody(b, false)
	return err
}

func countWS(b []byte, fromClient bool) int {
	w := messages.WebSocket{FromClient: fromClient}
	n, _ := w.Feed(b)
	return n
}
