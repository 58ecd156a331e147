// Package messages counts the messages of long-lived streams from their bytes, as they pass a
// proxy in chunks of any size: the length-prefixed messages of a gRPC stream ([GRPC]) and the
// messages of a WebSocket session after its upgrade ([WebSocket]). It never buffers a message:
// each framer is a small fixed struct that remembers where in the framing the last chunk ended
// (inside a header, or how many payload bytes are left to skip), so a length prefix announcing
// 4 GiB costs nothing but a counter. It allocates nothing per chunk, reads no clock and does no
// I/O; the filter feeds it the body chunks Envoy hands to proxy_on_request_body and
// proxy_on_response_body, one framer per direction of a stream.
//
// # When a message counts
//
// A message counts when its first byte arrives: the gRPC flag byte, the first byte of the
// WebSocket frame that opens a text or binary message. That byte alone says that a message
// starts, so a rate limit charges the message before its length, let alone its body, has passed,
// and a shaper can stop the chunk that carries it. [GRPC.Feed] and [WebSocket.Feed] return how many
// messages started in a chunk; [GRPC.Next] and [WebSocket.Next] return them one at a time with the
// offset of each first byte in the chunk, the message boundary where a chunk can be cut. A header
// that turns out to be invalid after its first byte has already counted; the stream fails there
// anyway.
//
// gRPC: every length-prefixed message counts once, compressed (flag 1) or not (flag 0).
//
// WebSocket: whole messages count, not frames. A message is a text or binary frame with FIN set,
// or a text or binary frame without FIN followed by continuation frames, the last with FIN; it
// counts once, at its first frame. Continuation frames and control frames (ping, pong, close) do
// not count; they are parsed and checked (a control frame may come between the fragments of a
// message). The framer also counts data frames ([WebSocket.Frames]), for a limit that wants them.
//
// # Errors
//
// A framing violation stops the framer for good: [GRPC.Err] and [WebSocket.Err] return it, every
// later call reports it, and [GRPC.Offset] or [WebSocket.Offset] is the offset in the stream of the
// byte that made the stream invalid (the bytes before it were consumed). Every violation is one of
// the package's [*Error] variables, which wrap [ErrMalformed] or [ErrTooLarge] and name the answer
// an endpoint gives: the gRPC status of the RPC ([Error.GRPCStatus]: 13 INTERNAL for malformed
// framing, as grpc-go answers a bad flag byte; 8 RESOURCE_EXHAUSTED for a message over the size
// limit, as grpc-go answers a message over its maximum) and the WebSocket close code (1002
// protocol error, 1009 message too big; RFC 6455 §7.4.1). What the filter does with a violation
// (end the stream, or stop counting and let it pass) is its own decision.
//
// # Answers
//
// [AppendClose] builds the close frame a proxy writes to a WebSocket client (1008 policy
// violation or 1013 try again later); [ResourceExhausted] holds what a filter passes to
// proxy_send_local_response to end a gRPC stream whose response has not started, and
// [AppendTrailersOnly] the header fields Envoy then sends (docs/envoy-host.md §13).
package messages
