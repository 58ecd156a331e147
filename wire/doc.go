// Package wire is the contract between the meshlimit filter and the decision service: the
// /v1/check request and answer (service/API.md), their bounds, and the one encoder and decoder
// of each, so that the two ends cannot drift apart.
//
// Both ends import it. The filter runs inside Envoy as a WebAssembly module, so the package
// uses the standard library only (no net/http, no reflection): the request encoder and the
// answer decoder append to and fill caller-owned buffers and never allocate. The request
// decoder and the answer encoder are the service's; the request decoder is strict (see
// DecodeRequest) and allocates only the key strings it returns.
//
// The request, as the filter writes it:
//
//	{"descriptors":[{"key":"<plugin>/<rule>/<fingerprint>/<value>","algorithm":"token_bucket",
//	  "quota":100,"window_ms":1000,"burst":200,"cost":1}, ...]}
//
// The answer, as the service writes it:
//
//	{"allowed":false,"decisions":[{"allowed":true,"limit":100,"remaining":42,"reset_ms":580,
//	  "retry_after_ms":0}, {"allowed":false,...,"skipped":true}]}
//
// Concurrency permits (permit.go) are descriptors with the algorithm "concurrency" and the
// request's optional "renew" and "release" lists; their answer adds "renewed" and "released".
// Settles (settle.go) are the request's optional "settle" list: the difference between a
// reservation and the real cost, applied without a decision; their answer adds "settled".
// The reset log (resets.go) is a second endpoint, /v1/resets: the admin resets a proxy polls to
// forget the same keys in its shared data, and ParseKey, which splits the keys it serves.
package wire

import "time"

const (
	// Path is the path of the check endpoint (POST).
	Path = "/v1/check"
	// SecretHeader carries the optional shared secret from the filter to the service.
	SecretHeader = "x-meshlimit-secret"
	// ContentType is the media type of requests and answers.
	ContentType = "application/json"

	// MaxDescriptors is the most descriptors one check may carry.
	MaxDescriptors = 64
	// MaxKeyBytes is the longest descriptor key, in bytes of UTF-8.
	MaxKeyBytes = 512
	// MaxBodyBytes is the largest request body the service reads (413 beyond).
	MaxBodyBytes = 64 << 10
	// MaxAnswerBytes is the largest answer the filter reads; a longer one is a failed call.
	MaxAnswerBytes = 1 << 20
	// MaxTimeUs is the latest now_us, in unix microseconds (2^52, the algorithms' time bound).
	MaxTimeUs = 1 << 52
)

// The parts of a key the filter composes (see Key). Their bounds are chosen so that every key
// the encoder writes fits MaxKeyBytes, whatever the configuration and the request carry.
const (
	// MaxPluginBytes is the longest plugin name written as is; a longer one is hashed.
	MaxPluginBytes = 128
	// MaxRuleBytes is the longest rule name written as is (the configuration allows 64).
	MaxRuleBytes = 64
	// MaxValueBytes is the longest key value written as is; a longer one is hashed.
	MaxValueBytes = 256
	// maxFingerprintBytes is the longest base-36 uint64.
	maxFingerprintBytes = 13
	// hashedBytes is the longest hashed part: "#", up to 16 hex digits, "-", up to 16 hex digits.
	hashedBytes = 34
)

// The largest key the encoder writes is within MaxKeyBytes (a compile-time check: the
// constant below overflows a uint if it is not).
const _ uint = MaxKeyBytes - (max(MaxPluginBytes, hashedBytes) + 1 + max(MaxRuleBytes, hashedBytes) + 1 +
	maxFingerprintBytes + 1 + max(MaxValueBytes, hashedBytes))

// ceilMs rounds a non-negative duration up to whole milliseconds, so that a client waiting
// that long is never early.
func ceilMs(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
