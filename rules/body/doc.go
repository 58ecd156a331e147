// Package body reads what meshlimit needs of request and response bodies: an integer field of a
// JSON document (JSONInt, Read), read as the upstream's parser may read it, so that a client
// cannot hide a cost from the filter in a form the upstream still understands; and the events of a
// text/event-stream body (SSE), fed chunk by chunk and held within a bound.
//
// Package rules decides what a reading costs (BodyCost); the filter feeds bodies to it. body is a
// leaf: it imports only the standard library, and knows nothing of rules or proxy-wasm.
package body
